package dlq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
	"github.com/spf13/cobra"
)

// Workflow is the dlq commands' code for another screen (dlqctl triage):
// it reads what ls, show and check read, and acts by parsing the same
// command lines decide, replay and rm parse, then running their code. A
// decision made on the screen is the one its command line would make.
type Workflow struct {
	f  *cmdutil.Factory
	cl *client.Client
	ld *ledger.Store
}

// NewWorkflow opens the broker client and the ledger.
func NewWorkflow(ctx context.Context, f *cmdutil.Factory) (*Workflow, error) {
	cl, ld, err := f.Session(ctx)
	if err != nil {
		return nil, err
	}
	return &Workflow{f: f, cl: cl, ld: ld}, nil
}

// Server is the broker's URL, without credentials.
func (w *Workflow) Server() string { return w.cl.Server() }

// Rows streams the dead-letter rows sel matches, newest first, without
// payloads (as ls --group-by reads them).
func (w *Workflow) Rows(ctx context.Context, sel *replay.Selection) iter.Seq2[client.Row, error] {
	q := sel.Query(pageSize)
	q.NoData = true
	var limited bool
	return func(yield func(client.Row, error) bool) {
		for r, err := range selected(w.cl.Rows(ctx, q), sel, &limited) {
			r.Data = nil
			if !yield(r, err) {
				return
			}
		}
	}
}

// Decisions are the latest decision of each address.
func (w *Workflow) Decisions(ctx context.Context) (map[client.Address]ledger.Decision, error) {
	return w.ld.LatestDecisions(ctx, w.cl.Broker())
}

// DecisionLabel is ls's DECISION column for a row, whose triage SLO is
// slo (0 for none).
func DecisionLabel(d ledger.Decision, r client.Row, now time.Time, slo time.Duration) string {
	return decisionLabel(d, r, now, slo)
}

// TriageSLO is the triage SLO policy of a queue and consumer group, 0
// for none.
func (w *Workflow) TriageSLO(queue, group string) time.Duration {
	cfg, _ := w.f.Config()
	return triageSLO(cfg, queue, group)
}

// GroupName shows a consumer group to a person.
func GroupName(g string) string { return groupName(g) }

// Check evaluates the scopes of queues (all when empty) as dlq check does
// with no flags: thresholds from the config's policies.
func (w *Workflow) Check(ctx context.Context, queues []string) (*CheckResult, error) {
	return evaluate(ctx, w.f, CheckInput{Queues: queues})
}

// MaxAge is the max-age policy of a queue and consumer group, 0 for none.
func (w *Workflow) MaxAge(queue, group string) time.Duration {
	cfg, err := w.f.Config()
	if err != nil {
		return 0
	}
	if p, ok := cfg.PolicyFor(queue, group); ok {
		return p.MaxAge.D()
	}
	return 0
}

// Show is what dlq show prints for an address.
func (w *Workflow) Show(ctx context.Context, addr client.Address) (ShowResult, error) {
	return lookup(ctx, w.cl, w.ld, addr, w.f.Now())
}

// WriteShow writes a Show result as dlq show does, warnings included.
func WriteShow(out io.Writer, pal *render.Palette, res ShowResult) {
	writeShow(out, out, pal, res)
}

// Decide records a decision from a dlq decide command line (its
// arguments after "decide"), parsed and checked by that command. It
// returns the batch and how many messages it holds.
func (w *Workflow) Decide(ctx context.Context, args []string) (*ledger.Batch, int, error) {
	o, err := parse(w.f, NewCmdDecide, args)
	if err != nil {
		return nil, 0, err
	}
	sel, err := o.Selection.Build(w.f, o.Args)
	if err != nil {
		return nil, 0, err
	}
	if err := cmdutil.RequireSelection(sel, "dlq decide"); err != nil {
		return nil, 0, err
	}
	now := w.f.Now()
	b := &ledger.Batch{Action: o.Action, By: o.By, At: now, Why: o.Why, Owner: o.Owner}
	if b.By == "" {
		b.By = w.f.User()
	}
	if o.Until != "" {
		if b.Until, err = parseUntil(o.Until, now); err != nil {
			return nil, 0, cmdutil.FlagErrorf("%v", err)
		}
	}
	n, err := recordDecision(ctx, w.cl, w.ld, sel, b)
	return b, n, err
}

// Planned is a replay or rm planned from its command line and not yet
// run: nothing has been written to the broker or the ledger.
type Planned struct {
	p *pending
}

// Plan parses a dlq replay or dlq rm command line (verb is "replay" or
// "rm"; args follow it) with that command's own flags and checks, and
// plans the batch as its --dry-run would.
func (w *Workflow) Plan(ctx context.Context, verb string, args []string) (*Planned, error) {
	var sp execSpec
	switch verb {
	case "replay":
		o, err := parse(w.f, NewCmdReplay, args)
		if err != nil {
			return nil, err
		}
		sp = replaySpec(o)
	case "rm":
		o, err := parse(w.f, NewCmdRm, args)
		if err != nil {
			return nil, err
		}
		sp = rmSpec(o)
	default:
		return nil, fmt.Errorf("dlq: no verb %q to plan", verb)
	}
	p, err := prepare(ctx, w.f, sp)
	if err != nil {
		return nil, err
	}
	if len(p.in.items) > 0 {
		if err := p.makePlan(ctx); err != nil {
			return nil, err
		}
	}
	return &Planned{p: p}, nil
}

// BatchID is the id the batch is (or will be) recorded under.
func (pl *Planned) BatchID() string { return pl.p.batchID() }

// Messages is how many messages the batch holds (0: nothing matches).
func (pl *Planned) Messages() int { return len(pl.p.in.items) }

// Held is how many of them are under an active hold.
func (pl *Planned) Held() int { return pl.p.plan.Held }

// Rate is the batch's rate, messages a second (0 = unlimited).
func (pl *Planned) Rate() float64 { return pl.p.settings.Rate }

// SetRate changes the rate, and the plan's estimate; the rate is checked
// as --rate is.
func (pl *Planned) SetRate(r float64) error { return pl.p.setRate(r) }

// OverrideHold acts on messages under an active hold all the same, as
// --override-hold does.
func (pl *Planned) OverrideHold() { pl.p.sp.flags.OverrideHold = true }

// WritePlan writes the plan as the command prints it before it asks.
func (pl *Planned) WritePlan(w io.Writer, pal *render.Palette) {
	writePlan(w, pal, pl.p.plan)
}

// Outcome is what a run did.
type Outcome struct {
	Report *replay.Report
	// Next are the lines that say how to finish the batch (the resume
	// line, and what a resume cannot do), each a command to paste.
	Next []string
	// NewSince counts dead letters matching the selection that arrived
	// after the plan (they are not in the batch).
	NewSince int
	// Err is the ledger failure the run stopped on, if any.
	Err error
}

// Run records and executes the batch as the command does once it is
// confirmed, recording why; progress gets the number of addresses done.
// Holds are refused as the command refuses them without --override-hold.
// Cancelling ctx interrupts it like SIGINT: calls in flight finish and
// the batch resumes with Outcome.Resume.
func (pl *Planned) Run(ctx context.Context, why string, progress func(done int)) (*Outcome, error) {
	p := pl.p
	if strings.TrimSpace(why) == "" {
		return nil, cmdutil.FlagErrorf("a reason is required: it is recorded in the ledger")
	}
	if p.plan.Held > 0 && !p.sp.flags.OverrideHold {
		return nil, cmdutil.UsageError(fmt.Errorf("%s under an active hold; nothing done", plural(p.plan.Held, "message is", "messages are")))
	}
	p.why = why
	res, err := p.run(ctx, io.Discard, progress)
	if res == nil {
		return nil, err
	}
	return &Outcome{Report: res.rep, Next: res.next, NewSince: res.newSince, Err: err}, nil
}

// Write writes the outcome as the command's summary, with the resume
// line when part of the batch is left.
func (o *Outcome) Write(w io.Writer, pal *render.Palette) {
	writeReport(w, pal, o.Report)
	if o.NewSince > 0 {
		fmt.Fprintf(w, "%s matching the selection arrived since the plan; they are not in this batch.\n", plural(o.NewSince, "new dead letter", "new dead letters"))
	}
	if o.Err != nil {
		fmt.Fprintf(w, "%s %s\n", pal.Red("error:"), render.Clean(o.Err.Error()))
	}
	for _, l := range o.Next {
		fmt.Fprintln(w, l)
	}
}

// parse runs a command's flag parsing and checks on args and returns its
// options, without running it.
func parse[O any](f *cmdutil.Factory, newCmd func(*cmdutil.Factory, func(*O) error) *cobra.Command, args []string) (*O, error) {
	var got *O
	cmd := newCmd(f, func(o *O) error { got = o; return nil })
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	err := cmd.Execute()
	if err == nil && got == nil {
		err = errors.New("the command line was not run") // --help, say
	}
	if err != nil {
		var fe *cmdutil.FlagError
		if errors.As(err, &fe) {
			return nil, err
		}
		return nil, cmdutil.FlagErrorf("%v", err)
	}
	return got, nil
}

// CommandLine is args as a shell line a person can paste.
func CommandLine(args ...string) string { return cmdutil.CommandLine(args...) }
