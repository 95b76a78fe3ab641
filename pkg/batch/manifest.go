package batch

import (
	"context"
	"slices"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// ManifestItemOf freezes one item as its manifest records it.
func ManifestItemOf(it replay.Item) ledger.ManifestItem {
	r := it.Newest()
	mi := ledger.ManifestItem{Address: it.Address, MessageID: r.ID, Queue: it.Queue, Partition: it.Partition, Groups: it.Groups(),
		Error: r.ErrorMessage, RetryCount: r.RetryCount, Payload: it.Data(), Undecryptable: it.Undecryptable(), Checked: it.Checked}
	for _, x := range it.Rows {
		mi.Rows = append(mi.Rows, ledger.ManifestRow{ID: x.ID, ConsumerGroup: x.ConsumerGroup, Error: x.ErrorMessage, RetryCount: x.RetryCount, FailedAt: x.FailedAt, Selected: true})
	}
	for _, x := range it.Others {
		mi.Rows = append(mi.Rows, ledger.ManifestRow{ID: x.ID, ConsumerGroup: x.ConsumerGroup, Error: x.ErrorMessage, RetryCount: x.RetryCount, FailedAt: x.FailedAt})
	}
	// The newest failure the batch saw: a row that fails later is a
	// new dead letter the decision does not cover.
	for _, x := range mi.Rows {
		if x.FailedAt.After(mi.FailedAt) {
			mi.FailedAt = x.FailedAt
		}
	}
	return mi
}

// newSince counts dead letters matching a fresh selection that arrived
// after the plan (not in the batch, not the run's own copies failed
// again: own): they are not silently added to a frozen batch. The
// candidates are looked up in the batch's manifest a chunk at a time, so
// nothing of the batch is held; a ledger that cannot be read ends the
// count.
func newSince(ctx context.Context, cl *client.Client, ld *ledger.Store, batchID string, sel *deadletter.Selection, planAt time.Time, own func(txid string) bool) int {
	n := 0
	var chunk []deadletter.Address
	count := func() bool {
		in, err := ld.InBatch(ctx, cl.Broker(), batchID, chunk)
		if err != nil {
			return false
		}
		for _, a := range chunk {
			if !in[a] {
				n++
			}
		}
		chunk = chunk[:0]
		return true
	}
	q := client.QueryFor(sel, inspect.PageSize)
	q.NoData = true
	for r, err := range cl.Rows(ctx, q) {
		if err != nil || r.FailedAt.Before(planAt) {
			break // newest first: nothing older can be new
		}
		if sel.Match(r) && !own(r.TransactionID) {
			if chunk = append(chunk, r.Address()); len(chunk) == 400 && !count() {
				return n
			}
		}
	}
	if len(chunk) > 0 {
		count()
	}
	return n
}

// queueGroups lists consumer groups per queue from the broker's queue and
// consumer-group lists and from the rows in hand (in, which adds each
// queue and group it has).
func queueGroups(ctx context.Context, cl *client.Client, in func(add func(q, g string))) map[string][]string {
	out := map[string][]string{}
	add := func(q, g string) {
		if !slices.Contains(out[q], g) {
			out[q] = append(out[q], g)
		}
	}
	if qs, err := cl.Queues(ctx); err == nil {
		for _, q := range qs {
			for _, g := range q.ConsumerGroups {
				add(q.Name, g)
			}
		}
	}
	if cgs, err := cl.ConsumerGroups(ctx); err == nil {
		for _, g := range cgs {
			add(g.Queue, g.Name)
		}
	}
	in(add)
	return out
}

// archiveItem queues every row of an item for the archive, each with the
// message's payload (the checked one, when the detail route was asked).
func archiveItem(ctx context.Context, a *ledger.Archiver, it replay.Item) error {
	for _, r := range it.AllRows() {
		if len(r.Data) == 0 || it.Checked {
			r.Data = it.Data()
		}
		if err := a.Add(ctx, r); err != nil {
			return err
		}
	}
	return nil
}
