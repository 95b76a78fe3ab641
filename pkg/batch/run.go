package batch

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"sync/atomic"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// Result is what a run of a planned batch did.
type Result struct {
	Report *replay.Report
	// Next says how to finish the batch when the run did not.
	Next []Step
	// NewSince counts dead letters matching the selection that arrived
	// after the plan (they are not in the batch).
	NewSince int
	// Awaiting: the batch was recorded awaiting a second person's
	// approval, not run (Env.ApprovalAbove); Author is who recorded it as
	// the ledger knows them (ledger.Store.Identity), whom the approver
	// must not be.
	Awaiting bool
	Author   string
}

// Run records the batch (or takes up the recorded one), archives every
// row its deletes may remove, and executes it, once what the person said
// (g) passes the rules (Refusal); h is told how it goes. A nil result is
// an error before anything was published; a result with an error is a
// run the ledger failed under.
func (pl *Planned) Run(ctx context.Context, g Go, h Hooks) (*Result, error) {
	if err := pl.Refusal(g); err != nil {
		return nil, err
	}
	p, recorded, progress := pl.Pending, h.Recorded, h.Progress
	p.paused = h.Paused
	cl, ld, settings, opts := p.env.Client, p.env.Ledger, p.settings, p.opts
	by := cmp.Or(p.req.By, p.env.User)
	phases := &replay.Phases{Plan: p.planTook.Seconds()}
	took := phaseClock()
	batch, err := p.record(ctx, by)
	if err != nil {
		return nil, err
	}
	phases.Record = took()
	if batch.Status == ledger.StatusAwaiting {
		return p.awaiting(ctx, batch, by, recorded), nil
	}
	jctx := context.WithoutCancel(ctx)
	owner, err := p.begin(jctx, batch, by)
	if err != nil {
		return nil, err
	}
	phases.Start = took()
	// The run can be stopped from anywhere (decisions stop): its beat
	// learns of it and ends the run as SIGINT would, nothing in flight
	// lost; done is what the beat says the run got to.
	var done atomic.Int64
	rctx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	defer beat(jctx, ld, batch.ID, owner, &done, func(st *ledger.Stop) { stopRun(&StoppedError{Stop: *st}) })()
	if recorded != nil {
		recorded(batch.ID, p.in.batch == nil)
	}
	opts.Rate, opts.Burst = settings.Rate, settings.Burst
	opts.Broker, opts.BatchID, opts.Owner = cl.Broker(), batch.ID, owner
	opts.Progress = func(n int) {
		done.Store(int64(n))
		if progress != nil {
			progress(n)
		}
	}
	var tr *tracer
	if p.act().Publishes {
		if tr = startTracer(cl, opts.Release, settings, batch); tr != nil {
			opts.Replayed = tr.replayed
		}
	}
	phases.Start += took() // the tracer's start
	rep, runErr := replay.NewEngine(cl, ld, opts).RunSource(rctx, p.source())
	tr.finish(rep)
	var stopped *StoppedError
	if errors.As(context.Cause(rctx), &stopped) && ctx.Err() == nil {
		rep.StoppedBy = &stopped.Stop
	}
	phases.Run = took()
	rep.Phases = phases
	res := &Result{Report: rep, Next: NextSteps(rep)}
	if runErr != nil {
		return res, runErr
	}
	if err := p.end(ctx, batch.ID, by, rep); err != nil {
		return res, err
	}
	phases.Settle = took()
	res.NewSince = p.newSince(ctx, batch.ID, rep)
	return res, nil
}

// awaiting is the result of a batch recorded awaiting a second person's
// approval (audited as such), not run.
func (p *Pending) awaiting(ctx context.Context, batch *ledger.Batch, by string, recorded func(id string, fresh bool)) *Result {
	if recorded != nil {
		recorded(batch.ID, true)
	}
	_ = p.env.Ledger.Audit(context.WithoutCancel(ctx), ledger.AuditEntry{At: p.now, Broker: p.env.Client.Broker(), BatchID: batch.ID, Kind: "awaiting-approval", By: by,
		Detail: fmt.Sprintf("%s of %s: more than %d needs a second person's approval", p.act().Verb, render.Plural(p.Messages(), "address", "addresses"), p.env.ApprovalAbove)})
	return &Result{Report: &replay.Report{BatchID: batch.ID}, Awaiting: true, Author: batch.Author}
}

// source is the stage as the run reads it, archiving the rows of what it
// reads when the batch deletes.
func (p *Pending) source() source {
	src := source{st: p.in.st}
	if p.act().Deletes {
		src.arch = &archiving{a: p.env.Ledger.NewArchiver(p.env.Client.Broker(), p.now)}
	}
	return src
}

// begin readies a recorded batch to run: the batch running, and the run
// started under a new owner (returned) and audited.
func (p *Pending) begin(ctx context.Context, batch *ledger.Batch, by string) (owner string, err error) {
	ld, now := p.env.Ledger, p.now
	if err := ld.SetBatchStatus(ctx, batch.ID, ledger.StatusRunning, now, now, batch.Outcome); err != nil {
		return "", err
	}
	owner = ledger.NewOwner(nonce())
	if err := ld.StartRun(ctx, batch.ID, owner, p.Messages()); err != nil {
		return "", err
	}
	_ = ld.Audit(ctx, ledger.AuditEntry{At: now, Broker: p.env.Client.Broker(), BatchID: batch.ID, Kind: "execution-started", By: by,
		Detail: fmt.Sprintf("%s of %s at %s, %s", p.act().Verb, render.Plural(p.Messages(), "address", "addresses"), rateWords(p.settings.Rate), viaWords(p.settings, p.opts.Via))})
	return owner, nil
}

// end settles a run that ended without a ledger error: the copies this
// batch published that failed again (the run did not act on them: one
// batch does not act twice, and its summary, status and exit say so, as
// decisions verify does), and the batch's status.
func (p *Pending) end(ctx context.Context, id, by string, rep *replay.Report) error {
	for _, cb := range p.in.copiesBack {
		rep.DeadLetteredAgain++
		rep.Listed = append(rep.Listed, replay.AddrResult{Address: cb.Copy, Reason: fmt.Sprintf(
			"the copy of %s, which this batch published, is dead-lettered again", cb.Lineage.Original),
			Next: replay.ReplayOrDiscardNext, Generation: cb.Lineage.Generation + 1})
	}
	return p.settle(context.WithoutCancel(ctx), id, by, rep)
}

// newSince counts the dead letters that matched a fresh selection's
// batch after its plan (a run that finished; 0 for any other).
func (p *Pending) newSince(ctx context.Context, id string, rep *replay.Report) int {
	sel := p.req.Selection
	if p.in.batch != nil || p.act().Outside() || rep.Interrupted || sel == nil || len(sel.Addresses) > 0 {
		return 0
	}
	return newSince(ctx, p.env.Client, p.env.Ledger, id, sel, p.in.planAt, rep.Published)
}

// phaseClock returns a function that says, in seconds, how long it has
// been since it was last called (or since phaseClock).
func phaseClock() func() float64 {
	last := time.Now()
	return func() float64 {
		now := time.Now()
		d := now.Sub(last)
		last = now
		return d.Seconds()
	}
}

// beat says the run is alive, and how many addresses it has done, every
// ledger.BeatEvery until the returned stop is called: a batch whose run
// was killed shows as interrupted, and one asked to stop (decisions stop)
// is told to stopped.
func beat(ctx context.Context, ld *ledger.Store, id, owner string, done *atomic.Int64, stopped func(*ledger.Stop)) (stop func()) {
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(ledger.BeatEvery)
		defer t.Stop()
		told := false
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				st, err := ld.Beat(ctx, id, owner, int(done.Load())) // a missed beat is retried at the next
				if err == nil && st != nil && !told {
					told = true
					stopped(st)
				}
			}
		}
	}()
	return func() { close(quit); <-finished }
}

// StoppedError is why a run ended early: a stop asked of it from
// anywhere (decisions stop).
type StoppedError struct{ ledger.Stop }

func (e *StoppedError) Error() string { return "stopped by " + e.By + ": " + e.Why }

// record writes a fresh batch (the decision and its frozen manifest, in
// the order the run takes) before anything is published, or records the
// settings a recorded batch now runs with. Its rows are archived as the
// run reads them (source).
func (p *Pending) record(ctx context.Context, by string) (b *ledger.Batch, err error) {
	settings, _ := json.Marshal(p.settings)
	st := p.in.st
	// A replay in its order; a restore partition by partition, oldest
	// first (it keeps no order as it runs, but starts from it).
	ordered := (p.act().Ordered && replay.Ordered(p.settings.Order) || p.act().Outside()) && !p.recordedOrder()
	if err := st.arrange(ctx, ordered, p.settings.ToQueue); err != nil {
		return nil, err
	}
	if b := p.in.batch; b != nil {
		return b, p.env.Ledger.SetBatchSettings(ctx, b.ID, settings)
	}
	b = &ledger.Batch{ID: p.BatchID(), Broker: p.env.Client.Broker(), Action: p.req.Action,
		By: by, At: p.now, Why: p.why, Selection: p.selectionWords(), Destination: p.destination(), Status: ledger.StatusRunning, Settings: settings}
	if p.awaits() {
		b.Status, b.NeedsApproval = ledger.StatusAwaiting, true
	}
	return b, recordFrom(ctx, p.env.Ledger, b, st, nil)
}

// Selection is the selection the batch was asked for (nil for an
// import's file or a recorded batch).
func (p *Pending) Selection() *deadletter.Selection { return p.req.Selection }

// Chosen is the selection in words, as the person gave it ("" for an
// import's file or a recorded batch).
func (p *Pending) Chosen() string {
	if p.req.Selection == nil {
		return ""
	}
	return p.req.Selection.String()
}

// destination is where the batch's messages go, as it is recorded: a
// replay's --to-queue, or where a discard's went before it.
func (p *Pending) destination() string {
	if p.req.Went != "" {
		return p.req.Went
	}
	return p.settings.ToQueue
}

// selectionWords is the selection a fresh batch is recorded with.
func (p *Pending) selectionWords() string {
	if p.in.from != nil {
		return "what batch " + p.in.from.ID + " archived"
	}
	if f := p.in.file; f != nil {
		return f.Words()
	}
	words := p.req.Selection.String()
	if p.req.Words != "" {
		words = p.req.Words
	}
	if p.req.Also != "" {
		return words + "; " + p.req.Also
	}
	return words
}

// recordFrom writes batch b with the stage's arranged items as its
// manifest, then more (items the stage does not have).
func recordFrom(ctx context.Context, ld *ledger.Store, b *ledger.Batch, st *stage, more []ledger.ManifestItem) error {
	next, stop := iter.Pull2(st.inOrder(ctx))
	defer stop()
	return ld.CreateBatchFrom(ctx, b, st.arranged+len(more), func() (ledger.ManifestItem, error) {
		it, err, ok := next()
		switch {
		case err != nil:
			return ledger.ManifestItem{}, err
		case !ok && len(more) > 0:
			m := more[0]
			more = more[1:]
			return m, nil
		case !ok:
			return ledger.ManifestItem{}, errors.New("recording the manifest: the staged snapshot ended early")
		}
		return ManifestItemOf(it), nil
	})
}

// settle records what the run did: the batch's outcome from its journal
// (so a resumed batch shows everything it did, not only its last run)
// and status, the audit, the archive's rows it removed, and the holds
// whose messages have all left.
func (p *Pending) settle(ctx context.Context, id, by string, rep *replay.Report) error {
	ld, broker := p.env.Ledger, p.env.Client.Broker()
	outcome, err := ld.BatchOutcome(ctx, id)
	if err != nil {
		return err
	}
	status := ledger.StatusDone
	switch {
	case rep.Interrupted || rep.Stopped != "":
		status = ledger.StatusInterrupted
	case outcome[ledger.Failed]+outcome[ledger.Unknown]+outcome[ledger.Pending]+outcome[ledger.Inflight]+outcome[ledger.Published] > 0 || !rep.Clean():
		status = ledger.StatusFailed
	}
	end := p.env.Now()
	if err := ld.SetBatchStatus(ctx, id, status, p.now, end, outcome); err != nil {
		return err
	}
	_ = ld.Audit(ctx, ledger.AuditEntry{At: end, Broker: broker, BatchID: id, Kind: "execution-" + status, By: by, Detail: render.Counts(rep.Outcome())})
	if err := ld.MarkRemoved(ctx, broker, id, end); err != nil {
		return err
	}
	_, _ = ld.ResolveHolds(ctx, broker)
	return nil
}

// StepKind is a way to go on with a batch a run left unfinished.
type StepKind int

// The steps.
const (
	// Resume: running the batch again does more of it.
	Resume StepKind = iota + 1
	// RetryUnknown: addresses whose /retry answer was lost; once the live
	// queue is checked (a copy there: discard the dead letter), re-run
	// with --retry-unknown.
	RetryUnknown
	// SkipGaps: partitions wait behind a message a resume will never
	// replay; --order skip-gaps goes on past it.
	SkipGaps
	// Unreplayable: messages that cannot be replayed as they are
	// (undecryptable, past the generation cap): the way on is to discard them.
	Unreplayable
)

// Step is one way to go on, with how many addresses it concerns; for
// Unreplayable, the addresses (when there are few enough to name).
type Step struct {
	Kind      StepKind
	N         int
	Addresses []deadletter.Address
}

// NextSteps say how to finish a batch a run left unfinished: resume when
// resuming can do more; --retry-unknown for unknowns; --order skip-gaps
// and a discard for what a resume will never replay and the partitions
// waiting behind it.
func NextSteps(rep *replay.Report) []Step {
	var out []Step
	if Resumable(rep) {
		out = append(out, Step{Kind: Resume})
	}
	if rep.Unknown > 0 {
		out = append(out, Step{Kind: RetryUnknown, N: rep.Unknown})
	}
	stuck := 0
	for _, b := range rep.BlockedPartitions {
		if b.Permanent {
			stuck++
		}
	}
	if stuck > 0 {
		out = append(out, Step{Kind: SkipGaps, N: stuck})
	}
	var skipped []deadletter.Address
	for _, l := range rep.Listed {
		if l.Next == replay.DiscardNext || l.Next == replay.GenerationCapNext {
			skipped = append(skipped, l.Address)
		}
	}
	if len(skipped) > 0 {
		s := Step{Kind: Unreplayable, N: len(skipped)}
		if len(skipped) <= 10 {
			s.Addresses = skipped
		}
		out = append(out, s)
	}
	return out
}

// Resumable reports whether running the batch again can do more of it:
// something was stopped, not started, failed (and is retryable), left to
// another run, unrecorded, or waits behind a gap a resume can close.
func Resumable(rep *replay.Report) bool {
	if rep.Interrupted || rep.Stopped != "" || rep.NotStarted > 0 || rep.Claimed > 0 || rep.LedgerError != "" || rep.Unrecorded > 0 || rep.Failed > 0 {
		return true
	}
	for _, b := range rep.BlockedPartitions {
		if !b.Permanent {
			return true
		}
	}
	return false
}

// nonce is a short random hex string (a claim owner's).
func nonce() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
