package decisions

import (
	"context"
	"fmt"
	"strings"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// CancelOptions are `decisions cancel`'s flags.
type CancelOptions struct {
	BatchID string
	Why     string
	By      string
}

// NewCmdCancel ends a hold or a decision that was not carried out.
func NewCmdCancel(f *cmdutil.Factory) *cobra.Command {
	o := &CancelOptions{}
	cmd := &cobra.Command{
		Use:   "cancel BATCH --why TEXT",
		Short: "End a hold, or a replay or discard decision not carried out, with who and why",
		Long: `Cancel ends a batch that is not carried out: a hold (active or expired), or a
replay or discard decision that is recorded, interrupted or failed. It is
no longer a decision: plans no longer need --override-hold for a cancelled
hold, dlq check counts its dead letters as undecided again, and the batch
cannot be executed any more. Who cancelled it, when and why are recorded
in the audit. A batch that was carried out (done), a hold that resolved,
or a batch another run is working on now cannot be cancelled.`,
		Example: `  $ dlqctl decisions cancel 20261130T031502-9f3a --why "false alarm: the consumer recovered"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.BatchID = args[0]
			if strings.TrimSpace(o.Why) == "" {
				return cmdutil.FlagErrorf("--why is required: say why the decision is ended (it is recorded in the audit)")
			}
			return cancelRun(cmd.Context(), f, o)
		},
	}
	cmd.Flags().StringVar(&o.Why, "why", "", "why the decision is ended (required; recorded in the audit)")
	cmd.Flags().StringVar(&o.By, "by", "", "who ends it (default: the OS user)")
	return cmd
}

func cancelRun(ctx context.Context, f *cmdutil.Factory, o *CancelOptions) error {
	by, err := f.Who(o.By)
	if err != nil {
		return err
	}
	ld, err := f.Ledger(ctx)
	if err != nil {
		return err
	}
	b, err := ld.CancelBatch(ctx, o.BatchID, by, o.Why, f.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(f.IO.ErrOut, "Cancelled %s batch %s (%s) by %s: %s\n", b.Action, b.ID, render.Plural(b.Size, "message", "messages"), render.Clean(by), render.Clean(o.Why))
	return nil
}
