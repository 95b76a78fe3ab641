package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// destQueue is the queue an item is published to.
func (e *Engine) destQueue(it Item) string {
	if e.o.ToQueue != "" {
		return e.o.ToQueue
	}
	return it.Queue
}

// Pinned reports whether an address was attempted on the manual path
// and may have been published under its derived id: every later run
// keeps that path (and id), so a repeat is a harmless duplicate.
func Pinned(ent *ledger.Entry) bool {
	return ent != nil && ent.Via == ViaManual && ent.ReplayTxID != "" &&
		(ent.State == ledger.Inflight || ent.State == ledger.Failed || ent.State == ledger.Published || ent.State == ledger.Unknown)
}

// copyAddress is where a manual replay's copy of an item would be: the
// partition the push answer named, or the item's own partition when it
// went to the item's own queue. ok is false when it cannot be known.
func copyAddress(it Item, ent *ledger.Entry, toQueue string) (deadletter.Address, bool) {
	txid := ent.ReplayTxID
	if txid == "" {
		txid = ReplayTxID(it.Address, ent.Generation)
	}
	switch {
	case ent.ReplayPartitionID != "":
		return deadletter.Address{PartitionID: ent.ReplayPartitionID, TransactionID: txid}, true
	case ent.ReplayQueue == it.Queue, ent.ReplayQueue == "" && toQueue == "":
		return deadletter.Address{PartitionID: it.Address.PartitionID, TransactionID: txid}, true
	}
	return deadletter.Address{}, false
}

func (e *Engine) replay(pctx, ctx context.Context, it Item, ent *ledger.Entry) error {
	a := it.Address
	if done, err := e.resume(pctx, ctx, ent); done {
		return err
	}
	ent.Action = e.act.Name
	if e.o.MaxGeneration > 0 && ent.Generation > e.o.MaxGeneration {
		return e.settle(ctx, ent, ledger.Skipped, "generation-cap", "", func(r *Report) {
			r.SkippedGeneration++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("skipped: generation %d is past the batch's cap of %d (it keeps failing after replays)", ent.Generation, e.o.MaxGeneration), Next: GenerationCapNext})
		})
	}
	payload, done, err := e.payloadOf(ctx, it, ent)
	if done {
		return err
	}
	if Pinned(ent) && ent.ReplayQueue != "" && ent.ReplayQueue != e.destQueue(it) {
		// Its earlier push (which may have landed) went elsewhere: the
		// same id in another queue is no duplicate. A person decides.
		e.record(func(r *Report) {
			r.Failed++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("not sent: an earlier attempt pushed it to queue %s as %s and may have landed; replay it to that queue, or check that queue and discard it", ent.ReplayQueue, ent.ReplayTxID)})
		})
		return e.save(ctx, ent, true)
	}
	if err := e.pace(pctx); err != nil {
		return err
	}
	// An address attempted on the manual path stays on it: its derived id
	// makes a repeat a duplicate, where /retry would mint a second copy.
	switch e.pathOf(it, ent) {
	case ViaMove:
		return e.move(ctx, it, ent)
	case ViaEndpoint:
		return e.endpoint(ctx, ent)
	}
	return e.manual(ctx, it, ent, payload)
}

// resume takes up where the journal says an earlier attempt left an
// address (done: settled here): an endpoint answer lost (retried only
// with --retry-unknown), a copy published and its row still to delete,
// an endpoint call in flight.
func (e *Engine) resume(pctx, ctx context.Context, ent *ledger.Entry) (done bool, err error) {
	switch ent.State {
	case ledger.Unknown:
		if !e.o.RetryUnknown {
			if err := e.save(ctx, ent, true); err != nil {
				return true, err
			}
			e.record(func(r *Report) { r.Unknown++ })
			e.list(ent.Address, "unknown: an endpoint replay's answer was lost and the row is still there", RetryUnknownNext)
			return true, nil
		}
		ent.State = ledger.Pending
	case ledger.Published:
		if err := e.pace(pctx); err != nil {
			return true, err
		}
		if ent.Outcome == deadletter.OutcomeMovedElsewhere {
			return true, e.movedElsewhere(ctx, ent, ent.ReplayTxID)
		}
		return true, e.finishDelete(ctx, ent, func(r *Report) { r.Replayed++ })
	case ledger.Inflight:
		if ent.Via == ViaEndpoint {
			return true, e.resolveEndpoint(ctx, ent)
		}
		// Manual path: re-pushing the same derived id is safe; the move:
		// moving the row again is (a moved row is a 404, its copy found).
	}
	return false, nil
}

// payloadOf is the message a replay publishes: the list's, or, when the
// list showed an envelope or nothing, the detail route's (it decrypts;
// an envelope is never pushed). done: the address was settled here (gone,
// or undecryptable and left in place).
func (e *Engine) payloadOf(ctx context.Context, it Item, ent *ledger.Entry) (payload json.RawMessage, done bool, err error) {
	payload = it.Data()
	if !it.Checked && (it.Envelope() || len(payload) == 0) {
		m, err := e.b.Get(ctx, it.Address)
		switch {
		case errors.Is(err, client.ErrNoDeadLetterRow):
			return nil, true, e.gone(ctx, ent)
		case err != nil:
			return nil, true, e.fail(ctx, ent, "failed: ", err)
		}
		payload = m.Payload
	}
	if !deadletter.IsEnvelope(payload) {
		return payload, false, nil
	}
	if e.o.Release.Moves() {
		// 2.x's console moves a row it cannot decrypt, the envelope as the
		// copy: a row moved meanwhile is not left in place.
		if cp, err := e.anyRowCopied(ctx, it); err != nil {
			return nil, true, e.fail(ctx, ent, "failed: looking for a copy another hand published: ", err)
		} else if cp != "" {
			return nil, true, e.movedElsewhere(ctx, ent, cp)
		}
	}
	return nil, true, e.settle(ctx, ent, ledger.Skipped, "undecryptable", "", func(r *Report) {
		r.SkippedEncrypted++
		r.Listed = append(r.Listed, AddrResult{Address: it.Address, Reason: "skipped: undecryptable envelope (wrong or rotated key); left in place", Next: DiscardNext})
	})
}

// endpoint replays through /retry (--via endpoint).
func (e *Engine) endpoint(ctx context.Context, ent *ledger.Entry) error {
	a := ent.Address
	ent.State, ent.Via = ledger.Inflight, ViaEndpoint
	ent.Attempts++
	if err := e.save(ctx, ent, false); err != nil {
		return err
	}
	res, err := e.b.Retry(ctx, a)
	var he *client.HTTPError
	switch {
	case err == nil:
		if res.ReplayedAs != nil {
			ent.ReplayTxID = res.ReplayedAs.TransactionID
			e.copies.add(ent.ReplayTxID)
		}
		ent.Outcome = deadletter.OutcomeReplayed
		if !res.DLQRowRemoved {
			// The message now exists twice; the row is ours to delete.
			// Published is journaled first: a crash before the delete
			// then resumes with the delete, not with an unknown.
			ent.State = ledger.Published
			if err := e.save(ctx, ent, false); err != nil {
				return err
			}
			return e.finishDelete(ctx, ent, func(r *Report) { r.Replayed++ })
		}
		return e.replayed(ctx, ent)
	case errors.Is(err, client.ErrRouteMissing):
		return e.settle(ctx, ent, ledger.Failed, "", "the broker has no /retry route", func(r *Report) {
			r.Failed++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: "failed: the broker has no /retry route", Next: OtherPathNext})
		})
	case errors.Is(err, client.ErrNoDeadLetterRow):
		return e.gone(ctx, ent)
	case errors.As(err, &he) && he.Err == nil && (he.Status == 503 || he.Status == 429 || he.Status == 401 || he.Status == 403):
		// The broker answered that it did not take the call.
		return e.fail(ctx, ent, "failed: ", err)
	case errors.Is(err, client.ErrNotSent):
		// Refused, or never written: the broker has not seen it.
		return e.fail(ctx, ent, "failed: ", err)
	}
	// The answer was lost: the push may or may not have happened.
	return e.resolveEndpoint(ctx, ent)
}

// resolveEndpoint settles an endpoint call whose answer was lost by
// looking at the row: gone means replayed; still there means unknown
// (the push may have happened with dlqRowRemoved:false), left for a human
// rather than risking a second copy.
func (e *Engine) resolveEndpoint(ctx context.Context, ent *ledger.Entry) error {
	present, err := e.rowPresent(ctx, ent.Address)
	if err != nil {
		ent.State = ledger.Inflight
		if serr := e.save(ctx, ent, true); serr != nil {
			return serr
		}
		e.record(func(r *Report) {
			r.Failed++
			r.Listed = append(r.Listed, AddrResult{Address: ent.Address, Reason: "unresolved: the replay call's answer was lost and the row could not be checked: " + err.Error()})
		})
		e.heard(err)
		return nil
	}
	if !present {
		return e.replayed(ctx, ent)
	}
	return e.settle(ctx, ent, ledger.Unknown, "", "answer lost; row still dead-lettered", func(r *Report) {
		r.Unknown++
		r.Listed = append(r.Listed, AddrResult{Address: ent.Address, Reason: "unknown: the replay call's answer was lost and the row is still there", Next: RetryUnknownNext})
	})
}

// rowPresent asks the broker whether the address is still dead-lettered.
func (e *Engine) rowPresent(ctx context.Context, a deadletter.Address) (bool, error) {
	m, err := e.b.Get(ctx, a)
	switch {
	case errors.Is(err, client.ErrNoDeadLetterRow):
		return false, nil
	case err != nil:
		return false, err
	}
	return m.Status == "" || m.Status == "dead_letter", nil
}

// manual replays by get-push-delete with the derived transaction id
// (on a broker that moves, the broker's own copy id for the row): every
// retry of the push is safe, a repeat comes back "duplicate".
func (e *Engine) manual(ctx context.Context, it Item, ent *ledger.Entry, payload json.RawMessage) error {
	payload, ok, err := e.transform(ctx, ent, payload)
	if !ok {
		return err
	}
	queue, partition := e.destQueue(it), it.Partition
	ours, done, err := e.intend(ctx, it, ent, queue, payload)
	if done {
		return err
	}
	if e.o.Release.Moves() {
		// The console moves one row at a time: a message of several rows
		// may have had another of them moved meanwhile, its copy already
		// published to every group in the message's own partition. That is
		// so whether or not an earlier attempt of this entry pushed (its
		// copy is under another id), and whatever destination this batch
		// has.
		if done, err := e.anotherHandsCopy(ctx, it, ent, ours); done || err != nil {
			return err
		}
	}
	e.copies.add(ent.ReplayTxID)
	res, sent, err := e.pushCopy(ctx, client.PushItem{Queue: queue, Partition: partition, Payload: payload, TransactionID: ent.ReplayTxID})
	if err != nil {
		e.stopOnRefusal(err)
		// Stays retryable: the derived id makes the next attempt safe.
		return e.fail(ctx, ent, "failed: ", err)
	}
	return e.pushed(ctx, it, ent, res, ours || sent)
}

// intend journals a manual replay's intent before its push: whatever
// happens next (a lost answer, a kill), every later run, on any path and
// in any process, finds that a push with this id may exist and repeats it
// (a duplicate) instead of minting a copy through /retry. The claim may
// have journaled it already (intentAhead), or a run that died after
// journaling it: then there is nothing to wait for, and its id is this
// one (a generation changes only in one, which clears the id with it),
// not derived a second time. ours: a copy under the id may be this
// entry's own, from an attempt before this one (else a duplicate is
// another hand's); done: the address was settled here instead.
func (e *Engine) intend(ctx context.Context, it Item, ent *ledger.Entry, queue string, payload json.RawMessage) (ours, done bool, err error) {
	if ent.Via != ViaManual && ent.Via != ViaMove || ent.ReplayTxID == "" {
		ent.ReplayTxID = e.copyTxID(it, ent.Generation)
	}
	digest := ledger.PayloadDigest(payload)
	if Pinned(ent) && ent.ReplayDigest != "" && ent.ReplayDigest != digest {
		return false, true, e.otherPayloadBefore(ctx, ent)
	}
	ent.ReplayDigest = digest
	ours = !ent.Fresh() && tried(ent)
	ent.State, ent.Via, ent.ReplayQueue = ledger.Inflight, ViaManual, queue
	ent.Attempts++
	if !ent.Holds() {
		if err := e.save(ctx, ent, false); err != nil {
			return ours, true, err
		}
	}
	return ours, false, nil
}

// otherPayloadBefore leaves an address an earlier push under its id may
// have landed with another payload: pushing this one would come back a
// duplicate and be suppressed, the correction silently lost. A person
// decides.
func (e *Engine) otherPayloadBefore(ctx context.Context, ent *ledger.Entry) error {
	e.record(func(r *Report) {
		r.Failed++
		r.Listed = append(r.Listed, AddrResult{Address: ent.Address, Reason: fmt.Sprintf("not sent: an earlier attempt pushed it to queue %s as %s with another payload (another transform, or none), and it may be live; this one would be suppressed as a duplicate",
			ent.ReplayQueue, ent.ReplayTxID), Next: CheckEarlierCopyNext})
	})
	return e.save(ctx, ent, true)
}

// pushed settles a manual replay's push the broker answered: a duplicate
// that is not this entry's own on a broker that moves is another hand's
// copy; otherwise the copy is published, and the row is deleted.
func (e *Engine) pushed(ctx context.Context, it Item, ent *ledger.Entry, res client.PushResult, ours bool) error {
	dup := res.Duplicate()
	if dup && !ours && e.o.Release.Moves() {
		// The broker's copy of this row exists and this entry never made
		// it: another hand (the console) replayed the row.
		return e.movedElsewhere(ctx, ent, ent.ReplayTxID)
	}
	ent.ReplayPartitionID = res.PartitionID
	ent.State = ledger.Published
	ent.Outcome = deadletter.OutcomeReplayed
	if dup {
		ent.Outcome = deadletter.OutcomeDuplicate
	}
	// Published is journaled only if the delete fails (finishDelete);
	// otherwise the next write is the final one.
	return e.deleteAfterPush(ctx, it, ent, func(r *Report) {
		if dup {
			r.Duplicate++
		} else {
			r.Replayed++
		}
	})
}

// transform runs --transform on the payload an entry publishes (the
// payload as it is when there is none). A transform that fails settles
// the entry failed: ok is false, and err is the journal's.
func (e *Engine) transform(ctx context.Context, ent *ledger.Entry, payload json.RawMessage) (_ json.RawMessage, ok bool, err error) {
	if e.o.Transform == nil {
		return payload, true, nil
	}
	out, terr := e.o.Transform(ctx, payload)
	if terr != nil {
		return nil, false, e.settle(ctx, ent, ledger.Failed, "", "transform: "+terr.Error(), func(r *Report) {
			r.Failed++
			r.Listed = append(r.Listed, AddrResult{Address: ent.Address, Reason: "failed: the transform: " + terr.Error()})
		})
	}
	return out, true, nil
}

// pushCopy pushes a copy under its derived id, trying again where that
// is safe (a push that did land answers "duplicate" the second time).
// sent says an earlier try may have reached the broker; a push the
// broker buffered or did not accept is an error.
func (e *Engine) pushCopy(ctx context.Context, p client.PushItem) (res client.PushResult, sent bool, err error) {
	for try := 0; try < 4; try++ {
		if try > 0 {
			if serr := e.o.Sleep(ctx, max(time.Duration(try)*200*time.Millisecond, client.RetryAfter(err))); serr != nil {
				break
			}
			sent = sent || !errors.Is(err, client.ErrNotSent)
		}
		res, err = e.pushes.push(p)
		if err == nil || errors.Is(err, client.ErrUnauthorized) || errors.Is(err, client.ErrForbidden) ||
			errors.Is(err, client.ErrRefused) || errors.Is(err, client.ErrFull) || errors.Is(err, client.ErrStandby) {
			break
		}
	}
	if err == nil && res.Buffered() {
		// Not in the broker's database yet: the dead letter stays, and
		// the derived id makes a later attempt safe either way.
		e.stop("the broker buffered a push (its database is down); re-run when its /health says the database is connected")
		err = fmt.Errorf("the broker buffered the push instead of storing it (its database is down); the dead letter is kept")
	}
	if err == nil && !res.Accepted() {
		err = fmt.Errorf("push refused: status %q %s", res.Status, res.Error)
	}
	return res, sent, err
}

// stopOnRefusal stops the batch when the broker refuses what every other
// call would also need: a 2.x refusal (409), a full disk (507), a standby
// cluster (503 "standby", which refuses every write until promoted).
func (e *Engine) stopOnRefusal(err error) {
	switch {
	case errors.Is(err, client.ErrStandby):
		e.mu.Lock()
		e.rep.BrokerDown = true
		e.mu.Unlock()
		e.stopFor("the broker is a standby cluster (503, code standby): it refuses every write until it is promoted, so nothing more is sent", PrimaryNext)
	case errors.Is(err, client.ErrFull):
		e.stop("the broker's storage is full (507): nothing more can be published until it has room; " + err.Error())
	case errors.Is(err, client.ErrRefused):
		e.stop("the broker refused the call (409): " + err.Error())
	}
}

// finishDelete deletes the row of a published address; a 404 means it is
// already gone, which is what we wanted.
func (e *Engine) finishDelete(ctx context.Context, ent *ledger.Entry, count func(r *Report)) error {
	_, err := e.deleteRows(ctx, ent, count)
	return err
}

// deleteAfterPush is finishDelete after a push of this run's own, on a
// broker that moves: a delete that removed fewer rows than the message
// had (2.x says how many) is another hand's doing meanwhile, and where
// it was the console's move, the broker now holds a second copy. The
// report says which.
func (e *Engine) deleteAfterPush(ctx context.Context, it Item, ent *ledger.Entry, count func(r *Report)) error {
	e.mu.Lock()
	planned := e.rows[it.Address]
	e.mu.Unlock()
	n, err := e.deleteRows(ctx, ent, count)
	if err != nil || n < 0 || n >= planned || !e.o.Release.Moves() {
		return err
	}
	if cps, ferr := e.otherRowsCopied(ctx, it, ent.ReplayTxID); ferr == nil && len(cps) > 0 {
		e.heldMoreThanOnce(it.Address, ent.ReplayTxID, cps)
		return nil
	}
	e.list(it.Address, fmt.Sprintf("replayed as %s; its delete removed %d of the %d rows the message had: another hand removed the others meanwhile (no copy of theirs was found, so none was replayed)", ent.ReplayTxID, n, planned), "")
	return nil
}

// deleteRows deletes a published address's rows and settles it, saying
// how many rows the broker removed (-1: it did not say, or none were
// there).
func (e *Engine) deleteRows(ctx context.Context, ent *ledger.Entry, count func(r *Report)) (int, error) {
	var err error
	n := -1
	for try := 0; try < 3; try++ {
		if try > 0 {
			if serr := e.o.Sleep(ctx, time.Duration(try)*300*time.Millisecond); serr != nil {
				break
			}
		}
		n, err = e.b.Deleted(ctx, ent.Address)
		if err == nil || errors.Is(err, client.ErrNoDeadLetterRow) {
			err = nil
			break
		}
	}
	if err != nil {
		// Published stays: the next run only finishes this delete.
		ent.State, ent.LastError = ledger.Published, err.Error()
		if serr := e.save(ctx, ent, true); serr != nil {
			return -1, serr
		}
		e.record(func(r *Report) {
			r.Failed++
			r.Listed = append(r.Listed, AddrResult{Address: ent.Address, Reason: "published, but the dead-letter row could not be deleted: " + err.Error() + " (re-run to finish)"})
		})
		return -1, nil
	}
	return n, e.settle(ctx, ent, ledger.Removed, ent.Outcome, "", count)
}

// discard deletes an address whose rows are archived.
func (e *Engine) discard(pctx, ctx context.Context, it Item, ent *ledger.Entry) error {
	a := it.Address
	if err := e.pace(pctx); err != nil {
		return err
	}
	if ent.State == ledger.Published || ent.State == ledger.Inflight && ent.Via != "" {
		// A replay is half done at this address; finishing the delete is
		// all either action needs now.
		return e.finishDelete(ctx, ent, func(r *Report) { r.Replayed++ })
	}
	// The command archived every row of the batch before the run began.
	ent.Action, ent.State, ent.Via = deadletter.Discard, ledger.Pending, ""
	ent.Attempts++
	_, err := e.b.Deleted(ctx, a)
	switch {
	case err == nil:
		return e.settle(ctx, ent, ledger.Removed, deadletter.OutcomeDiscarded, "", func(r *Report) { r.Discarded++ })
	case errors.Is(err, client.ErrNoDeadLetterRow):
		return e.gone(ctx, ent)
	}
	return e.fail(ctx, ent, "failed: ", err)
}
