package inspect

import (
	"context"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// Sync archives every row of the DLQ (or a queue) and marks what left.
// A failed read marks nothing: a partial view must not call rows vanished.
func Sync(ctx context.Context, cl *client.Client, ld *ledger.Store, queue string, now func() time.Time) (ledger.SyncResult, error) {
	return SyncEach(ctx, cl, ld, queue, now, nil)
}

// SyncEach is Sync that also hands every row it archives to visit (the
// exporter counts failure classes from the same read).
func SyncEach(ctx context.Context, cl *client.Client, ld *ledger.Store, queue string, now func() time.Time, visit func(deadletter.Row)) (ledger.SyncResult, error) {
	start := now()
	a := ld.NewArchiver(cl.Broker(), start)
	for r, err := range cl.Rows(ctx, client.ListQuery{Queue: queue, Limit: PageSize}) {
		if err != nil {
			return ledger.SyncResult{}, err
		}
		if queue != "" && r.Queue != queue {
			continue
		}
		if visit != nil {
			visit(r)
		}
		if err := a.Add(ctx, r); err != nil {
			return ledger.SyncResult{}, err
		}
	}
	if err := a.Flush(ctx); err != nil {
		return ledger.SyncResult{}, err
	}
	res, err := ld.MarkGone(ctx, cl.Broker(), queue, start, now())
	res.Seen = a.Count()
	if err != nil {
		return res, err
	}
	// A hold whose messages have all left the DLQ is over.
	_, err = ld.ResolveHolds(ctx, cl.Broker())
	return res, err
}
