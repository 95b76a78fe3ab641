// Package batch is a decision's life in the ledger: a replay or discard
// is snapshotted (or a recorded batch loaded), planned, recorded,
// archived and run through the replay engine; a decision is recorded
// without running (Decide). dlq replay, dlq rm, dlq decide and the
// triage screen all go through it, so a batch is the same whichever
// front end started it.
package batch

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"slices"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/policy"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// Env is what a batch works with.
type Env struct {
	Client *client.Client
	Ledger *ledger.Store
	Now    func() time.Time
	// User is who a batch is recorded as by when Request.By is empty.
	User string
	// Policies give --where's decision labels their triage SLO.
	Policies policy.Set
	// ApprovalAbove: a fresh batch of more messages is recorded awaiting
	// a second person's approval instead of run (approval.go); 0: none.
	ApprovalAbove int
}

// Request is a replay or discard to plan: a selection, or a recorded
// batch to execute or resume.
type Request struct {
	Action    string                // deadletter.Replay or deadletter.Discard
	Selection *deadletter.Selection // nil when BatchID is set
	BatchID   string
	// Settings are what the caller asked for; for a recorded batch, the
	// recorded ones stand unless Changed says the caller set them again.
	Settings Settings
	// Changed reports whether a flag (rate, to-queue, …) was given.
	Changed func(flag string) bool
	Why, By string
	// SkipHeld leaves messages under an active hold out of the batch;
	// OverrideHold acts on them all the same (Run refuses otherwise).
	SkipHeld, OverrideHold bool
	// PlanOnly: the batch is planned and never run (a dry run), so the
	// snapshot keeps no payload but the envelopes the plan counts.
	PlanOnly bool
	// Engine sets the engine options the settings in force ask for (the
	// action's own: replay's path, order, transform, canary, …).
	Engine func(*replay.Options, Settings) error
	// items: plan from the items (a streamed plan met more than it can
	// name); inMemory: a batch that will run holds its rows rather than
	// staging them on disk (tests compare the two).
	items, inMemory bool
}

// Pending is a batch planned and not yet executed: what a command
// prints as the plan, and what the triage screen shows before it asks.
type Pending struct {
	env      Env
	began    time.Time     // when Prepare began (the wall clock: phases)
	planTook time.Duration // Prepare to the end of MakePlan
	req      Request
	in       *input
	settings Settings
	opts     replay.Options
	po       replay.PlanOptions
	plan     replay.Plan
	why      string // the recorded batch's, unless given again
	now      time.Time
	// approval is a recorded batch's approval (nil: none), and
	// manifestDigest its frozen manifest's, for Refusal to bind them.
	approval       *ledger.Approval
	manifestDigest string
	// skippedHeld counts the messages SkipHeld left out of the batch.
	skippedHeld int
	// id is the id a fresh batch will be recorded under, minted with the
	// plan so it can be said before the run.
	id string

	// where is what --where cost and saw while the selection was read.
	where *inspect.WhereStats
	// sp, for a batch planned from the rows as they streamed (see
	// streamable), stands for the items: in.items is empty. A batch that
	// will run has them in stage.
	sp    *streamed
	stage *stage
	// gens are the streamed addresses' copy generations (see
	// copyGenerations).
	gens replay.Generations

	// letGo gives back the collector settings the batch holds (holdHeap).
	letGo func()

	// Paused, when set, is told why the run waits (consumer lag, outside
	// the window) as each pause starts or changes, and "" as it ends.
	Paused func(why string)
}

// Prepare snapshots the selection (or loads the recorded batch), settles
// the settings and the replay order; nothing is written anywhere. A
// fresh selection that will run is staged on disk as it is read, so a
// batch of any size runs in bounded memory (see holdHeap); the caller
// closes the Pending.
func Prepare(ctx context.Context, env Env, req Request) (_ *Pending, err error) {
	p := &Pending{env: env, req: req, began: time.Now(), letGo: holdHeap(streamable(req))}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if req.Selection != nil {
		if err := inspect.CheckNames(ctx, env.Client, req.Selection); err != nil {
			return nil, err
		}
		ws, err := readyWhere(ctx, env, req.Selection)
		if err != nil {
			return nil, err
		}
		p.where = ws
	}
	in := &input{fresh: true, planAt: env.Now()}
	streamed := streamable(req)
	if !streamed {
		if in, err = gather(ctx, env.Client, env.Ledger, req, env.Now()); err != nil {
			return nil, err
		}
	}
	p.in, p.settings = in, req.Settings
	if in.batch != nil {
		if p.settings, err = ResumeSettings(in.batch.Settings, p.settings, req.Changed); err != nil {
			return nil, err
		}
		if err := p.loadApproval(ctx); err != nil {
			return nil, err
		}
	}
	p.opts = replay.Options{Action: req.Action, Rate: p.settings.Rate, Burst: p.settings.Burst, Now: env.Now}
	if req.Engine != nil {
		if err := req.Engine(&p.opts, p.settings); err != nil {
			return nil, err
		}
	}
	if streamed {
		switch err := p.stream(ctx); {
		case errors.Is(err, errTooMany):
			// Planned from the items, as any other batch.
			p.Close()
			req.items = true
			q, err := Prepare(ctx, env, req)
			if q != nil {
				q.began = p.began
			}
			return q, err
		case err != nil:
			return nil, err
		}
	}
	// A fresh batch is put in replay order before it is recorded, so its
	// manifest keeps that order for every resume; a recorded batch whose
	// settings say no order (decided by an older dlqctl) is arranged by
	// failure time, the same way every time.
	if req.Action == deadletter.Replay && p.sp == nil {
		recordedOrder := ""
		if in.batch != nil {
			var rec Settings
			_ = json.Unmarshal(in.batch.Settings, &rec)
			recordedOrder = rec.Order
		}
		if in.batch == nil || recordedOrder == "" {
			in.items, p.po.Order = replay.Arrange(in.items, p.settings.Order, p.settings.ToQueue)
		} else {
			_, p.po.Order = replay.Arrange(slices.Clone(in.items), p.settings.Order, p.settings.ToQueue)
			p.po.Order.Recorded = true
		}
	}
	p.why = req.Why
	if in.batch != nil && p.why == "" {
		p.why = in.batch.Why
	}
	return p, nil
}

// readyWhere readies a selection's --where for a batch: the
// decisions it sees are the ledger's latest, looked up for the rows as
// they are read (Selection.WhereRows), not loaded from the whole history.
// A lookup that fails fails the read: a batch is not chosen by a
// predicate that saw some rows without their decisions.
func readyWhere(ctx context.Context, env Env, sel *deadletter.Selection) (*inspect.WhereStats, error) {
	if sel.Where == "" {
		return inspect.PrepareWhere(ctx, env.Client, sel, nil, env.Policies, env.Now())
	}
	dec := inspect.NewDecisions(env.Ledger, env.Client.Broker(), env.Now())
	if sel.Limit == 0 {
		dec.ReadsAll()
	}
	sel.WhereRows = func(ctx context.Context, rows iter.Seq2[deadletter.Row, error]) iter.Seq2[deadletter.Row, error] {
		return func(yield func(deadletter.Row, error) bool) {
			for r, err := range dec.Through(ctx, rows) {
				if err == nil && dec.Err() != nil {
					err = dec.Err()
				}
				if !yield(r, err) || err != nil {
					return
				}
			}
		}
	}
	return inspect.PrepareWhere(ctx, env.Client, sel, dec.Lookup(), env.Policies, env.Now())
}

// MakePlan settles what the list could not say (undecryptable
// envelopes), finds the holds (leaving held messages out with SkipHeld),
// settles the path (replays) and makes the plan.
func (p *Pending) MakePlan(ctx context.Context) error {
	if p.sp != nil {
		return p.makeStreamedPlan(ctx)
	}
	if err := checkEnvelopes(ctx, p.env.Client, p.in.items); err != nil {
		return err
	}
	// The batch's own addresses' decisions, not the history's.
	addrs := make([]deadletter.Address, len(p.in.items))
	for i, it := range p.in.items {
		addrs[i] = it.Address
	}
	dec, err := p.env.Ledger.LatestDecisionsFor(ctx, p.env.Client.Broker(), addrs)
	if err != nil {
		return err
	}
	if err := p.startPlan(ctx); err != nil {
		return err
	}
	if p.req.Action == deadletter.Replay {
		gens, err := copyGenerations(ctx, p.env.Ledger, p.env.Client.Broker(), addrs)
		if err != nil {
			return err
		}
		p.po.Generations, p.opts.Generations = gens, gens
	}
	p.po.Hold = func(it replay.Item) (replay.HoldShare, bool) {
		d, ok := dec[it.Address]
		if !ok || !d.Holds(it.Newest().FailedAt, p.now) || p.in.batch != nil && d.BatchID == p.in.batch.ID {
			return replay.HoldShare{}, false
		}
		return replay.HoldShare{BatchID: d.BatchID, By: d.By, Until: d.Until, Why: d.Why}, true
	}
	if p.req.SkipHeld {
		// Held messages leave the batch before it is planned or recorded.
		kept := p.in.items[:0:0]
		for _, it := range p.in.items {
			if _, held := p.po.Hold(it); !held {
				kept = append(kept, it)
			}
		}
		p.skippedHeld = len(p.in.items) - len(kept)
		p.in.items = kept
	}
	if p.req.Action == deadletter.Replay {
		groups := func(add func(q, g string)) {
			for _, it := range p.in.items {
				for _, g := range it.Groups() {
					add(it.Queue, g)
				}
			}
		}
		if err := p.planReplay(ctx, groups, itemQueues(p.in.items), p.pinned); err != nil {
			return err
		}
	}
	p.po.NoCall = func(it replay.Item) bool { return p.in.absent[it.Address] }
	if err := p.tryTransform(ctx, func(f func(addr string, payload json.RawMessage) error) error {
		for _, it := range p.in.items {
			if p.in.absent[it.Address] || it.Undecryptable() || len(it.Data()) == 0 || !it.Checked && it.Envelope() {
				continue
			}
			if err := f(it.Address.String(), it.Data()); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	p.plan = replay.MakePlan(p.in.items, p.po)
	p.finishPlan()
	return nil
}

// tryTransform runs a replay's --transform on every payload the batch
// will publish (each gives to f), before anything is recorded: one that
// fails, or runs past jq's budget, fails the plan, naming the message.
func (p *Pending) tryTransform(ctx context.Context, each func(f func(addr string, payload json.RawMessage) error) error) error {
	t := p.opts.Transform
	if t == nil || p.req.Action != deadletter.Replay {
		return nil
	}
	return each(func(addr string, payload json.RawMessage) error {
		if deadletter.IsEnvelope(payload) {
			return nil // never published: skipped as undecryptable
		}
		if _, err := t(ctx, payload); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errs.Usagef("--transform fails on %s: %v; nothing was recorded or sent", addr, err)
		}
		return nil
	})
}

// makeStreamedPlan is MakePlan for a plan made from the rows (see
// stream): the holds and journal entries were looked up as they passed.
func (p *Pending) makeStreamedPlan(ctx context.Context) error {
	sp := p.sp
	if err := sp.checkEnvelopes(ctx, p.env.Client, p.stage); err != nil {
		return err
	}
	// What each address is called by is no longer asked.
	sp.by, sp.envelopes = nil, nil
	p.opts.Generations = p.gens
	if err := p.startPlan(ctx); err != nil {
		return err
	}
	p.skippedHeld = sp.skipped
	if p.req.Action == deadletter.Replay {
		// Each queue's groups, from every address the plan keeps.
		masks := make([]uint64, len(sp.queues))
		pinned := 0
		sp.each(func(st seen) {
			masks[st.queue] |= st.groups
			if st.flags&seenPinned != 0 {
				pinned++
			}
		})
		var queues []string
		for q, m := range masks {
			if m != 0 { // every address has a row, so a group
				queues = append(queues, sp.queues[q])
			}
		}
		groups := func(add func(q, g string)) {
			for q, m := range masks {
				for _, g := range sp.groupsOf(uint16(q), m) {
					add(sp.queues[q], g)
				}
			}
		}
		if err := p.planReplay(ctx, groups, queues, func(context.Context) (int, error) { return pinned, nil }); err != nil {
			return err
		}
	}
	if p.stage != nil {
		if err := p.tryTransform(ctx, func(f func(string, json.RawMessage) error) error {
			return p.stage.payloads(ctx, sp.kept, f)
		}); err != nil {
			return err
		}
	}
	p.plan = sp.plan(p.po)
	p.finishPlan()
	return nil
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

// startPlan sets the plan's moment, the options the settings give, and
// the broker's release.
func (p *Pending) startPlan(ctx context.Context) error {
	p.now = p.env.Now()
	s := p.settings
	p.po.Action, p.po.Rate, p.po.ToQueue, p.po.MaxGeneration = p.req.Action, s.Rate, s.ToQueue, s.MaxGeneration
	return p.release(ctx)
}

// planReplay settles what a replay's plan says beyond its items' own
// figures: the path, the groups a re-push reaches (groups adds each
// queue and group of the batch's rows), the addresses pinned to the
// manual path, and the pace (queues: the batch's queues).
func (p *Pending) planReplay(ctx context.Context, groups func(add func(q, g string)), queues []string, pinned func(context.Context) (int, error)) error {
	var err error
	if p.po.Via, err = p.resolvePath(ctx); err != nil {
		return err
	}
	if p.settings.ToQueue == "" {
		p.po.QueueGroups = queueGroups(ctx, p.env.Client, groups)
	}
	if p.po.Pinned, err = pinned(ctx); err != nil {
		return err
	}
	return p.paceBy(ctx, queues)
}

// resolvePath settles which path this broker gets, from its release
// (read once a session): on a broker that moves (Queen 1.6, 2.x) auto,
// move and endpoint take the move; elsewhere the manual path (push with
// a derived id, then delete) unless --via endpoint, which asks once,
// with an address that cannot exist, whether the broker has /retry and
// stops here when it has none. It returns the path in words.
func (p *Pending) resolvePath(ctx context.Context) (string, error) {
	s := p.settings
	rel := p.po.Release
	switch via := p.opts.Via; {
	case rel.Moves() && via != replay.ViaManual:
		p.opts.Via = replay.ViaMove
		return viaWords(s, replay.ViaMove), nil
	case via == replay.ViaMove:
		return "", errs.Usagef("--via move: this broker is %s, which has no move (Queen 1.6 added it); use --via auto or manual", rel.Name())
	case via != replay.ViaEndpoint || s.Transform != "" || s.ToQueue != "":
		p.opts.Via = replay.ViaManual
		return viaWords(s, replay.ViaManual), nil
	}
	ok, err := p.env.Client.HasRetryRoute(ctx)
	switch {
	case ok:
		return viaWords(s, replay.ViaEndpoint), nil
	case err != nil:
		return "", err
	}
	return "", errs.Usagef("--via endpoint: the broker has no /retry route (use --via auto or manual)")
}

// release reads which Queen the broker runs (once a session) for the
// plan and the run.
func (p *Pending) release(ctx context.Context) error {
	rel, err := p.env.Client.Release(ctx)
	if err != nil {
		return err
	}
	p.po.Release, p.opts.Release = &rel, rel
	return nil
}

// pinned counts the addresses whose journal keeps them on the manual
// path (an earlier attempt may have published their derived id): they
// take it whatever the path resolved to.
func (p *Pending) pinned(ctx context.Context) (int, error) {
	addrs := make([]deadletter.Address, len(p.in.items))
	for i, it := range p.in.items {
		addrs[i] = it.Address
	}
	ents, err := p.env.Ledger.Entries(ctx, p.env.Client.Broker(), addrs)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if replay.Pinned(e) {
			n++
		}
	}
	return n, nil
}

// SetRate changes the rate of a planned batch, and its estimate; the
// rate is checked as --rate is.
func (p *Pending) SetRate(r float64) error {
	if err := ValidateRate(r); err != nil {
		return err
	}
	p.settings.Rate, p.opts.Rate, p.po.Rate = r, r, r
	if p.sp != nil {
		p.plan = p.sp.plan(p.po)
	} else {
		p.plan = replay.MakePlan(p.in.items, p.po)
	}
	p.finishPlan()
	return nil
}

// BatchID is the recorded batch's id, or the one a fresh batch gets.
func (p *Pending) BatchID() string {
	if p.in.batch != nil {
		return p.in.batch.ID
	}
	if p.id == "" {
		p.id = ledger.NewBatchID(p.env.Now())
	}
	return p.id
}

// Plan is the plan MakePlan made.
func (p *Pending) Plan() replay.Plan { return p.plan }

// Messages is how many messages the batch holds (0: nothing matches).
func (p *Pending) Messages() int {
	if p.sp != nil {
		return p.sp.messages - p.skippedHeld
	}
	return len(p.in.items) + p.in.released
}

// Held is how many of them are under an active hold.
func (p *Pending) Held() int { return p.plan.Held }

// SkippedHeld is how many SkipHeld left out.
func (p *Pending) SkippedHeld() int { return p.skippedHeld }

// Rate is the batch's rate, messages a second (0 = unlimited).
func (p *Pending) Rate() float64 { return p.settings.Rate }

// Close lets go of what the plan holds outside the process (a staged
// snapshot); a Pending that ran has let go already.
func (p *Pending) Close() {
	p.stage.close()
	p.stage = nil
	p.letGo()
}

// ApprovalAbove is the size past which a fresh batch awaits approval.
func (p *Pending) ApprovalAbove() int { return p.env.ApprovalAbove }

// By is who the batch is recorded under.
func (p *Pending) By() string {
	if p.req.By != "" {
		return p.req.By
	}
	return p.env.User
}

// Why is the reason the batch is recorded with.
func (p *Pending) Why() string { return p.why }

// SetWhy gives the reason (the triage screen asks for it after the plan).
func (p *Pending) SetWhy(why string) { p.why = why }

// OverrideHold acts on messages under an active hold all the same (the
// screen asks after the plan, where the command takes --override-hold).
func (p *Pending) OverrideHold() { p.req.OverrideHold = true }

// Missing are the explicit addresses that are not dead-lettered.
func (p *Pending) Missing() []deadletter.Address { return p.in.missing }

// finishPlan adds to a plan what the batch knows beside its items: the
// held messages left out, the predicate's notes, and whether each copy
// gets a trace event in the broker.
func (p *Pending) finishPlan() {
	if p.planTook == 0 { // SetRate plans again, after the user may have waited
		p.planTook = time.Since(p.began)
	}
	p.plan.SkippedHeld = p.skippedHeld
	p.plan.Where = p.where.Notes()
	p.plan.Trace = p.req.Action == deadletter.Replay && !p.settings.NoTrace && p.opts.Release.Traces()
	if p.awaits() {
		p.plan.ApprovalAbove = p.env.ApprovalAbove
	}
}
