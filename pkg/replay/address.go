package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// one executes one address. Only ledger errors (and errNotStarted) are
// returned: broker errors are the address's outcome.
func (e *Engine) one(ctx context.Context, it Item, ent *ledger.Entry) error {
	// Calls already begun run to completion: interrupting between a push
	// and its journal entry is what the journal exists to survive, but
	// there is no reason to cause it.
	cctx := context.WithoutCancel(ctx)
	a := it.Address
	absent := e.o.Absent[a]
	// The rows a removal takes with it, held while the address is worked
	// on (settle counts them), not for the whole batch.
	e.mu.Lock()
	if absent {
		e.rows[a] = 0
	} else {
		e.rows[a] = len(it.Rows) + len(it.Others)
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.rows, a)
		e.mu.Unlock()
	}()
	if ent.State == ledger.Removed {
		if absent {
			return e.settle(cctx, ent, ledger.Removed, ent.Outcome, "", func(r *Report) { r.AlreadyDone++ })
		}
		// The journal says done, but the snapshot saw it in the DLQ (or it
		// is a recorded batch's and may be back): ask the broker, since
		// another run may also have removed it since.
		present, err := e.rowPresent(cctx, a)
		if err != nil {
			return e.settle(cctx, ent, ledger.Removed, ent.Outcome, "", func(r *Report) {
				r.Failed++
				r.Listed = append(r.Listed, AddrResult{a, "failed: checking whether it is back in the DLQ: " + err.Error()})
			})
		}
		if !present {
			return e.settle(cctx, ent, ledger.Removed, ent.Outcome, "", func(r *Report) { r.AlreadyDone++ })
		}
		if ent.BatchID == e.o.BatchID {
			// This batch already acted on it and it came back: one batch
			// does not act twice on an address; a person decides.
			return e.settle(cctx, ent, ledger.Removed, ent.Outcome, "", func(r *Report) {
				r.DeadLetteredAgain++
				r.Listed = append(r.Listed, AddrResult{a, fmt.Sprintf("dead-lettered again after this batch %s it (%s): replay it as generation %d with dlqctl dlq replay %s --why …, or discard it with dlqctl dlq rm %s --why …",
					pastTense(ent.Action), stamp(ent.UpdatedAt), ent.Generation+1, a, a)})
			})
		}
		// Back in the DLQ after another batch: acted on afresh, a replay as
		// a new generation, so its derived transaction id is not a duplicate.
		if e.o.Action == Replay {
			ent.Generation++
		}
		ent.State, ent.ReplayTxID, ent.ReplayPartitionID, ent.Via, ent.Outcome = ledger.Pending, "", "", "", ""
	}
	ent.BatchID = e.o.BatchID
	manualTried := ent.Via == ViaManual && (ent.State == ledger.Inflight || ent.State == ledger.Failed)
	if absent && (ent.State == ledger.Pending || ent.State == ledger.Failed || ent.State == ledger.Skipped || ent.State == ledger.Unknown || manualTried) {
		if e.o.Action == Replay && (ent.State == ledger.Pending || manualTried) {
			// A run that died between its push and its delete, or whose
			// push answer was lost, may have published: if the copy with
			// the derived id exists, the address was replayed, not lost
			// to someone else.
			if cp, ok := copyAddress(it, ent, e.o.ToQueue); ok {
				if m, err := e.b.Get(cctx, cp); err == nil && m != nil {
					ent.ReplayTxID, ent.Via = cp.TransactionID, ViaManual
					return e.settle(cctx, ent, ledger.Removed, "replayed", "", func(r *Report) { r.Replayed++ })
				}
			}
		}
		return e.settle(cctx, ent, ledger.Removed, "gone", "", func(r *Report) { r.AlreadyGone++ })
	}
	if why := a.Unreachable(); why != "" {
		return e.settle(cctx, ent, ledger.Skipped, "unreachable", why, func(r *Report) {
			r.Unreachable++
			r.Listed = append(r.Listed, AddrResult{a, "unreachable: " + why + "; nothing was sent (the broker cannot be asked about this address)"})
		})
	}
	if e.o.Action == Discard {
		return e.discard(ctx, cctx, it, ent)
	}
	return e.replay(ctx, cctx, it, ent)
}

func pastTense(action string) string {
	if action == Discard {
		return "discarded"
	}
	return "replayed"
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "earlier"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}
