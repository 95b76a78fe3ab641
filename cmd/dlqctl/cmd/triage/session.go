package triage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/gate"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// session is what the screen reads and acts through: the broker, the
// ledger and the config of the command line it was started with, and
// the domain packages the dlq commands call, called the same way.
type session struct {
	f *cmdutil.Factory
	batch.Env
}

func newSession(ctx context.Context, f *cmdutil.Factory) (*session, error) {
	env, err := f.BatchEnv(ctx)
	if err != nil {
		return nil, err
	}
	return &session{f: f, Env: env}, nil
}

// Server is the broker's URL, without credentials.
func (s *session) Server() string { return s.Client.Server() }

// List reads the dead-letter rows sel matches as dlq ls --group-by
// does, without payloads unless --where looks at them, each row's
// decision looked up into dec.
func (s *session) List(ctx context.Context, sel *deadletter.Selection, dec *inspect.Decisions) (*inspect.Listing, error) {
	return inspect.List(ctx, s.Client, sel, dec, inspect.ListOptions{NoData: true, Policies: s.Policies, Now: s.f.Now()})
}

// Decisions looks up the latest decisions of rows as they are read
// (inspect.Decisions): what the screen holds grows with its rows, not
// with the ledger's history.
func (s *session) Decisions() *inspect.Decisions {
	return inspect.NewDecisions(s.Ledger, s.Client.Broker(), s.f.Now())
}

// DecisionsFor are the latest decisions of some addresses.
func (s *session) DecisionsFor(ctx context.Context, addrs []deadletter.Address) (map[deadletter.Address]ledger.Decision, error) {
	return s.Ledger.LatestDecisionsFor(ctx, s.Client.Broker(), addrs)
}

// Check evaluates the scopes of queues (all when empty) as dlq check does
// with no flags: thresholds from the config's policies.
func (s *session) Check(ctx context.Context, queues []string) (*gate.Result, error) {
	return gate.Evaluate(ctx, s.Client, s.Ledger, gate.Input{Policies: s.Policies, Queues: queues, Now: s.f.Now()})
}

// MaxAge is the max-age policy of a queue and consumer group, 0 for none.
func (s *session) MaxAge(queue, group string) time.Duration {
	p, _ := s.Policies.For(queue, group)
	return p.MaxAge
}

// TriageSLO is the triage SLO policy of a queue and consumer group.
func (s *session) TriageSLO(queue, group string) time.Duration {
	return inspect.TriageSLO(s.Policies, queue, group)
}

// Show is what dlq show prints for an address.
func (s *session) Show(ctx context.Context, addr deadletter.Address) (inspect.ShowResult, error) {
	return inspect.Lookup(ctx, s.Client, s.Ledger, addr, s.f.Now())
}

// hold records a hold as dlq decide --action hold does: the same use
// case and rules, worded for the screen's fields.
func (s *session) hold(ctx context.Context, t target, until, why, owner string) (*ledger.Batch, int, error) {
	req := batch.DecideRequest{Action: ledger.ActionHold, By: s.f.User(), Why: why, Owner: owner, Until: strings.TrimSpace(until)}
	if err := batch.CheckDecision(req); err != nil {
		return nil, 0, fieldError(err)
	}
	sel, err := t.sel.BuildRequired(s.f, t.addrs, "dlq decide")
	if err != nil {
		return nil, 0, err
	}
	req.Selection = sel
	d, err := batch.Record(ctx, s.Env, req)
	if err != nil {
		return nil, 0, fieldError(err)
	}
	return d.Batch, d.Messages, nil
}

// fieldError words a refusal of the rules (pkg/batch) in the screen's
// fields, where the command names its flags.
func fieldError(err error) error {
	var held *batch.HeldError
	switch {
	case errors.Is(err, batch.ErrNoReason):
		return cmdutil.FlagErrorf("a reason is required: it is recorded in the ledger")
	case errors.Is(err, batch.ErrNoUntil):
		return cmdutil.FlagErrorf("a hold needs an until (a time, or a duration from now such as 24h)")
	case errors.As(err, &held):
		return cmdutil.UsageError(fmt.Errorf("%s under an active hold; nothing done", render.Plural(held.Messages, "message is", "messages are")))
	}
	return err
}

// plan plans a replay or discard of a target as dlq replay or dlq rm
// --dry-run does, with their default settings.
func (s *session) plan(ctx context.Context, verb string, t target) (*planned, error) {
	action := deadletter.ActionOf(verb).Name
	sel, err := t.sel.BuildRequired(s.f, t.addrs, "dlq "+verb)
	if err != nil {
		return nil, err
	}
	req := batch.Request{Action: action, Selection: sel, Settings: batch.DefaultSettings(action)}
	p, err := batch.Prepare(ctx, s.Env, req)
	if err != nil {
		return nil, err
	}
	pl := &batch.Planned{Pending: p} // nothing matches: an empty plan
	if p.Messages() > 0 {
		if pl, err = p.MakePlan(ctx); err != nil {
			p.Close()
			return nil, err
		}
	}
	return &planned{s: s, verb: verb, p: pl}, nil
}

// planned is a replay or discard planned and not yet run: nothing has
// been written to the broker or the ledger. override: the person said to
// act on messages under a hold all the same.
type planned struct {
	s        *session
	verb     string
	p        *batch.Planned
	override bool
}

// Messages is how many messages the batch holds (0: nothing matches).
func (pl *planned) Messages() int { return pl.p.Messages() }

// Held is how many of them are under an active hold.
func (pl *planned) Held() int { return pl.p.Held() }

// Rate is the batch's rate, messages a second (0 = unlimited).
func (pl *planned) Rate() float64 { return pl.p.Rate() }

// OverrideHold acts on messages under an active hold all the same.
func (pl *planned) OverrideHold() { pl.override = true }

// BatchID is the id the batch is (or will be) recorded under.
func (pl *planned) BatchID() string { return pl.p.BatchID() }

// WritePlan writes the plan as the command prints it before it asks.
func (pl *planned) WritePlan(w io.Writer, pal *render.Palette) { present.Plan(w, pal, pl.p.Plan()) }

// said is what the person said in the plan's form: why, the rate, and
// whether holds are overridden.
func (pl *planned) said(why string, rate float64) batch.Go {
	return batch.Go{Why: why, OverrideHold: pl.override, Rate: &rate}
}

// Refusal is why the batch would not run with this reason and rate
// (pkg/batch's rules: a reason, a rate that is one, holds overridden),
// or nil.
func (pl *planned) Refusal(why string, rate float64) error {
	return pl.p.Refusal(pl.said(why, rate))
}

// Close lets go of the plan (its staged rows) when it is not run.
func (pl *planned) Close() {
	if pl != nil {
		pl.p.Close()
	}
}

// Run records and executes the batch as the command does once it is
// confirmed, recording why, at rate; progress gets the number of addresses done.
// Holds are refused as the command refuses them without --override-hold.
// Cancelling ctx interrupts it like SIGINT.
func (pl *planned) Run(ctx context.Context, why string, rate float64, progress func(done int)) (*outcome, error) {
	defer pl.p.Close()
	res, err := pl.p.Run(ctx, pl.said(why, rate), batch.Hooks{Progress: progress})
	if res == nil {
		return nil, fieldError(err)
	}
	if res.Awaiting {
		ld, _ := pl.s.f.Ledger(ctx)
		return &outcome{Report: res.Report, Awaiting: true, Next: present.Awaiting(pl.p.BatchID(), pl.p.Messages(), pl.p.ApprovalAbove(), res.Author, ld != nil && ld.Vouches(), pl.verb, pl.s.f.Again, pl.s.f.Another)}, nil
	}
	return &outcome{Report: res.Report, Next: present.Next(res.Next, pl.verb, pl.p.BatchID(), pl.s.f.Again), NewSince: res.NewSince, Err: err}, nil
}

// outcome is what a run did.
type outcome struct {
	Report *replay.Report
	// Next are the lines that say how to finish the batch.
	Next []string
	// NewSince counts dead letters matching the selection that arrived
	// after the plan (they are not in the batch).
	NewSince int
	// Err is the ledger failure the run stopped on, if any.
	Err error
	// Awaiting: the batch was recorded awaiting approval, not run.
	Awaiting bool
}

// Write writes the outcome as the command's summary, with the lines that
// say how to finish the batch.
func (o *outcome) Write(w io.Writer, pal *render.Palette) {
	if !o.Awaiting {
		present.Report(w, pal, o.Report)
	}
	if o.NewSince > 0 {
		fmt.Fprintln(w, present.NewSince(o.NewSince))
	}
	if o.Err != nil {
		fmt.Fprintf(w, "%s %s\n", pal.Red("error:"), render.Clean(o.Err.Error()))
	}
	for _, l := range o.Next {
		fmt.Fprintln(w, l)
	}
}

var errNoTerminal = errors.New("dlqctl triage needs a terminal (standard input and output are not both one); in scripts use dlqctl dlq ls --group-by error")
