package dlq

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
	"github.com/itchyny/gojq"
	"github.com/spf13/cobra"
)

// ReplayOptions are `dlq replay`'s flags.
type ReplayOptions struct {
	Selection     cmdutil.SelectionFlags
	Exec          ExecFlags
	Concurrency   int
	ToQueue       string
	Transform     string
	Via           string
	MaxFailures   int
	MaxGeneration int
	RetryUnknown  bool
	Canary        int
	CanaryWait    time.Duration
	MaxRefailures int
	Args          []string
}

// NewCmdReplay re-publishes dead letters.
func NewCmdReplay(f *cmdutil.Factory, runF func(*ReplayOptions) error) *cobra.Command {
	o := &ReplayOptions{}
	cmd := &cobra.Command{
		Use:   "replay [ADDRESS...] [selection flags]",
		Short: "Re-publish a frozen batch of dead letters, rate-limited and idempotent",
		Long: `Replay snapshots the selection into a batch recorded in the ledger, prints the
plan, then re-publishes each message once, at --rate, with at most
--concurrency calls in flight. Each address is journaled (pending →
published → removed), so a crash or a second run never publishes twice:
resume with --batch ID. The manual path (get, push with a transaction id
derived from the address, delete) makes every retry safe; the /retry
endpoint is used by --via auto when nothing is transformed or redirected.
Undecryptable envelopes are never replayed. SIGINT stops scheduling, lets
calls in flight finish and prints how to resume.`,
		Example: `  $ dlqctl dlq replay --class 1a2b3c4d --dry-run
  $ dlqctl dlq replay --queue orders --error 'unknown payload version' --rate 20 --why "v4 parser deployed" --yes
  $ dlqctl dlq replay --batch 20261130T031502-9f3a --yes          # resume after a crash
  $ dlqctl dlq replay --queue orders --cg billing --to-queue orders-recovery --why "billing only" --yes
  $ dlqctl dlq replay --queue orders --transform '.version = 4' --why "fix version" --yes`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Args = args
			if err := validateReplay(cmd, o); err != nil {
				return err
			}
			if runF != nil {
				return runF(o)
			}
			return replayRun(cmd.Context(), f, o)
		},
	}
	cmdutil.AddSelectionFlags(cmd, &o.Selection, true)
	addExecFlags(cmd, &o.Exec, "replay")
	fl := cmd.Flags()
	fl.IntVar(&o.Concurrency, "concurrency", 4, "at most this many calls in flight")
	fl.StringVar(&o.ToQueue, "to-queue", "", "publish to this (recovery) queue instead of the original")
	fl.StringVar(&o.Transform, "transform", "", "jq expression applied to each payload before publishing (manual path)")
	fl.StringVar(&o.Via, "via", "auto", "path: auto, endpoint (/retry) or manual (get, push, delete)")
	fl.IntVar(&o.MaxFailures, "max-failures", 0, "stop scheduling after this many failed addresses (0 = never)")
	fl.IntVar(&o.MaxGeneration, "max-generation", 3, "refuse to replay a message that has already been replayed this many times")
	fl.BoolVar(&o.RetryUnknown, "retry-unknown", false, "re-attempt addresses left unknown (check the live queue first)")
	fl.IntVar(&o.Canary, "canary", 0, "replay this many first, wait --canary-wait, stop if any came back to the DLQ")
	fl.DurationVar(&o.CanaryWait, "canary-wait", 30*time.Second, "how long to wait after the canary")
	fl.IntVar(&o.MaxRefailures, "max-refailures", 0, "pause the batch when this many replayed messages failed again (0 = never)")
	return cmd
}

func addExecFlags(cmd *cobra.Command, e *ExecFlags, verb string) {
	fl := cmd.Flags()
	fl.StringVar(&e.Why, "why", "", "why this batch is "+map[string]string{"replay": "replayed", "rm": "discarded"}[verb]+" (recorded in the ledger)")
	fl.StringVar(&e.By, "by", "", "who decided (default: the OS user)")
	fl.BoolVarP(&e.Yes, "yes", "y", false, "do not ask for confirmation")
	fl.BoolVar(&e.DryRun, "dry-run", false, "print the plan; write nothing to the broker or the ledger")
	fl.Float64Var(&e.Rate, "rate", 10, "messages per second (0 = unlimited, only with --yes)")
	fl.IntVar(&e.Burst, "burst", 1, "how many may start at once before --rate applies")
	fl.StringVar(&e.BatchID, "batch", "", "execute or resume this recorded batch instead of a selection")
}

func validateReplay(cmd *cobra.Command, o *ReplayOptions) error {
	if err := validateExec(cmd, &o.Exec); err != nil {
		return err
	}
	switch o.Via {
	case replay.ViaAuto, replay.ViaManual:
	case replay.ViaEndpoint:
		if o.Transform != "" || o.ToQueue != "" {
			return cmdutil.FlagErrorf("--via endpoint cannot --transform or --to-queue: the /retry endpoint republishes the stored payload to its own queue")
		}
	default:
		return cmdutil.FlagErrorf("invalid --via %q: valid values are auto, endpoint, manual", o.Via)
	}
	if o.Concurrency < 1 || o.Concurrency > 256 {
		return cmdutil.FlagErrorf("invalid --concurrency %d: want 1 to 256", o.Concurrency)
	}
	if o.MaxFailures < 0 || o.MaxGeneration < 0 || o.Canary < 0 || o.MaxRefailures < 0 {
		return cmdutil.FlagErrorf("--max-failures, --max-generation, --canary and --max-refailures take 0 or more")
	}
	if o.Transform != "" {
		if _, err := gojq.Parse(o.Transform); err != nil {
			return cmdutil.FlagErrorf("invalid --transform: %v", err)
		}
	}
	return nil
}

func validateExec(cmd *cobra.Command, e *ExecFlags) error {
	if e.Rate < 0 {
		return cmdutil.FlagErrorf("invalid --rate %g: want messages per second, 0 for unlimited", e.Rate)
	}
	if e.Rate == 0 && !e.Yes && !e.DryRun {
		return cmdutil.FlagErrorf("--rate 0 (unlimited) needs --yes")
	}
	if e.Burst < 1 {
		return cmdutil.FlagErrorf("invalid --burst %d: want 1 or more", e.Burst)
	}
	if e.BatchID != "" && cmd.Flags().Changed("all") {
		return cmdutil.FlagErrorf("--batch executes a recorded batch; it takes no selection")
	}
	return nil
}

// compileTransform turns a jq expression into a payload function that
// must yield exactly one value.
func compileTransform(expr string) (func(json.RawMessage) (json.RawMessage, error), error) {
	q, err := gojq.Parse(expr)
	if err != nil {
		return nil, err
	}
	code, err := gojq.Compile(q)
	if err != nil {
		return nil, err
	}
	return func(in json.RawMessage) (json.RawMessage, error) {
		var v any
		if err := json.Unmarshal(in, &v); err != nil {
			return nil, fmt.Errorf("payload is not JSON: %v", err)
		}
		it := code.Run(v)
		out, ok := it.Next()
		if !ok {
			return nil, fmt.Errorf("the expression yielded nothing")
		}
		if err, isErr := out.(error); isErr {
			return nil, err
		}
		if _, more := it.Next(); more {
			return nil, fmt.Errorf("the expression yielded more than one value")
		}
		return json.Marshal(out)
	}, nil
}

func replayRun(ctx context.Context, f *cmdutil.Factory, o *ReplayOptions) error {
	return execute(ctx, f, execSpec{
		action: replay.Replay, verb: "replay", flags: &o.Exec, sel: &o.Selection, args: o.Args,
		configure: func(opts *replay.Options) error {
			opts.Concurrency = o.Concurrency
			opts.Via = o.Via
			opts.ToQueue = o.ToQueue
			opts.MaxFailures = o.MaxFailures
			opts.MaxGeneration = o.MaxGeneration
			opts.RetryUnknown = o.RetryUnknown
			opts.Canary = o.Canary
			opts.CanaryWait = o.CanaryWait
			opts.MaxRefailures = o.MaxRefailures
			if o.Transform != "" {
				t, err := compileTransform(o.Transform)
				if err != nil {
					return cmdutil.FlagErrorf("invalid --transform: %v", err)
				}
				opts.Transform = t
			}
			return nil
		},
		plan: func(p *replay.PlanOptions) {
			p.Via, p.ToQueue, p.MaxGeneration = o.Via, o.ToQueue, o.MaxGeneration
		},
		destination: o.ToQueue,
	})
}

// execSpec is what differs between replay and rm.
type execSpec struct {
	action      string
	verb        string
	flags       *ExecFlags
	sel         *cmdutil.SelectionFlags
	args        []string
	configure   func(*replay.Options) error
	plan        func(*replay.PlanOptions)
	destination string
	allRows     bool // rm: count other groups' rows a delete also discards
}

func execute(ctx context.Context, f *cmdutil.Factory, sp execSpec) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	ef := sp.flags
	var sel *replay.Selection
	if ef.BatchID == "" {
		if sel, err = sp.sel.Build(f, sp.args); err != nil {
			return err
		}
		if err := cmdutil.RequireSelection(sel, "dlq "+sp.verb); err != nil {
			return err
		}
	} else if len(sp.args) > 0 || sp.sel.Queue != "" || sp.sel.FromFile != "" || sp.sel.Class != "" || sp.sel.Error != "" {
		return cmdutil.FlagErrorf("--batch executes a recorded batch; it takes no selection")
	}
	opts := replay.Options{Action: sp.action, Rate: ef.Rate, Burst: ef.Burst, Now: f.Now}
	if sp.configure != nil {
		if err := sp.configure(&opts); err != nil {
			return err
		}
	}
	cl, err := f.Client()
	if err != nil {
		return err
	}
	ld, err := f.Ledger(ctx)
	if err != nil {
		return err
	}
	in, err := gather(ctx, f, cl, ld, sel, ef.BatchID, sp.action)
	if err != nil {
		return err
	}
	why := ef.Why
	if in.batch != nil && why == "" {
		why = in.batch.Why
	}
	if why == "" && !ef.DryRun {
		return cmdutil.FlagErrorf("--why is required: say why this batch is %s (it is recorded in the ledger)", map[string]string{"replay": "replayed", "rm": "discarded"}[sp.verb])
	}
	if len(in.items) == 0 {
		reportMissing(f, in.missing)
		if len(in.missing) > 0 {
			return &cmdutil.ExitError{Code: cmdutil.ExitNotFound, Silent: true}
		}
		fmt.Fprintln(f.IO.ErrOut, "Nothing to "+sp.verb+": no dead letter matches.")
		return nil
	}
	po := replay.PlanOptions{Action: sp.action, Rate: ef.Rate}
	if sp.plan != nil {
		sp.plan(&po)
	}
	if sp.action == replay.Replay && sp.destination == "" {
		po.QueueGroups = queueGroups(ctx, cl, in.items)
	}
	if sp.allRows {
		if po.AllRows, err = rowCounts(ctx, cl, in.items); err != nil {
			return err
		}
	}
	plan := replay.MakePlan(in.items, po)
	if err := printPlan(f, fm, plan, ef.DryRun); err != nil {
		return err
	}
	if ef.DryRun {
		reportMissing(f, in.missing)
		return nil
	}
	if !ef.Yes {
		if err := confirm(f, fmt.Sprintf("%s %s?", strings.ToUpper(sp.verb[:1])+sp.verb[1:], plural(len(in.items), "message", "messages"))); err != nil {
			return err
		}
	}
	by := ef.By
	if by == "" {
		by = f.User()
	}
	batch := in.batch
	now := f.Now()
	verb := "Executing recorded"
	if batch == nil {
		verb = "Recorded"
		batch = &ledger.Batch{Broker: cl.Server(), Action: map[string]string{replay.Replay: ledger.ActionReplay, replay.Discard: ledger.ActionDiscard}[sp.action],
			By: by, At: now, Why: why, Selection: sel.String(), Destination: sp.destination, Status: ledger.StatusRunning}
		if err := ld.CreateBatch(ctx, batch, toManifest(in.items)); err != nil {
			return err
		}
	}
	jctx := context.WithoutCancel(ctx)
	if err := ld.SetBatchStatus(jctx, batch.ID, ledger.StatusRunning, now, batch.Outcome); err != nil {
		return err
	}
	_ = ld.Audit(jctx, ledger.AuditEntry{At: now, Broker: cl.Server(), BatchID: batch.ID, Kind: "execution-started", By: by,
		Detail: fmt.Sprintf("%s of %d address(es) at rate %g", sp.verb, len(in.items), ef.Rate)})
	fmt.Fprintf(f.IO.ErrOut, "%s batch %s.\n", verb, batch.ID)

	opts.Broker, opts.BatchID, opts.Owner, opts.Fresh, opts.Absent = cl.Server(), batch.ID, ledger.NewOwner(cmdutil.Nonce()), in.fresh, in.absent
	if sp.action == replay.Discard {
		opts.Archive = func(ctx context.Context, rows []client.Row) error {
			a := ld.NewArchiver(cl.Server(), f.Now())
			for _, r := range rows {
				if err := a.Add(ctx, r); err != nil {
					return err
				}
			}
			return a.Flush(ctx)
		}
	}
	tick, finish := progress(f, len(in.items), sp.verb)
	opts.Progress = tick
	rep, err := replay.NewEngine(cl, ld, opts).Run(ctx, in.items)
	finish()
	if err != nil {
		return err
	}
	// The batch's record is its journal's, so a resumed batch shows
	// everything it did, not only its last run.
	outcome, err := ld.BatchOutcome(jctx, batch.ID)
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
	end := f.Now()
	if err := ld.SetBatchStatus(jctx, batch.ID, status, now, outcome); err != nil {
		return err
	}
	_ = ld.Audit(jctx, ledger.AuditEntry{At: end, Broker: cl.Server(), BatchID: batch.ID, Kind: "execution-" + status, By: by,
		Detail: fmt.Sprintf("%v", rep.Outcome())})
	if in.fresh && !rep.Interrupted && sel != nil && len(sel.Addresses) == 0 {
		own := map[string]bool{}
		for _, t := range rep.ReplayTxIDs {
			own[t] = true
		}
		if n := newSince(ctx, cl, sel, in.planAt, in.items, own); n > 0 {
			fmt.Fprintf(f.IO.ErrOut, "%s matching the selection arrived since the plan; they are not in this batch.\n", plural(n, "new dead letter", "new dead letters"))
		}
	}
	cmdLine := "dlqctl dlq " + sp.verb + " --batch " + batch.ID + " --yes"
	return printReport(f, fm, rep, cmdLine, in.missing)
}

// rowCounts counts the rows each item's address has in the DLQ now, every
// consumer group included, reading only the items' queues.
func rowCounts(ctx context.Context, cl *client.Client, items []replay.Item) (map[client.Address]int, error) {
	want := map[client.Address]bool{}
	var queues []string
	for _, it := range items {
		want[it.Address] = true
		if !contains(queues, it.Queue) {
			queues = append(queues, it.Queue)
		}
	}
	out := map[client.Address]int{}
	for _, q := range queues {
		for r, err := range cl.Rows(ctx, client.ListQuery{Queue: q, Limit: pageSize}) {
			if err != nil {
				return nil, err
			}
			if r.Queue == q && want[r.Address()] {
				out[r.Address()]++
			}
		}
	}
	return out, nil
}
