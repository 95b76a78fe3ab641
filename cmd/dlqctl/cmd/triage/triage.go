// Package triage is `dlqctl triage`: the dead-letter workflow (see what
// failed, drill in, hold, replay, discard) on one terminal screen. Every
// read and every action goes through the dlq commands' own code
// (pkg/inspect, gate, batch, as the dlq commands call them): a hold made
// here is the decide command line it shows.
package triage

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// Options are `triage`'s flags.
type Options struct {
	Selection cmdutil.SelectionFlags
	GroupBy   string
}

// NewCmdTriage opens the triage screen.
func NewCmdTriage(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	o := &Options{}
	cmd := &cobra.Command{
		Use:   "triage [selection flags]",
		Short: "The whole workflow on one terminal screen: classes, dead letters, hold, replay, discard",
		Long: `Triage opens a full-screen view of the DLQ: the queue and consumer-group
scopes with their dlq check status, then the failure classes (or queues,
groups, partitions: g). Enter drills into a class's dead letters, and
into one message (what dlq show prints). h holds, r replays and x
discards what is selected (a class, or one message): each shows the plan
its command would print and asks first; a replay runs here with its
progress, and ctrl+c interrupts it as it does the command (resume with
dlq replay --batch). Everything is recorded in the ledger as the
commands record it. It needs a terminal; scripts use dlq ls.`,
		Example: `  $ dlqctl triage
  $ dlqctl triage --queue orders --failed-after 24h
  $ dlqctl triage --group-by cg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(inspect.GroupBys, o.GroupBy) {
				return cmdutil.FlagErrorf("invalid --group-by %q: valid values are %s", o.GroupBy, strings.Join(inspect.GroupBys, ", "))
			}
			if o.Selection.FromFile == "-" {
				return cmdutil.FlagErrorf("--from-file - reads standard input, which the screen needs for keys: give a file")
			}
			if runF != nil {
				return runF(o)
			}
			return triageRun(cmd.Context(), f, o)
		},
	}
	cmdutil.AddSelectionFlags(cmd, &o.Selection, false)
	cmd.Flags().StringVar(&o.GroupBy, "group-by", "error", "first grouping: error, queue, cg or partition (g changes it)")
	return cmd
}

func triageRun(ctx context.Context, f *cmdutil.Factory, o *Options) error {
	if !f.IO.IsStdoutTTY() || !f.IO.IsStdinTTY() {
		return cmdutil.UsageError(errNoTerminal)
	}
	if f.Globals.Debug {
		return cmdutil.FlagErrorf("--debug writes a trace to the terminal the screen draws on: use it with the dlq commands")
	}
	if fm, err := f.Format(); err != nil {
		return err
	} else if fm != render.Table {
		return cmdutil.FlagErrorf("triage draws a screen and has no -o %s: use dlq ls -o %s", fm, fm)
	}
	sel, err := o.Selection.Build(f, nil)
	if err != nil {
		return err
	}
	sess, err := newSession(ctx, f)
	if err != nil {
		return err
	}
	m := newModel(ctx, sess, config{base: o.Selection, sel: sel, by: o.GroupBy, now: f.Now, color: f.IO.ColorEnabled()})
	// The screen keeps every row it loads, and little else is allocated
	// once they are in: collecting at half the default growth keeps the
	// heap near what it holds (at the default it grew to twice that)
	// for a little more collecting during the load.
	defer debug.SetGCPercent(debug.SetGCPercent(50))
	opts := []tea.ProgramOption{tea.WithContext(ctx), tea.WithInput(f.IO.In), tea.WithOutput(f.IO.Out)}
	if !f.IO.ColorEnabled() {
		// NO_COLOR and --no-color: no colour from any component either.
		opts = append(opts, tea.WithColorProfile(colorprofile.Ascii))
	}
	_, runErr := tea.NewProgram(m, opts...).Run()
	// A batch still running (the screen was killed under it) finishes
	// its calls in flight and its journal before dlqctl exits.
	m.wait()
	if m.rows != nil {
		m.rows.Close()
	}
	for _, l := range m.log {
		fmt.Fprintln(f.IO.ErrOut, l)
	}
	switch {
	case errors.Is(runErr, tea.ErrInterrupted), errors.Is(runErr, tea.ErrProgramKilled) && ctx.Err() != nil:
		return cmdutil.ErrInterrupted
	case runErr != nil:
		return runErr
	}
	return nil
}
