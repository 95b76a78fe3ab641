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
	"fmt"
	"iter"
	"strings"
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
	// recorded ones stand but those Given names.
	Settings Settings
	Given    Given
	// Run is what this run does that a batch does not record.
	Run     RunOptions
	Why, By string
	// SkipHeld leaves messages under an active hold out of the batch;
	// OverrideHold acts on them all the same (Run refuses otherwise).
	SkipHeld, OverrideHold bool
	// PlanOnly: the batch is planned and never run (a dry run): its stage
	// keeps no payload it does not need to plan.
	PlanOnly bool
	// File is the export file an import publishes (Selection is nil).
	File *File
	// Also is said after the selection in the batch's record (dlq export
	// --move: the file its rows were written to).
	Also string
	// Words, when set, is the selection as the batch's record says it, in
	// place of the selection's flags (a replay into another broker
	// deletes here by a list of addresses no one typed).
	Words string
	// Went is where a discard's messages went before it deleted them
	// ("exported to FILE", "replayed into BROKER"): the batch's recorded
	// destination, which show says of each message.
	Went string
}

// RunOptions are what a run of a batch does that the batch does not
// record: the canary, and the unknowns a person has checked.
type RunOptions struct {
	RetryUnknown bool
	Canary       int
	CanaryWait   time.Duration
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
	po       PlanOptions
	plan     Plan
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
	// gens are the batch's copies' generations that their ids do not say
	// (see copyGenerations); holds the active holds over its messages.
	gens  replay.Generations
	holds map[string]HoldShare
	// decided: the batches of the same action not carried out that cover
	// its messages already (a fresh batch's).
	decided map[string]DecidedShare

	// letGo gives back the collector settings the batch holds (holdHeap).
	letGo func()
	// paused is told why a run waits (Hooks.Paused).
	paused func(why string)
}

// Planned is a batch whose plan is made: what a person is shown before
// they say go, and what Run takes. Preparing gives a Pending, planning
// it a Planned; nothing is set between the calls.
type Planned struct{ *Pending }

// Go is what a person says once they have seen the plan, beside what the
// request said: why (when the request gave no reason), to act on the
// messages under an active hold all the same, and the rate to run at
// (nil: the planned one), checked as the rate setting is.
type Go struct {
	Why          string
	OverrideHold bool
	Rate         *float64
}

// Hooks are what a front end is told as a run goes: the batch's id once
// it is in the ledger (fresh: newly recorded), the number of addresses
// done, and why the run waits (consumer lag, outside the window) as each
// pause starts or changes, "" as it ends.
type Hooks struct {
	Recorded func(id string, fresh bool)
	Progress func(done int)
	Paused   func(why string)
}

// take settles what the person said on the planned batch: a rate that
// is none is refused, and the plan's estimate follows the one taken.
func (p *Planned) take(g Go) error {
	if g.Rate != nil {
		if err := ValidateRate(*g.Rate); err != nil {
			return err
		}
		p.settings.Rate = *g.Rate
		p.plan = p.plan.WithRate(*g.Rate)
	}
	if strings.TrimSpace(g.Why) != "" {
		p.why = g.Why
	}
	p.req.OverrideHold = p.req.OverrideHold || g.OverrideHold
	return nil
}

// Prepare stages the selection (or the recorded batch) on disk and
// settles the settings; nothing is written to the ledger or the broker.
// The caller closes the Pending.
func Prepare(ctx context.Context, env Env, req Request) (_ *Pending, err error) {
	p := &Pending{env: env, req: req, began: time.Now(), letGo: holdHeap(), in: &input{planAt: env.Now()}}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	restoring := deadletter.ActionOf(req.Action).Outside()
	if req.Selection != nil && !restoring {
		// (A restore's selection is of the archive: its queues may be
		// gone, and --where sees the archived row.)
		if err := inspect.CheckNames(ctx, env.Client, req.Selection); err != nil {
			return nil, err
		}
		if p.where, err = readyWhere(ctx, env, req.Selection); err != nil {
			return nil, err
		}
	}
	p.settings = req.Settings
	if req.BatchID != "" {
		if err := p.takeBatch(ctx); err != nil {
			return nil, err
		}
	}
	p.opts = replay.Options{Action: req.Action, Now: env.Now, RetryUnknown: req.Run.RetryUnknown, Canary: req.Run.Canary, CanaryWait: req.Run.CanaryWait}
	if err := p.settings.Apply(&p.opts); err != nil {
		return nil, err
	}
	if err := fill(ctx, env, req, p.in, req.PlanOnly && p.settings.Transform == ""); err != nil {
		return nil, err
	}
	p.why = req.Why
	if p.in.batch != nil && p.why == "" {
		p.why = p.in.batch.Why
	}
	return p, nil
}

// takeBatch reads the recorded batch a request names: the batch it
// executes (its settings, with what the request changes, and its
// approval), or the discard whose archive a restore takes back.
func (p *Pending) takeBatch(ctx context.Context) error {
	b, err := loadBatch(ctx, p.env, p.req.BatchID, p.req.Action)
	if err != nil {
		return err
	}
	if p.act().Outside() && deadletter.ActionOf(b.Action).Discards() {
		p.in.from = b
		return nil
	}
	p.in.batch = b
	if p.settings, err = ResumeSettings(b.Settings, p.settings, p.req.Given); err != nil {
		return err
	}
	return p.loadApproval(ctx)
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
// settles the path and the pace (replays) and makes the plan.
func (p *Pending) MakePlan(ctx context.Context) (*Planned, error) {
	if err := p.makePlan(ctx); err != nil {
		return nil, err
	}
	return &Planned{p}, nil
}

func (p *Pending) makePlan(ctx context.Context) error {
	if err := p.startPlan(ctx); err != nil {
		return err
	}
	st := p.in.st
	p.gens, p.holds, p.decided, p.skippedHeld = replay.Generations{}, map[string]HoldShare{}, map[string]DecidedShare{}, 0
	p.po.Generations, p.opts.Generations = p.gens, p.gens
	replaying, restoring := p.act().Republishes(), p.act().Outside()
	if replaying || restoring {
		queues, err := st.queues(ctx)
		if err != nil {
			return err
		}
		if err := p.planReplay(ctx, st.groups, queues); err != nil {
			return err
		}
		if restoring {
			p.goneQueues(ctx, queues)
		}
	}
	pl := NewPlanner(p.po)
	if err := p.planItems(ctx, pl); err != nil {
		return err
	}
	if replaying {
		mode := p.settings.Order
		info := replay.OrderInfo{Mode: mode}
		if replay.Ordered(mode) {
			chains, err := st.chains(ctx, p.settings.ToQueue)
			if err != nil {
				return err
			}
			info = replay.OrderInfoOf(mode, chains)
		}
		info.Recorded = p.recordedOrder()
		pl.SetOrder(info)
	}
	p.plan = pl.Plan().WithRate(p.settings.Rate)
	if q := p.settings.ToQueue; replaying && q != "" && p.missingQueues(ctx, []string{q})[q] {
		p.plan.NewQueue = q
	}
	if len(p.in.unrestorable) > 0 {
		p.plan.Unrestorable = p.in.unrestorable
	}
	p.finishPlan()
	return nil
}

// goneQueues finds the destination queues of a restore that no longer
// exist: nothing is published to them, and the plan and the report say
// how many messages that leaves out.
func (p *Pending) goneQueues(ctx context.Context, queues []string) {
	gone := p.missingQueues(ctx, destinations(queues, p.settings.ToQueue))
	p.po.GoneQueues, p.opts.GoneQueues = gone, gone
}

// missingQueues are those of queues the broker does not list. A broker
// that cannot list its queues is taken to have them all.
func (p *Pending) missingQueues(ctx context.Context, queues []string) map[string]bool {
	qs, err := p.env.Client.Queues(ctx)
	if err != nil {
		return nil
	}
	have := map[string]bool{}
	for _, q := range qs {
		have[q.Name] = true
	}
	missing := map[string]bool{}
	for _, q := range queues {
		if !have[q] {
			missing[q] = true
		}
	}
	return missing
}

// recordedOrder reports whether the batch is a recorded one whose
// manifest is in replay order already (decided by a dlqctl that records
// its settings' order): a run keeps the manifest's order. One recorded
// without an order is arranged by its settings, the same way every time.
func (p *Pending) recordedOrder() bool {
	if p.in.batch == nil {
		return false
	}
	var rec Settings
	_ = json.Unmarshal(p.in.batch.Settings, &rec)
	return rec.Order != ""
}

// startPlan sets the plan's moment, the options the settings give, and
// the broker's release.
func (p *Pending) startPlan(ctx context.Context) error {
	p.now = p.env.Now()
	s := p.settings
	p.po.Action, p.po.ToQueue, p.po.ToPartition, p.po.MaxGeneration = p.req.Action, s.ToQueue, s.ToPartition, s.MaxGeneration
	return p.release(ctx)
}

// planReplay settles what a replay's plan says beyond its items' own
// figures: the path, the groups a re-push reaches (groups adds each
// queue and group of the batch's rows), and the pace (queues: the
// batch's queues).
func (p *Pending) planReplay(ctx context.Context, groups func(add func(q, g string)), queues []string) error {
	var err error
	if p.po.Via, err = p.resolvePath(ctx); err != nil {
		return err
	}
	if p.settings.ToQueue == "" {
		p.po.QueueGroups = queueGroups(ctx, p.env.Client, groups)
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
	if p.act().Outside() {
		p.opts.Via = replay.ViaRestore
		if p.act().From == deadletter.FromFile {
			return "a push of the file's payload under an id derived from the source broker and its address (dlqi-…; dlqa-… for this broker's own): importing it again is a duplicate the broker drops", nil
		}
		return viaWords(s, replay.ViaRestore), nil
	}
	switch via, ok := replay.PathOn(*rel, p.opts.Via); {
	case !ok:
		return "", refuse(errs.Usage, GivenVia, "move", fmt.Sprintf("this broker is %s, which has no move (Queen 1.6 added it); take auto or manual", rel.Name()))
	case via == replay.ViaMove:
		p.opts.Via = replay.ViaMove
		return viaWords(s, replay.ViaMove), nil
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
	return "", refuse(errs.Usage, GivenVia, "endpoint", "the broker has no /retry route; take auto or manual")
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
func (p *Planned) Plan() Plan { return p.plan }

// Messages is how many messages the batch holds (0: nothing matches).
func (p *Pending) Messages() int { return p.in.st.n - p.skippedHeld }

// Held is how many of them are under an active hold.
func (p *Planned) Held() int { return p.plan.Held }

// SkippedHeld is how many SkipHeld left out.
func (p *Pending) SkippedHeld() int { return p.skippedHeld }

// Rate is the batch's rate, messages a second (0 = unlimited).
func (p *Pending) Rate() float64 { return p.settings.Rate }

// act is the batch's action.
func (p *Pending) act() *deadletter.Action { return deadletter.ActionOf(p.req.Action) }

// Close lets go of the batch's stage.
func (p *Pending) Close() {
	p.in.st.close()
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

// Unrestorable counts the archived messages a restore's selection
// matched and cannot restore, by why.
func (p *Pending) Unrestorable() map[string]int { return p.in.unrestorable }

// Missing are the explicit addresses that are not dead-lettered.
func (p *Pending) Missing() []deadletter.Address { return p.in.missing }

// finishPlan adds to a plan what the batch knows beside its items: the
// held messages left out, the predicate's notes, and whether each copy
// gets a trace event in the broker.
func (p *Pending) finishPlan() {
	p.planTook = time.Since(p.began)
	p.plan.SkippedHeld = p.skippedHeld
	p.plan.Where = p.where.Notes()
	if f := p.in.file; f != nil {
		p.plan.Source = f.Words()
	}
	p.plan.Trace = p.act().Publishes && !p.settings.NoTrace && p.opts.Release.Traces()
	if p.awaits() {
		p.plan.ApprovalAbove = p.env.ApprovalAbove
	}
}
