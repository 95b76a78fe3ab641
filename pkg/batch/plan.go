package batch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// The plan is made in one pass over the stage, a chunk of items at a
// time, once what it depends on beside the items is known (the path, the
// queues' groups, the pace). Each chunk settles what the list could not
// say: which envelopes the broker cannot decrypt (the detail route is
// asked), which messages an active hold covers (left out with
// --skip-held), which addresses an earlier attempt pinned to the manual
// path, the copies' generations, and whether --transform runs on every
// payload; what it finds is written beside the item, and the items the
// batch keeps are counted.

// planChunk is how many items the pass holds at a time.
const planChunk = 400

// planItems is the pass: every item settled, and counted on pl and by
// its chain (which a run then arranges by).
func (p *Pending) planItems(ctx context.Context, pl *Planner) error {
	st := p.in.st
	st.counted = nil
	counted := countChains(p.settings.ToQueue)
	if err := p.passItems(ctx, func(it replay.Item, f ItemFacts) {
		counted.add(it)
		pl.Add(it, f)
	}); err != nil {
		return err
	}
	st.counted = counted
	return nil
}

// passItems settles every item and gives each the batch keeps to add,
// with what the pass found of it.
func (p *Pending) passItems(ctx context.Context, add func(replay.Item, ItemFacts)) error {
	cl, ld, st := p.env.Client, p.env.Ledger, p.in.st
	if p.act().Outside() {
		// The archive's rows, or a file's: no hold, journal path or
		// envelope to ask the broker about (the rows are not in it).
		return st.chunks(ctx, planChunk, func([]placed) error { return nil }, func(chunk []placed) error {
			for _, c := range chunk {
				if err := p.tryTransform(ctx, c.it); err != nil {
					return err
				}
				add(c.it, ItemFacts{})
			}
			return nil
		})
	}
	// The chunks ahead ask together, detailAsks calls at a time.
	sem := make(chan struct{}, detailAsks)
	ahead := func(chunk []placed) error { return p.checkEnvelopes(ctx, sem, chunk) }
	// A broker the ledger knows nothing of (its first batch) has no
	// decision, entry or copy to look up, chunk after chunk.
	history, err := ld.HasHistory(ctx, cl.Broker())
	if err != nil {
		return err
	}
	// Of the decisions, the pass asks only whether a hold in force covers
	// an address, or (a fresh selection) a batch of this action recorded
	// and not run: only the addresses of the queues where one may are
	// looked up.
	var pending map[string]bool
	if history {
		action := p.req.Action
		if p.in.batch != nil {
			action = "" // a resume is the batch decided
		}
		if pending, err = ld.QueuesPending(ctx, cl.Broker(), action, p.now); err != nil {
			return err
		}
	}
	return st.chunks(ctx, planChunk, ahead, func(chunk []placed) error {
		var known chunkHistory
		if history {
			if known, err = p.historyOf(ctx, chunk, pending); err != nil {
				return err
			}
		}
		var marks chunkMarks
		for _, c := range chunk {
			if c.answered {
				marks.answered = append(marks.answered, c)
			}
			f, keep := p.factsOf(c, known, &marks)
			if !keep {
				continue
			}
			if err := p.tryTransform(ctx, c.it); err != nil {
				return err
			}
			add(c.it, f)
		}
		p.skippedHeld += len(marks.skipped)
		return marks.write(ctx, st)
	})
}

// chunkHistory is what the ledger knows of a chunk's addresses: their
// latest decisions and (a replay's) journal entries.
type chunkHistory struct {
	dec  map[deadletter.Address]ledger.Decision
	ents map[deadletter.Address]*ledger.Entry
}

// historyOf reads what the ledger knows of a chunk's addresses: the
// latest decisions of those in the pending queues (QueuesPending), and (a
// replay's) journal entries; it notes the generations of the copies among
// them.
func (p *Pending) historyOf(ctx context.Context, chunk []placed, pending map[string]bool) (chunkHistory, error) {
	cl, ld := p.env.Client, p.env.Ledger
	addrs := make([]deadletter.Address, len(chunk))
	var decided []deadletter.Address
	for i, c := range chunk {
		addrs[i] = c.it.Address
		if pending[c.it.Queue] {
			decided = append(decided, c.it.Address)
		}
	}
	var h chunkHistory
	var err error
	if len(decided) > 0 {
		if h.dec, err = ld.LatestDecisionsFor(ctx, cl.Broker(), decided); err != nil {
			return h, err
		}
	}
	if !p.act().Generations {
		return h, nil
	}
	if h.ents, err = ld.Entries(ctx, cl.Broker(), addrs); err != nil {
		return h, err
	}
	gens, err := copyGenerations(ctx, ld, cl.Broker(), addrs)
	for a, g := range gens {
		p.gens[a] = g
	}
	return h, err
}

// chunkMarks are what a chunk's pass writes beside its items: the detail
// route's answers, the items --skip-held left out, those pinned to the
// manual path, and the holds.
type chunkMarks struct {
	answered      []placed
	skipped, pins []int
	held          map[string][]int
}

func (m *chunkMarks) write(ctx context.Context, st *stage) error {
	for _, c := range m.answered {
		if err := st.checked(ctx, c.at, c.it.Payload); err != nil {
			return err
		}
	}
	if err := st.mark(ctx, "skipped", 1, m.skipped); err != nil {
		return err
	}
	if err := st.mark(ctx, "pinned", 1, m.pins); err != nil {
		return err
	}
	for id, at := range m.held {
		if err := st.mark(ctx, "hold", id, at); err != nil {
			return err
		}
	}
	return nil
}

// factsOf is what the ledger's history says of an item (keep: false for
// one --skip-held leaves out), marked on marks.
func (p *Pending) factsOf(c placed, known chunkHistory, marks *chunkMarks) (f ItemFacts, keep bool) {
	it := c.it
	d, decided := known.dec[it.Address]
	if decided && d.Holds(it.Newest().FailedAt, p.now) && (p.in.batch == nil || d.BatchID != p.in.batch.ID) {
		if p.req.SkipHeld {
			marks.skipped = append(marks.skipped, c.at)
			return f, false
		}
		h, ok := p.holds[d.BatchID]
		if !ok {
			h = HoldShare{BatchID: d.BatchID, By: d.By, Until: d.Until, Why: d.Why}
			p.holds[d.BatchID] = h
		}
		f.Hold = &h
		if marks.held == nil {
			marks.held = map[string][]int{}
		}
		marks.held[d.BatchID] = append(marks.held[d.BatchID], c.at)
	}
	if decided && p.in.batch == nil && p.decidedBefore(d, it) {
		ds, ok := p.decided[d.BatchID]
		if !ok {
			ds = DecidedShare{BatchID: d.BatchID, By: d.By, Status: d.Status, Why: d.Why}
			p.decided[d.BatchID] = ds
		}
		f.Decided = &ds
	}
	if e, ok := known.ents[it.Address]; ok && replay.Pinned(e) {
		f.Pinned = true
		marks.pins = append(marks.pins, c.at)
	}
	return f, true
}

// decidedBefore reports whether d is a batch of this action, decided and
// never run, that covers the item: running it is what was decided.
func (p *Pending) decidedBefore(d ledger.Decision, it replay.Item) bool {
	return d.Action == p.req.Action && d.Copy == nil && (d.Status == ledger.StatusRecorded || d.Status == ledger.StatusAwaiting) && d.Covers(it.Newest().FailedAt, p.now)
}

// checkEnvelopes asks the detail route about each item of a chunk whose
// payload the list showed as an encryption envelope, sem bounding the
// calls in flight with the other chunks' asks: the released server's list
// never decrypts, so only the detail route tells an encrypted payload (it
// decrypts) from an undecryptable one. The answer is what the batch
// publishes: the chunk's pass stages it (chunkMarks), not the asks, which
// would each wait for the stage's one connection while the next chunk is
// read. An address gone from the DLQ, or a broker without the route,
// leaves it unanswered (a run settles it).
func (p *Pending) checkEnvelopes(ctx context.Context, sem chan struct{}, chunk []placed) error {
	var ask []*placed
	for i := range chunk {
		if c := &chunk[i]; !c.it.Checked && c.it.Envelope() {
			ask = append(ask, c)
		}
	}
	return askDetails(ctx, p.env.Client, sem, len(ask), func(i int) deadletter.Address { return ask[i].it.Address }, func(i int, m *client.Message, err error) error {
		switch {
		case errors.Is(err, client.ErrNoDeadLetterRow), errors.Is(err, client.ErrRouteMissing):
			return nil
		case err != nil:
			return err
		}
		ask[i].it.Payload, ask[i].it.Checked, ask[i].answered = m.Payload, true, true
		return nil
	})
}

// tryTransform runs a replay's --transform on the payload an item would
// publish, before anything is recorded: one that fails, or runs past
// jq's budget, fails the plan, naming the message. An item that is not
// published (gone, undecryptable, empty) is not tried.
func (p *Pending) tryTransform(ctx context.Context, it replay.Item) error {
	t := p.opts.Transform
	if t == nil || !p.act().Publishes || it.Absent || it.Undecryptable() || len(it.Data()) == 0 || !it.Checked && it.Envelope() {
		return nil
	}
	if _, err := t(ctx, it.Data()); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return refuse(errs.Usage, GivenTransform, "", fmt.Sprintf("fails on %s: %v; nothing was recorded or sent", it.Address, err))
	}
	return nil
}

// groups adds each queue and consumer group of the staged rows (for the
// fan-out warning), in order.
func (st *stage) groups(add func(q, g string)) {
	pairs := slices.Collect(maps.Keys(st.pairs))
	slices.SortFunc(pairs, func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	for _, k := range pairs {
		add(k[0], k[1])
	}
}

// copyGenerations are the generations of the addresses that are copies
// the /retry endpoint published (their ids, minted by the broker, say
// none): the ledger's journal knows which replay made each.
func copyGenerations(ctx context.Context, ld *ledger.Store, broker string, addrs []deadletter.Address) (replay.Generations, error) {
	var minted []deadletter.Address
	for _, a := range addrs {
		if !deadletter.IsReplayID(a.TransactionID) {
			minted = append(minted, a)
		}
	}
	gens, err := ld.CopyGenerations(ctx, broker, minted)
	return replay.Generations(gens), err
}
