package decisions

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// running lists the running batches with their progress (decisions ls
// --running).
func running(ctx context.Context, f *cmdutil.Factory, fm render.Format, ld *ledger.Store, batches []ledger.Batch) error {
	type entry struct {
		Batch    ledger.Batch     `json:"batch"`
		Progress *ledger.Progress `json:"progress"`
	}
	var out []entry
	for _, b := range batches {
		if b.Status != ledger.StatusRunning {
			continue // its run is gone: interrupted, not running
		}
		p, err := ld.ProgressOf(ctx, &b)
		if err != nil {
			return err
		}
		out = append(out, entry{b, p})
	}
	if !fm.Human() {
		st := render.NewStream(f.IO.Out, fm)
		for _, e := range out {
			if err := st.Write(e); err != nil {
				return err
			}
		}
		return st.Close()
	}
	if len(out) == 0 {
		fmt.Fprintln(f.IO.ErrOut, "No batch is running.")
		return nil
	}
	now := time.Now()
	rows := make([][]string, len(out))
	for i, e := range out {
		rows[i] = present.RunningRow(e.Batch, e.Progress, now)
	}
	return render.WriteTable(f.IO.Out, present.RunningHeader, rows)
}

// watch follows a batch's progress until its run ends (or ctx does): on
// a terminal one line drawn again every beat, elsewhere a line each time
// the figures change; then the batch as it ended.
func watch(ctx context.Context, f *cmdutil.Factory, ld *ledger.Store, id string) error {
	tty := f.IO.IsStdoutTTY()
	last := ""
	for {
		b, err := ld.Batch(ctx, id)
		if err != nil {
			return err
		}
		p, err := ld.ProgressOf(ctx, b)
		if err != nil {
			return err
		}
		line := present.Progress(p, time.Now())
		if b.Status != ledger.StatusRunning || b.Stale {
			if tty {
				fmt.Fprint(f.IO.Out, "\r\033[K")
			}
			fmt.Fprintf(f.IO.Out, "Batch %s %s: %s\n", b.ID, b.Shown(), line)
			return nil
		}
		if tty {
			fmt.Fprintf(f.IO.Out, "\r\033[K%s", render.Truncate(line, max(20, f.IO.TerminalWidth()-1)))
		} else if figures := progressFigures(p); figures != last {
			last = figures
			fmt.Fprintln(f.IO.Out, line)
		}
		if err := client.Sleep(ctx, ledger.BeatEvery); err != nil {
			if tty {
				fmt.Fprintln(f.IO.Out)
			}
			return err
		}
	}
}

// progressFigures are what changes as a batch goes on.
func progressFigures(p *ledger.Progress) string {
	stop := ""
	if p.Run.Stop != nil {
		stop = "stop"
	}
	return fmt.Sprint(p.Done, p.Failed, p.Skipped, p.Status, stop)
}

// StopOptions are `decisions stop`'s flags.
type StopOptions struct {
	BatchID string
	Why     string
	By      string
}

// NewCmdStop stops a running batch from anywhere the ledger is shared.
func NewCmdStop(f *cmdutil.Factory) *cobra.Command {
	o := &StopOptions{}
	cmd := &cobra.Command{
		Use:   "stop BATCH --why TEXT",
		Short: "Stop a running batch from any terminal or host that shares its ledger",
		Long: `Stop asks the run of a running batch to stop, wherever it runs (another
terminal, a runbook host): within two seconds (its next beat) the run
claims nothing more, lets what is in flight finish and be journaled (no
message lost or published twice), prints who stopped it and its resume
line, and exits 130 as for Ctrl-C. Who and why are in the audit. The
batch is then interrupted: dlq replay --batch (rm, restore) resumes it.
decisions ls --running lists what runs now; decisions show BATCH --watch
follows one.`,
		Example: `  $ dlqctl decisions ls --running
  $ dlqctl decisions stop 20261130T031502-9f3a --why "consumers are falling over: pausing the replay"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.BatchID = args[0]
			if strings.TrimSpace(o.Why) == "" {
				return cmdutil.FlagErrorf("--why is required: say why the run is stopped (it is recorded in the audit)")
			}
			return stopRun(cmd.Context(), f, o)
		},
	}
	cmd.Flags().StringVar(&o.Why, "why", "", "why the run is stopped (required; recorded in the audit)")
	cmd.Flags().StringVar(&o.By, "by", "", "who stops it (default: the OS user)")
	return cmd
}

func stopRun(ctx context.Context, f *cmdutil.Factory, o *StopOptions) error {
	by, err := f.Who(o.By)
	if err != nil {
		return err
	}
	ld, err := f.Ledger(ctx)
	if err != nil {
		return err
	}
	b, err := ld.RequestStop(ctx, o.BatchID, by, o.Why, f.Now())
	if errors.Is(err, ledger.ErrNotRunning) {
		return cmdutil.UsageError(err)
	}
	if err != nil {
		return err
	}
	run, err := ld.RunOf(ctx, b.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(f.IO.ErrOut, "Asked the run of %s batch %s (pid %d on %s) to stop: it stops within %s, lets what is in flight finish, and prints its resume line.\n",
		b.Action, b.ID, run.PID, render.Clean(run.Host), render.Duration(ledger.BeatEvery))
	fmt.Fprintf(f.IO.ErrOut, "Follow it with: %s\n", f.Again("decisions", "show", b.ID, "--watch"))
	return nil
}
