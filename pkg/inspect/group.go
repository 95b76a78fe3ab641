package inspect

import (
	"hash/maphash"
	"slices"
	"sort"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Group is one row of `ls --group-by`: for error, a failure class.
type Group struct {
	Key      string    `json:"key"`
	Class    string    `json:"class,omitempty"`
	Pattern  string    `json:"pattern,omitempty"`
	Count    int       `json:"count"`    // dead-letter rows
	Messages int       `json:"messages"` // distinct addresses among them
	Oldest   time.Time `json:"oldestFailedAt"`
	Newest   time.Time `json:"newestFailedAt"`
	Example  string    `json:"exampleAddress"`
	Queues   []string  `json:"queues"`
	// Held counts the group's rows under an active hold; HeldBy names who
	// the holds are with (their owners, else who recorded them).
	Held   int      `json:"held"`
	HeldBy []string `json:"heldBy,omitempty"`
	// OldestQueue and OldestGroup are where the oldest row is: its age is
	// judged against that scope's max-age.
	OldestQueue string `json:"-"`
	OldestGroup string `json:"-"`
	queueSet    map[string]struct{}
	addrs       *distinct // the addresses' hashes: counting messages costs 8 bytes each
}

// GroupBys are the groupings of `ls --group-by`.
var GroupBys = []string{"error", "queue", "cg", "partition"}

// GroupKey is the key of r's group under a grouping.
func GroupKey(by string, r deadletter.Row) string {
	switch by {
	case "queue":
		return r.Queue
	case "cg":
		return r.Queue + "/" + r.ConsumerGroup
	case "partition":
		return r.Queue + "/" + r.Partition
	}
	return deadletter.ClassID(r.ErrorMessage)
}

// Grouper groups rows one at a time, so the groups can be shown while
// rows are still arriving (the triage screen does).
type Grouper struct {
	by     string
	groups map[string]*Group
	seed   maphash.Seed
	// Held, when set, says whether a row is under an active hold and
	// who it is with.
	Held func(deadletter.Row) (string, bool)
}

// NewGrouper groups by one of GroupBys.
func NewGrouper(by string) *Grouper {
	return &Grouper{by: by, groups: map[string]*Group{}, seed: maphash.MakeSeed()}
}

// Add counts a row into its group and returns the group's key.
func (gr *Grouper) Add(r deadletter.Row) string {
	key := GroupKey(gr.by, r)
	g := gr.groups[key]
	if g == nil {
		g = &Group{Key: key, Oldest: r.FailedAt, Newest: r.FailedAt, Example: r.Address().String(),
			OldestQueue: r.Queue, OldestGroup: r.ConsumerGroup, queueSet: map[string]struct{}{}, addrs: &distinct{}}
		if gr.by == "error" {
			g.Class, g.Pattern = key, deadletter.NormalizeError(r.ErrorMessage)
		}
		gr.groups[key] = g
	}
	g.Count++
	g.addrs.add(addrHash(gr.seed, r))
	if r.FailedAt.Before(g.Oldest) {
		g.Oldest, g.OldestQueue, g.OldestGroup = r.FailedAt, r.Queue, r.ConsumerGroup
	}
	if r.FailedAt.After(g.Newest) {
		g.Newest = r.FailedAt
	}
	if _, ok := g.queueSet[r.Queue]; !ok {
		g.queueSet[r.Queue] = struct{}{}
		g.Queues = append(g.Queues, r.Queue)
	}
	if gr.Held != nil {
		if who, ok := gr.Held(r); ok {
			g.Held++
			if !slices.Contains(g.HeldBy, who) {
				g.HeldBy = append(g.HeldBy, who)
			}
		}
	}
	return key
}

// addrHash hashes a row's address without building its string.
func addrHash(seed maphash.Seed, r deadletter.Row) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(r.PartitionID)
	h.WriteByte('/')
	h.WriteString(r.TransactionID)
	return h.Sum64()
}

// Lookup returns a copy of one group, as Groups does.
func (gr *Grouper) Lookup(key string) (Group, bool) {
	g, ok := gr.groups[key]
	if !ok {
		return Group{}, false
	}
	return g.snapshot(), true
}

// snapshot is a copy of the group the grouper can go on counting under.
func (g *Group) snapshot() Group {
	c := *g
	c.Queues = slices.Clone(g.Queues)
	sort.Strings(c.Queues)
	c.HeldBy = slices.Clone(g.HeldBy)
	sort.Strings(c.HeldBy)
	c.Messages = g.addrs.count()
	c.queueSet, c.addrs = nil, nil
	return c
}

// Groups returns copies of the groups, biggest first; ties by oldest
// first, then key, so the order is stable.
func (gr *Grouper) Groups() []Group {
	list := make([]Group, 0, len(gr.groups))
	for _, g := range gr.groups {
		list = append(list, g.snapshot())
	}
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i], list[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		if !a.Oldest.Equal(b.Oldest) {
			return a.Oldest.Before(b.Oldest)
		}
		return a.Key < b.Key
	})
	return list
}
