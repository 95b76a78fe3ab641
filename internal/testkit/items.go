package testkit

// The reference a batch is checked against: what a snapshot of a
// selection holds, read into memory the plainest way, and the replay
// order written over items in memory. dlqctl itself stages a batch on
// disk and orders it there (pkg/batch); its tests compare the two.

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// Snapshot reads the selection from the broker into a frozen list of
// addresses, newest failure first, before anything is written: paging
// cannot skip rows that a later delete shifts. Limit counts addresses.
// Each item also gets the address's rows the selection left out (Widen).
func Snapshot(ctx context.Context, l replay.Lister, sel *deadletter.Selection, pageSize int) ([]replay.Item, error) {
	var items []replay.Item
	idx := map[deadletter.Address]int{}
	inScope, matched := 0, 0
	sel.Bind(ctx)
	rows := l.Rows(ctx, client.QueryFor(sel, pageSize))
	if sel.WhereRows != nil {
		rows = sel.WhereRows(ctx, rows)
	}
	for r, err := range rows {
		if err != nil {
			return nil, err
		}
		if sel.InScope(r) {
			inScope++
		}
		if !sel.Match(r) {
			if err := sel.WhereErr(); err != nil {
				return nil, err
			}
			continue
		}
		matched++
		a := r.Address()
		if i, ok := idx[a]; ok {
			items[i].Rows = append(items[i].Rows, r)
			continue
		}
		if sel.Limit > 0 && len(items) >= sel.Limit {
			continue
		}
		idx[a] = len(items)
		items = append(items, replay.Item{Address: a, Queue: r.Queue, Partition: r.Partition, Rows: []deadletter.Row{r}})
	}
	if err := sel.Everything(sel.Acting, inScope, matched); err != nil {
		return nil, err
	}
	if sel.RowLevel() {
		if err := Widen(ctx, l, items, pageSize); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// Widen adds to each item the rows of its address that are not among its
// rows (other groups', other failures'), reading only the items' queues
// and skipping payloads.
func Widen(ctx context.Context, l replay.Lister, items []replay.Item, pageSize int) error {
	idx := make(map[deadletter.Address]int, len(items))
	have := map[client.Key]bool{}
	var queues []string
	for i, it := range items {
		idx[it.Address] = i
		for _, r := range it.Rows {
			have[client.RowKey(r)] = true
		}
		if !slices.Contains(queues, it.Queue) {
			queues = append(queues, it.Queue)
		}
	}
	for _, q := range queues {
		for r, err := range l.Rows(ctx, client.ListQuery{Queue: q, Limit: pageSize, NoData: true}) {
			if err != nil {
				return err
			}
			i, ok := idx[r.Address()]
			if !ok || r.Queue != q || have[client.RowKey(r)] {
				continue
			}
			have[client.RowKey(r)] = true
			items[i].Others = append(items[i].Others, r)
		}
	}
	return nil
}

// Arrange puts items in replay order: each destination partition's
// messages together, oldest enqueued first (message ids when they are
// UUIDv7 for the whole partition, first failure otherwise), partitions by
// their oldest message. The manifest keeps this order, so a resumed batch
// replays in it too. With OrderNone the items are left as they are.
// The items are arranged in place: a caller that needs them as they were
// passes a copy.
func Arrange(items []replay.Item, mode, toQueue string) ([]replay.Item, replay.OrderInfo) {
	info := replay.OrderInfo{Mode: mode}
	if !replay.Ordered(mode) {
		return items, info
	}
	// The items stay where they are until the order is known: each
	// chain is a run of indices (chains in order of first appearance,
	// items in snapshot order within), each run is sorted, then the runs
	// by their heads, and each item is moved once. Only indices are
	// copied, 12 bytes an item, whatever an item holds.
	type run struct {
		start, n int
		byID     bool
	}
	num := map[replay.Chain]int32{}
	var chains []replay.Chain
	var runs []run
	of := make([]int32, len(items))
	for i, it := range items {
		c := replay.ChainOf(it, toQueue)
		k, ok := num[c]
		if !ok {
			k = int32(len(runs))
			num[c] = k
			chains = append(chains, c)
			runs = append(runs, run{})
		}
		of[i] = k
		runs[k].n++
	}
	next := make([]int, len(runs))
	for k, start := 0, 0; k < len(runs); k++ {
		runs[k].start, next[k] = start, start
		start += runs[k].n
	}
	idx := make([]int32, len(items))
	for i, k := range of {
		idx[next[k]] = int32(i)
		next[k]++
	}
	counts := make([]replay.ChainCount, len(runs))
	for k := range runs {
		r := &runs[k]
		g := idx[r.start : r.start+r.n]
		r.byID = true
		for _, i := range g {
			if !replay.IsUUIDv7(items[i].Rows[0].ID) {
				r.byID = false
				break
			}
		}
		ids := r.byID
		sort.SliceStable(g, func(i, j int) bool {
			a, b := &items[g[i]], &items[g[j]]
			if ids {
				if less, equal := idLess(a.Rows[0].ID, b.Rows[0].ID); !equal {
					return less
				}
			}
			if x, y := firstFailure(a), firstFailure(b); !x.Equal(y) {
				return x.Before(y)
			}
			return a.Address.String() < b.Address.String()
		})
		counts[k] = replay.ChainCount{Chain: chains[k], N: r.n, ByID: ids}
	}
	info = replay.OrderInfoOf(mode, counts)
	// Partitions by their oldest message, so the oldest failures go first.
	head := func(r run) *replay.Item { return &items[idx[r.start]] }
	sort.SliceStable(runs, func(i, j int) bool {
		a, b := head(runs[i]), head(runs[j])
		if runs[i].byID && runs[j].byID {
			less, _ := idLess(a.Rows[0].ID, b.Rows[0].ID)
			return less
		}
		return firstFailure(a).Before(firstFailure(b))
	})
	// from[k] is the index of the item that goes to place k.
	from := of[:0]
	for _, r := range runs {
		from = append(from, idx[r.start:r.start+r.n]...)
	}
	permute(items, from)
	return items, info
}

// firstFailure is an item's earliest failure: the best stand-in for its
// enqueue time when the message id does not tell it.
func firstFailure(it *replay.Item) time.Time {
	t := it.Rows[0].FailedAt
	for _, rows := range [2][]deadletter.Row{it.Rows, it.Others} {
		for i := range rows {
			if rows[i].FailedAt.Before(t) {
				t = rows[i].FailedAt
			}
		}
	}
	return t
}

// idLess orders two UUIDs as their lower-case forms do, without making
// them (Arrange compares each id many times).
func idLess(a, b string) (less, equal bool) {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := lowerASCII(a[i]), lowerASCII(b[i])
		if x != y {
			return x < y, false
		}
	}
	return len(a) < len(b), len(a) == len(b)
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// permute moves items in place so that place k holds what was at
// from[k], each item moved once (following the permutation's cycles);
// from is used up.
func permute(items []replay.Item, from []int32) {
	for i := range from {
		if from[i] < 0 {
			continue
		}
		held, j := items[i], i
		for {
			k := int(from[j])
			from[j] = -1
			if k == i {
				items[j] = held
				break
			}
			items[j], j = items[k], k
		}
	}
}
