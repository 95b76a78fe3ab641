// Package decisions is `dlqctl decisions`: the audit log of batches.
package decisions

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
	"github.com/spf13/cobra"
)

// NewCmdDecisions is the `decisions` noun.
func NewCmdDecisions(f *cmdutil.Factory) *cobra.Command {
	cmd := cmdutil.Noun(&cobra.Command{
		Use:   "decisions",
		Short: "The audit log: every batch decided or executed, by whom and why",
	})
	cmd.AddCommand(NewCmdLs(f), NewCmdShow(f), NewCmdCancel(f), NewCmdApprove(f), NewCmdVerify(f))
	return cmd
}

// LsOptions are `decisions ls`'s flags.
type LsOptions struct {
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
  $ dlqctl decisions ls --action discard --since 7d -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch o.Action {
			case "", ledger.ActionReplay, ledger.ActionDiscard, ledger.ActionHold:
			default:
				return cmdutil.FlagErrorf("invalid --action %q: valid actions are replay, discard, hold", o.Action)
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
	return cmd
}

func lsRun(ctx context.Context, f *cmdutil.Factory, o *LsOptions) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	filter := ledger.BatchFilter{Action: o.Action, Limit: o.Limit}
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
	batches, err := ld.Batches(ctx, filter)
	if err != nil {
		return err
	}
	for i := range batches {
		if err := shown(ctx, ld, &batches[i]); err != nil {
			return err
		}
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
		if b.Action == ledger.ActionHold && !b.Until.IsZero() {
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

// shown makes a batch what decisions ls and show print: a running batch
// whose run is gone is interrupted (with stale: true), its outcome is
// read from its journal now, and the counts add up to its size.
func shown(ctx context.Context, ld *ledger.Store, b *ledger.Batch) error {
	if err := ld.Tally(ctx, b); err != nil {
		return err
	}
	b.Status = b.Shown()
	return nil
}

// resumeVerb is the command that carries on with a batch.
func resumeVerb(b *ledger.Batch) string {
	if b.Action == ledger.ActionDiscard {
		return "rm"
	}
	return "replay"
}

// ShowOptions are `decisions show`'s flags.
type ShowOptions struct {
	BatchID string
}

// NewCmdShow shows one batch.
func NewCmdShow(f *cmdutil.Factory) *cobra.Command {
	o := &ShowOptions{}
	return &cobra.Command{
		Use:     "show BATCH",
		Short:   "Show a batch: its decision, manifest, journal and audit",
		Example: "  $ dlqctl decisions show 20261130T031502-9f3a\n  $ dlqctl decisions show 20261130T0315 -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.BatchID = args[0]
			return showRun(cmd.Context(), f, o)
		},
	}
}

// ShowResult is `decisions show -o json`.
type ShowResult struct {
	Batch    *ledger.Batch         `json:"batch"`
	Manifest []ledger.ManifestItem `json:"manifest"`
	Journal  []ledger.Entry        `json:"journal"`
	Audit    []ledger.AuditEntry   `json:"audit"`
	// BlockedPartitions are the partitions of an ordered replay whose
	// later messages wait behind one that was not replayed.
	BlockedPartitions []replay.Blocked `json:"blockedPartitions,omitempty"`
	// Verification is the last decisions verify of a replay batch.
	Verification *ledger.Verification `json:"lastVerification,omitempty"`
	// Approval is the second person's approval of a batch that needs one.
	Approval *ledger.Approval `json:"approval,omitempty"`
}

// blocked reads an ordered replay batch's manifest (in replay order)
// against each address's journal.
func blocked(ctx context.Context, ld *ledger.Store, b *ledger.Batch, man []ledger.ManifestItem) ([]replay.Blocked, error) {
	var set struct {
		Order string `json:"order"`
	}
	_ = json.Unmarshal(b.Settings, &set)
	if b.Action != ledger.ActionReplay || set.Order != replay.OrderPartition {
		return nil, nil
	}
	items := make([]replay.Item, len(man))
	journal := make(map[deadletter.Address]*ledger.Entry, len(man))
	for i, m := range man {
		items[i] = replay.Item{Address: m.Address, Queue: m.Queue, Partition: m.Partition}
		e, err := ld.Entry(ctx, b.Broker, m.Address)
		if err != nil {
			return nil, err
		}
		journal[m.Address] = e
	}
	return replay.BlockedChains(items, b.Destination, journal), nil
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
	b, err := ld.Batch(ctx, o.BatchID)
	if err != nil {
		return err
	}
	if err := shown(ctx, ld, b); err != nil {
		return err
	}
	man, err := ld.Manifest(ctx, b.ID)
	if err != nil {
		return err
	}
	jr, err := ld.BatchEntries(ctx, b.ID)
	if err != nil {
		return err
	}
	au, err := ld.AuditFor(ctx, b.ID)
	if err != nil {
		return err
	}
	bl, err := blocked(ctx, ld, b, man)
	if err != nil {
		return err
	}
	ver, err := ld.LastVerification(ctx, b.ID)
	if err != nil {
		return err
	}
	var ap *ledger.Approval
	if b.NeedsApproval {
		if ap, err = ld.ApprovalOf(ctx, b.ID); err != nil {
			return err
		}
	}
	if !fm.Human() {
		return render.Document(f.IO.Out, fm, ShowResult{Batch: b, Manifest: man, Journal: jr, Audit: au, BlockedPartitions: bl, Verification: ver, Approval: ap})
	}
	w := f.IO.Out
	kv := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "%-12s %s\n", k+":", render.Clean(v))
		}
	}
	kv("Batch", b.ID)
	kv("Broker", b.Broker)
	kv("Action", b.Action)
	kv("By", b.By)
	kv("At", render.Timestamp(b.At))
	kv("Why", b.Why)
	kv("Owner", b.Owner)
	if !b.Until.IsZero() {
		kv("Until", render.Timestamp(b.Until))
	}
	kv("Selection", b.Selection)
	kv("Destination", b.Destination)
	kv("Size", strconv.Itoa(b.Size))
	kv("Status", b.Status)
	if b.Stale {
		heard := "never"
		if t := b.LastBeat(); !t.IsZero() {
			heard = render.AgeSince(time.Now(), t) + " ago"
		}
		kv("Run", fmt.Sprintf("gone: the ledger says running, but its process has exited or stopped saying it is alive (last heard from %s). Resume with: %s",
			heard, f.Again("dlq", resumeVerb(b), "--batch", b.ID, "--yes")))
	}
	switch {
	case ap != nil:
		kv("Approved", fmt.Sprintf("%s by %s: %s", render.Timestamp(ap.At), ap.By, ap.Why))
	case b.NeedsApproval:
		kv("Approval", fmt.Sprintf("awaiting a second person's approval (not %s): %s", b.By, f.Again("decisions", "approve", b.ID, "--why", "…")))
	}
	if !b.ExecutedAt.IsZero() {
		kv("Executed", render.Timestamp(b.ExecutedAt))
	}
	kv("Outcome", render.Counts(b.Outcome))
	if ver != nil {
		kv("Verified", fmt.Sprintf("%s by %s: %s", render.Timestamp(ver.At), ver.By, render.Counts(ver.Counts)))
	}
	state := map[string]string{}
	for _, e := range jr {
		state[e.Address.String()] = e.State
	}
	fmt.Fprintln(w, "\nManifest:")
	var rows [][]string
	for _, m := range man {
		st := state[m.Address.String()]
		if st == "" {
			st = "-"
		}
		c := render.Clean
		groups := make([]string, len(m.Groups))
		for i, g := range m.Groups {
			groups[i] = deadletter.GroupLabel(g)
		}
		rows = append(rows, []string{c(m.Address.String()), c(m.Queue), c(strings.Join(groups, ",")), render.Timestamp(m.FailedAt), st, render.Truncate(c(m.Error), 60)})
	}
	if err := render.WriteTable(w, []string{"ADDRESS", "QUEUE", "CG", "FAILED-AT", "STATE", "ERROR"}, rows); err != nil {
		return err
	}
	if len(bl) > 0 {
		fmt.Fprintln(w, "\nHeld back (ordered replay):")
		for _, x := range bl {
			fmt.Fprintf(w, "  partition %s/%s: %d message(s) wait behind %s (%s)\n", render.Clean(x.Queue), render.Clean(x.Partition), x.Messages,
				render.Clean(x.Address.String()), render.Clean(x.Reason))
		}
	}
	fmt.Fprintln(w, "\nAudit:")
	for _, a := range au {
		fmt.Fprintf(w, "  %s  %-22s %s  %s\n", render.Timestamp(a.At), a.Kind, render.Clean(a.By), render.Clean(a.Detail))
	}
	return nil
}
