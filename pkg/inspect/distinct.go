package inspect

import (
	"container/heap"
	"slices"
)

// distinct counts distinct 64-bit hashes in about 8 bytes each: sorted,
// deduplicated runs, each allocated once at its size, and a tail that
// becomes a run when it fills. The count merges the runs. A map of the
// same hashes took three to four times the memory; one sorted run, grown
// by merging the tail into it, held twice its size whenever it grew.
// Runs are never merged with each other, so a hash repeated in two runs
// is held twice: at most 8 bytes for every hash added.
type distinct struct {
	runs [][]uint64
	tail []uint64
	held int // hashes in the runs
	// counted is the last count, while nothing was added since (a
	// screen asks again at every frame).
	counted int
	fresh   bool
}

func (d *distinct) add(h uint64) {
	d.fresh = false
	if d.tail == nil {
		d.tail = make([]uint64, 0, 1024)
	}
	d.tail = append(d.tail, h)
	// Runs grow with what is held (an eighth of it), so there are a few
	// dozen of them at a million hashes.
	if len(d.tail) >= max(4096, d.held/8) {
		d.flush()
	}
}

// flush turns the tail into a run.
func (d *distinct) flush() {
	if len(d.tail) == 0 {
		return
	}
	slices.Sort(d.tail)
	run := slices.Clone(slices.Compact(d.tail))
	d.runs = append(d.runs, run)
	d.held += len(run)
	d.tail = d.tail[:0]
}

func (d *distinct) count() int {
	if !d.fresh {
		d.counted, d.fresh = d.merged(), true
	}
	return d.counted
}

// merged counts the distinct hashes of the runs and the tail.
func (d *distinct) merged() int {
	d.flush()
	switch len(d.runs) {
	case 0:
		return 0
	case 1:
		return len(d.runs[0])
	}
	c := make(cursors, 0, len(d.runs))
	for _, r := range d.runs {
		c = append(c, cursor{run: r})
	}
	heap.Init(&c)
	n, last := 0, uint64(0)
	for len(c) > 0 {
		top := &c[0]
		if v := top.run[top.i]; n == 0 || v != last {
			n, last = n+1, v
		}
		if top.i++; top.i == len(top.run) {
			heap.Pop(&c)
		} else {
			heap.Fix(&c, 0)
		}
	}
	return n
}

// cursor is a place in a run; cursors is a heap of them by the value
// they are at.
type cursor struct {
	run []uint64
	i   int
}

type cursors []cursor

func (c cursors) Len() int           { return len(c) }
func (c cursors) Less(i, j int) bool { return c[i].run[c[i].i] < c[j].run[c[j].i] }
func (c cursors) Swap(i, j int)      { c[i], c[j] = c[j], c[i] }
func (c *cursors) Push(x any)        { *c = append(*c, x.(cursor)) }
func (c *cursors) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}
