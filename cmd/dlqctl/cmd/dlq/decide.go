package dlq

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/config"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
	"github.com/spf13/cobra"
)

// DecideOptions are `dlq decide`'s flags.
type DecideOptions struct {
	Selection cmdutil.SelectionFlags
	Action    string
	Why       string
	By        string
	Owner     string
	Until     string
	Args      []string
}

// NewCmdDecide records a decision for a batch without executing it.
func NewCmdDecide(f *cmdutil.Factory, runF func(*DecideOptions) error) *cobra.Command {
	o := &DecideOptions{}
	cmd := &cobra.Command{
		Use:   "decide [ADDRESS...] [selection flags] --action replay|discard|hold --why TEXT",
		Short: "Record a decision (replay, discard, hold) for a batch without executing it",
		Long: `Decide snapshots the selection into a batch and records who decided what,
when and why. It executes nothing: run the batch later with
dlq replay --batch ID or dlq rm --batch ID. hold means "under
investigation until --until": it stops the undecided alert of dlq check
until then. Prints the batch id.`,
		Example: `  $ dlqctl dlq decide --class 1a2b3c4d --action hold --until 24h --why "waiting on the inventory fix" --owner team-billing
  $ dlqctl dlq decide --queue orders --action replay --why "v4 parser deployed"
  $ dlqctl dlq replay --batch "$(dlqctl dlq decide --queue orders --action replay --why fixed)" --yes`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Args = args
			switch o.Action {
			case ledger.ActionReplay, ledger.ActionDiscard, ledger.ActionHold:
			case "":
				return cmdutil.FlagErrorf("--action is required: replay, discard or hold")
			default:
				return cmdutil.FlagErrorf("invalid --action %q: valid actions are replay, discard, hold", o.Action)
			}
			if o.Why == "" {
				return cmdutil.FlagErrorf("--why is required: say why (it is recorded in the ledger)")
			}
			if o.Action == ledger.ActionHold && o.Until == "" {
				return cmdutil.FlagErrorf("--action hold needs --until (a time, or a duration from now such as 24h)")
			}
			if o.Action != ledger.ActionHold && o.Until != "" {
				return cmdutil.FlagErrorf("--until goes with --action hold only")
			}
			if runF != nil {
				return runF(o)
			}
			return decideRun(cmd.Context(), f, o)
		},
	}
	cmdutil.AddSelectionFlags(cmd, &o.Selection, true)
	fl := cmd.Flags()
	fl.StringVar(&o.Action, "action", "", "replay, discard or hold")
	fl.StringVar(&o.Why, "why", "", "why (required)")
	fl.StringVar(&o.By, "by", "", "who decided (default: the OS user)")
	fl.StringVar(&o.Owner, "owner", "", "the team that owns the follow-up")
	fl.StringVar(&o.Until, "until", "", "for hold: until when (RFC 3339, or a duration from now such as 24h)")
	return cmd
}

// parseUntil reads --until: RFC 3339, or a duration from now.
func parseUntil(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		if !t.After(now) {
			return time.Time{}, fmt.Errorf("--until %s is in the past", s)
		}
		return t.UTC(), nil
	}
	d, err := config.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("invalid --until %q: want RFC 3339 or a duration from now (4h, 2d)", s)
	}
	return now.Add(d).UTC(), nil
}

func decideRun(ctx context.Context, f *cmdutil.Factory, o *DecideOptions) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	sel, err := o.Selection.Build(f, o.Args)
	if err != nil {
		return err
	}
	if err := cmdutil.RequireSelection(sel, "dlq decide"); err != nil {
		return err
	}
	now := f.Now()
	var until time.Time
	if o.Until != "" {
		if until, err = parseUntil(o.Until, now); err != nil {
			return cmdutil.FlagErrorf("%v", err)
		}
	}
	cl, ld, err := f.Session(ctx)
	if err != nil {
		return err
	}
	if err := cmdutil.CheckNames(ctx, cl, sel); err != nil {
		return err
	}
	by := o.By
	if by == "" {
		by = f.User()
	}
	b := &ledger.Batch{Action: o.Action, By: by, At: now, Why: o.Why, Owner: o.Owner, Until: until}
	n, err := recordDecision(ctx, cl, ld, sel, b)
	if err != nil {
		return err
	}
	if !fm.Human() {
		return render.Document(f.IO.Out, fm, b)
	}
	fmt.Fprintf(f.IO.ErrOut, "Recorded %s of %s by %s.\n", o.Action, plural(n, "message", "messages"), by)
	fmt.Fprintln(f.IO.Out, b.ID)
	return nil
}

// recordDecision snapshots the selection into batch b (its action, who,
// when, why and until set by the caller) and records it; it returns how
// many messages the batch holds. An explicit address that is no longer
// dead-lettered but that the ledger's archive kept (a vanished row, one
// that left the broker) is recorded from the archive: that is how the
// alarm of a vanished row is settled. A batch of such addresses alone has
// nothing left to carry out, and is done.
func recordDecision(ctx context.Context, cl *client.Client, ld *ledger.Store, sel *replay.Selection, b *ledger.Batch) (int, error) {
	items, err := replay.Snapshot(ctx, cl, sel, pageSize)
	if err != nil {
		return 0, err
	}
	gone, err := archivedOnly(ctx, ld, cl.Broker(), sel.Addresses, items)
	if err != nil {
		return 0, err
	}
	if len(items) == 0 && len(gone) == 0 {
		if len(sel.Addresses) > 0 {
			return 0, cmdutil.NotFoundf("none of the given addresses is dead-lettered or known to the ledger's archive; nothing recorded")
		}
		return 0, cmdutil.UsageError(fmt.Errorf("no dead letter matches the selection; nothing recorded"))
	}
	if len(gone) > 0 && b.Action == ledger.ActionReplay {
		return 0, cmdutil.UsageError(fmt.Errorf("%s no longer in the DLQ (the archive keeps it): it cannot be replayed from the broker; record --action discard (nothing to redo) or hold", plural(len(gone), "message is", "messages are")))
	}
	b.Broker, b.Selection = cl.Broker(), sel.String()
	if b.Action == ledger.ActionReplay {
		// Recorded in replay order, as replay records its own batches, so
		// the manifest's order is the one every run of it keeps.
		items, _ = replay.Arrange(items, replay.OrderPartition, "")
		b.Settings, _ = json.Marshal(map[string]string{"order": replay.OrderPartition})
	}
	if len(items) == 0 && b.Action == ledger.ActionDiscard {
		b.Status, b.Outcome = ledger.StatusDone, map[string]int{"gone": len(gone)}
	}
	if err := ld.CreateBatch(ctx, b, append(toManifest(items), gone...)); err != nil {
		return 0, err
	}
	return len(items) + len(gone), nil
}

// archivedOnly returns, for each explicit address not among items, the
// manifest of what the archive kept of it once it left the DLQ.
func archivedOnly(ctx context.Context, ld *ledger.Store, broker string, addrs []client.Address, items []replay.Item) ([]ledger.ManifestItem, error) {
	in := make(map[client.Address]bool, len(items))
	for _, it := range items {
		in[it.Address] = true
	}
	var out []ledger.ManifestItem
	for _, a := range addrs {
		if in[a] {
			continue
		}
		in[a] = true
		rows, err := ld.ArchivedRows(ctx, broker, ledger.ArchiveFilter{Address: &a})
		if err != nil {
			return nil, err
		}
		var mi *ledger.ManifestItem
		for _, r := range rows {
			if r.GoneAt.IsZero() {
				continue
			}
			if mi == nil {
				mi = &ledger.ManifestItem{Address: a, Queue: r.Queue, Partition: r.Partition, Error: r.Error, RetryCount: r.RetryCount, Payload: r.Payload}
			}
			mi.Rows = append(mi.Rows, ledger.ManifestRow{ConsumerGroup: r.ConsumerGroup, Error: r.Error, RetryCount: r.RetryCount, FailedAt: r.FailedAt, Selected: true})
			if !slices.Contains(mi.Groups, r.ConsumerGroup) {
				mi.Groups = append(mi.Groups, r.ConsumerGroup)
			}
			if r.FailedAt.After(mi.FailedAt) {
				mi.FailedAt = r.FailedAt
			}
		}
		if mi != nil {
			out = append(out, *mi)
		}
	}
	return out, nil
}
