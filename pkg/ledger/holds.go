package ledger

import (
	"context"
	"database/sql"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// HoldsInForce puts in into the current decision of every address under
// a hold in force at now (not cancelled, its until not passed), when the
// holds in force name at most most addresses in all; ok is false, and
// nothing but the holds' sizes is read, when they name more. A reader
// that would look up every row of a queue under holds asks this once
// instead. (A hold whose addresses have a later decision puts none of
// those; an address into already holds is left as it is, since what a
// reader looked up is its current decision.)
//
// The holds' manifests are read newest first, with every batch recorded
// since the oldest of them in a held queue: an address's first batch
// met is its current decision, and no address is looked up. Where those
// later batches name many more addresses than the holds (a hold a week
// old, and replays of its queue since), each hold's addresses are looked
// up in current_decisions instead.
func (s *Store) HoldsInForce(ctx context.Context, broker string, now time.Time, most int, into *DecisionSet) (ok bool, err error) {
	// A second's slack: a hold the moment it ends is read, and judged by
	// its until as every decision is (Decision.Active).
	at := fmtTime(now.Add(-time.Second))
	holds, size, err := s.holdsInForce(ctx, broker, at, most)
	if err != nil || holds == nil {
		return false, err
	}
	if len(holds) == 0 {
		return true, nil
	}
	ids := make([]string, len(holds))
	for i, h := range holds {
		ids[i] = h.id
	}
	batches := map[string]*Decision{}
	if err := s.decisionBatches(ctx, ids, batches); err != nil {
		return false, err
	}
	into.grow(size)
	for id, d := range batches {
		if d != nil {
			batches[id] = into.part(d) // each hold's part is put as it is held
		}
	}
	r := holdsRead{s: s, into: into, batches: batches, names: map[string]string{}}
	later, laterSize, err := s.batchesSince(ctx, broker, at, holds[0])
	if err != nil {
		return false, err
	}
	if laterSize <= holdsReadDirect*size {
		return true, r.newestFirst(ctx, later)
	}
	return true, r.byCurrent(ctx, broker, ids)
}

// holdsReadDirect: the batches since the oldest hold in force are read
// whole while they name at most this many times the holds' addresses
// (a read of a manifest's row costs a fraction of a lookup).
var holdsReadDirect = 2

// heldBatch is a batch as HoldsInForce orders it.
type heldBatch struct {
	id, at string
	size   int
}

// holdsInCondition is the holds in force at the second parameter, of
// the broker named by the first, in the batches aliased h.
const holdsInCondition = `h.broker = ? AND h.action = 'hold' AND h.status <> 'cancelled' AND (h.until_at IS NULL OR h.until_at = '' OR h.until_at > ?)`

// holdsInForce names the holds in force after at, oldest first, and how
// many addresses they name; nil when that is more than most.
func (s *Store) holdsInForce(ctx context.Context, broker, at string, most int) ([]heldBatch, int, error) {
	holds, total, err := s.heldBatches(ctx, `SELECT h.id, h.at, h.size FROM batches h WHERE `+holdsInCondition+` ORDER BY h.at, h.id`, broker, at)
	if err != nil || total > most {
		return nil, 0, err
	}
	return holds, total, nil
}

// batchesSince names, newest first, the batches not cancelled recorded
// since the hold oldest (itself included) that cover a queue a hold in
// force at at covers, and how many addresses they name: every batch
// that can be the current decision of an address a hold names.
func (s *Store) batchesSince(ctx context.Context, broker, at string, oldest heldBatch) ([]heldBatch, int, error) {
	return s.heldBatches(ctx, `SELECT b.id, b.at, b.size FROM batches b
		WHERE b.broker = ? AND b.status <> 'cancelled' AND (b.at > ? OR (b.at = ? AND b.id >= ?))
		AND EXISTS (SELECT 1 FROM batch_queues bq WHERE bq.batch_id = b.id AND bq.queue IN (
			SELECT hq.queue FROM batch_queues hq JOIN batches h ON h.id = hq.batch_id WHERE `+holdsInCondition+`))
		ORDER BY b.at DESC, b.id DESC`, broker, oldest.at, oldest.at, oldest.id, broker, at)
}

// heldBatches runs a query of batches' id, at and size.
func (s *Store) heldBatches(ctx context.Context, q string, args ...any) ([]heldBatch, int, error) {
	out, total := []heldBatch{}, 0
	err := s.each(ctx, q, func(rows *sql.Rows) error {
		var b heldBatch
		err := rows.Scan(&b.id, &b.at, &b.size)
		out, total = append(out, b), total+b.size
		return err
	}, args...)
	return out, total, s.wrap("reading holds", err)
}

// holdsRead puts the addresses of the holds in force (batches: their
// decisions, by id) into a DecisionSet.
type holdsRead struct {
	s       *Store
	into    *DecisionSet
	batches map[string]*Decision
	// names keeps each queue and partition id once: they repeat from
	// address to address.
	names map[string]string
}

func (r *holdsRead) name(b sql.RawBytes) string {
	if n, ok := r.names[string(b)]; ok {
		return n
	}
	n := string(b)
	r.names[n] = n
	return n
}

// put holds a's decision, the hold d as the address's manifest row
// (queue, failure time) gives it.
func (r *holdsRead) put(a deadletter.Address, d *Decision, queue sql.RawBytes, seen sql.NullString) {
	r.into.put(a, d, r.name(queue), parseTime(seen), nil)
}

// newestFirst reads the manifests of later (newest first): an address
// is put when the first batch that names it is a hold in force.
func (r *holdsRead) newestFirst(ctx context.Context, later []heldBatch) error {
	held := map[string]bool{} // the queues the holds cover
	for _, b := range later {
		if r.batches[b.id] != nil {
			qs, err := r.s.textSet(ctx, "reading holds", `SELECT queue FROM batch_queues WHERE batch_id = ?`, b.id)
			if err != nil {
				return err
			}
			for q := range qs {
				held[q] = true
			}
		}
	}
	// decidedSince: addresses in a held queue whose first batch met is
	// not a hold in force.
	decidedSince := map[deadletter.Address]bool{}
	var part, queue sql.RawBytes
	for _, b := range later {
		d := r.batches[b.id]
		err := r.s.each(ctx, `SELECT partition_id, transaction_id, queue, failed_at FROM batch_items WHERE batch_id = ?`, func(rows *sql.Rows) error {
			var a deadletter.Address
			var seen sql.NullString
			if err := rows.Scan(&part, &a.TransactionID, &queue, &seen); err != nil {
				return err
			}
			if !held[string(queue)] {
				return nil
			}
			a.PartitionID = r.name(part)
			switch {
			case r.into.Has(a) || decidedSince[a]:
			case d == nil:
				decidedSince[a] = true
			default:
				r.put(a, d, queue, seen)
			}
			return nil
		}, b.id)
		if err != nil {
			return r.s.wrap("reading holds", err)
		}
	}
	return nil
}

// byCurrent reads each hold's addresses in key order beside
// current_decisions (so a page of it is read once, not once an address)
// and puts those whose current decision the hold is.
func (r *holdsRead) byCurrent(ctx context.Context, broker string, ids []string) error {
	var part, queue sql.RawBytes
	for _, id := range ids {
		b := r.batches[id]
		if b == nil {
			continue // gone since the holds were named
		}
		err := r.s.each(ctx, `SELECT cd.partition_id, cd.transaction_id, cd.queue, cd.failed_at FROM batch_items bi
			JOIN current_decisions cd ON cd.broker = ? AND cd.partition_id = bi.partition_id AND cd.transaction_id = bi.transaction_id
			WHERE bi.batch_id = ? AND cd.batch_id = bi.batch_id ORDER BY bi.partition_id, bi.transaction_id`, func(rows *sql.Rows) error {
			var a deadletter.Address
			var seen sql.NullString
			if err := rows.Scan(&part, &a.TransactionID, &queue, &seen); err != nil {
				return err
			}
			a.PartitionID = r.name(part)
			if !r.into.Has(a) {
				r.put(a, b, queue, seen)
			}
			return nil
		}, broker, id)
		if err != nil {
			return r.s.wrap("reading holds", err)
		}
	}
	return nil
}
