package dlq

import (
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/spf13/cobra"
)

// RestoreOptions are `dlq restore`'s flags.
type RestoreOptions struct {
	Selection cmdutil.SelectionFlags
	Exec      ExecFlags
	Publish   PublishFlags
	Args      []string

	given batch.Given
}

// PublishFlags are the flags of a batch that publishes messages from
// outside the DLQ (a restore, an import): where to and how.
type PublishFlags struct {
	Concurrency int
	ToQueue     string
	ToPartition string
	Transform   string
	NoTrace     bool
}

func addPublishFlags(cmd *cobra.Command, p *PublishFlags, action string) {
	fl := cmd.Flags()
	act := deadletter.ActionOf(action)
	fl.IntVar(&p.Concurrency, "concurrency", batch.DefaultSettings(action).Concurrency, "at most this many calls in flight")
	fl.StringVar(&p.ToQueue, "to-queue", "", "publish to this queue instead of each message's own")
	fl.StringVar(&p.ToPartition, "to-partition", "", "publish to this partition instead of each message's own")
	fl.StringVar(&p.Transform, "transform", "", "jq expression applied to each payload before publishing, tried on every payload while planning")
	original := map[string]string{deadletter.FromArchive: "the archived original", deadletter.FromFile: "the original"}[act.From]
	fl.BoolVar(&p.NoTrace, "no-trace", false, "write no trace event in the broker for the copies (on Queen 1.x and 2.x, each copy otherwise gets one naming the batch, its reason and "+original+"; a failed one never fails the "+act.Name+")")
}

func (p PublishFlags) validate() error {
	if err := batch.ValidateConcurrency(p.Concurrency); err != nil {
		return err
	}
	return batch.ValidateTransform(p.Transform)
}

// settings are what the flags ask of the batch, with the run's rate.
func (p PublishFlags) settings(e ExecFlags) batch.Settings {
	return batch.Settings{Rate: e.Rate, Burst: e.Burst, Concurrency: p.Concurrency, ToQueue: p.ToQueue, ToPartition: p.ToPartition, Transform: p.Transform, NoTrace: p.NoTrace}
}

// NewCmdRestore re-publishes what dlq rm archived.
func NewCmdRestore(f *cmdutil.Factory) *cobra.Command {
	o := &RestoreOptions{}
	cmd := &cobra.Command{
		Use:   "restore [ADDRESS...] [selection flags]",
		Short: "Undo a discard: re-publish dead letters dlq rm archived, each once",
		Long: `Restore re-publishes archived dead letters that a discard deleted, from the
payload the ledger's archive kept, to their own queue and partition (or
--to-queue, --to-partition). The selection is of the archive, as
dlq ls --archived lists it: its flags, addresses, --from-file, or --batch of
a discard batch for everything that batch archived. Like a replay it is a
batch recorded in the ledger with who and why, planned before anything is
sent (--dry-run prints the plan), at --rate with at most --concurrency
calls in flight, journaled message by message.

Each message is published under a transaction id derived from its address
(dlqa-…), so restoring it again (a rerun, a resume after a crash, a second
person) is a duplicate the broker drops, never a second copy; the journal
says it was restored, and by which batch. What cannot be restored is said,
never skipped silently: a message already restored, one that was replayed
rather than discarded, an archived envelope the broker could not decrypt,
a destination queue that no longer exists. Resume with --batch ID.`,
		Example: `  $ dlqctl dlq restore --batch 20261130T031502-9f3a --dry-run       # what that discard archived
  $ dlqctl dlq restore --queue orders --class 1a2b3c4d --why "the customer was real" --yes
  $ dlqctl dlq restore 6f1c0a4e-…/order:8812:v3 --to-queue orders-recovery --why "check first" --yes`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Args = args
			o.given = cmdutil.GivenIn(cmd.Flags())
			if err := validateExec(&o.Exec); err != nil {
				return err
			}
			if err := o.Publish.validate(); err != nil {
				return err
			}
			return execute(cmd.Context(), f, restoreSpec(o))
		},
	}
	cmdutil.AddSelectionFlags(cmd, &o.Selection, true)
	addExecFlags(cmd, &o.Exec, "restore")
	addPublishFlags(cmd, &o.Publish, deadletter.Restore)
	return cmd
}

// restoreSpec is what restore's flags ask of execute.
func restoreSpec(o *RestoreOptions) execSpec {
	return execSpec{verb: "restore", flags: &o.Exec, selection: &o.Selection, args: o.Args, base: batch.Request{
		Action: deadletter.Restore, Given: o.given,
		Settings: o.Publish.settings(o.Exec),
	}}
}
