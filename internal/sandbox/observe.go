package sandbox

// What a test reads of the broker (its rows, its live messages, the calls
// it received and the changes they made), and retention's Forget.

import (
	"maps"
	"slices"
	"time"
)

// Forget removes a message as retention would: no row, no trace.
func (b *Broker) Forget(partitionID, txid string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := msgKey{partitionID, txid}
	m := b.messages[k]
	if m == nil {
		return false
	}
	if b.removeRowsLocked(k) > 0 {
		b.applied-- // retention's doing, not a client's
	}
	delete(b.messages, k)
	b.live = slices.DeleteFunc(b.live, func(x *message) bool { return x == m })
	b.version++
	return true
}

// DeadLetterRows returns the dead-letter rows the broker holds now.
func (b *Broker) DeadLetterRows() []Row {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Row, 0, len(b.rows))
	for _, r := range b.rows {
		out = append(out, Row{ID: r.id, PartitionID: b.listedPID(r.msg.PartitionID), TransactionID: r.msg.TxID, Queue: r.msg.Queue,
			Partition: r.msg.Partition, ConsumerGroup: r.Group, Error: r.Error, FailedAt: r.FailedAt, Payload: r.msg.Payload})
	}
	return out
}

// Depth is the number of dead-letter rows.
func (b *Broker) Depth() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.rows)
}

// LiveMessages returns every message published through push or /retry, in
// publication order.
func (b *Broker) LiveMessages() []Live {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Live, 0, len(b.live))
	for _, m := range b.live {
		out = append(out, Live{PartitionID: b.listedPID(m.PartitionID), TransactionID: m.TxID, MessageID: m.ID, Queue: m.Queue, Partition: m.Partition, Payload: m.Payload})
	}
	return out
}

// Calls returns how many calls each route received, keyed "METHOD route"
// (e.g. "GET /api/v1/dlq", "POST /retry", "DELETE /messages").
func (b *Broker) Calls() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.routes)
}

// Applied counts the changes clients made to the broker: messages
// published (a duplicate is none) and addresses whose rows were deleted.
// A call that changed nothing (a /retry of an address with no row) is
// not one.
func (b *Broker) Applied() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.applied
}

// ResetCalls zeroes the route counters.
func (b *Broker) ResetCalls() {
	b.mu.Lock()
	b.routes = map[string]int{}
	b.mu.Unlock()
	b.inflight.mu.Lock()
	b.inflight.since, b.inflight.at, b.inflight.area, b.inflight.peak = time.Time{}, time.Time{}, 0, b.inflight.n
	b.inflight.mu.Unlock()
}
