package dlq

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
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
	Order         string
	Args          []string

	changed func(string) bool
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
			o.changed = changedIn(cmd.Flags())
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
	fl.StringVar(&o.Order, "order", replay.OrderPartition, "partition (each partition in enqueue order, a message not replayed holds back the rest), skip-gaps, or none")
	return cmd
}

func addExecFlags(cmd *cobra.Command, e *ExecFlags, verb string) {
	fl := cmd.Flags()
	fl.StringVar(&e.Why, "why", "", "why this batch is "+map[string]string{"replay": "replayed", "rm": "discarded"}[verb]+" (recorded in the ledger)")
	fl.StringVar(&e.By, "by", "", "who decided (default: the OS user)")
	fl.BoolVarP(&e.Yes, "yes", "y", false, "do not ask for confirmation")
	fl.BoolVar(&e.DryRun, "dry-run", false, "print the plan; write nothing to the broker or the ledger")
	fl.Float64Var(&e.Rate, "rate", 10, "messages per second (0 = unlimited, only with --yes); a resumed batch keeps its recorded rate unless this is given")
	fl.IntVar(&e.Burst, "burst", 1, "how many may start at once before --rate applies")
	fl.StringVar(&e.BatchID, "batch", "", "execute or resume this recorded batch instead of a selection (with the settings it was run with)")
	fl.BoolVar(&e.OverrideHold, "override-hold", false, "act on messages under an active hold (dlq decide --action hold) all the same")
	fl.BoolVar(&e.SkipHeld, "skip-held", false, "leave messages under an active hold out of the batch and act on the rest")
}

func validateReplay(cmd *cobra.Command, o *ReplayOptions) error {
	if err := validateExec(&o.Exec); err != nil {
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
	switch o.Order {
	case replay.OrderPartition, replay.OrderSkipGaps, replay.OrderNone:
	default:
		return cmdutil.FlagErrorf("invalid --order %q: valid values are partition, skip-gaps, none", o.Order)
	}
	if o.CanaryWait < 0 {
		return cmdutil.FlagErrorf("invalid --canary-wait %s: want a duration of 0 or more", o.CanaryWait)
	}
	if o.Transform != "" {
		if _, err := gojq.Parse(o.Transform); err != nil {
			return cmdutil.FlagErrorf("invalid --transform: %v", err)
		}
	}
	return nil
}

func validateExec(e *ExecFlags) error {
	if err := validateRate(e.Rate); err != nil {
		return err
	}
	if e.SkipHeld && e.OverrideHold {
		return cmdutil.FlagErrorf("--skip-held and --override-hold contradict each other: leave held messages out, or act on them too")
	}
	if e.SkipHeld && e.BatchID != "" {
		return cmdutil.FlagErrorf("--skip-held selects a new batch; a recorded batch (--batch) keeps its messages")
	}
	if e.Rate == 0 && !e.Yes && !e.DryRun {
		return cmdutil.FlagErrorf("--rate 0 (unlimited) needs --yes")
	}
	if e.Burst < 1 {
		return cmdutil.FlagErrorf("invalid --burst %d: want 1 or more", e.Burst)
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
	return execute(ctx, f, replaySpec(o))
}

// replaySpec is what replay's flags ask of execute.
func replaySpec(o *ReplayOptions) execSpec {
	return execSpec{
		action: replay.Replay, verb: "replay", flags: &o.Exec, sel: &o.Selection, args: o.Args, changed: o.changed,
		settings: Settings{Rate: o.Exec.Rate, Burst: o.Exec.Burst, Concurrency: o.Concurrency, Via: o.Via, ToQueue: o.ToQueue,
			Transform: o.Transform, MaxGeneration: o.MaxGeneration, MaxFailures: o.MaxFailures, MaxRefailures: o.MaxRefailures, Order: o.Order},
		configure: func(opts *replay.Options, s Settings) error {
			opts.Concurrency = s.Concurrency
			opts.Via = s.Via
			opts.ToQueue = s.ToQueue
			opts.MaxFailures = s.MaxFailures
			opts.MaxGeneration = s.MaxGeneration
			opts.RetryUnknown = o.RetryUnknown
			opts.Canary = o.Canary
			opts.CanaryWait = o.CanaryWait
			opts.MaxRefailures = s.MaxRefailures
			opts.Order = s.Order
			if opts.Order == "" {
				opts.Order = replay.OrderPartition
			}
			if s.Transform != "" {
				t, err := compileTransform(s.Transform)
				if err != nil {
					return cmdutil.FlagErrorf("invalid --transform: %v", err)
				}
				opts.Transform = t
			}
			return nil
		},
	}
}
