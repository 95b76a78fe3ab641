package replay

import (
	"slices"
	"sort"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// Orders a replay can keep.
const (
	// OrderPartition: within each destination partition, messages are
	// published in their original enqueue order, one in flight at a time,
	// and a message that is not replayed (failed, unknown, skipped,
	// claimed by another run) holds back the later ones of its partition.
	OrderPartition = "partition"
	// OrderSkipGaps keeps the order but goes on past a message that is
	// not replayed.
	OrderSkipGaps = "skip-gaps"
	// OrderNone publishes in any order, as fast as --concurrency allows.
	OrderNone = "none"
)

// Ordered reports whether an order mode keeps per-partition order.
func Ordered(mode string) bool { return mode == OrderPartition || mode == OrderSkipGaps }

// Chain is the destination partition a message is published to: its
// messages are replayed one after another, in enqueue order.
type Chain struct {
	Queue     string `json:"queue"`
	Partition string `json:"partition"`
}

// ChainOf is the chain an item belongs to, given the destination queue
// (--to-queue keeps the source partition name, so order holds there too).
func ChainOf(it Item, toQueue string) Chain {
	q := it.Queue
	if toQueue != "" {
		q = toQueue
	}
	return Chain{Queue: q, Partition: it.Partition}
}

// IsUUIDv7 reports whether a message id is a UUIDv7, whose ids sort in
// enqueue order (see uuidV7).
func IsUUIDv7(id string) bool { return uuidV7(id) }

// uuidV7 reports whether a message id is a UUIDv7: its first 48 bits are
// the enqueue time, so ids sort in enqueue order (the broker mints them).
func uuidV7(id string) bool {
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[14] != '7' || id[18] != '-' || id[23] != '-' {
		return false
	}
	for i := 0; i < 36; i++ {
		c := id[i]
		if i == 8 || i == 13 || i == 18 || i == 23 {
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// firstFailure is an item's earliest failure: the best stand-in for its
// enqueue time when the message id does not tell it.
func firstFailure(it *Item) time.Time {
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

// OrderInfo is what a plan says about order.
type OrderInfo struct {
	Mode string `json:"mode"`
	// Partitions counts destination partitions with more than one
	// message: the ones where order matters.
	Partitions   int   `json:"partitionsWithSeveral"`
	LongestChain int   `json:"longestChain"`
	Chain        Chain `json:"longestChainPartition,omitzero"`
	// ByFailure counts messages ordered by their first failure, their
	// ids not being time-ordered UUIDs.
	ByFailure int `json:"orderedByFailureTime"`
	// Recorded: the batch was recorded in replay order, and a resume
	// keeps that order (ByFailure then counts items recorded without a
	// message id).
	Recorded bool `json:"recordedOrder,omitempty"`
}

// Arrange puts items in replay order: each destination partition's
// messages together, oldest enqueued first (message ids when they are
// UUIDv7 for the whole partition, first failure otherwise), partitions by
// their oldest message. The manifest keeps this order, so a resumed batch
// replays in it too. With OrderNone the items are left as they are.
// The items are arranged in place: a caller that needs them as they were
// passes a copy.
func Arrange(items []Item, mode, toQueue string) ([]Item, OrderInfo) {
	info := OrderInfo{Mode: mode}
	if !Ordered(mode) {
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
	num := map[Chain]int32{}
	var chains []Chain
	var runs []run
	of := make([]int32, len(items))
	for i, it := range items {
		c := ChainOf(it, toQueue)
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
	counts := make([]ChainCount, len(runs))
	for k := range runs {
		r := &runs[k]
		g := idx[r.start : r.start+r.n]
		r.byID = true
		for _, i := range g {
			if !uuidV7(items[i].Rows[0].ID) {
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
		counts[k] = ChainCount{Chain: chains[k], N: r.n, ByID: ids}
	}
	info = OrderInfoOf(mode, counts)
	// Partitions by their oldest message, so the oldest failures go first.
	head := func(r run) *Item { return &items[idx[r.start]] }
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

// ChainCount is a destination partition's share of a batch: how many
// messages, and whether every one's id is a UUIDv7 (enqueue order).
type ChainCount struct {
	Chain Chain
	N     int
	ByID  bool
}

// OrderInfoOf is what a plan says about order, from the batch's chains in
// the order they first appear in it.
func OrderInfoOf(mode string, chains []ChainCount) OrderInfo {
	info := OrderInfo{Mode: mode}
	for _, c := range chains {
		if !c.ByID {
			info.ByFailure += c.N
		}
		if c.N > 1 {
			info.Partitions++
		}
		if c.N > info.LongestChain {
			info.LongestChain, info.Chain = c.N, c.Chain
		}
	}
	return info
}

// permute moves items in place so that place k holds what was at
// from[k], each item moved once (following the permutation's cycles);
// from is used up.
func permute(items []Item, from []int32) {
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

// Blocked is a partition whose later messages a replay held back: the
// message at Address was not replayed, for Reason.
type Blocked struct {
	Chain
	Address  deadletter.Address `json:"address"`
	Reason   string             `json:"reason"`
	Messages int                `json:"messagesHeldBack"`
	// Permanent: what holds the partition back will not be replayed by a
	// resume (an undecryptable envelope, the generation cap, an address
	// the API cannot name): only --order skip-gaps or a discard frees it.
	Permanent bool `json:"permanent,omitempty"`
}

// passes reports whether an address's journal lets the rest of its
// partition go on: it was published (or is gone, or was done before).
func passes(ent *ledger.Entry) bool {
	return ent != nil && (ent.State == ledger.Removed || ent.State == ledger.Published)
}

// BlockedChains reads a batch's manifest (in its order) against the
// journal: for each partition, the first message not replayed, when
// later ones were held back behind it.
func BlockedChains(items []Item, toQueue string, journal map[deadletter.Address]*ledger.Entry) []Blocked {
	var out []Blocked
	idx := map[Chain]int{}
	for _, it := range items {
		c := ChainOf(it, toQueue)
		if i, ok := idx[c]; ok {
			if i >= 0 && !passes(journal[it.Address]) {
				out[i].Messages++
			}
			continue
		}
		ent := journal[it.Address]
		if passes(ent) {
			continue
		}
		// Not replayed. If it is the last of its partition nothing waits
		// on it; the count below says how many do.
		reason := "not replayed yet"
		if ent != nil {
			reason = ent.State
			if ent.LastError != "" {
				reason += ": " + ent.LastError
			} else if ent.Outcome != "" {
				reason += " (" + ent.Outcome + ")"
			}
		}
		idx[c] = len(out)
		out = append(out, Blocked{Chain: c, Address: it.Address, Reason: reason, Permanent: ent != nil && ent.State == ledger.Skipped})
	}
	return slices.DeleteFunc(out, func(b Blocked) bool { return b.Messages == 0 })
}
