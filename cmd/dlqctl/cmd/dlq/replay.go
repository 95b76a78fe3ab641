package dlq

import (
	"context"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// ReplayOptions are `dlq replay`'s flags.
type ReplayOptions struct {
	Selection cmdutil.SelectionFlags
	// Exec holds the batch settings the flags give (Exec.Settings).
	Exec         ExecFlags
	RetryUnknown bool
	Canary       int
	CanaryWait   time.Duration
	// Into is a destination in another broker (--to-context, --to-server).
	Into IntoFlags
	Args []string
}

// NewCmdReplay re-publishes dead letters.
func NewCmdReplay(f *cmdutil.Factory, runF func(*ReplayOptions) error) *cobra.Command {
	o := &ReplayOptions{}
	return newBatchCmd(batchCommand{action: deadletter.Replay, exec: &o.Exec, selection: &o.Selection, cmd: &cobra.Command{
		Use:   "replay [ADDRESS...] [selection flags]",
		Short: "Re-publish a frozen batch of dead letters, rate-limited and idempotent",
		Long: `Replay snapshots the selection into a batch recorded in the ledger, prints the
plan, then re-publishes each message once, at --rate, with at most
--concurrency calls in flight. Each address is journaled (pending →
published → removed), so a crash or a second run never publishes twice:
resume with --batch ID.

The path (--via auto) follows the broker's release, which the plan names:
on Queen 1.6 and 2.x, the broker's own move (one call a message, atomic:
the copy is published as dlq:<row id>, the id the broker's console uses
too, so a row the console replays meanwhile is not published again); a
message several groups dead-lettered, or a --transform'ed payload, is
pushed under that same id, then deleted. On older brokers, the manual
path: push with a transaction id derived from the address, then delete,
so every retry is safe. --via endpoint takes the broker's /retry (before
1.6 it mints a fresh id: a lost answer leaves the address unknown).
Undecryptable envelopes are never replayed. SIGINT stops scheduling, lets
calls in flight finish and prints how to resume.

--to-context NAME (or --to-server URL with --to-token-file) replays into
another broker, of any Queen line: the selection is read here, published
there as an import batch recorded in the destination's ledger (each message
under an id derived from this broker's identity and its address, dlqi-…, so
a rerun or a second person publishes nothing twice), then deleted here as a
discard batch of exactly the messages the destination holds (archived
first). --keep copies and deletes nothing. This broker's token is never
sent to the destination, nor the destination's here. A run stopped
anywhere is taken up by running the same command again.`,
		Example: `  $ dlqctl dlq replay --class 1a2b3c4d --dry-run
  $ dlqctl dlq replay --queue orders --error 'unknown payload version' --rate 20 --why "v4 parser deployed" --yes
  $ dlqctl dlq replay --batch 20261130T031502-9f3a --yes          # resume after a crash
  $ dlqctl dlq replay --queue orders --cg billing --to-queue orders-recovery --why "billing only" --yes
  $ dlqctl dlq replay --queue orders --transform '.version = 4' --why "fix version" --yes
  $ dlqctl --context queen-0 dlq replay --queue orders --to-context queen-2 --why "migrated to 2.2" --yes
  $ dlqctl --context prod dlq replay --class 1a2b3c4d --to-context staging --keep --why "reproduce INC-231" --yes`,
	}, notes: map[batch.Given]string{batch.GivenToPartition: "; only into another broker (--to-context, --to-server)"},
		flags: func(fl *pflag.FlagSet) {
			fl.BoolVar(&o.RetryUnknown, "retry-unknown", false, "re-attempt addresses left unknown (check the live queue first)")
			fl.IntVar(&o.Canary, "canary", 0, "replay this many first, wait --canary-wait, stop if any came back to the DLQ")
			fl.DurationVar(&o.CanaryWait, "canary-wait", 30*time.Second, "how long to wait after the canary")
			addIntoFlags(fl, &o.Into)
		},
		check: func(cmd *cobra.Command, _ []string) error { return validateReplay(cmd, o) },
		run: func(ctx context.Context, args []string) error {
			o.Args = args
			if runF != nil {
				return runF(o)
			}
			return replayRun(ctx, f, o)
		}})
}

// validateReplay is replay's own rules: a destination in another broker,
// and the canary.
func validateReplay(cmd *cobra.Command, o *ReplayOptions) error {
	if err := validateInto(cmd, o.Into, o.Exec.Settings); err != nil {
		return err
	}
	if o.Canary < 0 {
		return cmdutil.FlagErrorf("invalid --canary %d: want 0 or more", o.Canary)
	}
	if o.CanaryWait < 0 {
		return cmdutil.FlagErrorf("invalid --canary-wait %s: want a duration of 0 or more", o.CanaryWait)
	}
	return nil
}

func replayRun(ctx context.Context, f *cmdutil.Factory, o *ReplayOptions) error {
	if o.Into.set() {
		return replayInto(ctx, f, o)
	}
	return execute(ctx, f, replaySpec(o))
}

// replaySpec is what replay's flags ask of execute.
func replaySpec(o *ReplayOptions) execSpec {
	return execSpec{verb: "replay", flags: &o.Exec, selection: &o.Selection, args: o.Args, base: batch.Request{
		Action:   deadletter.Replay,
		Settings: o.Exec.Settings,
		Run:      batch.RunOptions{RetryUnknown: o.RetryUnknown, Canary: o.Canary, CanaryWait: o.CanaryWait},
	}}
}
