package gate

import (
	"context"
	"fmt"
	"github.com/dlqctl/dlqctl/pkg/duration"
	"slices"
	"sort"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// limits are a scope's thresholds.
type limits struct {
	maxAge, slo         time.Duration
	hasMA, hasSLO       bool
	defaulted           bool
	owner               string
	maCutoff, sloCutoff time.Time
}

func (g *gate) limitsFor(queue, group string) limits {
	pol, _ := g.policies.For(queue, group)
	l := limits{maxAge: pol.MaxAge, slo: pol.TriageSLO, owner: pol.Owner}
	// A scope no policy sets a threshold for is held to max-age 0; a
	// flag overrides only its own threshold, so --triage-slo alone
	// leaves that default in place rather than switching max-age off.
	unset := pol.MaxAge <= 0 && pol.TriageSLO <= 0
	if g.maxAge > 0 {
		l.maxAge = g.maxAge
	}
	if g.triageSLO > 0 {
		l.slo = g.triageSLO
	}
	l.hasMA, l.hasSLO = l.maxAge > 0, l.slo > 0
	if !l.hasMA && unset {
		l.hasMA, l.defaulted = true, true
	}
	l.maCutoff, l.sloCutoff = g.now.Add(-l.maxAge), g.now.Add(-l.slo)
	return l
}

func (g *gate) held(r deadletter.Row) bool {
	d, ok := g.dec.Get(r.Address())
	return ok && d.Holds(r.FailedAt, g.now)
}

// acc accumulates a scope from rows streamed past it.
type acc struct {
	lim          limits
	depth        int
	oldest       *deadletter.Row
	oldestUnheld *deadletter.Row
	// oldestAt and oldestUnheldAt are when they count as having failed
	// (counted).
	oldestAt, oldestUnheldAt time.Time
	// ahead counts the rows that failed after now, by up to maxAhead.
	ahead    int
	maxAhead time.Duration
	// again counts the rows read that are a replay's copies, failed
	// again, by the batch that published them.
	again     map[string]int
	undecided int
	// stale are the decisions not carried out within the SLO that leave
	// rows of the scope undecided, by batch.
	stale map[string]*NotCarriedOut
}

// pastSLO counts a row that failed before the SLO's cutoff: undecided
// when no decision covers it or the one that does was not carried out in
// time.
func (a *acc) pastSLO(g *gate, r deadletter.Row) {
	d, ok := g.dec.Get(r.Address())
	if ok && d.Covers(r.FailedAt, g.now) {
		if !d.NotCarriedOut(g.now, a.lim.slo) {
			return
		}
		if a.stale == nil {
			a.stale = map[string]*NotCarriedOut{}
		}
		n := a.stale[d.BatchID]
		if n == nil {
			n = &NotCarriedOut{BatchID: d.BatchID, Action: d.Action, By: d.By, At: d.At, Status: d.Status}
			a.stale[d.BatchID] = n
		}
		n.DeadLetters++
	}
	a.undecided++
}

// counted is when a dead letter counts as having failed: its failedAt,
// or, for one that failed after now (a broker whose clock runs ahead of
// this one), as long before now as it is after: at least the skew, where
// an age of 0 would hide every dead letter of a skewed broker.
func (g *gate) counted(t time.Time) (time.Time, time.Duration) {
	if !t.After(g.now) {
		return t, 0
	}
	ahead := t.Sub(g.now)
	return g.now.Add(-ahead), ahead
}

// copyBack counts a row that is a replay's copy back in the DLQ.
func (a *acc) copyBack(g *gate, r deadletter.Row) {
	if d, ok := g.dec.Get(r.Address()); ok && d.Copy != nil {
		if a.again == nil {
			a.again = map[string]int{}
		}
		a.again[d.Copy.BatchID]++
	}
}

func (a *acc) add(g *gate, r deadletter.Row) {
	a.depth++
	a.copyBack(g, r)
	at, ahead := g.counted(r.FailedAt)
	if ahead > 0 {
		a.ahead++
		a.maxAhead = max(a.maxAhead, ahead)
	}
	if a.oldest == nil || at.Before(a.oldestAt) {
		r := r
		a.oldest, a.oldestAt = &r, at
	}
	if (a.oldestUnheld == nil || at.Before(a.oldestUnheldAt)) && !g.held(r) {
		r := r
		a.oldestUnheld, a.oldestUnheldAt = &r, at
	}
	if a.lim.hasSLO && at.Before(a.lim.sloCutoff) {
		a.pastSLO(g, r)
	}
}

// pagedScope evaluates a scope of a broker that pages, from its extent:
// the oldest row and the count past the triage SLO come from offsets
// alone, unless the ledger has holds (then the oldest end is read until
// the first row not held) or decisions old enough to cover rows past the
// SLO (then those rows are read, without their payloads, and counted).
func (g *gate) pagedScope(ctx context.Context, q, group string, ext *client.Extent) (Scope, error) {
	lim := g.limitsFor(q, group)
	s := newScope(q, group, lim)
	s.Depth = ext.Depth
	if ext.Oldest == nil {
		return s, nil
	}
	lq := client.ListQuery{Queue: q, NoData: true}
	if group != "*" {
		lq.ConsumerGroup = group
	}
	// Only the oldest end is read: a skewed clock shows here when even
	// the oldest row failed after now.
	at, ahead := g.counted(ext.Oldest.FailedAt)
	a := acc{lim: lim, depth: ext.Depth, oldest: ext.Oldest, oldestUnheld: ext.Oldest, oldestAt: at, oldestUnheldAt: at}
	if ahead > 0 {
		a.ahead, a.maxAhead = ext.Depth, ahead
	}
	if err := g.prefetch(ctx, []deadletter.Row{*ext.Oldest}); err != nil {
		return s, err
	}
	if g.holds[q] && g.held(*ext.Oldest) {
		if err := g.knowHolds(ctx, ext.Depth); err != nil {
			return s, err
		}
		r, err := g.oldestUnheld(ctx, lq, ext.Depth)
		if err != nil {
			return s, err
		}
		a.oldestUnheld = r
		if r != nil {
			a.oldestUnheldAt, _ = g.counted(r.FailedAt)
		}
	}
	if lim.hasSLO && ext.Oldest.FailedAt.Before(lim.sloCutoff) {
		idx, err := g.cl.IndexOlderThan(ctx, lq, ext, lim.sloCutoff)
		if err != nil {
			return s, err
		}
		if !g.decided[q] {
			// No decision in this queue: every row past the SLO is undecided.
			a.undecided = ext.Depth - idx
		} else {
			lq.Offset = idx
			lq.Limit = pageSize
			each, flush := g.chunked(ctx, func(r deadletter.Row) {
				a.copyBack(g, r)
				if r.FailedAt.Before(lim.sloCutoff) {
					a.pastSLO(g, r)
				}
			})
			for r, err := range g.cl.Rows(ctx, lq) {
				if err != nil {
					return s, err
				}
				if !each(r) {
					break
				}
			}
			if err := flush(); err != nil {
				return s, err
			}
		}
	}
	g.fill(&s, &a)
	return s, nil
}

// oldestUnheld reads a paged scope from its oldest end, a page at a time,
// until a row not under an active hold; nil when every row is held. The
// rows' decisions are looked up a page at a time, unless every hold in
// force is known (knowHolds).
func (g *gate) oldestUnheld(ctx context.Context, lq client.ListQuery, depth int) (*deadletter.Row, error) {
	for end := depth; end > 0; end -= pageSize {
		lq.Offset, lq.Limit = max(0, end-pageSize), min(pageSize, end)
		p, err := g.cl.ListPage(ctx, lq)
		if err != nil {
			return nil, err
		}
		if !g.holdsKnown {
			if err := g.prefetch(ctx, p.Rows); err != nil {
				return nil, err
			}
		}
		for i := len(p.Rows) - 1; i >= 0; i-- {
			if !g.held(p.Rows[i]) {
				return &p.Rows[i], nil
			}
		}
	}
	return nil, nil
}

// oneBodyPass evaluates a queue of a broker that answers it in one body:
// one streamed read serves the whole-queue figures and every group,
// including groups only the rows name.
type oneBodyPass struct {
	g    *gate
	q    string
	accs map[string]*acc
}

func (ob *oneBodyPass) get(grp string) *acc {
	a := ob.accs[grp]
	if a == nil {
		a = &acc{lim: ob.g.limitsFor(ob.q, grp)}
		ob.accs[grp] = a
	}
	return a
}

func (ob *oneBodyPass) scopes(m *client.Meter) []Scope {
	grps := make([]string, 0, len(ob.accs))
	for grp := range ob.accs {
		grps = append(grps, grp)
	}
	slices.Sort(grps)
	out := make([]Scope, 0, len(grps))
	for i, grp := range grps {
		a := ob.accs[grp]
		s := newScope(ob.q, grp, a.lim)
		s.Depth = a.depth
		ob.g.fill(&s, a)
		if i == 0 {
			s.Requests, s.Bytes = m.Requests(), m.Bytes()
		}
		out = append(out, s)
	}
	return out
}

func newScope(q, group string, lim limits) Scope {
	s := Scope{Queue: q, ConsumerGroup: group, Owner: lim.owner, DefaultedMaxAge: lim.defaulted}
	if lim.hasMA {
		s.MaxAgeSeconds = secs(lim.maxAge)
	}
	if lim.hasSLO {
		s.TriageSLOSeconds = secs(lim.slo)
	}
	return s
}

// fill turns an accumulated scope into figures and max-age/SLO breaches.
func (g *gate) fill(s *Scope, a *acc) {
	lim := a.lim
	if a.oldest != nil {
		s.OldestAgeSeconds = render.SecondsSince(g.now, a.oldestAt)
		s.OldestAddress = a.oldest.Address().String()
		s.OldestFailedAt = a.oldestAt
		s.OldestHeld = g.held(*a.oldest)
		if s.OldestHeld {
			d, _ := g.dec.Get(a.oldest.Address())
			s.OldestHold = &HoldInfo{BatchID: d.BatchID, By: d.By, Owner: d.Owner, Until: d.Until, Why: d.Why}
		}
	}
	if a.oldestUnheld != nil {
		s.OldestUnheldFailedAt = a.oldestUnheldAt
	}
	s.FailedAhead, s.AheadSeconds = a.ahead, a.maxAhead.Seconds()
	for id, n := range a.again {
		s.FailedAgain = append(s.FailedAgain, FailedAgain{BatchID: id, DeadLetters: n})
	}
	sort.Slice(s.FailedAgain, func(i, j int) bool { return s.FailedAgain[i].BatchID < s.FailedAgain[j].BatchID })
	s.UndecidedPastSLO = a.undecided
	for _, n := range a.stale {
		s.NotCarriedOut = append(s.NotCarriedOut, *n)
		s.DecidedNotCarriedOut += n.DeadLetters
	}
	sort.Slice(s.NotCarriedOut, func(i, j int) bool { return s.NotCarriedOut[i].BatchID < s.NotCarriedOut[j].BatchID })
	if u := a.oldestUnheld; lim.hasMA && u != nil && a.oldestUnheldAt.Before(lim.maCutoff) {
		age := render.SecondsSince(g.now, a.oldestUnheldAt)
		if lim.defaulted {
			s.Breaches = append(s.Breaches, Breach{Kind: DefaultMaxAge, DeadLetters: s.Depth, AgeSeconds: age})
		} else {
			s.Breaches = append(s.Breaches, Breach{Kind: MaxAge, Address: u.Address().String(), AgeSeconds: age, Limit: lim.maxAge})
		}
	}
	if n := s.UndecidedPastSLO - s.DecidedNotCarriedOut; n > 0 {
		s.Breaches = append(s.Breaches, Breach{Kind: TriageSLO, DeadLetters: n, Limit: lim.slo})
	}
	for i := range s.NotCarriedOut {
		n := &s.NotCarriedOut[i]
		s.Breaches = append(s.Breaches, Breach{Kind: Unexecuted, Decision: n, AgoSeconds: render.SecondsSince(g.now, n.At), DeadLetters: n.DeadLetters, Limit: lim.slo})
	}
}

// aheadNote says a scope's dead letters failed after now: the broker's
// clock runs ahead, and an age of 0 would hide them.
func aheadNote(s Scope) string {
	name := scopeLabel(s)
	ahead := duration.Seconds(s.AheadSeconds)
	return fmt.Sprintf("%s: %d dead letter(s) failed after now, by up to %s: the broker's clock is ahead of this one; each counts as old as it is ahead", name, s.FailedAhead, render.Duration(ahead.Round(time.Second)))
}

// scopeLabel names a scope in a note: queue, or queue/group.
func scopeLabel(s Scope) string {
	if s.ConsumerGroup != "" && s.ConsumerGroup != "*" {
		return s.Queue + "/" + s.ConsumerGroup
	}
	return s.Queue
}

// vanishedAndVerdict counts the scope's rows that left the broker with no
// decision (from the last sync) and settles its breaches.
func (g *gate) vanishedAndVerdict(s *Scope, vanished []ledger.Archived) {
	seen := map[deadletter.Address]bool{}
	for _, v := range vanished {
		if v.Queue != s.Queue || (s.ConsumerGroup != "" && s.ConsumerGroup != "*" && v.ConsumerGroup != s.ConsumerGroup) || seen[v.Address] {
			continue
		}
		if d, ok := g.dec.Get(v.Address); ok && d.Covers(v.FailedAt, g.now) {
			continue
		}
		seen[v.Address] = true
		s.VanishedUndecided++
	}
	if s.VanishedUndecided > 0 {
		s.Breaches = append(s.Breaches, Breach{Kind: Vanished, DeadLetters: s.VanishedUndecided})
	}
}

func secs(d time.Duration) *float64 {
	s := d.Seconds()
	return &s
}
