package dlq

import (
	"context"
	"fmt"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// SyncOptions are `dlq sync`'s flags.
type SyncOptions struct {
	Queue string
}

// NewCmdSync mirrors the DLQ into the ledger's archive.
func NewCmdSync(f *cmdutil.Factory) *cobra.Command {
	o := &SyncOptions{}
	cmd := &cobra.Command{
		Use:   "sync",
		Short: "Mirror the DLQ into the ledger's archive and mark rows that vanished",
		Long: `Sync reads the whole DLQ (or one queue) into the ledger's archive: payload,
error, retries, failedAt, first and last seen. Rows that left the broker
since the last sync with no recorded replay or discard are marked vanished:
the only way to catch a dead letter lost to retention or to someone else's
delete. dlq check reports them.`,
		Example: `  $ dlqctl dlq sync
  $ dlqctl dlq sync && dlqctl dlq check     # the cron pattern`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return syncRun(cmd.Context(), f, o)
		},
	}
	cmd.Flags().StringVar(&o.Queue, "queue", "", "sync only this queue")
	return cmd
}

func syncRun(ctx context.Context, f *cmdutil.Factory, o *SyncOptions) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	cl, ld, err := f.Session(ctx)
	if err != nil {
		return err
	}
	res, err := inspect.Sync(ctx, cl, ld, o.Queue, f.Now)
	if err != nil {
		return err
	}
	if !fm.Human() {
		return render.Document(f.IO.Out, fm, res)
	}
	fmt.Fprintf(f.IO.ErrOut, "Synced %s from %s. Since the last sync, %s left the broker under a recorded replay or discard decision; %s left with no decision (vanished; dlq check reports them).\n",
		render.Plural(res.Seen, "dead-letter row", "dead-letter rows"), cl.Server(), render.Plural(res.Gone, "row", "rows"), render.Plural(res.Vanished, "row", "rows"))
	return nil
}
