package inspect

import (
	"context"
	"errors"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/policy"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// What became of an archived dead letter (ArchivedRow.Outcome).
const (
	OutcomeInDLQ     = "inDLQ"                     // still dead-lettered when last seen
	OutcomeReplayed  = deadletter.OutcomeReplayed  // a batch replayed it
	OutcomeDuplicate = deadletter.OutcomeDuplicate // a batch replayed it; the broker already had the copy
	OutcomeDiscarded = deadletter.OutcomeDiscarded // a batch discarded it
	OutcomeRestored  = deadletter.OutcomeRestored  // a batch discarded it, and a restore published it again
	OutcomeGone      = deadletter.OutcomeGone      // it left while a batch acted on it, or under a decision
	// OutcomeMovedElsewhere: another hand (the broker's console) replayed
	// it while a batch held it.
	OutcomeMovedElsewhere = deadletter.OutcomeMovedElsewhere
	OutcomeVanished       = "vanished" // it left with no recorded decision
)

// ArchivedRow is a dead-letter row the ledger's archive kept (replay, rm
// and sync archive every row they see), with what became of it.
type ArchivedRow struct {
	ledger.Archived
	// Outcome is one of the Outcome constants; BatchID the batch that
	// did it (or the decision recorded since, for a vanished row);
	// ReplayTxID and ReplayQueue where a replay's copy went.
	Outcome     string
	BatchID     string
	ReplayTxID  string
	ReplayQueue string
	// Decision is the address's latest decision, if any.
	Decision *ledger.Decision
}

// Row is the archived row as the broker listed it.
func (a ArchivedRow) Row() deadletter.Row {
	return deadletter.Row{ID: a.MessageID, PartitionID: a.Address.PartitionID, TransactionID: a.Address.TransactionID, Queue: a.Queue,
		Partition: a.Partition, ConsumerGroup: a.ConsumerGroup, ErrorMessage: a.Error, RetryCount: a.RetryCount, FailedAt: a.FailedAt, Data: a.Payload}
}

// settle works out the outcome from the address's journal entry (its
// last word: it speaks for this row when it was written after the row was
// last seen) and the archive's own marks.
func (a *ArchivedRow) settle(e *ledger.Entry) {
	applies := e != nil && !e.UpdatedAt.Before(a.LastSeen)
	if applies && deadletter.ActionOf(e.Action).From == deadletter.FromArchive && e.State != ledger.Removed {
		// A restore under way, or one that could not publish it: the
		// discard is still the last thing done to it (its batch is the
		// manifest's, which the restore's entry no longer names).
		a.Outcome = OutcomeDiscarded
		return
	}
	switch {
	case applies && e.State == ledger.Removed && e.Outcome != "":
		a.Outcome, a.BatchID = e.Outcome, e.BatchID
	case applies && e.State == ledger.Published:
		a.Outcome, a.BatchID = OutcomeReplayed, e.BatchID
	case a.GoneAt.IsZero():
		a.Outcome = OutcomeInDLQ
	case a.Vanished:
		a.Outcome = OutcomeVanished
	default:
		a.Outcome = OutcomeGone
	}
	if applies && (a.Outcome == OutcomeReplayed || a.Outcome == OutcomeDuplicate || a.Outcome == OutcomeMovedElsewhere || a.Outcome == OutcomeRestored) {
		a.ReplayTxID, a.ReplayQueue = e.ReplayTxID, e.ReplayQueue
	}
	if a.BatchID == "" && a.Decision != nil && a.Outcome != OutcomeInDLQ {
		a.BatchID = a.Decision.BatchID
	}
}

// Words is the outcome for people: "replayed as dlqr-1-… by batch X".
func (a ArchivedRow) Words() string {
	by := ""
	if a.BatchID != "" {
		by = " by batch " + a.BatchID
	}
	switch a.Outcome {
	case OutcomeReplayed, OutcomeDuplicate:
		s := "replayed"
		if a.Outcome == OutcomeDuplicate {
			s = "replayed (the broker had the copy)"
		}
		if a.ReplayTxID != "" {
			s += " as " + a.ReplayTxID
		}
		if a.ReplayQueue != "" && a.ReplayQueue != a.Queue {
			s += " to " + a.ReplayQueue
		}
		return s + by
	case OutcomeMovedElsewhere:
		s := "replayed by another hand while a batch held it (moved elsewhere)"
		if a.ReplayTxID != "" {
			s += " as " + a.ReplayTxID
		}
		if a.BatchID != "" {
			s += "; batch " + a.BatchID
		}
		return s
	case OutcomeDiscarded:
		return "discarded" + by
	case OutcomeRestored:
		s := "discarded, then restored"
		if a.ReplayTxID != "" {
			s += " as " + a.ReplayTxID
		}
		if a.ReplayQueue != "" && a.ReplayQueue != a.Queue {
			s += " to " + a.ReplayQueue
		}
		return s + by
	case OutcomeVanished:
		if a.Decision != nil {
			return "vanished; since decided: " + a.Decision.Action + by
		}
		return "vanished with no decision"
	case OutcomeInDLQ:
		return "in the DLQ (last seen " + render.Timestamp(a.LastSeen) + ")"
	}
	return "gone" + by
}

// ArchiveValue is the archive's part of a row in machine formats (the
// "archive" object of ls --archived -o ndjson) and for --where.
func (a ArchivedRow) ArchiveValue() map[string]any {
	v := map[string]any{"firstSeen": render.Timestamp(a.FirstSeen), "lastSeen": render.Timestamp(a.LastSeen), "vanished": a.Vanished, "outcome": a.Outcome}
	if !a.GoneAt.IsZero() {
		v["goneAt"] = render.Timestamp(a.GoneAt)
	}
	if a.BatchID != "" {
		v["batchId"] = a.BatchID
	}
	if a.ReplayTxID != "" {
		v["replayTransactionId"] = a.ReplayTxID
	}
	if a.ReplayQueue != "" {
		v["replayQueue"] = a.ReplayQueue
	}
	return v
}

// Listed is an archived row as ls --archived prints it: as ls prints a
// live one, with the "archive" object added.
type Listed struct {
	Row
	Archive map[string]any `json:"archive"`
}

// Listed is the row as ls --archived prints it, at now, with the
// row's triage SLO.
func (a ArchivedRow) Listed(now time.Time, slo time.Duration) Listed {
	return Listed{Row: ToRow(a.Row(), now, a.Decision, slo), Archive: a.ArchiveValue()}
}

// EachArchived streams the archived rows of a broker that sel matches,
// newest failure first, up to its --limit; --where sees each as ls
// prints it, with its "archive" object. The journal and the decisions
// are looked up a page at a time, for the page's addresses only.
func EachArchived(ctx context.Context, ld *ledger.Store, broker string, sel *deadletter.Selection, policies policy.Set, now time.Time, fn func(ArchivedRow) error) error {
	var cur *ArchivedRow
	sel.Bind(ctx)
	if sel.Where != "" {
		sel.WhereNow = now
		sel.WhereInput = func(r deadletter.Row, v map[string]any) {
			label, batch := "", ""
			if d := cur.Decision; d != nil {
				label, batch = DecisionLabel(*d, r, now, TriageSLO(policies, r.Queue, r.ConsumerGroup)), d.BatchID
			}
			deadletter.FillWhereValue(v, r, now, label, batch)
			v["archive"] = cur.ArchiveValue()
		}
	}
	n := 0
	var page []ArchivedRow
	flush := func() error {
		addrs := make([]deadletter.Address, len(page))
		for i, a := range page {
			addrs[i] = a.Address
		}
		entries, err := ld.Entries(ctx, broker, addrs)
		if err != nil {
			return err
		}
		dec, err := ld.LatestDecisionsFor(ctx, broker, addrs)
		if err != nil {
			return err
		}
		for i := range page {
			a := &page[i]
			if d, ok := dec[a.Address]; ok {
				a.Decision = &d
			}
			a.settle(entries[a.Address])
			cur = a
			if !sel.Match(a.Row()) {
				if err := sel.WhereErr(); err != nil {
					return err
				}
				continue
			}
			if err := fn(*a); err != nil {
				return err
			}
			if n++; sel.Limit > 0 && n >= sel.Limit {
				return errLimit
			}
		}
		page = page[:0]
		return nil
	}
	err := ld.EachArchived(ctx, broker, ledger.ArchiveFilter{Queue: sel.Queue}, func(a ledger.Archived) error {
		page = append(page, ArchivedRow{Archived: a})
		if len(page) == 500 {
			return flush()
		}
		return nil
	})
	if err == nil && len(page) > 0 {
		err = flush()
	}
	if err == errLimit {
		return nil
	}
	return err
}

// errLimit ends the archive's read once --limit rows were handed over.
var errLimit = errors.New("limit reached")
