package dlq

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

// ExecFlags are the flags replay, rm and restore share.
type ExecFlags struct {
	Why          string
	By           string
	Yes          bool
	DryRun       bool
	BatchID      string
	OverrideHold bool
	SkipHeld     bool
	// Broker is what the person says of a broker the ledger may know
	// under another name (--same-broker-as, --other-broker).
	Broker cmdutil.BrokerAnswer
	// Settings are the batch settings the command's flags give (its
	// action's defaults where none is given).
	Settings batch.Settings

	// action is the batch action the flags are for; given, the settings
	// the command line gave (newBatchCmd).
	action string
	given  batch.Given
}

// addExecFlags registers the flags every batch command has, its
// settings' among them (notes: as addSettingFlags).
func addExecFlags(cmd *cobra.Command, e *ExecFlags, verb string, notes map[batch.Given]string) {
	fl := cmd.Flags()
	fl.StringVar(&e.Why, "why", "", "why this batch is "+deadletter.ActionOf(verb).Past+" (recorded in the ledger)")
	fl.StringVar(&e.By, "by", "", "who decided (default: the OS user)")
	fl.BoolVarP(&e.Yes, "yes", "y", false, "do not ask for confirmation")
	fl.BoolVar(&e.DryRun, "dry-run", false, "print the plan; write nothing to the broker or the ledger")
	addSettingFlags(cmd, e, verb, notes)
	fl.StringVar(&e.BatchID, "batch", "", "execute or resume this recorded batch instead of a selection (with the settings it was run with; last: this broker's newest the command runs)")
	if !deadletter.ActionOf(verb).Outside() { // an archived or exported message is out of a hold's reach
		fl.BoolVar(&e.OverrideHold, "override-hold", false, "act on messages under an active hold (dlq decide --action hold) all the same")
		fl.BoolVar(&e.SkipHeld, "skip-held", false, "leave messages under an active hold out of the batch and act on the rest")
	}
	fl.StringVar(&e.Broker.SameAs, "same-broker-as", "", "this broker is the one the ledger knows by this name or URL: file its history there (asked when the ledger may know it under another name; recorded)")
	fl.BoolVar(&e.Broker.Other, "other-broker", false, "this broker is not the one the ledger knows under another name that reaches the same address (recorded)")
}

func validateExec(e *ExecFlags) error {
	if err := e.Settings.Check(e.action); err != nil {
		return err
	}
	if e.SkipHeld && e.OverrideHold {
		return cmdutil.FlagErrorf("--skip-held and --override-hold contradict each other: leave held messages out, or act on them too")
	}
	if e.SkipHeld && e.BatchID != "" {
		return cmdutil.FlagErrorf("--skip-held selects a new batch; a recorded batch (--batch) keeps its messages")
	}
	if e.Settings.Rate == 0 && !e.Yes && !e.DryRun {
		return cmdutil.FlagErrorf("--rate 0 (unlimited) needs --yes")
	}
	if e.Broker.SameAs != "" && e.Broker.Other {
		return cmdutil.FlagErrorf("--same-broker-as and --other-broker contradict each other")
	}
	return nil
}

// execSpec is what replay or rm asks of execute: the command's verb,
// its flags and arguments, and the batch request its own flags make
// (the action and its settings).
type execSpec struct {
	verb      string
	flags     *ExecFlags
	selection *cmdutil.SelectionFlags
	args      []string
	base      batch.Request
	// file is the export file an import publishes (no selection).
	file *batch.File
	// built is a selection made by the program, not typed (a replay into
	// another broker deletes here what the destination holds).
	built *deadletter.Selection
	// before runs once the batch is planned and confirmed, before it is
	// recorded (dlq export --move writes its file there); planned is
	// told the plan of a dry run (what it would write).
	before, planned func(ctx context.Context, p *batch.Planned) error
	// doing is what "Nothing to …" says is not done (the verb's, unless
	// another command runs the verb's batch).
	doing string
}

// request is the batch request of a command line: the selection built
// from the flags, or the recorded batch; --batch takes no selection.
func (sp execSpec) request(f *cmdutil.Factory) (batch.Request, error) {
	req := sp.base
	req.Given = sp.flags.given
	req.BatchID, req.Why, req.SkipHeld, req.OverrideHold, req.PlanOnly = sp.flags.BatchID, sp.flags.Why, sp.flags.SkipHeld, sp.flags.OverrideHold, sp.flags.DryRun
	if sp.flags.By != "" {
		by, err := f.Who(sp.flags.By)
		if err != nil {
			return req, err
		}
		req.By = by
	}
	if sp.flags.BatchID != "" {
		if sp.selection != nil && sp.selection.Any(sp.args) || sp.file != nil {
			return req, cmdutil.FlagErrorf("--batch executes a recorded batch; it takes no selection")
		}
		return req, nil
	}
	if sp.file != nil {
		req.File = sp.file
		return req, nil
	}
	if sp.built != nil {
		req.Selection = sp.built
		return req, nil
	}
	sel, err := sp.selection.BuildRequired(f, sp.args, "dlq "+sp.verb)
	if err != nil {
		return req, err
	}
	sel.Acting = "dlq " + sp.verb
	req.Selection = sel
	return req, nil
}

func execute(ctx context.Context, f *cmdutil.Factory, sp execSpec) error {
	// The batch holds the collector at half the default growth from
	// Prepare on (batch.Prepare); set from the command's start, what
	// reading the config and opening the ledger leave behind is collected
	// at that pace too, and the peak is lower (BenchmarkBatchMemory;
	// docs/performance.md).
	defer debug.SetGCPercent(debug.SetGCPercent(50))
	fm, err := f.Format()
	if err != nil {
		return err
	}
	flags := sp.flags
	p, err := prepare(ctx, f, sp)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := p.Unreasoned(); err != nil && !flags.DryRun {
		return refusal(err, sp)
	}
	if p.Messages() == 0 {
		return nothingToDo(f, sp, p)
	}
	pl, err := p.MakePlan(ctx)
	if err != nil {
		return err
	}
	if pl.Messages() == 0 {
		fmt.Fprintf(f.IO.ErrOut, "Nothing to %s: every dead letter that matches is under an active hold (%d left out by --skip-held).\n", sp.verb, p.SkippedHeld())
		return nil
	}
	if err := writePlan(f, fm, pl, flags.DryRun); err != nil {
		return err
	}
	if flags.DryRun {
		return dryRunEnd(ctx, sp, pl)
	}
	if err := pl.Refusal(batch.Go{}); err != nil {
		return refusal(err, sp)
	}
	if !flags.Yes {
		question := deadletter.ActionOf(sp.base.Action).Title
		if err := confirm(f, fmt.Sprintf("%s %s?", question, render.Plural(p.Messages(), "message", "messages"))); err != nil {
			return err
		}
	}
	if sp.before != nil {
		if err := sp.before(ctx, pl); err != nil {
			return err
		}
	}
	tick, paused, finish := progress(f, pl.Messages(), sp.verb)
	res, err := pl.Run(ctx, batch.Go{}, batch.Hooks{Progress: tick, Paused: paused, Recorded: func(id string, fresh bool) {
		fmt.Fprintf(f.IO.ErrOut, "%s batch %s.\n", map[bool]string{true: "Recorded", false: "Executing recorded"}[fresh], id)
	}})
	finish()
	return ran(ctx, f, fm, sp, pl, res, err)
}

// prepare stages the batch the command line asks for, once it knows
// which broker's history it continues.
func prepare(ctx context.Context, f *cmdutil.Factory, sp execSpec) (*batch.Pending, error) {
	flags := sp.flags
	req, err := sp.request(f)
	if err != nil {
		return nil, err
	}
	if !flags.DryRun || flags.Broker.SameAs != "" || flags.Broker.Other {
		// Which broker's history this continues, before anything is read
		// for it: a second name's history cannot see the first's.
		if err := f.ConfirmBroker(ctx, flags.Broker); err != nil {
			return nil, err
		}
	}
	e, err := f.BatchEnv(ctx)
	if err != nil {
		return nil, err
	}
	if req.BatchID != "" {
		if req.BatchID, err = f.ResolveBatch(ctx, e.Ledger, req.BatchID, deadletter.ActionOf(req.Action).BatchesRun()...); err != nil {
			return nil, err
		}
	}
	return batch.Prepare(ctx, e, req)
}

// nothingToDo says why a batch with no message does nothing: addresses
// not dead-lettered (exit 5), what a restore or an import leaves out, or
// a selection that matches nothing.
func nothingToDo(f *cmdutil.Factory, sp execSpec, p *batch.Pending) error {
	present.Missing(f.IO.ErrOut, p.Missing())
	if len(p.Missing()) > 0 {
		return &cmdutil.ExitError{Code: cmdutil.ExitNotFound, Silent: true}
	}
	switch deadletter.ActionOf(sp.base.Action).From {
	case deadletter.FromArchive:
		fmt.Fprintln(f.IO.ErrOut, present.NothingToRestore(p.Unrestorable()))
		return nil
	case deadletter.FromFile:
		fmt.Fprintln(f.IO.ErrOut, present.NothingToImport(p.Unrestorable()))
		return nil
	}
	doing := sp.verb
	if sp.doing != "" {
		doing = sp.doing
	}
	if why := inNoClass(p.Selection()); why != "" {
		fmt.Fprintln(f.IO.ErrOut, "Nothing to "+doing+why+".")
		return nil
	}
	fmt.Fprintln(f.IO.ErrOut, "Nothing to "+doing+": no dead letter matches.")
	return nil
}

// dryRunEnd ends a dry run once its plan is shown: what the command says
// of it (an export's would-write), and the exit the run would refuse with
// (a script that tries the plan first learns what the run would do); only
// the reason, which a plan needs none of, is left.
func dryRunEnd(ctx context.Context, sp execSpec, p *batch.Planned) error {
	if sp.planned != nil {
		if err := sp.planned(ctx, p); err != nil {
			return err
		}
	}
	if err := p.PlanRefusal(); err != nil {
		return refusal(err, sp)
	}
	return nil
}

// ran says how a run ended: awaiting approval (exit 6), a journal that
// could not be written (what was done, then the cause), or its report.
func ran(ctx context.Context, f *cmdutil.Factory, fm render.Format, sp execSpec, p *batch.Planned, res *batch.Result, err error) error {
	if res == nil {
		return refusal(err, sp)
	}
	if res.Awaiting {
		ld, _ := f.Ledger(ctx)
		fmt.Fprintln(f.IO.ErrOut, strings.Join(present.Awaiting(p.BatchID(), p.Messages(), p.ApprovalAbove(), res.Author, ld != nil && ld.Vouches(), sp.verb, f.Again, f.Another), "\n"))
		fmt.Fprintln(f.IO.Out, p.BatchID())
		return &cmdutil.ExitError{Code: cmdutil.ExitAwaiting, Silent: true}
	}
	next := present.Next(res.Next, sp.verb, p.BatchID(), f.Again)
	if err != nil {
		// The journal could not be written: say what was done and how to
		// go on, then the cause (exit 3).
		_ = printReport(f, fm, res.Report, next, p.Missing())
		return err
	}
	if res.NewSince > 0 {
		fmt.Fprintln(f.IO.ErrOut, present.NewSince(res.NewSince))
	}
	return printReport(f, fm, res.Report, next, p.Missing())
}

// writePlan writes a batch's plan. A dry run's plan is its output
// (stdout: replay --dry-run > plan.txt); before a real run, the plan is
// said on stderr with the progress.
func writePlan(f *cmdutil.Factory, fm render.Format, p *batch.Planned, dryRun bool) error {
	switch {
	case dryRun && !fm.Human():
		if err := render.Document(f.IO.Out, fm, p.Plan()); err != nil {
			return err
		}
	case dryRun:
		present.Plan(f.IO.Out, f.Palette(), p.Plan())
	default:
		present.Plan(f.IO.ErrOut, f.ErrPalette(), p.Plan())
		return nil
	}
	fmt.Fprintln(f.IO.ErrOut, "Dry run: nothing was written to the broker or the ledger.")
	present.Missing(f.IO.ErrOut, p.Missing())
	return nil
}

// refusal words a batch's refusal (batch.Refusal) in the command's flags.
func refusal(err error, sp execSpec) error {
	verb := sp.verb
	var held *batch.HeldError
	var awaiting *batch.AwaitingError
	var changed *batch.ChangedError
	var decided *batch.DecidedError
	switch {
	case errors.As(err, &decided):
		return cmdutil.UsageError(fmt.Errorf("%v: run it with dlqctl dlq %s --batch %s --yes, or cancel it (dlqctl decisions cancel %s --why …) to decide anew",
			err, verb, decided.BatchID, decided.BatchID))
	case errors.As(err, &awaiting):
		return &cmdutil.ExitError{Code: cmdutil.ExitAwaiting, Err: fmt.Errorf("%v: it runs once approved (dlqctl decisions approve %s --why …)", err, awaiting.BatchID)}
	case errors.As(err, &changed):
		return cmdutil.UsageError(fmt.Errorf("%w: run it as approved, or have the new plan approved (a new batch)", err))
	case errors.Is(err, batch.ErrNoReason):
		return cmdutil.FlagErrorf("--why is required: say why this batch is %s (it is recorded in the ledger)", deadletter.ActionOf(verb).Past)
	case errors.As(err, &held):
		how := "pass --override-hold to " + verb + " them anyway"
		if sp.flags.BatchID == "" { // a recorded batch keeps its messages
			how += ", or --skip-held to " + verb + " the rest"
		}
		return cmdutil.UsageError(fmt.Errorf("%s under an active hold (see the plan); %s", render.Plural(held.Messages, "message is", "messages are"), how))
	}
	return err
}

// confirm asks for a yes on a terminal; without one, --yes is required.
func confirm(f *cmdutil.Factory, question string) error {
	if !f.IO.CanPrompt() {
		return cmdutil.FlagErrorf("refusing to act without --yes (not a terminal to ask on)")
	}
	fmt.Fprintf(f.IO.ErrOut, "%s [y/N] ", question)
	line, _ := bufio.NewReader(f.IO.In).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New("not confirmed; nothing done")}
}

// progress returns a progress callback drawing a bar on a TTY stderr,
// and one for pauses: on the bar's line on a TTY, a line each elsewhere
// (a log says when a run waited and why).
func progress(f *cmdutil.Factory, total int, verb string) (func(int), func(string), func()) {
	if !f.IO.IsStderrTTY() || total == 0 {
		var since, said time.Time
		return nil, func(why string) {
			switch {
			case why != "":
				if since.IsZero() {
					since = time.Now()
				} else if time.Since(said) < time.Minute {
					return // a reason that changes (the lag) is said once a minute
				}
				said = time.Now()
				fmt.Fprintf(f.IO.ErrOut, "paused: %s\n", render.Clean(why))
			case !since.IsZero():
				fmt.Fprintf(f.IO.ErrOut, "going on after %s paused\n", render.Duration(time.Since(since).Round(time.Second)))
				since = time.Time{}
			}
		}, func() {}
	}
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(f.IO.ErrOut),
		progressbar.OptionSetDescription(verb),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionEnableColorCodes(f.IO.ColorEnabledStderr()),
	)
	// The rate is the description's, not the bar's: the bar's own falls
	// towards "0 msg/hr" while a run is paused, which reads as stuck.
	var mu sync.Mutex
	r := newRecentRate(10 * time.Second)
	why := ""
	describe := func() {
		if why != "" {
			bar.Describe("paused: " + render.Clean(why))
			return
		}
		bar.Describe(verb + r.String())
	}
	paused := func(w string) {
		mu.Lock()
		defer mu.Unlock()
		why = w
		if w == "" {
			r.restart() // the pause is no part of the rate after it
		}
		describe()
	}
	done := func(n int) {
		mu.Lock()
		defer mu.Unlock()
		if r.add(time.Now(), n) {
			describe()
		}
		_ = bar.Set(n)
	}
	return done, paused, func() { _ = bar.Finish() }
}

// recentRate is the rate of the last window of progress, said as
// " (12.5 msg/s)": a bar's rate over the whole run hides a change of pace.
type recentRate struct {
	window time.Duration
	times  []time.Time
	counts []int
	said   time.Time
}

func newRecentRate(window time.Duration) *recentRate { return &recentRate{window: window} }

// add records that n messages are done at t; it reports whether the
// rate is worth saying again (at most twice a second).
func (r *recentRate) add(t time.Time, n int) bool {
	r.times, r.counts = append(r.times, t), append(r.counts, n)
	i := 0
	for i < len(r.times)-1 && t.Sub(r.times[i]) > r.window {
		i++
	}
	r.times, r.counts = r.times[i:], r.counts[i:]
	if t.Sub(r.said) < 500*time.Millisecond {
		return false
	}
	r.said = t
	return true
}

func (r *recentRate) restart() { r.times, r.counts = nil, nil }

func (r *recentRate) String() string {
	if len(r.times) < 2 {
		return ""
	}
	d := r.times[len(r.times)-1].Sub(r.times[0]).Seconds()
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%.1f msg/s)", float64(r.counts[len(r.counts)-1]-r.counts[0])/d)
}

// printReport writes the end summary and returns the command's error.
func printReport(f *cmdutil.Factory, fm render.Format, rep *replay.Report, next []string, missing []deadletter.Address) error {
	if !fm.Human() {
		if err := render.Document(f.IO.Out, fm, rep); err != nil {
			return err
		}
	} else {
		present.Report(f.IO.ErrOut, f.ErrPalette(), rep)
	}
	if ph := rep.Phases; ph != nil && f.Globals.Debug {
		fmt.Fprintf(f.IO.ErrOut, "phases: plan %.3fs, record %.3fs, start %.3fs, run %.3fs, settle %.3fs\n", ph.Plan, ph.Record, ph.Start, ph.Run, ph.Settle)
	}
	for _, l := range next {
		fmt.Fprintln(f.IO.ErrOut, l)
	}
	present.Missing(f.IO.ErrOut, missing)
	switch {
	case rep.Interrupted:
		return cmdutil.ErrInterrupted
	case rep.AuthRefused:
		return &cmdutil.ExitError{Code: cmdutil.ExitAuth, Silent: true}
	case rep.BrokerDown:
		return &cmdutil.ExitError{Code: cmdutil.ExitBroker, Silent: true}
	case !rep.Clean():
		return cmdutil.ErrBreach
	case len(missing) > 0:
		return &cmdutil.ExitError{Code: cmdutil.ExitNotFound, Silent: true}
	}
	return nil
}
