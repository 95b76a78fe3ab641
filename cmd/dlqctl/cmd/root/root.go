// Package root builds the command tree and maps errors to exit codes.
package root

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/configcmd"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/decisions"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/dlq"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/exporter"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/sandbox"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/triage"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/version"
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/iostreams"
	"github.com/dlqctl/dlqctl/pkg/duration"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/jq"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// Main runs dlqctl with the process's streams and arguments and returns
// the exit code. Only main calls os.Exit.
func Main() int {
	// jq's time budget is the process's: read once, before any command.
	if v := os.Getenv("DLQCTL_JQ_BUDGET"); v != "" {
		d, err := duration.Parse(v)
		if err != nil || d <= 0 {
			fmt.Fprintf(os.Stderr, "error: DLQCTL_JQ_BUDGET=%s: want a positive duration (the time one jq evaluation may take; default %s)\n", render.Clean(v), jq.DefaultBudget.Time)
			return cmdutil.ExitUsage
		}
		jq.DefaultBudget.Time = d
	}
	return Run(context.Background(), cmdutil.NewFactory(iostreams.System()), os.Args[1:])
}

// Run executes one command line; SIGINT, SIGTERM and SIGHUP (a closed
// terminal) cancel its context, so a replay stops cleanly and says how to
// resume.
func Run(ctx context.Context, f *cmdutil.Factory, args []string) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// The first signal asks the command to stop cleanly (a replay
	// finishes its calls, records them and says how to resume); from
	// then on the signals are the system's again, so a second one ends
	// the process at once, whatever it waits for.
	context.AfterFunc(ctx, stop)
	defer f.Close()
	cmd := NewCmdRoot(f)
	cmd.SetArgs(args)
	cmd.SetIn(f.IO.In)
	cmd.SetOut(f.IO.Out)
	cmd.SetErr(f.IO.ErrOut)
	ran := false
	cmd.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		ran = true
		f.SetFlags(c.Root().PersistentFlags())
		f.IO.SetNoColor(f.Globals.NoColor)
		if _, err := f.Format(); err != nil {
			return err
		}
		if f.Globals.Timeout <= 0 {
			return cmdutil.FlagErrorf("invalid --timeout %s: want a positive duration (each broker call waits at most this long for an answer; GET and DELETE are tried 4 times)", f.Globals.Timeout)
		}
		return nil
	}
	sub, err := cmd.ExecuteContextC(ctx)
	if err == nil {
		return cmdutil.ExitOK
	}
	if !ran {
		// cobra's own errors (unknown command, bad arguments) are usage errors.
		err = &cmdutil.FlagError{Err: err}
	}
	var ee *cmdutil.ExitError
	if errors.As(err, &ee) && ee.Silent {
		return ee.Code
	}
	code := cmdutil.ExitCode(err)
	if code == cmdutil.ExitInterrupted {
		fmt.Fprintln(f.IO.ErrOut, "interrupted")
		return code
	}
	// Errors quote the broker (bodies, names): one line, nothing that can
	// drive the terminal. A usage error may add a hint on lines of its own
	// (cobra's "Did you mean this?").
	msg, hint := cmdutil.Message(err), ""
	var fe *cmdutil.FlagError
	flagErr := errors.As(err, &fe) || errs.KindOf(err) == errs.Flag
	if flagErr {
		if i := strings.Index(msg, "\n\n"); i >= 0 {
			msg, hint = msg[:i], strings.TrimSpace(msg[i+2:])
		}
	}
	msg, hint = f.Redact(msg), f.Redact(hint)
	fmt.Fprintln(f.IO.ErrOut, "error: "+render.Clean(oneLine(msg)))
	for _, l := range strings.Split(hint, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if strings.HasSuffix(l, "?") {
				fmt.Fprintln(f.IO.ErrOut, render.Clean(l))
			} else {
				fmt.Fprintln(f.IO.ErrOut, "\t"+render.Clean(l))
			}
		}
	}
	if flagErr && sub != nil {
		fmt.Fprintf(f.IO.ErrOut, "Run '%s --help' for usage.\n", sub.CommandPath())
	}
	return code
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// NewCmdRoot builds the command tree.
func NewCmdRoot(f *cmdutil.Factory) *cobra.Command {
	g := f.Globals
	cmd := &cobra.Command{
		Use:   "dlqctl",
		Short: "Dead-letter triage and replay for the Queen broker",
		Long: `dlqctl turns a dead-letter queue into a workflow: alert, inspect, fix, and
decide (replay or discard), with every decision recorded in a ledger.`,
		Example: `  $ dlqctl sandbox &                      # a broker with realistic dead letters
  $ dlqctl dlq ls --group-by error        # what failed, grouped by failure class
  $ dlqctl dlq replay --class 1a2b3c4d --dry-run
  $ dlqctl dlq sync && dlqctl dlq check   # the cron/CI gate`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&g.Server, "server", "", "broker URL (env DLQCTL_SERVER, QUEEN_SERVER; default http://localhost:6632)")
	pf.StringVar(&g.Token, "token", "", "bearer token (env DLQCTL_TOKEN, QUEEN_TOKEN)")
	pf.StringVar(&g.TokenFile, "token-file", "", "file holding the bearer token")
	pf.StringVar(&g.Context, "context", "", "named broker profile from the config file (env DLQCTL_CONTEXT)")
	pf.StringVar(&g.Ledger, "ledger", "", "ledger DSN: sqlite:///path.db or postgres://user@host/db (env DLQCTL_LEDGER)")
	pf.StringVar(&g.ConfigPath, "config", "", "config file (env DLQCTL_CONFIG; default $XDG_CONFIG_HOME/dlqctl/config.yaml)")
	pf.StringVarP(&g.Output, "output", "o", "table", "output format: table, wide, json, ndjson, yaml")
	pf.DurationVar(&g.Timeout, "timeout", 30*time.Second, "how long one broker call may wait for an answer, and between reads of it; GET and DELETE are tried 4 times, and a broker that has not answered for 4× this is given up on for the rest of the command")
	pf.BoolVar(&g.NoColor, "no-color", false, "no colour (NO_COLOR is honoured too)")
	pf.BoolVar(&g.Debug, "debug", false, "print an HTTP trace to stderr (the token is redacted)")
	pf.StringVar(&g.CAFile, "ca-file", "", "PEM file of a CA to trust for the broker's certificate")
	pf.BoolVar(&g.Insecure, "insecure-skip-tls-verify", false, "do not verify the broker's certificate (warned on every use)")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &cmdutil.FlagError{Err: err} })

	cmd.AddCommand(dlq.NewCmdDLQ(f))
	cmd.AddCommand(triage.NewCmdTriage(f, nil))
	cmd.AddCommand(decisions.NewCmdDecisions(f))
	cmd.AddCommand(exporter.NewCmdExporter(f, nil))
	cmd.AddCommand(sandbox.NewCmdSandbox(f))
	cmd.AddCommand(configcmd.NewCmdConfig(f))
	cmd.AddCommand(version.NewCmdVersion(f))
	// cobra adds `completion` on Execute; adding it now puts it in the
	// generated reference too.
	cmd.InitDefaultCompletionCmd()
	return cmd
}
