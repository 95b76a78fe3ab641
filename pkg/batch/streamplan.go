package batch

import (
	"context"
	"errors"
	"hash/maphash"
	"maps"
	"time"
	"unsafe"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// A selection is planned from the rows as they stream: it holds about 45
// bytes an address (its hash, an index and a seen), not the items, so a
// plan over a million dead letters fits in a small process; a batch
// that will run stages its rows on disk as they pass (see stage). The
// plan is the one the items would make (TestStreamedPlanIsTheItemsPlan),
// and so is the staged batch (TestStagedBatchIsTheItemsBatch); an
// address's hash standing for it, two addresses whose 64-bit hashes
// collide would count as one.

// streamable reports whether a request can be planned so: a dry run, or
// a batch that will run (staged, unless a test holds it in memory), of a fresh selection
// that is not a list of addresses and cannot pick some rows of an
// address and not others (its other rows would have to be looked for,
// as Widen does).
func streamable(req Request) bool {
	sel := req.Selection
	return (req.PlanOnly || !req.inMemory) && !req.items && req.BatchID == "" && sel != nil && len(sel.Addresses) == 0 && !sel.RowLevel()
}

// errTooMany: a queue has more consumer groups than a seen's mask holds,
// or the batch meets more holds than a seen can name; the items are held
// instead.
var errTooMany = errors.New("more than 64 consumer groups in one queue, or 255 holds")

// seen is what a streamed plan keeps of an address: 24 bytes.
type seen struct {
	groups uint64 // the queue's groups that dead-lettered it, as bits (streamed.groups)
	rows   uint32
	chain  uint32
	class  uint32
	queue  uint16
	hold   uint8 // 1 + the index of the hold that covers it, 0 for none
	flags  uint8
}

const (
	seenUndecryptable = 1 << iota
	seenOverGenCap
	seenPinned
	seenSkipped // under a hold, left out by --skip-held
)

// streamed is a plan's figures gathered from the rows.
type streamed struct {
	seed maphash.Seed
	// by finds an address's seen among seens (blocks of 4,096, in the
	// order the addresses were first seen: a block is never copied).
	by        map[uint64]uint32
	seens     [][]seen
	queues    []string
	queueIdx  map[string]uint16
	groups    [][]string // per queue
	classes   []replay.ClassCount
	classIdx  map[string]uint32
	chains    []replay.ChainCount
	chainIdx  map[replay.Chain]uint32
	holds     []replay.HoldShare
	envelopes []deadletter.Address // to ask the detail route about, as checkEnvelopes does
	messages  int                  // addresses seen (within --limit)
	skipped   int
}

// newcomer is an address seen for the first time, until its chunk's
// decisions and journal entries are looked up.
type newcomer struct {
	key    uint64
	addr   deadletter.Address
	failed time.Time // its newest row's failure: what a hold must cover
}

// stream reads the selection and gathers the plan's figures; decisions
// (holds) and journal entries (pinned paths) are looked up a chunk of
// new addresses at a time.
func (p *Pending) stream(ctx context.Context) error {
	cl, sel, s := p.env.Client, p.req.Selection, p.settings
	sp := &streamed{seed: maphash.MakeSeed(), by: map[uint64]uint32{}, queueIdx: map[string]uint16{}, classIdx: map[string]uint32{}, chainIdx: map[replay.Chain]uint32{}}
	holdIdx := map[string]uint8{}
	if !p.req.PlanOnly {
		var err error
		if p.stage, err = openStage(ctx); err != nil {
			return err
		}
	}
	var chunk []newcomer
	lookup := func() error {
		err := p.lookUpNewcomers(ctx, sp, holdIdx, chunk)
		chunk = chunk[:0]
		return err
	}
	sel.Bind(ctx)
	inScope, matched := 0, 0
	rows := cl.Rows(ctx, client.QueryFor(sel, inspect.PageSize))
	if sel.WhereRows != nil {
		rows = sel.WhereRows(ctx, rows)
	}
	for r, err := range rows {
		if err != nil {
			return err
		}
		if sel.InScope(r) {
			inScope++
		}
		if !sel.Match(r) {
			if err := sel.WhereErr(); err != nil {
				return err
			}
			continue
		}
		matched++
		key := sp.key(r.Address())
		i, ok := sp.by[key]
		if !ok {
			if sel.Limit > 0 && sp.messages >= sel.Limit {
				continue
			}
			sp.messages++
			i = sp.add(sp.first(r, s))
			sp.by[key] = i
			n := newcomer{key: key, addr: r.Address(), failed: r.FailedAt}
			if r.Undecryptable() && n.addr.PathSafe() {
				sp.envelopes = append(sp.envelopes, n.addr)
			}
			chunk = append(chunk, n)
		}
		st := sp.at(i)
		if p.stage != nil {
			if err := p.stage.add(ctx, i, st.chain, r, !ok); err != nil {
				return err
			}
		}
		bit, err := sp.group(st.queue, r.ConsumerGroup)
		if err != nil {
			return err
		}
		st.groups |= bit
		st.rows++
		if len(chunk) == 400 {
			if err := lookup(); err != nil {
				return err
			}
		}
	}
	if err := lookup(); err != nil {
		return err
	}
	if err := sel.Everything(sel.Acting, inScope, matched); err != nil {
		return err
	}
	if p.stage != nil {
		if err := p.stage.seal(ctx); err != nil {
			return err
		}
	}
	p.sp = sp
	if p.req.Action == deadletter.Replay {
		p.po.Order = replay.OrderInfo{Mode: s.Order}
		if replay.Ordered(s.Order) {
			p.po.Order = replay.OrderInfoOf(s.Order, sp.chains)
		}
	}
	return nil
}

// lookUpNewcomers looks up the decisions (holds) and journal entries
// (pinned paths, generations) of a chunk of addresses new to the plan,
// and marks each one's seen; holdIdx numbers the holds met so far.
func (p *Pending) lookUpNewcomers(ctx context.Context, sp *streamed, holdIdx map[string]uint8, chunk []newcomer) error {
	cl, ld, s := p.env.Client, p.env.Ledger, p.settings
	if len(chunk) == 0 {
		return nil
	}
	addrs := make([]deadletter.Address, len(chunk))
	for i, n := range chunk {
		addrs[i] = n.addr
	}
	dec, err := ld.LatestDecisionsFor(ctx, cl.Broker(), addrs)
	if err != nil {
		return err
	}
	var ents map[deadletter.Address]*ledger.Entry
	var gens replay.Generations
	if p.req.Action == deadletter.Replay {
		if ents, err = ld.Entries(ctx, cl.Broker(), addrs); err != nil {
			return err
		}
		if s.MaxGeneration > 0 || p.stage != nil {
			if gens, err = copyGenerations(ctx, ld, cl.Broker(), addrs); err != nil {
				return err
			}
			if p.stage != nil && len(gens) > 0 {
				// The run starts each copy's replay from its generation.
				if p.gens == nil {
					p.gens = replay.Generations{}
				}
				maps.Copy(p.gens, gens)
			}
		}
	}
	now := p.env.Now()
	for _, n := range chunk {
		st := sp.at(sp.by[n.key])
		if d, ok := dec[n.addr]; ok && d.Holds(n.failed, now) {
			if p.req.SkipHeld {
				st.flags |= seenSkipped
				sp.skipped++
			} else {
				k, ok := holdIdx[d.BatchID]
				if !ok {
					if len(sp.holds) == 255 {
						return errTooMany
					}
					sp.holds = append(sp.holds, replay.HoldShare{BatchID: d.BatchID, By: d.By, Until: d.Until, Why: d.Why})
					k = uint8(len(sp.holds))
					holdIdx[d.BatchID] = k
				}
				st.hold = k
			}
		}
		if e, ok := ents[n.addr]; ok && replay.Pinned(e) {
			st.flags |= seenPinned
		}
		if g, ok := gens[n.addr]; ok && g > s.MaxGeneration {
			st.flags |= seenOverGenCap
		}
	}
	return nil
}

// add files a new address's seen and returns its index.
func (sp *streamed) add(st seen) uint32 {
	const block = 4096
	if n := len(sp.seens); n == 0 || len(sp.seens[n-1]) == block {
		sp.seens = append(sp.seens, make([]seen, 0, block))
	}
	last := &sp.seens[len(sp.seens)-1]
	*last = append(*last, st)
	return uint32((len(sp.seens)-1)*block + len(*last) - 1)
}

// at is the seen at index i.
func (sp *streamed) at(i uint32) *seen { return &sp.seens[i/4096][i%4096] }

// first is what an address's first (newest) row says of it.
func (sp *streamed) first(r deadletter.Row, s Settings) seen {
	var st seen
	q, ok := sp.queueIdx[r.Queue]
	if !ok {
		q = uint16(len(sp.queues))
		sp.queueIdx[r.Queue] = q
		sp.queues = append(sp.queues, r.Queue)
		sp.groups = append(sp.groups, nil)
	}
	st.queue = q
	id := deadletter.ClassID(r.ErrorMessage)
	c, ok := sp.classIdx[id]
	if !ok {
		c = uint32(len(sp.classes))
		sp.classIdx[id] = c
		sp.classes = append(sp.classes, replay.ClassCount{Class: id, Pattern: deadletter.NormalizeError(r.ErrorMessage)})
	}
	st.class = c
	chain := replay.ChainOf(replay.Item{Queue: r.Queue, Partition: r.Partition}, s.ToQueue)
	k, ok := sp.chainIdx[chain]
	if !ok {
		k = uint32(len(sp.chains))
		sp.chainIdx[chain] = k
		sp.chains = append(sp.chains, replay.ChainCount{Chain: chain, ByID: true})
	}
	sp.chains[k].N++
	sp.chains[k].ByID = sp.chains[k].ByID && replay.IsUUIDv7(r.ID)
	st.chain = k
	if r.Undecryptable() {
		st.flags |= seenUndecryptable // until the detail route says otherwise
	}
	if s.MaxGeneration > 0 && deadletter.Generation(r.TransactionID) > s.MaxGeneration {
		st.flags |= seenOverGenCap
	}
	return st
}

// group is the bit of a consumer group in its queue's mask.
func (sp *streamed) group(q uint16, g string) (uint64, error) {
	for i, x := range sp.groups[q] {
		if x == g {
			return 1 << i, nil
		}
	}
	if len(sp.groups[q]) == 64 {
		return 0, errTooMany
	}
	sp.groups[q] = append(sp.groups[q], g)
	return 1 << (len(sp.groups[q]) - 1), nil
}

// checkEnvelopes asks the detail route about each envelope, as
// checkEnvelopes does for items: what it returns is what the plan counts
// as undecryptable, and (staged) what the batch publishes.
func (sp *streamed) checkEnvelopes(ctx context.Context, cl *client.Client, staged *stage) error {
	var failed error
	err := askDetails(ctx, cl, len(sp.envelopes), func(i int) deadletter.Address { return sp.envelopes[i] }, func(i int, m *client.Message) {
		place := sp.by[sp.key(sp.envelopes[i])]
		st := sp.at(place)
		if deadletter.IsEnvelope(m.Payload) {
			st.flags |= seenUndecryptable
		} else {
			st.flags &^= seenUndecryptable
		}
		if staged != nil && failed == nil {
			failed = staged.checked(ctx, place, m.Payload)
		}
	})
	if failed != nil {
		return failed
	}
	return err
}

// kept reports whether the address at a place in the snapshot is in the
// batch (not left out by --skip-held).
func (sp *streamed) kept(place uint32) bool { return sp.at(place).flags&seenSkipped == 0 }

// key is an address's hash.
func (sp *streamed) key(a deadletter.Address) uint64 {
	var h maphash.Hash
	h.SetSeed(sp.seed)
	h.WriteString(a.PartitionID)
	h.WriteByte('/')
	h.WriteString(a.TransactionID)
	return h.Sum64()
}

// each calls f for every address the plan keeps (not left out by
// --skip-held).
func (sp *streamed) each(f func(st seen)) {
	for _, b := range sp.seens {
		for _, st := range b {
			if st.flags&seenSkipped == 0 {
				f(st)
			}
		}
	}
}

// groupsOf names the groups of a mask.
func (sp *streamed) groupsOf(q uint16, mask uint64) []string {
	var out []string
	for i, g := range sp.groups[q] {
		if mask&(1<<i) != 0 {
			out = append(out, g)
		}
	}
	return out
}

// plan makes the plan from the figures.
func (sp *streamed) plan(o replay.PlanOptions) replay.Plan {
	pl := replay.NewPlanner(o)
	counted := make([]bool, len(sp.classes))
	sp.each(func(st seen) {
		c := sp.classes[st.class]
		e := replay.PlanEntry{Queue: sp.queues[st.queue], Rows: int(st.rows), Class: c.Class,
			Undecryptable: st.flags&seenUndecryptable != 0, OverGenCap: o.Action == deadletter.Replay && st.flags&seenOverGenCap != 0,
			Groups: sp.groupsOf(st.queue, st.groups)}
		if !counted[st.class] {
			e.Pattern, counted[st.class] = c.Pattern, true
		}
		if st.hold > 0 {
			e.Hold = &sp.holds[st.hold-1]
		}
		pl.AddEntry(e)
	})
	return pl.Plan()
}

var _ = [1]struct{}{}[unsafe.Sizeof(seen{})-24] // a seen stays 24 bytes
