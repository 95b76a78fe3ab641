package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/duration"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// ParseUntil reads the end of a hold: RFC 3339, or a duration from now.
// A value that is neither, or is past, is an UntilError.
func ParseUntil(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		if !t.After(now) {
			return time.Time{}, &UntilError{Value: s, Why: "it is in the past"}
		}
		return t.UTC(), nil
	}
	d, err := duration.Parse(s)
	if errors.Is(err, duration.ErrTooLong) {
		return time.Time{}, &UntilError{Why: err.Error()} // it names the value
	}
	if err != nil || d <= 0 {
		return time.Time{}, &UntilError{Value: s, Why: "want RFC 3339 or a duration from now (4h, 2d)"}
	}
	return now.Add(d).UTC(), nil
}

// UntilError refuses the end of a hold. A front end words it with the
// name of the field it was given in (Words): a command line, --until.
// Value is the value refused, when Why does not name it.
type UntilError struct{ Value, Why string }

func (e *UntilError) Error() string { return e.Words("until") }

// Words is the refusal with the end of the hold called name.
func (e *UntilError) Words(name string) string {
	if e.Value == "" {
		return name + ": " + e.Why
	}
	return fmt.Sprintf("invalid %s %q: %s", name, e.Value, e.Why)
}

// Decide snapshots the selection into batch b (its action, who, when,
// why and until set by the caller) and records it, prepared as every
// batch is (Prepare: the names checked, the predicate readied, the
// selection staged). An explicit address that is no longer
// dead-lettered but that the ledger's archive kept (a vanished row, one
// that left the broker) is recorded from the archive: that is how the
// alarm of a vanished row is settled. A batch of such addresses alone has
// nothing left to carry out, and is done. A replay or discard of more
// messages than env.ApprovalAbove awaits a second person's approval, as
// one the run records does: its --batch runs it only once approved.
func Decide(ctx context.Context, env Env, sel *deadletter.Selection, b *ledger.Batch) (*Decided, error) {
	act := deadletter.ActionOf(b.Action)
	settings := DefaultSettings(b.Action)
	p, err := Prepare(ctx, env, Request{Action: b.Action, Selection: sel, Settings: settings})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	cl, ld, st := env.Client, env.Ledger, p.in.st
	gone, err := archivedOnly(ctx, ld, cl.Broker(), p.in.missing)
	if err != nil {
		return nil, err
	}
	live := st.n
	if err := decidable(sel, act, live, len(gone)); err != nil {
		return nil, err
	}
	b.Broker, b.Selection, b.Settings = cl.Broker(), sel.String(), settings.decided(act)
	// Recorded in replay order, as replay records its own batches, so the
	// manifest's order is the one every run of it keeps.
	if err := st.arrange(ctx, act.Republishes(), ""); err != nil {
		return nil, err
	}
	if live == 0 && act.Discards() {
		b.Status, b.Outcome = ledger.StatusDone, map[string]int{"gone": len(gone)}
	} else if env.needsApproval(b.Action, live+len(gone)) {
		b.Status, b.NeedsApproval = ledger.StatusAwaiting, true
	}
	if err := recordFrom(ctx, ld, b, st, gone); err != nil {
		return nil, err
	}
	return &Decided{Batch: b, Messages: live + len(gone), Notes: p.where.Notes()}, nil
}

// decidable refuses a decision on nothing (live messages in the DLQ and
// gone ones the archive kept), and a replay of messages gone from it.
func decidable(sel *deadletter.Selection, act *deadletter.Action, live, gone int) error {
	switch {
	case live == 0 && gone == 0 && len(sel.Addresses) > 0:
		return errs.NotFoundf("none of the given addresses is dead-lettered or known to the ledger's archive; nothing recorded")
	case live == 0 && gone == 0 && sel.Class != "":
		return errs.Usagef("no dead letter is in class %s now; nothing recorded", sel.Class)
	case live == 0 && gone == 0:
		return errs.Usagef("no dead letter matches the selection; nothing recorded")
	case gone > 0 && act.Republishes():
		return errs.Usagef("%s no longer in the DLQ (the archive keeps it): it cannot be replayed from the broker; decide a discard (nothing to redo) or a hold instead", render.Plural(gone, "message is", "messages are"))
	}
	return nil
}

// archivedOnly returns, for each address (explicit ones that are not
// dead-lettered), the manifest of what the archive kept of it once it
// left the DLQ.
func archivedOnly(ctx context.Context, ld *ledger.Store, broker string, addrs []deadletter.Address) ([]ledger.ManifestItem, error) {
	in := map[deadletter.Address]bool{}
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
