// Package decisions is `dlqctl decisions`: the audit log of batches.
package decisions

import (
	"context"
	"fmt"
	"strconv"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// NewCmdDecisions is the `decisions` noun.
func NewCmdDecisions(f *cmdutil.Factory) *cobra.Command {
	cmd := cmdutil.Noun(&cobra.Command{
		Use:   "decisions",
		Short: "The audit log: every batch decided or executed, by whom and why",
	})
	cmd.AddCommand(NewCmdLs(f), NewCmdShow(f), NewCmdStop(f), NewCmdCancel(f), NewCmdApprove(f), NewCmdVerify(f), NewCmdThreshold(f))
	return cmd
}

// LsOptions are `decisions ls`'s flags.
type LsOptions struct {
	Running    bool
	Action     string
	Since      string
	Limit      int
	AllBrokers bool
}

// NewCmdLs lists batches.
func NewCmdLs(f *cmdutil.Factory) *cobra.Command {
	o := &LsOptions{}
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List batches, newest first",
		Example: `  $ dlqctl decisions ls
  $ dlqctl decisions ls --running
  $ dlqctl decisions ls --action discard --since 7d -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch o.Action {
			case "", ledger.ActionReplay, ledger.ActionDiscard, ledger.ActionHold, ledger.ActionRestore, ledger.ActionImport:
			default:
				return cmdutil.FlagErrorf("invalid --action %q: valid actions are replay, discard, hold, restore, import", o.Action)
			}
			if o.Limit < 0 {
				return cmdutil.FlagErrorf("invalid --limit %d", o.Limit)
			}
			return lsRun(cmd.Context(), f, o)
		},
	}
	cmd.Flags().StringVar(&o.Action, "action", "", "only this action: replay, discard, hold")
	cmd.Flags().StringVar(&o.Since, "since", "", "only batches decided since (RFC 3339 or a duration ago)")
	cmd.Flags().IntVar(&o.Limit, "limit", 50, "at most this many (0 = all)")
	cmd.Flags().BoolVar(&o.AllBrokers, "all-brokers", false, "batches of every broker the ledger serves, not only --server's")
	cmd.Flags().BoolVar(&o.Running, "running", false, "only the batches running now, wherever they run, with their progress: done, failed, left, pace, estimated end, host and pid")
	return cmd
}

func lsRun(ctx context.Context, f *cmdutil.Factory, o *LsOptions) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	filter := ledger.BatchFilter{Action: o.Action, Limit: o.Limit}
	if o.Running {
		filter.Statuses = []string{ledger.StatusRunning}
	}
	if o.Since != "" {
		if filter.Since, err = deadletter.ParseTime(o.Since, f.Now()); err != nil {
			return cmdutil.FlagErrorf("--since: %v", err)
		}
	}
	ld, err := f.Ledger(ctx)
	if err != nil {
		return err
	}
	if !o.AllBrokers {
		if filter.Broker, err = f.BrokerKey(ctx, ld); err != nil {
			return err
		}
	}
	batches, err := batch.Batches(ctx, ld, filter)
	if err != nil {
		return err
	}
	if o.Running {
		return running(ctx, f, fm, ld, batches)
	}
	if !fm.Human() {
		st := render.NewStream(f.IO.Out, fm)
		for _, b := range batches {
			if err := st.Write(b); err != nil {
				return err
			}
		}
		return st.Close()
	}
	if len(batches) == 0 {
		fmt.Fprintln(f.IO.ErrOut, "No decisions recorded.")
		return nil
	}
	now := f.Now()
	header := []string{"BATCH", "ACTION", "BY", "OWNER", "AT", "SIZE", "STATUS", "OUTCOME", "WHY"}
	if fm == render.Wide {
		header = append(header, "UNTIL", "SELECTION", "BROKER")
	}
	var rows [][]string
	for _, b := range batches {
		action := b.Action
		if ledger.IsHold(b.Action) && !b.Until.IsZero() {
			action += " until " + render.Timestamp(b.Until)
		}
		c := render.Clean
		owner := "-"
		if b.Owner != "" {
			owner = c(b.Owner)
		}
		r := []string{b.ID, action, c(b.By), owner, render.AgeSince(now, b.At) + " ago", strconv.Itoa(b.Size), b.Status, render.Counts(b.Outcome), c(b.Why)}
		if fm == render.Wide {
			r = append(r, render.Timestamp(b.Until), c(b.Selection), c(b.Broker))
		}
		rows = append(rows, r)
	}
	return render.WriteTable(f.IO.Out, header, rows)
}

// ShowOptions are `decisions show`'s flags.
type ShowOptions struct {
	BatchID string
	// Watch follows a running batch's progress until it ends.
	Watch bool
}

// NewCmdShow shows one batch.
func NewCmdShow(f *cmdutil.Factory) *cobra.Command {
	o := &ShowOptions{}
	cmd := &cobra.Command{
		Use:   "show BATCH|last",
		Short: "Show a batch: its decision, progress, manifest, journal and audit (last: this broker's newest)",
		Long: `Show prints a batch: its decision, who recorded and approved it, its
progress while it runs (done, failed, left, the run's pace and estimated
end, the host and process that run it: from anywhere that shares the
ledger), its manifest, journal and audit. --watch follows a running
batch's progress until its run ends, a line drawn again every two
seconds on a terminal.`,
		Example: "  $ dlqctl decisions show 20261130T031502-9f3a\n  $ dlqctl decisions show 20261130T0315 -o json\n  $ dlqctl decisions show last --watch",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.BatchID = args[0]
			return showRun(cmd.Context(), f, o)
		},
	}
	cmd.Flags().BoolVar(&o.Watch, "watch", false, "follow a running batch's progress until its run ends")
	return cmd
}

func showRun(ctx context.Context, f *cmdutil.Factory, o *ShowOptions) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	ld, err := f.Ledger(ctx)
	if err != nil {
		return err
	}
	if o.BatchID, err = f.ResolveBatch(ctx, ld, o.BatchID); err != nil {
		return err
	}
	if o.Watch {
		if !fm.Human() {
			return cmdutil.FlagErrorf("--watch draws for people: -o %s gives the batch once", fm)
		}
		return watch(ctx, f, ld, o.BatchID)
	}
	d, err := batch.Describe(ctx, ld, o.BatchID)
	if err != nil {
		return err
	}
	if !fm.Human() {
		return render.Document(f.IO.Out, fm, d)
	}
	return present.Batch(f.IO.Out, d, f.Now(), f.Again)
}
