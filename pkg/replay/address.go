package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// one executes one address: its action's step (stepFor). Only ledger
// errors (and errNotStarted) are returned: broker errors are the
// address's outcome.
func (e *Engine) one(ctx context.Context, it Item, ent *ledger.Entry) error {
	// Calls already begun run to completion: interrupting between a push
	// and its journal entry is what the journal exists to survive, but
	// there is no reason to cause it.
	cctx := context.WithoutCancel(ctx)
	defer e.holdRows(it)()
	return e.step(e, ctx, cctx, it, ent)
}

// A step is what one address's turn does for the batch's action, given
// the run's context and one that is not cancelled (for calls begun).
type step func(e *Engine, ctx, cctx context.Context, it Item, ent *ledger.Entry) error

// stepFor is the step of an action, chosen once, when the engine is
// made: the engine calls it and does not ask the action again. A new
// action that does something else to an address is a new step here.
func stepFor(act *deadletter.Action) step {
	switch {
	case act.Outside(): // a restore, an import: nothing of the DLQ is asked
		return (*Engine).republish
	case act.Publishes: // a replay
		return inDLQ((*Engine).replay)
	default: // a discard
		return inDLQ((*Engine).discard)
	}
}

// inDLQ is the step of an action on a dead letter: an address the
// journal says is done is looked at again, an absent or unreachable one
// is settled without a call, and every other one is acted on by act.
func inDLQ(act step) step {
	return func(e *Engine, ctx, cctx context.Context, it Item, ent *ledger.Entry) error {
		if ent.State == ledger.Removed {
			if done, err := e.revisit(cctx, it, ent); done {
				return err
			}
		}
		ent.BatchID = e.o.BatchID
		// Nothing is sent for an absent address; every other one is taken
		// to be in the DLQ.
		if it.Absent && unsettled(ent) {
			return e.absent(cctx, it, ent)
		}
		if why := it.Address.Unreachable(); why != "" {
			return e.settle(cctx, ent, ledger.Skipped, "unreachable", why, func(r *Report) {
				r.Unreachable++
				r.Listed = append(r.Listed, AddrResult{Address: it.Address, Reason: "unreachable: " + why + "; nothing was sent (the broker cannot be asked about this address)"})
			})
		}
		return act(e, ctx, cctx, it, ent)
	}
}

// holdRows keeps, while an address is worked on (settle counts them),
// how many rows its removal takes with it, and returns what lets them go.
func (e *Engine) holdRows(it Item) (release func()) {
	a := it.Address
	e.mu.Lock()
	if it.Absent || e.act.Outside() {
		e.rows[a] = 0 // a restore or an import removes no row
	} else {
		e.rows[a] = len(it.Rows) + len(it.Others)
	}
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		delete(e.rows, a)
		delete(e.archived, a)
		e.mu.Unlock()
	}
}

// revisit settles an address whose journal says it is removed (done says
// so), or readies it to be acted on afresh: the journal says done, but
// the snapshot saw it in the DLQ (or it is a recorded batch's and may be
// back), so the broker is asked, since another run may also have removed
// it since.
func (e *Engine) revisit(ctx context.Context, it Item, ent *ledger.Entry) (done bool, err error) {
	a := it.Address
	// Found gone by this batch, which did nothing to it: a listing that
	// missed it (before that was asked of the broker) said so. Asked
	// again, wherever the listing saw it.
	foundGone := ent.BatchID == e.o.BatchID && ent.Outcome == deadletter.OutcomeGone
	alreadyDone := func(r *Report) { r.AlreadyDone++ }
	if it.Absent && !foundGone {
		return true, e.settle(ctx, ent, ledger.Removed, ent.Outcome, "", alreadyDone)
	}
	present, err := e.rowPresent(ctx, a)
	if err != nil {
		return true, e.settle(ctx, ent, ledger.Removed, ent.Outcome, "", func(r *Report) {
			r.Failed++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: "failed: checking whether it is back in the DLQ: " + err.Error()})
		})
	}
	switch {
	case !present:
		return true, e.settle(ctx, ent, ledger.Removed, ent.Outcome, "", alreadyDone)
	case foundGone && it.Absent:
		// Still there, though no listing of this run saw it.
		return true, e.missed(ctx, ent)
	case foundGone:
		// Still (or again) there: this batch never acted on it, so it
		// does now; no copy of this batch's can exist.
	case ent.BatchID == e.o.BatchID:
		// This batch already acted on it and it came back: one batch does
		// not act twice on an address; a person decides.
		return true, e.settle(ctx, ent, ledger.Removed, ent.Outcome, "", func(r *Report) {
			r.DeadLetteredAgain++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("dead-lettered again after %s (%s)", didWhat(ent), stamp(ent.UpdatedAt)),
				Next: ReplayOrDiscardNext, Generation: ent.Generation + 1})
		})
	case e.act.Generations:
		// Back in the DLQ after another batch: acted on afresh, a replay as
		// a new generation, so its derived transaction id is not a
		// duplicate. Its earlier copy is this journal's own, not another
		// hand's.
		ent.Generation++
		e.mu.Lock()
		e.archived[a] = slices.DeleteFunc(e.archived[a], func(id string) bool { return client.CopyID(id) == ent.ReplayTxID })
		e.mu.Unlock()
	}
	ent.State, ent.ReplayTxID, ent.ReplayPartitionID, ent.Via, ent.Outcome = ledger.Pending, "", "", "", ""
	return false, nil
}

// unsettled reports whether an entry is one an absent address must be
// looked for: not yet acted on, or tried without an answer.
func unsettled(ent *ledger.Entry) bool {
	switch ent.State {
	case ledger.Pending, ledger.Failed, ledger.Skipped, ledger.Unknown:
		return true
	}
	return tried(ent)
}

// tried reports whether an entry records an attempt whose answer was
// not heard (in flight, or failed, on a path that publishes).
func tried(ent *ledger.Entry) bool {
	return (ent.Via == ViaManual || ent.Via == ViaMove) && (ent.State == ledger.Inflight || ent.State == ledger.Failed)
}

// absent settles an address no listing of this run saw. A listing that
// paged while rows were removed (another run, the console, retention) can
// miss a row that is there: absent from it is gone only once the broker
// says so for the address.
func (e *Engine) absent(ctx context.Context, it Item, ent *ledger.Entry) error {
	present, err := e.rowPresent(ctx, it.Address)
	if err != nil {
		return e.fail(ctx, ent, "failed: not in this run's listing; asking the broker whether it is still dead-lettered: ", err)
	}
	if present {
		return e.missed(ctx, ent)
	}
	if e.act.Publishes && (ent.State == ledger.Pending || tried(ent)) {
		// A run that died between its push and its delete, or whose answer
		// was lost, may have published; on a broker that moves, someone
		// may have moved a row meanwhile: if a copy is there, the address
		// was replayed, not lost to someone else.
		cp, ours, err := e.copyOfAbsent(ctx, it, ent)
		switch {
		case err != nil:
			return e.fail(ctx, ent, "failed: the dead letter is gone; looking for its copy: ", err)
		case cp != "" && ours:
			ent.ReplayTxID = cp
			return e.replayed(ctx, ent)
		case cp != "":
			ent.ReplayTxID, ent.ReplayPartitionID, ent.ReplayQueue = cp, it.Address.PartitionID, ""
			return e.settle(ctx, ent, ledger.Removed, deadletter.OutcomeMovedElsewhere, "", func(r *Report) { r.MovedElsewhere++ })
		}
	}
	return e.gone(ctx, ent)
}

// copyOfAbsent looks for the copy of an address no longer in the DLQ:
// the one this entry's journal names (or the manual path derives), and
// on a broker that moves the broker's copy of each of its rows. It
// returns the copy's id ("" for none) and whether this entry's own
// attempt may have made it.
func (e *Engine) copyOfAbsent(ctx context.Context, it Item, ent *ledger.Entry) (string, bool, error) {
	tried := ent.Via == ViaManual || ent.Via == ViaMove
	if cp, ok := copyAddress(it, ent, e.o.ToQueue); ok && (tried || !e.o.Release.Moves()) {
		if _, err := e.b.Get(ctx, cp); err == nil {
			// dlqctl's derived ids are its own; a copy id of the broker's
			// is this entry's when it recorded an attempt under it.
			return cp.TransactionID, tried || deadletter.IsReplayID(cp.TransactionID), nil
		} else if !errors.Is(err, client.ErrNoDeadLetterRow) {
			return "", false, err
		}
	}
	if !e.o.Release.Moves() {
		return "", false, nil
	}
	found, err := e.rowCopies(ctx, it)
	if err != nil {
		return "", false, err
	}
	if len(found) == 0 {
		return "", false, nil
	}
	// Every copy is counted: two rows moved (by the console, or one by an
	// attempt of this entry) are the message held twice.
	ours := ""
	for i, cp := range found {
		if tried && ent.ReplayTxID == cp {
			ours, found = cp, slices.Delete(found, i, i+1)
			break
		}
	}
	e.heldMoreThanOnce(it.Address, ours, found)
	if ours != "" {
		return ours, true, nil
	}
	return found[0], false, nil
}

// rowCopies are the broker's copies of an address's rows (on a broker
// that moves, a moved row's copy is under an id made from the row's),
// each once.
func (e *Engine) rowCopies(ctx context.Context, it Item) ([]string, error) {
	var found []string
	for _, r := range it.AllRows() {
		if r.ID == "" {
			continue
		}
		cp := client.CopyID(r.ID)
		ok, err := e.copyFound(ctx, it, cp)
		if err != nil {
			return nil, err
		}
		if ok && !slices.Contains(found, cp) {
			found = append(found, cp)
		}
	}
	return found, nil
}

// replayed settles an address whose copy this entry published.
func (e *Engine) replayed(ctx context.Context, ent *ledger.Entry) error {
	return e.settle(ctx, ent, ledger.Removed, deadletter.OutcomeReplayed, "", func(r *Report) { r.Replayed++ })
}

// gone settles an address this batch found gone from the DLQ, with no
// copy of it anywhere: it did nothing to it.
func (e *Engine) gone(ctx context.Context, ent *ledger.Entry) error {
	return e.settle(ctx, ent, ledger.Removed, deadletter.OutcomeGone, "", func(r *Report) { r.AlreadyGone++ })
}

// missed leaves an address that is dead-lettered though this run's
// listing did not see it (rows removed while it paged slid it onto a
// page already read): this run cannot act on rows it has not read, and
// the next run of the batch, whose listing sees it, does. The entry is
// left as it was.
func (e *Engine) missed(ctx context.Context, ent *ledger.Entry) error {
	return e.settle(ctx, ent, ent.State, ent.Outcome, ent.LastError, func(r *Report) {
		r.Missed++
		r.Listed = append(r.Listed, AddrResult{Address: ent.Address, Reason: "still dead-lettered, though this run's listing did not see it (rows were removed while it read the DLQ: by another run, the console or retention); left for the next run",
			Next: RerunNext})
	})
}

// didWhat says what this batch did to an address, from its journal entry.
func didWhat(ent *ledger.Entry) string {
	if ent.Outcome == deadletter.OutcomeMovedElsewhere {
		return "another hand (the console) moved it while this batch held it"
	}
	return "this batch " + deadletter.ActionOf(cmp.Or(ent.Action, deadletter.Replay)).Past + " it"
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "earlier"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}
