package inspect

import (
	"math/rand/v2"
	"runtime"
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

// Asking again with nothing added is free (a screen asks at every frame
// for the class it shows); an add makes the next count a fresh one.
func TestDistinctCountAgainIsFree(t *testing.T) {
	var d distinct
	for i := range 100_000 {
		d.add(uint64(i % 60_000))
	}
	if d.count() != 60_000 {
		t.Fatalf("%d distinct", d.count())
	}
	if a := testing.AllocsPerRun(10, func() { d.count() }); a != 0 {
		t.Fatalf("a count with nothing added allocated %.0f times", a)
	}
	d.add(1 << 40)
	if d.count() != 60_001 {
		t.Fatalf("%d distinct after one more", d.count())
	}
}

// BenchmarkDistinctAllocates counts a million random hashes: it allocates
// little more than their 8 bytes once (B/hash; the runs, and the tail as
// it grows). What it holds is never copied into a larger array: a run
// grown by merging the tail into it allocated about 50 bytes a hash.
func BenchmarkDistinctAllocates(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	hashes := make([]uint64, 1_000_000)
	for i := range hashes {
		hashes[i] = rng.Uint64()
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range b.N {
		var d distinct
		for _, h := range hashes {
			d.add(h)
		}
		if got := d.count(); got != len(hashes) {
			b.Fatalf("%d distinct, want %d", got, len(hashes))
		}
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N*len(hashes)), "B/hash")
}
