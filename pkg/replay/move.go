package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// The broker's move (Queen 1.6, 2.x) publishes a dead-letter row's copy
// under dlq:<row id> and deletes the row, in one step: a row moved is
// gone, its copy there; a row not moved is still there, its copy not.
// That is what makes it exactly once by construction, and what settles
// every outcome in doubt (a lost answer, a kill mid-call, dlqRowRemoved
// null): the copy is looked for, and where it is not there, the row is
// moved again.

// move replays a message one group dead-lettered by the broker's move.
func (e *Engine) move(ctx context.Context, it Item, ent *ledger.Entry) error {
	row := it.Rows[0]
	cp := client.CopyID(row.ID)
	// A copy under this id may be this entry's own when an earlier run
	// recorded this move and was stopped before its verdict.
	ours := !ent.Fresh() && ent.Via == ViaMove && ent.ReplayTxID == cp
	// Another group's row of the message, seen before and moved since by
	// another hand: its copy reached every group, this one's too, whatever
	// destination this batch has.
	if done, err := e.anotherHandsCopy(ctx, it, ent, ours); done || err != nil {
		return err
	}
	ent.State, ent.Via, ent.ReplayTxID, ent.ReplayQueue = ledger.Inflight, ViaMove, cp, e.destQueue(it)
	ent.Attempts++
	// Nothing need be journaled before the call: the broker knows the copy
	// by an id every later run derives again, and moves a row once.
	e.copies.add(cp)
	var dest *client.Destination
	if e.o.ToQueue != "" {
		// Both halves: Queen's proxy refuses half a destination.
		dest = &client.Destination{Queue: e.o.ToQueue, Partition: it.Partition}
	}
	for try := 0; ; try++ {
		m, err := e.b.Move(ctx, row.ID, dest)
		if errors.Is(err, client.ErrOutcomeUnknown) && try == 0 {
			// The move is atomic: if its copy is not there, the row was
			// not moved, and it is moved again (which is a 404 if it was).
			ours = true
			if found, ferr := e.copyFound(ctx, it, cp); ferr == nil && found {
				ent.ReplayPartitionID = it.Address.PartitionID
				return e.replayed(ctx, ent)
			}
			continue
		}
		return e.moved(ctx, it, ent, m, err, cp, ours)
	}
}

// moved settles a move the broker answered (err: how it failed): the
// row's copy published, a duplicate of another hand's, or the row gone;
// any other failure is retryable (the next run looks for the copy, then
// moves the row).
func (e *Engine) moved(ctx context.Context, it Item, ent *ledger.Entry, m *client.Moved, err error, cp string, ours bool) error {
	switch {
	case err == nil && m.Copied():
		if e.o.ToQueue == "" {
			ent.ReplayPartitionID = it.Address.PartitionID
		}
		return e.replayed(ctx, ent)
	case err == nil:
		// A duplicate: the copy is there (another hand pushed it), the row
		// kept, a leftover to delete.
		return e.movedElsewhere(ctx, ent, cp)
	case errors.Is(err, client.ErrNoDeadLetterRow):
		// The row is gone: moved (by this entry before, or another hand) or
		// discarded.
		return e.rowLeft(ctx, it, ent, cp, ours)
	case errors.Is(err, client.ErrRouteMissing):
		e.stopFor("the broker has no move route (POST /api/v1/dlq/{id}/replay): it is not the Queen 1.6 it was taken for", ManualPathNext)
	}
	e.stopOnRefusal(err)
	return e.fail(ctx, ent, "failed: ", err)
}

// rowLeft settles a move whose row was gone: its copy there is this
// batch's if this entry may have made it, else another hand's; no copy
// means someone discarded the row.
func (e *Engine) rowLeft(ctx context.Context, it Item, ent *ledger.Entry, cp string, ours bool) error {
	found, err := e.copyFound(ctx, it, cp)
	switch {
	case err != nil:
		return e.fail(ctx, ent, "failed: the row is gone; looking for its copy: ", err)
	case found && ours:
		ent.ReplayPartitionID = it.Address.PartitionID
		return e.replayed(ctx, ent)
	case found:
		if others, err := e.otherRowsCopied(ctx, it, cp); err == nil {
			e.heldMoreThanOnce(it.Address, "", append([]string{cp}, others...))
		}
		ent.ReplayPartitionID, ent.ReplayQueue = it.Address.PartitionID, it.Queue
		return e.settle(ctx, ent, ledger.Removed, deadletter.OutcomeMovedElsewhere, "", func(r *Report) { r.MovedElsewhere++ })
	case ours && e.o.ToQueue != "":
		// Its copy went to the recovery queue, where it cannot be looked
		// for by address: an earlier attempt of this entry made it.
		return e.replayed(ctx, ent)
	}
	return e.gone(ctx, ent)
}

// copyFound reports whether the broker holds the copy cp of an item in
// the item's own partition: where an in-place move (this run's, or the
// console's, which moves in place) put it.
func (e *Engine) copyFound(ctx context.Context, it Item, cp string) (bool, error) {
	_, err := e.b.Get(ctx, deadletter.Address{PartitionID: it.Address.PartitionID, TransactionID: cp})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, client.ErrNoDeadLetterRow):
		return false, nil
	}
	return false, err
}

// anotherHandsCopy settles an item whose message another hand (the
// console) replayed by moving one of its other rows, and reports whether
// it did: the broker holds that copy, so nothing more is published and
// what is left of the rows is deleted. ours says an earlier attempt of
// this entry may have published its own copy. Where the broker now holds
// the message more than once (that copy and another hand's, or the
// console's moves of two of its rows), the report says so.
func (e *Engine) anotherHandsCopy(ctx context.Context, it Item, ent *ledger.Entry, ours bool) (bool, error) {
	cps, err := e.otherRowsCopied(ctx, it, ent.ReplayTxID)
	if err != nil {
		return true, e.fail(ctx, ent, "failed: looking for a copy another hand published: ", err)
	}
	if len(cps) == 0 {
		return false, nil
	}
	mine := ""
	switch first := client.CopyID(it.Rows[0].ID); {
	case ours && ent.ReplayTxID != "":
		if own, ok := copyAddress(it, ent, e.o.ToQueue); ok {
			if _, err := e.b.Get(ctx, own); err == nil {
				mine = own.TransactionID
			}
		}
	case it.Rows[0].ID != "":
		// Not this entry's: a copy under the newest row's id is the
		// console's too.
		if found, err := e.copyFound(ctx, it, first); err == nil && found {
			cps = append([]string{first}, cps...)
		}
	}
	e.heldMoreThanOnce(it.Address, mine, cps)
	return true, e.movedElsewhere(ctx, ent, cps[0])
}

// heldMoreThanOnce records a message the broker holds more than one copy
// of (nothing when it holds one): ours, published by an attempt of this
// batch ("" for none), and theirs, another hand's (the console's moves
// of its rows). dlqctl published once; the report says what the broker
// holds, and by whose hand.
func (e *Engine) heldMoreThanOnce(a deadletter.Address, ours string, theirs []string) {
	n := len(theirs)
	if ours != "" {
		n++
	}
	if n < 2 {
		return
	}
	hands := fmt.Sprintf("%s by another hand (the broker's console moved %s of its rows while this batch held it)", strings.Join(theirs, " and "),
		map[bool]string{true: "one", false: "each"}[len(theirs) == 1])
	if ours != "" {
		hands = ours + " by an earlier attempt of this batch, and " + hands
	}
	e.record(func(r *Report) {
		r.HeldMoreThanOnce++
		r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("held %d times by the broker: %s", n, hands)})
	})
}

// anyRowCopied is the copy id of any row of the item's message (its own
// selected rows' included) that the broker holds, "" when none is.
func (e *Engine) anyRowCopied(ctx context.Context, it Item) (string, error) {
	if cp := client.CopyID(it.Rows[0].ID); it.Rows[0].ID != "" {
		if found, err := e.copyFound(ctx, it, cp); err != nil || found {
			if found {
				others, oerr := e.otherRowsCopied(ctx, it, cp)
				if oerr == nil {
					e.heldMoreThanOnce(it.Address, "", append([]string{cp}, others...))
				}
			}
			return map[bool]string{true: cp}[found], err
		}
	}
	cps, err := e.otherRowsCopied(ctx, it, "")
	if err != nil || len(cps) == 0 {
		return "", err
	}
	e.heldMoreThanOnce(it.Address, "", cps)
	return cps[0], nil
}

// otherRowsCopied are the copy ids of the rows of the item's message,
// other than the one its copy is published under (and own, the copy id
// its journal names), that the broker holds: another hand moved each of
// those rows. The rows are the item's and those the ledger archived of
// its address and the DLQ no longer lists (a row the console moved before
// anything of dlqctl's saw it cannot be known).
func (e *Engine) otherRowsCopied(ctx context.Context, it Item, own string) ([]string, error) {
	e.mu.Lock()
	ids := e.archived[it.Address]
	e.mu.Unlock()
	for _, r := range it.AllRows() {
		ids = append(ids, r.ID)
	}
	seen := map[string]bool{it.Rows[0].ID: true}
	var out []string
	for _, id := range ids {
		cp := client.CopyID(id)
		if id == "" || seen[id] || cp == own {
			continue
		}
		seen[id] = true
		found, err := e.copyFound(ctx, it, cp)
		if err != nil {
			return nil, err
		}
		if found {
			out = append(out, cp)
		}
	}
	return out, nil
}

// movedElsewhere settles an address another hand replayed: its copy cp is
// in the broker; what is left of its rows is deleted (a 404 there is the
// rows gone too).
func (e *Engine) movedElsewhere(ctx context.Context, ent *ledger.Entry, cp string) error {
	a := ent.Address
	// Another hand's copy: in the message's own queue and partition, where
	// the console (and any in-place replay) publishes.
	ent.State, ent.Outcome, ent.ReplayTxID, ent.ReplayPartitionID, ent.ReplayQueue = ledger.Published, deadletter.OutcomeMovedElsewhere, cp, a.PartitionID, ""
	return e.finishDelete(ctx, ent, func(r *Report) {
		r.MovedElsewhere++
		r.RowsRemoved += e.rows[a]
	})
}
