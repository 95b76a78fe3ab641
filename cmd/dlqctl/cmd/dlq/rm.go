package dlq

import (
	"context"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/spf13/cobra"
)

// RmOptions are `dlq rm`'s flags.
type RmOptions struct {
	Selection cmdutil.SelectionFlags
	Exec      ExecFlags
	Args      []string
}

// NewCmdRm discards dead letters, archiving each row first.
func NewCmdRm(f *cmdutil.Factory) *cobra.Command {
	o := &RmOptions{}
	return newBatchCmd(batchCommand{action: deadletter.Discard, exec: &o.Exec, selection: &o.Selection, cmd: &cobra.Command{
		Use:   "rm [ADDRESS...] [selection flags]",
		Short: "Discard dead letters: archive each row in the ledger, then delete it",
		Long: `Discard snapshots the selection, records the batch, archives every row in the
ledger (payload included, so a discard is recoverable) and then deletes it,
at --rate. A row already gone is counted as such. Only addresses just seen
in the DLQ are deleted: an address that is not dead-lettered is a not-found
(exit 5), never a delete. A delete acts on the message's address, so it
also discards the rows of other consumer groups for that message; the plan
says when.`,
		Example: `  $ dlqctl dlq rm --class 9c1d2e3f --dry-run
  $ dlqctl dlq rm 6f1c0a4e-…/order:8812:v3 --why "test order, never valid" --yes
  $ dlqctl dlq rm --queue notifications --failed-before 7d --why "expired receipts" --rate 50 --yes`,
	}, run: func(ctx context.Context, args []string) error {
		o.Args = args
		return rmRun(ctx, f, o)
	}})
}

func rmRun(ctx context.Context, f *cmdutil.Factory, o *RmOptions) error {
	return execute(ctx, f, rmSpec(o))
}

// rmSpec is what rm's flags ask of execute.
func rmSpec(o *RmOptions) execSpec {
	return execSpec{verb: "rm", flags: &o.Exec, selection: &o.Selection, args: o.Args, base: batch.Request{
		Action:   deadletter.Discard,
		Settings: o.Exec.Settings,
	}}
}
