package replay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// claimChunk is how many addresses the next claim of a partition (or,
// unordered, of the feeder) takes, after one of last (0: the first). At a
// rate, at most a second of work (and 32), so claims are not held long.
// Unlimited, 32 and then twice the last, up to 256: each claim is a
// journal write a partition's worker waits for, queued behind the other
// workers' saves, and claiming 32 at a time held an unlimited run to
// about 0.78 of a bare push-and-delete loop (BenchmarkUnlimited), while
// a short partition still claims little.
func (e *Engine) claimChunk(last int) int {
	if e.o.Rate > 0 {
		return min(max(int(e.o.Rate), 1), 32)
	}
	if last == 0 {
		return 32
	}
	return min(2*last, 256)
}

// acquire claims a chunk of items, enrolling the addresses the journal
// has never seen: an address is enrolled when its run reaches it. On the
// manual path and the move an address that will be published is enrolled
// with its intent (path, copy id, destination), so its call waits for no
// journal write of its own.
func (e *Engine) acquire(ctx context.Context, part []Item) (map[deadletter.Address]*ledger.Entry, error) {
	addrs := make([]deadletter.Address, len(part))
	enrol := make([]ledger.Enrolment, len(part))
	for k, it := range part {
		addrs[k] = it.Address
		gen := e.o.Generations.Of(it.Address)
		enrol[k].Generation = gen
		if via := e.pathOf(it, nil); via != ViaEndpoint && e.intentAhead(it, gen) {
			enrol[k].Via, enrol[k].ReplayTxID, enrol[k].ReplayQueue = via, e.copyTxID(it, gen), e.destQueue(it)
			if via == ViaManual && (it.Checked || !it.Envelope()) {
				// The payload pushed is the one held (an envelope is
				// replaced by the detail route's payload at the push).
				enrol[k].Digest = ledger.PayloadDigest(it.Data())
			}
		}
	}
	if e.act.Republishes() && e.o.Release.Moves() {
		// The rows the ledger saw of each address, one statement a chunk:
		// one moved since by another hand left its copy under its id.
		ids, err := e.j.ArchivedRowIDs(ctx, e.o.Broker, addrs)
		if err != nil {
			return nil, err
		}
		e.mu.Lock()
		for a, l := range ids {
			e.archived[a] = l
		}
		e.mu.Unlock()
	}
	return e.j.Acquire(ctx, e.o.Broker, e.o.BatchID, e.o.Action, addrs, enrol, e.o.Owner, e.o.Now(), e.o.Lease)
}

// intentAhead reports whether an item's replay intent may be journaled
// with its claim: a replay of an address in the DLQ with a payload and
// under the generation cap, on a path whose copy id every later run
// derives again (the manual path's, the move's: a repeat is a duplicate,
// or a 404), and whose payload is known before the push (not one a
// --transform makes: its digest is journaled with the intent at the
// push). Any other item is enrolled pending and journals its intent (if
// any) when it gets there.
func (e *Engine) intentAhead(it Item, gen int) bool {
	return e.act.Republishes() && e.o.Transform == nil && !it.Absent && it.Address.Unreachable() == "" &&
		(e.o.MaxGeneration <= 0 || gen <= e.o.MaxGeneration) && len(it.Data()) > 0 && !it.Undecryptable()
}

// pathOf is the path an item's replay takes (ent, nil for one not yet
// claimed, is its journal): an address attempted on the manual path
// keeps it; on a broker that moves, the move for a message one group
// dead-lettered, and the manual path (under the broker's copy id) for a
// payload transformed or a message of several rows, which the move would
// publish once a row; elsewhere --via endpoint's /retry, else the manual
// path.
func (e *Engine) pathOf(it Item, ent *ledger.Entry) string {
	switch {
	case Pinned(ent):
		return ViaManual
	case e.o.Via == ViaMove && e.o.Transform == nil && len(it.Rows)+len(it.Others) == 1 && it.Rows[0].ID != "":
		return ViaMove
	case e.o.Via == ViaEndpoint && e.o.Transform == nil && e.o.ToQueue == "":
		return ViaEndpoint
	}
	return ViaManual
}

// copyTxID is the transaction id an item's copy is published under: on
// a broker that moves, the broker's own copy id for its newest selected
// row (dlq:<row id>), which the broker's move of that row then finds a
// duplicate of; elsewhere the id derived from the address and generation.
func (e *Engine) copyTxID(it Item, gen int) string {
	if e.o.Release.Moves() {
		if id := it.Rows[0].ID; id != "" {
			return client.CopyID(id)
		}
	}
	return ReplayTxID(it.Address, gen)
}

// runSome runs the items from position from to to-1 in order (a
// partition at a time per worker) or not, as Options.Order says.
func (e *Engine) runSome(ctx context.Context, from, to, workers int) error {
	if e.act.Ordered && Ordered(e.o.Order) {
		return e.runChains(ctx, from, to, workers)
	}
	return e.runItems(ctx, from, to, workers)
}

// chainAt is a destination partition's items: their positions in the
// source, in replay order (4 bytes an item; the items are read a claim
// at a time).
type chainAt struct {
	c   Chain
	pos []int32
}

// runChains replays each destination partition's items one after
// another, in the order given, with up to workers partitions at once. A
// partition is claimed a chunk at a time, from its first unfinished
// address: another run holding that address is working the partition,
// and this one leaves it to it. An address that is not replayed holds
// back the rest of its partition (OrderSkipGaps goes on past it).
func (e *Engine) runChains(ctx context.Context, from, to, workers int) error {
	var chains []chainAt
	idx := map[Chain]int{}
	err := e.src.Chains(context.WithoutCancel(ctx), from, to, e.o.ToQueue, func(pos int, c Chain) {
		i, ok := idx[c]
		if !ok {
			i = len(chains)
			idx[c] = i
			chains = append(chains, chainAt{c: c})
		}
		chains[i].pos = append(chains[i].pos, int32(pos))
	})
	if err != nil {
		e.stop("ledger error: " + err.Error())
		return err
	}
	clear(idx)
	feed := make(chan chainAt)
	var wg sync.WaitGroup
	var fatal error
	var fatalOnce sync.Once
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ch := range feed {
				if err := e.runChain(ctx, ch.c, ch.pos); err != nil {
					fatalOnce.Do(func() { fatal = err })
					e.stop("ledger error: " + err.Error())
				}
			}
		}()
	}
	clock := e.refailClock(true)
feeding:
	for _, ch := range chains {
		if ctx.Err() != nil || e.stopped() || clock.over(ctx) {
			break
		}
		select {
		case feed <- ch:
		case <-ctx.Done():
			break feeding
		}
	}
	close(feed)
	wg.Wait()
	e.lastRefailures(ctx)
	return fatal
}

// refailClock says, every Options.RefailEvery of a run, whether this
// run's replays back in the DLQ reached --max-refailures (and stops the
// run if they did); count: the report's count is set at every look, not
// only at the limit.
type refailClock struct {
	e     *Engine
	last  time.Time
	count bool
}

func (e *Engine) refailClock(count bool) *refailClock {
	return &refailClock{e: e, last: e.o.Now(), count: count}
}

func (c *refailClock) over(ctx context.Context) bool {
	e := c.e
	if e.o.MaxRefailures <= 0 || e.o.Now().Sub(c.last) < e.o.RefailEvery {
		return false
	}
	c.last = e.o.Now()
	return e.checkRefailures(ctx, c.count)
}

// lastRefailures counts this run's replays back in the DLQ once more as
// it ends (stopping none: it is over), unless it was stopped or
// interrupted.
func (e *Engine) lastRefailures(ctx context.Context) {
	if e.o.MaxRefailures > 0 && !e.stopped() && ctx.Err() == nil {
		e.checkRefailures(ctx, true)
	}
}

// runChain replays one partition's items (their positions, in order),
// reading them a claim at a time.
func (e *Engine) runChain(ctx context.Context, c Chain, pos []int32) error {
	jctx := context.WithoutCancel(ctx)
	e.mu.Lock()
	held := e.blocked[c]
	e.mu.Unlock()
	if held && e.o.Order != OrderSkipGaps {
		e.holdBack(c, nil, "", false, len(pos))
		return nil
	}
	chunk := 0
	for i := 0; i < len(pos); i += chunk {
		if ctx.Err() != nil || e.stopped() {
			return nil
		}
		chunk = e.claimChunk(chunk)
		part, err := e.src.Load(jctx, pos[i:min(i+chunk, len(pos))])
		if err != nil {
			return err
		}
		claimed, err := e.acquire(jctx, part)
		if err != nil {
			return err
		}
		if done, err := e.runClaim(ctx, c, part, claimed, len(pos)-i); done || err != nil {
			return err
		}
	}
	return nil
}

// runClaim replays a claimed chunk of a partition's items, left the
// number of the partition's items from the chunk's first on; done: the
// partition ends here (interrupted, stopped, held back behind a gap, or
// another run's from here), its claims not worked on released.
func (e *Engine) runClaim(ctx context.Context, c Chain, part []Item, claimed map[deadletter.Address]*ledger.Entry, left int) (done bool, err error) {
	jctx := context.WithoutCancel(ctx)
	release := func(from int) error {
		var rest []*ledger.Entry
		for _, it := range part[from:] {
			if ent := claimed[it.Address]; ent != nil {
				rest = append(rest, ent)
			}
		}
		return e.j.Release(jctx, e.o.Broker, rest, e.o.Owner)
	}
	for k, it := range part {
		ent := claimed[it.Address]
		if ent == nil {
			// Another run holds it: the partition is that run's from here.
			e.claimedChain(c, it.Address, left-k)
			return true, release(k + 1)
		}
		if ctx.Err() != nil || e.stopped() {
			return true, release(k)
		}
		err := e.one(ctx, it, ent)
		if errors.Is(err, errNotStarted) {
			return true, release(k)
		}
		e.markDone()
		if err != nil {
			e.record(func(r *Report) { r.Unrecorded++ })
			_ = release(k + 1)
			return true, err
		}
		if !passes(ent) && e.o.Order != OrderSkipGaps {
			e.gap(c, it.Address, ent, left-k-1)
			return true, release(k + 1)
		}
	}
	return false, nil
}

// gap holds back the rest of a partition, n messages, behind an address
// that was not replayed (ent says how it ended).
func (e *Engine) gap(c Chain, a deadletter.Address, ent *ledger.Entry, n int) {
	if n > 0 {
		reason := ent.State
		if ent.Outcome != "" {
			reason += " (" + ent.Outcome + ")"
		}
		e.holdBack(c, &a, reason, ent.State == ledger.Skipped, n)
	}
	e.mu.Lock()
	e.blocked[c] = true
	e.mu.Unlock()
}

// claimedChain records the rest of a partition, n messages from a, as
// another run's.
func (e *Engine) claimedChain(c Chain, a deadletter.Address, n int) {
	e.record(func(r *Report) {
		r.Claimed += n
		r.Listed = append(r.Listed, AddrResult{Address: a, Reason: fmt.Sprintf("claimed by another run working partition %s/%s; it and the %d after it are that run's (re-run this batch after it ends)", c.Queue, c.Partition, n-1)})
	})
	for range n {
		e.markDone()
	}
}

// holdBack records n messages of a partition not replayed behind a gap.
func (e *Engine) holdBack(c Chain, by *deadletter.Address, reason string, permanent bool, n int) {
	e.record(func(r *Report) {
		r.HeldBack += n
		for i := range r.BlockedPartitions {
			if r.BlockedPartitions[i].Chain == c {
				r.BlockedPartitions[i].Messages += n
				return
			}
		}
		b := Blocked{Chain: c, Reason: reason, Messages: n, Permanent: permanent}
		if by != nil {
			b.Address = *by
		}
		r.BlockedPartitions = append(r.BlockedPartitions, b)
	})
	for range n {
		e.markDone()
	}
}

// runItems claims the items from position from to to-1 a chunk at a
// time and feeds them to workers until done, stopped or interrupted;
// claims not worked on are released.
func (e *Engine) runItems(ctx context.Context, from, to, workers int) error {
	run := &itemRun{e: e}
	feed := make(chan job)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run.work(ctx, feed)
		}()
	}
	jctx := context.WithoutCancel(ctx)
	clock := e.refailClock(false)
	claims, quit := make(chan itemClaim, 1), make(chan struct{})
	go run.claimAhead(ctx, from, to, claims, quit)
	for c := range claims {
		if !run.feed(ctx, c, feed, clock) {
			break
		}
	}
	close(quit)
	for c := range claims {
		for _, ent := range c.claimed {
			run.release(ent)
		}
	}
	close(feed)
	wg.Wait()
	if err := e.j.Release(jctx, e.o.Broker, run.unworked, e.o.Owner); err != nil && run.fatal == nil {
		run.fatal = err
	}
	e.lastRefailures(ctx)
	return run.fatal
}

// feed hands a claim's items to the workers, one at a time; an item
// another run holds is that run's. It returns false when the run ends
// (interrupted, stopped, or past --max-refailures), the claims of the
// items not handed over released.
func (r *itemRun) feed(ctx context.Context, c itemClaim, feed chan<- job, clock *refailClock) bool {
	e := r.e
	for k, it := range c.part {
		ent := c.claimed[it.Address]
		if ent == nil {
			e.claimedItem(it.Address)
			continue
		}
		if ctx.Err() != nil || e.stopped() || clock.over(ctx) {
			r.releaseFrom(c, k)
			return false
		}
		select {
		case feed <- job{it, ent}:
		case <-ctx.Done():
			r.releaseFrom(c, k)
			return false
		}
	}
	return true
}

// releaseFrom releases a claim's entries from its kth item on.
func (r *itemRun) releaseFrom(c itemClaim, k int) {
	for _, x := range c.part[k:] {
		if ent := c.claimed[x.Address]; ent != nil {
			r.release(ent)
		}
	}
}

// itemRun is what one runItems call's feeder, workers and claimer share.
type itemRun struct {
	e         *Engine
	fatalOnce sync.Once
	fatal     error // the first ledger error: the run stops on it
	mu        sync.Mutex
	unworked  []*ledger.Entry // claimed, then not worked on: released at the end
}

// itemClaim is a chunk of items and the journal entries claimed for them.
type itemClaim struct {
	part    []Item
	claimed map[deadletter.Address]*ledger.Entry
}

func (r *itemRun) setFatal(err error) {
	r.fatalOnce.Do(func() { r.fatal = err })
	r.e.stop("ledger error: " + err.Error())
}

func (r *itemRun) release(ent *ledger.Entry) {
	r.mu.Lock()
	r.unworked = append(r.unworked, ent)
	r.mu.Unlock()
}

// work is a worker: it works on each job fed until the feed closes.
func (r *itemRun) work(ctx context.Context, feed <-chan job) {
	e := r.e
	for j := range feed {
		// A job handed over just before a stop is not started.
		if ctx.Err() != nil || e.stopped() {
			r.release(j.ent)
			continue
		}
		err := e.one(ctx, j.it, j.ent)
		if errors.Is(err, errNotStarted) {
			r.release(j.ent)
			continue
		}
		e.markDone()
		if err != nil {
			e.record(func(rep *Report) { rep.Unrecorded++ })
			r.setFatal(err)
		}
	}
}

// claimAhead loads and claims the items a chunk at a time, the next
// chunk while the workers take this one: a claim is a journal write, and
// made in line it stalled every worker (an unlimited run went at 0.8 of
// the ordered one). Claimed ahead and never fed (quit), a chunk is
// released. It closes claims when done.
func (r *itemRun) claimAhead(ctx context.Context, from, to int, claims chan<- itemClaim, quit <-chan struct{}) {
	e := r.e
	jctx := context.WithoutCancel(ctx)
	defer close(claims)
	chunk := 0
	for i := from; i < to; i += chunk {
		chunk = e.claimChunk(chunk)
		if ctx.Err() != nil || e.stopped() {
			return
		}
		part, err := e.src.Load(jctx, span(i, min(i+chunk, to)))
		if err != nil {
			r.setFatal(err)
			return
		}
		claimed, err := e.acquire(jctx, part)
		if err != nil {
			r.setFatal(err)
			return
		}
		select {
		case claims <- itemClaim{part, claimed}:
		case <-quit:
			for _, ent := range claimed {
				r.release(ent)
			}
			return
		}
	}
}

// checkRefailures asks how many of the batch's copies failed again and
// stops the run at --max-refailures, saying whether it did; the count is
// reported when it stops the run, or always.
func (e *Engine) checkRefailures(ctx context.Context, always bool) bool {
	n, err := e.refailures(ctx)
	if err != nil {
		return false
	}
	over := n >= e.o.MaxRefailures
	if over || always {
		e.mu.Lock()
		e.rep.Refailed = n
		e.mu.Unlock()
	}
	if over {
		e.stopFor(fmt.Sprintf("paused: %d replayed message(s) failed again, the batch's limit of %d", n, e.o.MaxRefailures), RefailureLimitNext)
	}
	return over
}

func (e *Engine) claimedItem(a deadletter.Address) {
	e.record(func(r *Report) {
		r.Claimed++
		r.Listed = append(r.Listed, AddrResult{Address: a, Reason: "claimed by another run that is working on this batch; re-run it after that run ends"})
	})
	e.markDone()
}

// refailures counts dead letters whose transaction id is one this run
// replayed as: the replay failed again.
func (e *Engine) refailures(ctx context.Context) (int, error) {
	if e.copies.empty() {
		return 0, nil
	}
	n := 0
	for r, err := range e.b.Rows(ctx, client.ListQuery{Limit: 500}) {
		if err != nil {
			return 0, err
		}
		if r.FailedAt.Before(e.start) {
			break // newest first: a re-failure of this run is newer than its start
		}
		if e.copies.has(r.TransactionID) {
			n++
		}
	}
	return n, nil
}
