package inspect

import (
	"math/rand/v2"
	"testing"
)

// distinct counts what a set counts, whatever the order, repeats and
// moments the count is asked for.
func TestDistinctCountsAsASet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var d distinct
	set := map[uint64]bool{}
	for i := range 50_000 {
		h := rng.Uint64N(20_000) // many repeats
		if i%7 == 0 {
			h = rng.Uint64() // and some spread wide
		}
		d.add(h)
		set[h] = true
		if i%4999 == 0 {
			if got := d.count(); got != len(set) {
				t.Fatalf("after %d: %d distinct, want %d", i+1, got, len(set))
			}
		}
	}
	if got := d.count(); got != len(set) {
		t.Fatalf("%d distinct, want %d", got, len(set))
	}
}
