package batch

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// A batch's items are most of the heap from the snapshot to the end, and
// a run allocates little beside them: while a batch is prepared, the
// collector runs at half the default growth, which keeps the heap near
// what it holds (at the default it grew to about twice that) for a
// little more collecting. A batch planned from the rows as they stream
// holds about 50 bytes an address and stages its rows on disk, so its
// heap is also kept within streamedHeap of what the process held before
// (a soft limit, under any GOMEMLIMIT the user set): the plan of a
// million addresses fits in it, and a larger one makes the collector run
// more often rather than the process grow (BenchmarkBatchMemory and
// docs/performance.md have the figures). What the process held is the
// triage screen's rows, say, which the batch must not make the collector
// chase. A batch held in memory is not limited: its heap is what it
// holds.
const streamedHeap = 80 << 20

// heap is the process's collector settings while batches are prepared:
// the first to hold them saves the settings before, the last to let go
// restores them, whatever the order.
var heap struct {
	mu              sync.Mutex
	held, streaming int
	gc              int
	limit           int64
}

// holdHeap applies the settings for a batch (streamed: planned from the
// rows); letGo undoes its part.
func holdHeap(streamed bool) (letGo func()) {
	heap.mu.Lock()
	defer heap.mu.Unlock()
	if heap.held == 0 {
		heap.gc, heap.limit = debug.SetGCPercent(50), debug.SetMemoryLimit(-1)
	}
	heap.held++
	if streamed {
		if heap.streaming == 0 {
			debug.SetMemoryLimit(min(heap.limit, liveHeap()+streamedHeap))
		}
		heap.streaming++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			heap.mu.Lock()
			defer heap.mu.Unlock()
			if streamed {
				if heap.streaming--; heap.streaming == 0 {
					debug.SetMemoryLimit(heap.limit)
				}
			}
			if heap.held--; heap.held == 0 {
				debug.SetGCPercent(heap.gc)
			}
		})
	}
}

// liveHeap is the heap the last collection found live.
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}
