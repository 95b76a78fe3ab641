package replay

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// The run's copies are added by many workers and asked about between
// additions (after the canary) and at the end: every id added is in the
// set at once, and ids never added are not.
func TestCopySet(t *testing.T) {
	c := newCopySet()
	if c.has("x") || !c.empty() {
		t.Fatal("an empty set has something")
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 20_000; i += 4 {
				c.add(fmt.Sprintf("dlqr-%d", i))
				if i%997 == 0 && !c.has(fmt.Sprintf("dlqr-%d", i)) {
					t.Errorf("dlqr-%d not in the set right after it was added", i)
				}
			}
		}()
	}
	wg.Wait()
	c.add("dlqr-7") // again
	for i := range 20_000 {
		if !c.has(fmt.Sprintf("dlqr-%d", i)) {
			t.Fatalf("dlqr-%d is not in the set", i)
		}
		if c.has(fmt.Sprintf("other-%d", i)) {
			t.Fatalf("other-%d is in the set", i)
		}
	}

}

// BenchmarkCopySetMemory holds a million copy ids of 23 bytes: what the
// set keeps of them (MB/1M held, about 8 bytes an id).
func BenchmarkCopySetMemory(b *testing.B) {
	var held float64
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		big := newCopySet()
		for i := range 1_000_000 {
			big.add(fmt.Sprintf("dlqr-%d-0123456789abcdef", i))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if !big.has("dlqr-0-0123456789abcdef") {
			b.Fatal("the first id is not in the set")
		}
		held = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / (1 << 20)
	}
	b.ReportMetric(held, "MB/1M-held")
}
