package dlq

import (
	"context"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/spf13/cobra"
)

// RestoreOptions are `dlq restore`'s flags.
type RestoreOptions struct {
	Selection cmdutil.SelectionFlags
	Exec      ExecFlags
	Args      []string
}

// NewCmdRestore re-publishes what dlq rm archived.
func NewCmdRestore(f *cmdutil.Factory) *cobra.Command {
	o := &RestoreOptions{}
	return newBatchCmd(batchCommand{action: deadletter.Restore, exec: &o.Exec, selection: &o.Selection, cmd: &cobra.Command{
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
	}, run: func(ctx context.Context, args []string) error {
		o.Args = args
		return execute(ctx, f, restoreSpec(o))
	}})
}

// restoreSpec is what restore's flags ask of execute.
func restoreSpec(o *RestoreOptions) execSpec {
	return execSpec{verb: "restore", flags: &o.Exec, selection: &o.Selection, args: o.Args, base: batch.Request{
		Action:   deadletter.Restore,
		Settings: o.Exec.Settings,
	}}
}
