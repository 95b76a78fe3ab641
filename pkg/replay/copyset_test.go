package replay

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// The run's copies are added by many workers and asked about between
// additions (after the canary) and at the end: every id added is in the
// set at once, ids never added are not, and a million ids take about 8
// bytes each.
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

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	big := newCopySet()
	for i := range 1_000_000 {
		big.add(fmt.Sprintf("dlqr-%d-0123456789abcdef", i))
	}
	big.has("dlqr-0-0123456789abcdef")
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("a million copies hold %.1f MB", float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20))
	if held := int64(after.HeapAlloc) - int64(before.HeapAlloc); held > 12<<20 {
		t.Fatalf("a million copies hold %d MB, want at most 12", held>>20)
	}
	runtime.KeepAlive(big)
}
