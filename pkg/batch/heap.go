package batch

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// A batch holds a chunk of its items and the plan's figures (its rows are
// on disk, see stage), so while one is prepared and run the collector
// runs at half the default growth and the heap is kept within batchHeap
// of what the process held before (a soft limit, under any GOMEMLIMIT the
// user set): a larger batch makes the collector run more often rather
// than the process grow (BenchmarkBatchMemory has the figures). What the
// process held is the triage screen's rows, say, which the batch must not
// make the collector chase.
const batchHeap = 80 << 20

// heap is the process's collector settings while batches are prepared:
// the first to hold them saves the settings before, the last to let go
// restores them, whatever the order.
var heap struct {
	mu    sync.Mutex
	held  int
	gc    int
	limit int64
}

// holdHeap applies the settings for a batch; letGo undoes its part.
func holdHeap() (letGo func()) {
	heap.mu.Lock()
	defer heap.mu.Unlock()
	if heap.held == 0 {
		heap.gc, heap.limit = debug.SetGCPercent(50), debug.SetMemoryLimit(-1)
		debug.SetMemoryLimit(min(heap.limit, liveHeap()+batchHeap))
	}
	heap.held++
	var once sync.Once
	return func() {
		once.Do(func() {
			heap.mu.Lock()
			defer heap.mu.Unlock()
			if heap.held--; heap.held == 0 {
				debug.SetMemoryLimit(heap.limit)
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
