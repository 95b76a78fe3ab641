package replay

import (
	"context"
	"fmt"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// ViaRestore is the journal's path of a restore or an import: a push,
// under the id derived from the address (deadletter.RestoreTxID,
// ImportTxID), of the payload the archive kept or the file holds.
const ViaRestore = "restore"

// republish publishes a message from outside the DLQ: an archived dead
// letter (a restore: its row left the broker when a discard deleted it),
// or a row of an export file (an import). The journal keeps one entry an
// address: a restore takes over the discard's, and once the address is
// published, every later restore or import of it (this batch's resume,
// another batch) finds it done. Another broker's message is filed under
// its foreign address (deadletter.ForeignAddress), which no call to this
// broker names. The intent is journaled before the push, and the push's
// id is derived from the address alone: a repeat after a lost answer or
// a kill comes back "duplicate", never a second copy.
func (e *Engine) republish(pctx, ctx context.Context, it Item, ent *ledger.Entry) error {
	a := it.Address
	// What the journal records: another broker's message is imported;
	// one of this broker's, from its archive or a file, restored (an
	// import of this broker's own export is a restore from the file).
	name, outcome, txid := deadletter.Restore, deadletter.OutcomeRestored, deadletter.RestoreTxID(a)
	if a.Foreign() {
		name, outcome, txid = deadletter.Import, deadletter.OutcomeImported, deadletter.ImportTxID(a)
	}
	if done, err := e.takeOver(ctx, it, ent, name); done {
		return err
	}
	queue, partition := e.destQueue(it), it.Partition
	if e.o.ToPartition != "" {
		partition = e.o.ToPartition
	}
	if done, err := e.unpublishable(ctx, it, ent, queue); done {
		return err
	}
	payload, ok, err := e.transform(ctx, ent, it.Data())
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
	ent.State, ent.Via, ent.ReplayTxID, ent.ReplayQueue, ent.ReplayDigest = ledger.Inflight, ViaRestore, txid, queue, digest
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
	if ent.ReplayPartitionID == "" && a.Foreign() {
		// Queen 1.6 and 2.x answer a push without its partition, and the
		// original's is another broker's: the copy's lineage and its
		// verification need the destination's.
		ent.ReplayPartitionID = e.partitionOf(ctx, queue, partition)
	}
	return e.settle(ctx, ent, ledger.Removed, outcome, "", e.republished(res))
}

// republished counts a copy a restore or an import pushed: one the broker
// had already, or one it published.
func (e *Engine) republished(res client.PushResult) func(*Report) {
	switch {
	case res.Duplicate():
		return func(r *Report) { r.Duplicate++ }
	case e.act.From == deadletter.FromFile:
		return func(r *Report) { r.Imported++ }
	}
	return func(r *Report) { r.Restored++ }
}

// takeOver settles an address a restore or an import finds done already
// (done says so: published by a batch of either, or made live by a replay
// since), or takes its entry over as name (restore or import), this
// batch's from here on.
func (e *Engine) takeOver(ctx context.Context, it Item, ent *ledger.Entry, name string) (done bool, err error) {
	a, act, was := it.Address, e.act, deadletter.ActionOf(ent.Action)
	switch {
	case was.Outside() && ent.State == ledger.Removed:
		return true, e.settle(ctx, ent, ledger.Removed, ent.Outcome, "", func(r *Report) {
			r.AlreadyDone++
			if ent.BatchID != e.o.BatchID {
				r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("already %s by batch %s as %s: not published again", was.Past, ent.BatchID, ent.ReplayTxID)})
			}
		})
	case was.Republishes() && ent.BatchID != "":
		// A replay since (of the message dead-lettered again; its entry
		// taken after this batch was planned) made it live: a copy of the
		// archived one would be the message twice. Its entry stays the
		// replay's.
		return true, e.settle(ctx, ent, ent.State, ent.Outcome, ent.LastError, func(r *Report) {
			r.AlreadyDone++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("not %s: batch %s replayed it after the discard (as %s)", act.Past, ent.BatchID, ent.ReplayTxID)})
		})
	case ent.Action != name:
		// The discard's entry (or none): this batch's from here on.
		ent.State, ent.ReplayTxID, ent.ReplayPartitionID, ent.ReplayQueue, ent.ReplayDigest, ent.Via, ent.Outcome = ledger.Pending, "", "", "", "", "", ""
	}
	ent.BatchID, ent.Action = e.o.BatchID, name
	if ent.ReplayTxID != "" || a.Foreign() {
		return false, nil
	}
	// Before its first attempt: one dead-lettered (again) in this broker
	// is a dead letter to replay or discard, not to publish beside.
	present, err := e.rowPresent(ctx, a)
	if err != nil {
		return true, e.fail(ctx, ent, "failed: asking whether it is dead-lettered again: ", err)
	}
	if present {
		return true, e.settle(ctx, ent, ledger.Skipped, "dead-lettered again", "", func(r *Report) {
			r.DeadLetteredAgain++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("not %s: it is dead-lettered again since the discard", act.Past), Next: ReplayOrDiscardNext, Generation: deadletter.Generation(a.TransactionID)})
		})
	}
	return false, nil
}

// unpublishable settles an address whose message cannot be published
// (done says so): an envelope the broker could not decrypt, no payload,
// or a destination queue that is gone.
func (e *Engine) unpublishable(ctx context.Context, it Item, ent *ledger.Entry, queue string) (done bool, err error) {
	a, act := it.Address, e.act
	kept := "the archive kept"
	if act.From == deadletter.FromFile {
		kept = "the file holds"
	}
	payload := it.Data()
	switch {
	case deadletter.IsEnvelope(payload):
		return true, e.settle(ctx, ent, ledger.Skipped, "undecryptable", "", func(r *Report) {
			r.SkippedEncrypted++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("not %s: %s an encryption envelope the broker could not decrypt (wrong or rotated key)", act.Past, kept)})
		})
	case len(payload) == 0:
		return true, e.settle(ctx, ent, ledger.Skipped, "no payload", "", func(r *Report) {
			r.SkippedEncrypted++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("not %s: %s no payload of it", act.Past, kept)})
		})
	case e.o.GoneQueues[queue]:
		return true, e.settle(ctx, ent, ledger.Skipped, "queue gone", "", func(r *Report) {
			r.QueueGone++
			r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("not %s: queue %s does not exist", act.Past, queue), Next: AnotherQueueNext})
		})
	}
	return false, nil
}

// partitionOf is the id of the destination partition a copy went to,
// asked of the broker once a partition a run ("" when it cannot say: the
// copy is published all the same, and counted as not traced).
func (e *Engine) partitionOf(ctx context.Context, queue, partition string) string {
	k := queue + "\x00" + partition
	e.mu.Lock()
	id, ok := e.partitions[k]
	e.mu.Unlock()
	if ok {
		return id
	}
	pf, ok := e.b.(interface {
		PartitionID(ctx context.Context, queue, partition string) (string, error)
	})
	if !ok {
		return ""
	}
	// Asked once, answered or not: a broker without the browse route
	// would otherwise be asked again for every copy.
	id, err := pf.PartitionID(ctx, queue, partition)
	if err != nil {
		id = ""
	}
	e.mu.Lock()
	if e.partitions == nil {
		e.partitions = map[string]string{}
	}
	e.partitions[k] = id
	e.mu.Unlock()
	return id
}
