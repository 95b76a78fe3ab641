package inspect

import (
	"context"
	"iter"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/stream"
)

// DecisionLookup is where a reader finds an address's latest decision.
type DecisionLookup func(deadletter.Address) (ledger.Decision, bool)

// Decisions are the latest decisions of the addresses read so far,
// looked up a chunk of rows at a time as they stream (Through): what a
// read costs grows with the rows read, not with the ledger's history. It
// keeps only the decisions found. Safe for concurrent Get.
type Decisions struct {
	mu     sync.RWMutex
	set    *ledger.DecisionSet
	ld     *ledger.Store // nil: set is all there is
	broker string
	err    error
	// queues are the queues with a decision, read at the first lookup:
	// rows of other queues are not looked up (nil: not read yet).
	queues map[string]bool
	// looked counts the addresses looked up one by one; holdsRead says
	// the holds in force were asked for (readHolds).
	looked    int
	holdsRead bool
	// all: the reader reads every row of its selection (ReadsAll); held
	// are the queues a hold in force covers, read at its first lookup.
	all  bool
	held map[string]bool
	now  time.Time
}

// holdsAfter and holdsMost: once a read has looked up holdsAfter
// addresses one by one, the holds in force are read at once, when they
// name at most holdsMost addresses (ledger.HoldsInForce); the rows a
// hold names then need no lookup of their own. A short read (ls --limit
// 100) never gets there; a reader of every row reads them sooner
// (ReadsAll).
var holdsAfter, holdsMost = 2_000, 50_000

// NewDecisions looks decisions up in ld as rows pass Through, for a
// reader whose now is now (which holds are in force).
func NewDecisions(ld *ledger.Store, broker string, now time.Time) *Decisions {
	return &Decisions{set: ledger.NewDecisionSet(nil), ld: ld, broker: broker, now: now}
}

// KnownDecisions are decisions already in memory (tests, or none at all).
func KnownDecisions(m map[deadletter.Address]ledger.Decision) *Decisions {
	return &Decisions{set: ledger.NewDecisionSet(m)}
}

// Get is an address's latest decision among those looked up.
func (d *Decisions) Get(a deadletter.Address) (ledger.Decision, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.set.Get(a)
}

// Take is Get for a reader that keeps the decision itself: it is
// forgotten here, so that it is not held twice.
func (d *Decisions) Take(a deadletter.Address) (ledger.Decision, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.set.Take(a)
}

// ReadsAll tells d, before its first lookup, that its reader reads every
// row of its selection (no --limit): the holds in force are then read at
// the first row of a queue a hold covers, not after holdsAfter lookups,
// and the rows they name are not looked up one by one.
func (d *Decisions) ReadsAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.all = true
}

// Lookup is Get as a DecisionLookup.
func (d *Decisions) Lookup() DecisionLookup { return d.Get }

// Err is the lookup that failed, if one did: the rows after it went on
// without their decisions.
func (d *Decisions) Err() error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.err
}

// decisionChunk is how many rows share one lookup; the first lookups
// take fewer (firstDecisionChunk, doubling), so that a read that stops
// early (ls --limit 100) looks up little more than it shows: each
// address looked up reads ledger pages of its own.
const decisionChunk, firstDecisionChunk = 500, 16

// Through passes rows on unchanged, each after its decision (if any)
// was looked up: a chunk of rows is held while the ledger is asked about
// their addresses in one statement. A goroutine reads and looks up the
// next chunk while the caller is on this one, so that the lookups cost
// little more than the rows. When no queue has a decision (or they cannot
// be read: Err says so), the rows pass as they come.
func (d *Decisions) Through(ctx context.Context, rows iter.Seq2[deadletter.Row, error]) iter.Seq2[deadletter.Row, error] {
	if d.ld == nil || len(d.decidedQueues(ctx)) == 0 {
		return rows
	}
	// Lookups run under ctx itself, not the one a caller that stops early
	// cancels: that is not a failed lookup.
	return stream.Ahead(ctx, 1, func(stopped context.Context, emit func([]deadletter.Row) ([]deadletter.Row, bool)) error {
		size := firstDecisionChunk
		buf := make([]deadletter.Row, 0, size)
		for r, err := range rows {
			if stopped.Err() != nil {
				return nil // the caller has what it wants: read no further
			}
			if err != nil {
				d.lookup(ctx, buf)
				emit(buf)
				return err
			}
			if buf = append(buf, r); len(buf) == size {
				d.lookup(ctx, buf)
				var ok bool
				if buf, ok = emit(buf); !ok {
					return nil
				}
				size = min(2*size, decisionChunk)
			}
		}
		d.lookup(ctx, buf)
		emit(buf)
		return nil
	})
}

// decidedQueues are the queues with a decision, read from the ledger
// once; none when they cannot be read (Err).
func (d *Decisions) decidedQueues(ctx context.Context) map[string]bool {
	d.mu.RLock()
	queues, err := d.queues, d.err
	d.mu.RUnlock()
	if queues != nil || err != nil {
		return queues
	}
	q, err := d.ld.QueuesWithDecisions(ctx, d.broker)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.err = err
		return nil
	}
	if q == nil {
		q = map[string]bool{}
	}
	d.queues = q
	return q
}

func (d *Decisions) lookup(ctx context.Context, rows []deadletter.Row) {
	if len(rows) == 0 || d.Err() != nil {
		return
	}
	queues := d.decidedQueues(ctx)
	if len(queues) == 0 {
		return
	}
	if d.holdsDue(ctx, rows) {
		d.readHolds(ctx)
	}
	addrs := make([]deadletter.Address, 0, len(rows))
	d.mu.RLock()
	for _, r := range rows {
		if a := r.Address(); queues[r.Queue] && !d.set.Has(a) {
			addrs = append(addrs, a)
		}
	}
	d.mu.RUnlock()
	if len(addrs) == 0 {
		return
	}
	found, err := d.ld.LatestDecisionsFor(ctx, d.broker, addrs)
	d.mu.Lock()
	if err != nil {
		d.err = err
	} else {
		d.set.Add(found)
	}
	d.looked += len(addrs)
	read := err == nil && !d.holdsRead && d.looked >= holdsAfter
	d.holdsRead = d.holdsRead || read
	d.mu.Unlock()
	if read {
		d.readHolds(ctx)
	}
}

// holdsDue reports, for a reader of every row, whether the holds in force
// are to be read before rows are looked up: once, at the first row of a
// queue a hold covers.
func (d *Decisions) holdsDue(ctx context.Context, rows []deadletter.Row) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.all || d.holdsRead || d.err != nil {
		return false
	}
	if d.held == nil {
		held, _, err := d.ld.DecidedQueues(ctx, d.broker, d.now)
		if err != nil {
			d.err = err
			return false
		}
		d.held = held
	}
	for _, r := range rows {
		if d.held[r.Queue] {
			d.holdsRead = true
			return true
		}
	}
	return false
}

// readHolds reads the holds in force at the reader's now into the
// decisions (unless they name more than holdsMost addresses); each is its
// address's current decision.
func (d *Decisions) readHolds(ctx context.Context) {
	// Read into the set itself, not beside it: a reader waits for the
	// read once, and the holds are not held twice.
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.ld.HoldsInForce(ctx, d.broker, d.now, holdsMost, d.set); err != nil {
		d.err = err
	}
}
