package ledger

import (
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// DecisionSet holds decisions looked up for the rows a reader has met,
// by address, keeping each batch's part of a decision once for every
// address it decided (a hold over 30,000 rows is one) and each address's
// own part (queue, failure time, lineage) beside it: an address holds a
// pointer and its own part, 32 bytes, not a whole Decision. Not safe for
// concurrent use.
type DecisionSet struct {
	m       map[deadletter.Address]decided
	batches map[string]*Decision
	queues  []string          // by number
	queueNo map[string]uint32 // the numbers of queues
}

// decided is an address's decision as a DecisionSet keeps it.
type decided struct {
	batch *Decision
	copy  *Lineage
	seen  int64  // Seen, in Unix nanoseconds (0: none)
	queue uint32 // the queue's number
}

// NewDecisionSet holds the decisions in m (none when nil).
func NewDecisionSet(m map[deadletter.Address]Decision) *DecisionSet {
	s := &DecisionSet{m: map[deadletter.Address]decided{}, batches: map[string]*Decision{}, queueNo: map[string]uint32{}}
	s.Add(m)
	return s
}

// Add holds the decisions found. A batch's part is kept once while it
// reads the same: a batch whose status has moved since gets a new one,
// and the decisions held before keep theirs.
func (s *DecisionSet) Add(found map[deadletter.Address]Decision) {
	for a, x := range found {
		s.Put(a, x)
	}
}

// Put holds one decision, as Add does.
func (s *DecisionSet) Put(a deadletter.Address, x Decision) {
	s.put(a, s.part(&x), x.Queue, x.Seen, x.Copy)
}

// part is the batch's part of x as the set keeps it: the one it holds
// while that reads the same, else x's, held from now on.
func (s *DecisionSet) part(x *Decision) *Decision {
	part := *x
	part.Queue, part.Seen, part.Copy = "", time.Time{}, nil
	b := s.batches[x.BatchID]
	if b == nil || *b != part {
		b = &part
		s.batches[x.BatchID] = b
	}
	return b
}

// put holds a's decision: its batch's part b (from part) and its own.
// A reader putting many addresses of one batch asks for the part once.
func (s *DecisionSet) put(a deadletter.Address, b *Decision, queue string, at time.Time, copy *Lineage) {
	q, ok := s.queueNo[queue]
	if !ok {
		q = uint32(len(s.queues))
		s.queues = append(s.queues, queue)
		s.queueNo[queue] = q
	}
	var seen int64
	if !at.IsZero() {
		seen = at.UnixNano()
	}
	s.m[a] = decided{batch: b, copy: copy, seen: seen, queue: q}
}

// grow makes room for n decisions in a set that holds none yet: one
// that holds some grows as they come (copying it into a larger map put
// 4 MB on a listing's peak, BenchmarkDecisionsPerRow).
func (s *DecisionSet) grow(n int) {
	if len(s.m) == 0 {
		s.m = make(map[deadletter.Address]decided, n)
	}
}

// Get is an address's decision, if one is held.
func (s *DecisionSet) Get(a deadletter.Address) (Decision, bool) {
	x, ok := s.m[a]
	if !ok {
		return Decision{}, false
	}
	d := *x.batch
	d.Queue, d.Copy = s.queues[x.queue], x.copy
	if x.seen != 0 {
		d.Seen = time.Unix(0, x.seen).UTC()
	}
	return d, true
}

// Take is Get, and the decision is no longer held.
func (s *DecisionSet) Take(a deadletter.Address) (Decision, bool) {
	d, ok := s.Get(a)
	delete(s.m, a)
	return d, ok
}

// Has reports whether an address's decision is held.
func (s *DecisionSet) Has(a deadletter.Address) bool {
	_, ok := s.m[a]
	return ok
}
