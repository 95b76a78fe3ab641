package replay

import (
	"context"
	"fmt"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// ViaRestore is the journal's path of a restore: a push, under the id
// derived from the archived address (deadletter.RestoreTxID), of the
// payload the archive kept.
const ViaRestore = "restore"

// restore publishes an archived dead letter again (its row left the
// broker when a discard deleted it). The journal keeps one entry an
// address: a restore takes over the discard's, and once the address is
// restored, every later restore of it (this batch's resume, another
// batch) finds it done. The intent is journaled before the push, and the
// push's id is derived from the address alone: a repeat after a lost
// answer or a kill comes back "duplicate", never a second copy.
func (e *Engine) restore(pctx, ctx context.Context, it Item, ent *ledger.Entry) error {
	a := it.Address
	if ent.Action == deadletter.Restore && ent.State == ledger.Removed {
		return e.settle(ctx, ent, ledger.Removed, ent.Outcome, "", func(r *Report) {
			r.AlreadyDone++
			if ent.BatchID != e.o.BatchID {
				r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("already restored by batch %s as %s: not published again", ent.BatchID, ent.ReplayTxID)})
			}
		})
	}
	if ent.Action == deadletter.Replay && ent.BatchID != "" {
		// A replay since (of the message dead-lettered again; its entry
		// taken after this batch was planned) made it live: a copy of the
		// archived one would be the message twice. Its entry stays the
		// replay's.
		return e.settle(ctx, ent, ent.State, ent.Outcome, ent.LastError, func(r *Report) {
			r.AlreadyDone++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("not restored: batch %s replayed it after the discard (as %s)", ent.BatchID, ent.ReplayTxID)})
		})
	}
	if ent.Action != deadletter.Restore {
		// The discard's entry (or none): this batch's from here on.
		ent.State, ent.ReplayTxID, ent.ReplayPartitionID, ent.ReplayQueue, ent.ReplayDigest, ent.Via, ent.Outcome = ledger.Pending, "", "", "", "", "", ""
	}
	ent.BatchID, ent.Action = e.o.BatchID, deadletter.Restore
	if ent.ReplayTxID == "" {
		// Before its first attempt: one dead-lettered again since the
		// discard is a dead letter to replay or discard, not to restore
		// beside.
		present, err := e.rowPresent(ctx, a)
		if err != nil {
			return e.fail(ctx, ent, "failed: asking whether it is dead-lettered again: ", err)
		}
		if present {
			return e.settle(ctx, ent, ledger.Skipped, "dead-lettered again", "", func(r *Report) {
				r.DeadLetteredAgain++
				r.Listed = append(r.Listed, AddrResult{Address: a, Reason: "not restored: it is dead-lettered again since the discard", Next: ReplayOrDiscardNext, Generation: deadletter.Generation(a.TransactionID)})
			})
		}
	}
	payload := it.Data()
	switch {
	case deadletter.IsEnvelope(payload):
		return e.settle(ctx, ent, ledger.Skipped, "undecryptable", "", func(r *Report) {
			r.SkippedEncrypted++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: "not restored: the archive kept an encryption envelope the broker could not decrypt (wrong or rotated key)"})
		})
	case len(payload) == 0:
		return e.settle(ctx, ent, ledger.Skipped, "no payload", "", func(r *Report) {
			r.SkippedEncrypted++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: "not restored: the archive kept no payload of it"})
		})
	}
	queue, partition := e.destQueue(it), it.Partition
	if e.o.ToPartition != "" {
		partition = e.o.ToPartition
	}
	if e.o.GoneQueues[queue] {
		return e.settle(ctx, ent, ledger.Skipped, "queue gone", "", func(r *Report) {
			r.QueueGone++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("not restored: queue %s does not exist", queue), Next: AnotherQueueNext})
		})
	}
	payload, ok, err := e.transform(ctx, ent, payload)
	if !ok {
		return err
	}
	digest := ledger.PayloadDigest(payload)
	if ent.ReplayTxID != "" && (ent.ReplayQueue != queue || ent.ReplayDigest != "" && ent.ReplayDigest != digest) {
		// An earlier attempt may have landed elsewhere, or with another
		// payload: under the same id it would be suppressed, or a second
		// copy. A person decides.
		e.record(func(r *Report) {
			r.Failed++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("not sent: an earlier attempt pushed it to queue %s as %s (another destination or payload), and it may be live there", ent.ReplayQueue, ent.ReplayTxID)})
		})
		return e.save(ctx, ent, true)
	}
	if err := e.pace(pctx); err != nil {
		return err
	}
	ent.State, ent.Via, ent.ReplayTxID, ent.ReplayQueue, ent.ReplayDigest = ledger.Inflight, ViaRestore, deadletter.RestoreTxID(a), queue, digest
	ent.Attempts++
	if err := e.save(ctx, ent, false); err != nil {
		return err
	}
	e.copies.add(ent.ReplayTxID)
	res, _, err := e.pushCopy(ctx, client.PushItem{Queue: queue, Partition: partition, Payload: payload, TransactionID: ent.ReplayTxID})
	if err != nil {
		e.stopOnRefusal(err)
		// Stays retryable: the derived id makes the next attempt safe.
		return e.fail(ctx, ent, "failed: ", err)
	}
	ent.ReplayPartitionID = res.PartitionID
	if res.Status == "duplicate" {
		return e.settle(ctx, ent, ledger.Removed, deadletter.OutcomeRestored, "", func(r *Report) { r.Duplicate++ })
	}
	return e.settle(ctx, ent, ledger.Removed, deadletter.OutcomeRestored, "", func(r *Report) { r.Restored++ })
}
