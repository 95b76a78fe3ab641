package replay

import "context"

// Source is a batch's items in replay order, read a claim at a time: a
// run holds what its workers have claimed, not the batch. A recorded
// batch's stage is one (pkg/batch); the tests' Items is one held in
// memory.
type Source interface {
	// Len is how many items the batch has.
	Len() int
	// Chains calls f with the chain of every item from position from to
	// to-1, in order: an ordered run groups them by it.
	Chains(ctx context.Context, from, to int, toQueue string, f func(pos int, c Chain)) error
	// Load returns the items at positions pos (ascending, each below Len).
	Load(ctx context.Context, pos []int32) ([]Item, error)
}

// span is the positions from to to-1.
func span(from, to int) []int32 {
	out := make([]int32, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, int32(i))
	}
	return out
}
