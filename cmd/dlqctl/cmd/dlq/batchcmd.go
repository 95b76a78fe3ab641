package dlq

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/batch"
)

// batchCommand is one batch action's command (replay, rm, restore,
// import), as newBatchCmd makes it.
type batchCommand struct {
	// cmd has the command's texts (Use, Short, Long, Example) and Args.
	cmd    *cobra.Command
	action string
	// exec and selection are what the flags every batch command has fill
	// (selection nil: the command takes none); notes, as addSettingFlags.
	exec      *ExecFlags
	selection *cmdutil.SelectionFlags
	notes     map[batch.Given]string
	// flags adds the command's own flags; check is its own rules, asked
	// after the shared ones; run does what the command line asks (or a
	// test's hook does).
	flags func(fl *pflag.FlagSet)
	check func(cmd *cobra.Command, args []string) error
	run   func(ctx context.Context, args []string) error
}

// newBatchCmd makes a batch action's command: the flags every batch
// command has, the settings its action takes among them (the settings'
// table), then its own. Each run notes which settings the command line
// gave, checks the shared rules and the command's own once, and runs.
func newBatchCmd(bc batchCommand) *cobra.Command {
	cmd := bc.cmd
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		bc.exec.given = cmdutil.GivenIn(cmd.Flags())
		if err := validateExec(bc.exec); err != nil {
			return err
		}
		if bc.check != nil {
			if err := bc.check(cmd, args); err != nil {
				return err
			}
		}
		return bc.run(cmd.Context(), args)
	}
	if bc.selection != nil {
		cmdutil.AddSelectionFlags(cmd, bc.selection, true)
	}
	addExecFlags(cmd, bc.exec, bc.action, bc.notes)
	if bc.flags != nil {
		bc.flags(cmd.Flags())
	}
	return cmd
}

// settingNotes are what a command line's own flags have to do with a
// setting, added to its words.
var settingNotes = map[batch.Given]string{batch.GivenRate: "; 0 only with --yes"}

// addSettingFlags gives every setting the action takes a flag of its
// name, from the settings' table (batch.Offer), filling e.Settings; notes
// adds, for some, what the command's other flags have to do with them.
func addSettingFlags(cmd *cobra.Command, e *ExecFlags, action string, notes map[batch.Given]string) {
	fl := cmd.Flags()
	e.action = action
	for _, s := range batch.Offer(action, &e.Settings) {
		words := s.Words + settingNotes[s.Given] + notes[s.Given]
		switch v := s.Field.(type) {
		case *int:
			fl.IntVar(v, s.Name, *v, words)
		case *string:
			fl.StringVar(v, s.Name, *v, words)
		case *float64:
			fl.Float64Var(v, s.Name, *v, words)
		case *bool:
			fl.BoolVar(v, s.Name, *v, words)
		default:
			panic(fmt.Sprintf("setting %s fills a %T: no flag takes one", s.Name, v))
		}
	}
}
