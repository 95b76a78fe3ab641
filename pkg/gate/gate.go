// Package gate is dlq check's evaluation: one scope per queue and
// consumer group, judged against its policy (max-age, triage SLO) and
// the ledger's decisions, in O(log N) list requests on a broker that
// pages and one streamed body on one that does not. The check command,
// the triage screen and the exporter all evaluate through Check.
package gate

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/policy"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// gate is one evaluation of the thresholds against the broker and the
// ledger's decisions.
type gate struct {
	cl        *client.Client
	policies  policy.Set
	dec       *ledger.DecisionSet
	src       DecisionSource // nil: dec is every decision
	maxAge    time.Duration  // flag overrides; 0 = from policies
	triageSLO time.Duration
	now       time.Time
	// holds and decided name the queues with at least one active hold or
	// decision: a queue with none needs no row read beyond the probes.
	holds, decided map[string]bool
	// holdsKnown: dec has every hold in force (knowHolds), so rows read
	// only to find the oldest one not held need no lookup; holdsAsked is
	// the most addresses the holds were asked for with, refused.
	holdsKnown bool
	holdsAsked int
	// depths are the broker's own per-queue DLQ depths, where it exports
	// them: where probes start looking for each end.
	depths map[string]int
	visit  func(deadletter.Row)
	// readAll is Input.ReadAll.
	readAll func(ctx context.Context, visit func(deadletter.Row)) error
	// readWhole: the unfiltered one-body pass streamed every row.
	readWhole bool
}

// Evaluate is Check against the ledger: decisions are looked up in it,
// the rows that left the DLQ with no decision are its archive's vanished
// ones, and a ledger made where one with history was says so in the
// notes on every check (its vanished rows start at its creation).
//
// A caller whose read of the DLQ is a sync (in.ReadAll: the exporter's
// --sync) has the vanished rows read once the sync is done, which marks
// them.
func Evaluate(ctx context.Context, cl *client.Client, ld *ledger.Store, in Input) (*Result, error) {
	in.Source = ld
	vanished := func(ctx context.Context) ([]ledger.Archived, error) {
		return ld.ArchivedRows(ctx, cl.Broker(), ledger.ArchiveFilter{VanishedOnly: true})
	}
	var err error
	if in.ReadAll != nil {
		in.LoadVanished = vanished
	} else if in.Vanished, err = vanished(ctx); err != nil {
		return nil, err
	}
	res, err := Check(ctx, cl, in)
	if err != nil {
		return nil, err
	}
	lost, err := ld.HistoryLost(ctx)
	if err != nil {
		return nil, err
	}
	if lost != nil {
		res.Notes = append(res.Notes, lost.String())
	}
	return res, nil
}

// Check evaluates every scope. It is the whole gate, minus I/O to the
// ledger, so tests call it directly.
//
// Scopes are one per queue and consumer group: the groups come from the
// broker's queue list, its consumer-groups route and, where the broker
// answers a queue in one body, the rows themselves. On a broker that
// pages, each scope costs O(log N) requests and reads no row unless the
// ledger holds a hold or a decision that could change the answer; on one
// that answers in one body, each queue is streamed once for all its scopes.
func Check(ctx context.Context, cl *client.Client, in Input) (*Result, error) {
	total := &client.Meter{}
	ctx = client.WithMeter(ctx, total)
	now, queues := in.Now, in.Queues
	res := &Result{Broker: cl.Server(), CheckedAt: render.Timestamp(now), OK: true}
	g := &gate{cl: cl, policies: in.Policies, dec: ledger.NewDecisionSet(in.Decisions), maxAge: in.MaxAge, triageSLO: in.TriageSLO, now: now,
		holds: map[string]bool{}, decided: map[string]bool{}, visit: in.Visit, readAll: in.ReadAll}
	if in.Decisions == nil && in.Source != nil {
		g.src = in.Source
		var err error
		if g.holds, g.decided, err = in.Source.DecidedQueues(ctx, cl.Broker(), now); err != nil {
			return nil, err
		}
	}
	for _, d := range in.Decisions {
		if !d.Active(now) {
			continue
		}
		g.decided[d.Queue] = true
		if ledger.IsHold(d.Action) {
			g.holds[d.Queue] = true
		}
	}
	topo, err := cl.Topology(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range queues {
		if err := cl.CheckNames(ctx, topo, []string{q}, ""); err != nil {
			return nil, err
		}
	}
	var scopes []Scope
	if len(queues) > 0 {
		for _, q := range queues {
			ss, notes, _, err := g.queue(ctx, q, g.groups(topo, q))
			if err != nil {
				return nil, err
			}
			scopes = append(scopes, ss...)
			res.Notes = append(res.Notes, notes...)
		}
	} else if scopes, err = g.everyQueue(ctx, topo, res); err != nil {
		return nil, err
	}
	if in.LoadVanished != nil {
		if in.Vanished, err = in.LoadVanished(ctx); err != nil {
			return nil, err
		}
	}
	if g.src != nil && len(in.Vanished) > 0 {
		rows := make([]deadletter.Row, len(in.Vanished))
		for i, v := range in.Vanished {
			rows[i] = deadletter.Row{PartitionID: v.Address.PartitionID, TransactionID: v.Address.TransactionID}
		}
		for start := 0; start < len(rows); start += prefetchChunk {
			if err := g.prefetch(ctx, rows[start:min(start+prefetchChunk, len(rows))]); err != nil {
				return nil, err
			}
		}
	}
	sort.SliceStable(scopes, func(i, j int) bool {
		a, b := scopes[i], scopes[j]
		if a.Queue != b.Queue {
			return a.Queue < b.Queue
		}
		return a.ConsumerGroup < b.ConsumerGroup
	})
	shown := scopes[:0]
	for i := range scopes {
		s := &scopes[i]
		g.vanishedAndVerdict(s, in.Vanished)
		if s.FailedAhead > 0 {
			res.Notes = append(res.Notes, aheadNote(*s))
		}
		for _, fa := range s.FailedAgain {
			res.Notes = append(res.Notes, fmt.Sprintf("%s: %d dead letter(s) are copies batch %s replayed that failed again (dlq ls says back after replay; each is undecided)", scopeLabel(*s), fa.DeadLetters, fa.BatchID))
		}
		if len(s.Breaches) > 0 {
			res.OK = false
		}
		// An empty scope nobody named says nothing: test queues by the
		// dozen would bury the few that matter.
		if in.AllScopes || s.Depth > 0 || s.VanishedUndecided > 0 || len(s.Breaches) > 0 || slices.Contains(queues, s.Queue) || g.policies.Names(s.Queue) {
			shown = append(shown, *s)
		} else {
			res.Hidden++
		}
	}
	res.Scopes = shown
	res.ReadWhole = g.readWhole
	res.Requests, res.Bytes = total.Requests(), total.Bytes()
	return res, nil
}

// Input is what a check is evaluated against besides the broker.
type Input struct {
	Policies policy.Set
	// Source looks decisions up for the rows the check reads (a chunk at
	// a time), so a check costs what it reads, not the ledger's history;
	// Decisions, when set instead, is every latest decision already in
	// memory.
	Source    DecisionSource
	Decisions map[deadletter.Address]ledger.Decision
	// Vanished are the archived rows that left the broker with no decision.
	Vanished []ledger.Archived
	// Queues narrows the check to these queues (each must exist).
	Queues []string
	// MaxAge and TriageSLO, when not zero, override the policies.
	MaxAge, TriageSLO time.Duration
	Now               time.Time
	// AllScopes keeps the scopes with no dead letter that no policy and
	// no --queue names (they are counted in Hidden otherwise).
	AllScopes bool
	// Visit, when set, sees every row a one-body pass streams (stats
	// counts arrivals from the same read); CheckResult.ReadWhole says
	// whether that was every row of the DLQ.
	Visit func(deadletter.Row)
	// ReadAll, when set, is the gate's read of every queue: it hands
	// every row of the DLQ to visit, and the scopes are evaluated from
	// those rows with no list call of the gate's own. The exporter's
	// --sync passes its archive read through it, so a pass reads the DLQ
	// once. It is not used when Queues narrows the check.
	ReadAll func(ctx context.Context, visit func(deadletter.Row)) error
	// LoadVanished, when set, supplies Vanished once the rows are read
	// (a sync marks what left only after its read).
	LoadVanished func(ctx context.Context) ([]ledger.Archived, error)
}

// DecisionSource is where a check looks decisions up; *ledger.Store is one.
type DecisionSource interface {
	LatestDecisionsFor(ctx context.Context, broker string, addrs []deadletter.Address) (map[deadletter.Address]ledger.Decision, error)
	DecidedQueues(ctx context.Context, broker string, now time.Time) (holds, decided map[string]bool, err error)
	HoldsInForce(ctx context.Context, broker string, now time.Time, most int, into *ledger.DecisionSet) (bool, error)
}

// knowHolds reads every hold in force into dec, once, when the holds
// name few enough addresses beside a queue of depth rows under them (4
// an undecided row, 10,000 at the least): a queue whose oldest rows are
// held is then read to its oldest row not held with no lookup a page.
// Holds that name more (a hold over a million addresses, most gone) are
// not read: the rows are looked up as they are read.
func (g *gate) knowHolds(ctx context.Context, depth int) error {
	most := max(10_000, 4*depth)
	if g.src == nil || g.holdsKnown || most <= g.holdsAsked {
		return nil
	}
	g.holdsAsked = most
	ok, err := g.src.HoldsInForce(ctx, g.cl.Broker(), g.now, most, g.dec)
	g.holdsKnown = ok
	return err
}

// prefetch looks up the decisions of rows about to be judged (with a
// Source: the cache keeps only the ones found, so it grows with the
// decided rows read, not with the history).
func (g *gate) prefetch(ctx context.Context, rows []deadletter.Row) error {
	if g.src == nil || len(rows) == 0 {
		return nil
	}
	addrs := make([]deadletter.Address, len(rows))
	for i, r := range rows {
		addrs[i] = r.Address()
	}
	found, err := g.src.LatestDecisionsFor(ctx, g.cl.Broker(), addrs)
	if err != nil {
		return err
	}
	g.dec.Add(found)
	return nil
}

// prefetchChunk is how many rows are judged per decision lookup.
const prefetchChunk = 500

// chunked wraps a per-row function so that rows reach it a chunk at a
// time, after their decisions are looked up: each() is handed to the
// broker's read, flush() at its end hands over the rest.
func (g *gate) chunked(ctx context.Context, fn func(deadletter.Row)) (each func(deadletter.Row) bool, flush func() error) {
	var buf []deadletter.Row
	var ferr error
	flush = func() error {
		if ferr != nil {
			return ferr
		}
		if ferr = g.prefetch(ctx, buf); ferr != nil {
			return ferr
		}
		for _, r := range buf {
			fn(r)
		}
		buf = buf[:0]
		return nil
	}
	each = func(r deadletter.Row) bool {
		if buf = append(buf, r); len(buf) >= prefetchChunk {
			return flush() == nil
		}
		return true
	}
	return each, flush
}

// everyQueue evaluates every queue: the ones the broker lists, and every
// queue that has dead letters even when the broker's list omits it. The
// first read asks for one row of the whole DLQ: a broker that answers in
// one body sends all of it, and that one streamed read serves every
// scope of every queue. On a broker that pages, each listed queue is
// probed, then the whole DLQ's depth: rows beyond the listed queues'
// belong to queues the list left out, which are found and checked too.
func (g *gate) everyQueue(ctx context.Context, topo *client.Topology, res *Result) ([]Scope, error) {
	m := &client.Meter{}
	mctx := client.WithMeter(ctx, m)
	passes := map[string]*oneBodyPass{}
	pass := func(q string) *oneBodyPass {
		p := passes[q]
		if p == nil {
			p = &oneBodyPass{g: g, q: q, accs: map[string]*acc{}}
			for _, grp := range g.groups(topo, q) {
				p.get(grp)
			}
			passes[q] = p
		}
		return p
	}
	// The first row is handed to visit only once the answer turns out to
	// be the whole DLQ: a broker that pages answered one row, and the
	// caller reads the rows it wants itself.
	if g.readAll != nil {
		each, flush := g.chunked(ctx, func(r deadletter.Row) {
			pass(r.Queue).get(r.ConsumerGroup).add(g, r)
			if g.visit != nil {
				g.visit(r)
			}
		})
		err := g.readAll(mctx, func(r deadletter.Row) { each(r) })
		if err == nil {
			err = flush()
		}
		if err != nil {
			return nil, err
		}
		return g.fromWholeRead(topo, passes, pass, m, res), nil
	}
	// The first page of the whole DLQ: on a broker that answers in one
	// body it is everything; a short page is everything too (a small DLQ
	// costs one request). Held until the reading is settled: the rows go
	// to the scopes only if the rest is read too.
	first, err := g.cl.ListPage(mctx, client.ListQuery{Limit: wholePage, NoData: true})
	if err != nil {
		return nil, err
	}
	whole := len(first.Rows) < wholePage || g.cl.OneBody()
	if !whole {
		whole = g.readAllIsCheaper(ctx, topo, len(first.Rows), first.Total)
	}
	if !whole {
		return g.queueByQueue(ctx, topo, m, res)
	}
	each, flush := g.chunked(ctx, func(r deadletter.Row) {
		pass(r.Queue).get(r.ConsumerGroup).add(g, r)
		if g.visit != nil {
			g.visit(r)
		}
	})
	read := map[client.Key]struct{}{}
	for _, r := range first.Rows {
		read[client.RowKey(r)] = struct{}{}
		each(r)
	}
	if len(first.Rows) == wholePage && !g.cl.OneBody() {
		// The rest, from where the first page ended; a row that a newer
		// arrival pushed over the edge is not counted twice.
		for r, err := range g.cl.Rows(mctx, client.ListQuery{Offset: wholePage, Limit: wholePage, NoData: true}) {
			if err != nil {
				return nil, err
			}
			if _, dup := read[client.RowKey(r)]; dup {
				continue
			}
			if !each(r) {
				break
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return g.fromWholeRead(topo, passes, pass, m, res), nil
}

// wholePage is the page a whole read of the DLQ asks for: the most every
// broker serves (2.x clamps at 1000).
const wholePage = client.MaxPage

// readAllIsCheaper reports whether reading the rest of the DLQ (its first
// page, of n rows, read) costs fewer list requests than probing each
// scope could, less three: the gate then reads it whole, and never asks
// more than three requests beyond what a whole read would. The depth comes from the page's total where it
// counts every row (2.x), else from the broker's own metrics; unknown, the
// DLQ is read whole (probing could cost more than reading, and finding
// the depth to tell would already). Probing costs no more bytes: it reads
// a row a request.
func (g *gate) readAllIsCheaper(ctx context.Context, topo *client.Topology, n int, total *int) bool {
	if g.depths == nil {
		g.depths = g.cl.DLQDepths(ctx)
	}
	depth := 0
	switch {
	case total != nil && *total > n:
		depth = *total
	case len(g.depths) > 0:
		depth, _ = g.wholeDepth()
	default:
		return true
	}
	// Probing may cost the three requests more than reading would that
	// the gate allows itself: past that, the rows are read.
	pages := (depth + wholePage - 1) / wholePage
	return g.probeBound(topo, depth) > pages+3
}

// probeBound is how many list requests queueByQueue makes, at most,
// for the queues topo lists, with depth rows in the whole DLQ (the
// broker's per-queue depths where it exports them): a search for the
// end of each scope (a head, a read at the depth it cannot pass, a
// binary search to a window, the window; galloping up where the depth is
// not known), the triage SLO's index (another search), and the oldest
// rows read a page at a time in a queue with a hold, or with a decision
// old enough to count. Not counted: a queue found to hold rows of groups
// the broker does not list, searched once more as a whole.
func (g *gate) probeBound(topo *client.Topology, depth int) int {
	// The halvings of a binary search from d rows down to a window.
	steps := func(d int) int { return bits.Len(uint(max(d-1, 0) / client.ProbeWindow)) }
	n := 0
	if _, known := g.wholeDepth(); !known {
		n += 3 + 2*steps(depth) // the whole DLQ's depth, beyond the queues'
	}
	for _, q := range topo.Queues() {
		d, known := g.depths[q]
		if !known {
			d = depth
		}
		search := 3 + steps(d)
		n++ // the queue's head
		groups := g.groups(topo, q)
		if !known || len(groups) == 0 {
			n += search + steps(d)
		}
		pages := (d + pageSize - 1) / pageSize
		for _, grp := range groups {
			lim := g.limitsFor(q, grp)
			n += search
			if lim.hasSLO {
				n += steps(d) + 1
			}
			if g.holds[q] {
				n += pages + 1
			}
			if g.decided[q] && lim.hasSLO {
				n += pages + 1
			}
		}
	}
	return n
}

// wholeDepth is the whole DLQ's depth where the broker says it (the sum
// of the per-queue depths it exports).
func (g *gate) wholeDepth() (int, bool) {
	if len(g.depths) == 0 {
		return 0, false
	}
	n := 0
	for _, d := range g.depths {
		n += d
	}
	return n, true
}

// queueByQueue evaluates a paging broker's queues one at a time (m
// counts the probe before), then the queues that have dead letters the
// broker's list left out.
func (g *gate) queueByQueue(ctx context.Context, topo *client.Topology, m *client.Meter, res *Result) ([]Scope, error) {
	names := topo.Queues()
	var err error
	if len(names) == 0 {
		res.Notes = append(res.Notes, "the broker did not list its queues; the DLQ was read whole to find them")
		if names, err = queuesInDLQ(ctx, g.cl); err != nil {
			return nil, err
		}
	}
	var out []Scope
	sum := 0
	check := func(q string) error {
		ss, notes, depth, err := g.queue(ctx, q, g.groups(topo, q))
		if err != nil {
			return err
		}
		out = append(out, ss...)
		res.Notes = append(res.Notes, notes...)
		sum += depth
		return nil
	}
	for _, q := range names {
		if err := check(q); err != nil {
			return nil, err
		}
	}
	if len(out) > 0 {
		out[0].Requests, out[0].Bytes = out[0].Requests+m.Requests(), out[0].Bytes+m.Bytes()
	}
	// The whole DLQ's depth (the broker's own, or searched below what the
	// queues add up to): more rows than that are rows of queues the list
	// left out.
	whole, known := g.wholeDepth()
	if !known || whole > sum {
		// Searched, also to confirm what the broker's metrics said before
		// the DLQ is read for the queues they imply.
		ext, err := g.cl.FindOldestBelow(ctx, client.ListQuery{}, sum)
		if err != nil {
			return nil, err
		}
		whole = ext.Depth
	}
	if whole > sum {
		all, err := queuesInDLQ(ctx, g.cl)
		if err != nil {
			return nil, err
		}
		for _, q := range all {
			if slices.Contains(names, q) {
				continue
			}
			res.Notes = append(res.Notes, fmt.Sprintf("%s has dead letters but the broker's queue list does not name it; it is checked all the same", q))
			if err := check(q); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// fromWholeRead makes the scopes of a read that streamed every row of
// the DLQ: every queue the broker lists has its scopes, rows or none; the
// read's cost is counted on the first.
func (g *gate) fromWholeRead(topo *client.Topology, passes map[string]*oneBodyPass, pass func(string) *oneBodyPass, m *client.Meter, res *Result) []Scope {
	g.readWhole = true
	for _, q := range topo.Queues() {
		pass(q)
	}
	names := make([]string, 0, len(passes))
	for q := range passes {
		names = append(names, q)
	}
	slices.Sort(names)
	var out []Scope
	for i, q := range names {
		meter := m
		if i > 0 {
			meter = &client.Meter{}
		}
		out = append(out, passes[q].scopes(meter)...)
		if !topo.Has(q) && topo.Listed {
			res.Notes = append(res.Notes, fmt.Sprintf("%s has dead letters but the broker's queue list does not name it; it is checked all the same", q))
		}
	}
	return out
}

// groups are a queue's consumer groups: those the broker names, and
// those a policy names (a group the queue list omits is judged by its
// own policy all the same).
func (g *gate) groups(topo *client.Topology, q string) []string {
	out := slices.Clone(topo.Groups[q])
	for _, grp := range g.policies.Groups(q) {
		if !slices.Contains(out, grp) {
			out = append(out, grp)
		}
	}
	slices.Sort(out)
	return out
}

// queue evaluates one queue's scopes; it also returns the queue's depth.
func (g *gate) queue(ctx context.Context, q string, listed []string) ([]Scope, []string, int, error) {
	// The first read asks for one row. A broker that ignores limit answers
	// the whole queue: that one streamed read then serves every scope.
	ob := &oneBodyPass{g: g, q: q, accs: map[string]*acc{}}
	for _, grp := range listed {
		ob.get(grp)
	}
	m := &client.Meter{}
	mctx := client.WithMeter(ctx, m)
	each, flush := g.chunked(ctx, func(r deadletter.Row) {
		if r.Queue == q {
			ob.get(r.ConsumerGroup).add(g, r)
		}
	})
	n, err := g.cl.ListEach(mctx, client.ListQuery{Queue: q, Limit: 1, NoData: true}, each)
	if err == nil {
		err = flush()
	}
	if err != nil {
		return nil, nil, 0, err
	}
	if n > 1 || g.cl.OneBody() {
		depth := 0
		for _, a := range ob.accs {
			depth += a.depth
		}
		return ob.scopes(m), nil, depth, nil
	}
	var out []Scope
	var notes []string
	first := true
	finish := func(s Scope, mm *client.Meter) {
		s.Requests, s.Bytes = mm.Requests(), mm.Bytes()
		if first {
			s.Requests, s.Bytes = s.Requests+m.Requests(), s.Bytes+m.Bytes()
			first = false
		}
		out = append(out, s)
	}
	if g.depths == nil {
		// Asked once, and only of a broker that pages.
		g.depths = g.cl.DLQDepths(ctx)
	}
	depth, known := g.depths[q]
	if len(listed) == 0 || !known {
		whole, err := g.cl.FindOldestBelow(mctx, client.ListQuery{Queue: q}, depth)
		if err != nil {
			return nil, nil, 0, err
		}
		if len(listed) == 0 {
			s, err := g.pagedScope(mctx, q, "", whole)
			if err != nil {
				return nil, nil, 0, err
			}
			finish(s, &client.Meter{})
			return out, nil, whole.Depth, nil
		}
		depth = whole.Depth
	}
	sum := 0
	for _, grp := range listed {
		gm := &client.Meter{}
		gctx := client.WithMeter(ctx, gm)
		// A group's rows are among its queue's: search below its depth.
		ext, err := g.cl.FindOldestBelow(gctx, client.ListQuery{Queue: q, ConsumerGroup: grp}, depth)
		if err != nil {
			return nil, nil, 0, err
		}
		sum += ext.Depth
		s, err := g.pagedScope(gctx, q, grp, ext)
		if err != nil {
			return nil, nil, 0, err
		}
		finish(s, gm)
	}
	// Rows of groups the broker does not name (a retired group) would
	// escape the group scopes, so such a queue is also checked whole.
	if depth > sum {
		wm := &client.Meter{}
		wctx := client.WithMeter(ctx, wm)
		whole, err := g.cl.FindOldestBelow(wctx, client.ListQuery{Queue: q}, depth)
		if err != nil {
			return nil, nil, 0, err
		}
		if whole.Depth > sum {
			notes = append(notes, fmt.Sprintf("%s: %d dead letter(s) belong to consumer groups the broker does not list; the queue is also checked as a whole", q, whole.Depth-sum))
			s, err := g.pagedScope(wctx, q, "*", whole)
			if err != nil {
				return nil, nil, 0, err
			}
			finish(s, wm)
		}
	}
	return out, notes, max(depth, sum), nil
}

// queuesInDLQ finds the queues by reading the DLQ.
func queuesInDLQ(ctx context.Context, cl *client.Client) ([]string, error) {
	var names []string
	for r, err := range cl.Rows(ctx, client.ListQuery{Limit: pageSize, NoData: true}) {
		if err != nil {
			return nil, err
		}
		if !slices.Contains(names, r.Queue) {
			names = append(names, r.Queue)
		}
	}
	return names, nil
}

// pageSize is how many rows the gate asks the list route for at a time.
const pageSize = 500
