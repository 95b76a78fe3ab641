package replay

import (
	"slices"

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
	if len(id) != 36 || id[14] != '7' {
		return false
	}
	for i := range len(id) {
		switch i {
		case 8, 13, 18, 23:
			if id[i] != '-' {
				return false
			}
		default:
			if !isHex(id[i]) {
				return false
			}
		}
	}
	return true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

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
