package replay

import "context"

// What the tests run batches with: items held in memory, not staged.

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

// Run executes items held in memory (see RunSource).
func (e *Engine) Run(ctx context.Context, items []Item) (*Report, error) {
	return e.RunSource(ctx, Items(items))
}
