package inspect

import "slices"

// distinct counts distinct 64-bit hashes in about 8 bytes each: a sorted,
// deduplicated run and an unsorted tail merged into it when it grows or
// the count is asked for. A map of the same hashes took three to four
// times the memory, which at a million dead letters was most of what
// `ls --group-by` held.
type distinct struct {
	sorted []uint64
	tail   []uint64
}

func (d *distinct) add(h uint64) {
	d.tail = append(d.tail, h)
	if len(d.tail) >= max(1024, len(d.sorted)/4) {
		d.compact()
	}
}

func (d *distinct) count() int {
	d.compact()
	return len(d.sorted)
}

// compact merges the tail into the sorted run, in place from the end.
func (d *distinct) compact() {
	if len(d.tail) == 0 {
		return
	}
	slices.Sort(d.tail)
	t := slices.Compact(d.tail)
	n, m := len(d.sorted), len(t)
	d.sorted = slices.Grow(d.sorted, m)[:n+m]
	i, j, k := n-1, m-1, n+m-1
	for j >= 0 {
		if i >= 0 && d.sorted[i] > t[j] {
			d.sorted[k] = d.sorted[i]
			i--
		} else {
			d.sorted[k] = t[j]
			j--
		}
		k--
	}
	d.sorted = slices.Compact(d.sorted)
	d.tail = d.tail[:0]
}
