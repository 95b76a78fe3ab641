package replay

import "context"

// Source is a batch's items in replay order, read a claim at a time: a
// run holds what its workers have claimed, not the batch. A recorded
// batch's manifest in the ledger is one (batch.ManifestSource); Items
// is one held in memory.
type Source interface {
	// Len is how many items the batch has.
	Len() int
	// Chains calls f with the chain of every item from position from to
	// to-1, in order: an ordered run groups them by it.
	Chains(ctx context.Context, from, to int, toQueue string, f func(pos int, c Chain)) error
	// Load returns the items at positions pos (ascending, each below Len).
	Load(ctx context.Context, pos []int32) ([]Item, error)
}

// Items is a Source over items in memory.
type Items []Item

// Len is how many items there are.
func (s Items) Len() int { return len(s) }

// Chains calls f with each item's chain.
func (s Items) Chains(_ context.Context, from, to int, toQueue string, f func(pos int, c Chain)) error {
	for i := from; i < to; i++ {
		f(i, ChainOf(s[i], toQueue))
	}
	return nil
}

// Load returns the items at pos.
func (s Items) Load(_ context.Context, pos []int32) ([]Item, error) {
	out := make([]Item, len(pos))
	for k, p := range pos {
		out[k] = s[p]
	}
	return out, nil
}

// span is the positions from to to-1.
func span(from, to int) []int32 {
	out := make([]int32, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, int32(i))
	}
	return out
}
