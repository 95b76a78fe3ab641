package decisions

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// ApproveOptions are `decisions approve`'s flags.
type ApproveOptions struct {
	BatchID string
	Why     string
}

// NewCmdApprove is the second pair of eyes on a large batch.
func NewCmdApprove(f *cmdutil.Factory) *cobra.Command {
	o := &ApproveOptions{}
	cmd := &cobra.Command{
		Use:   "approve BATCH --why TEXT",
		Short: "Approve a large replay or discard recorded awaiting a second person's approval",
		Long: `Approve lets a batch that awaits approval run. With approval: {min-messages: N}
in the config, a replay or discard of more than N messages is recorded with
its frozen plan and not run; someone other than its author approves it
here. Then dlq replay --batch (or dlq rm --batch) runs it, as approved: a
changed --to-queue or --transform is a new plan, refused until approved
again. The approval, who and why, is in the audit and in decisions show.

Who recorded the batch and who approves it are the ledger's to say, not a
name anyone types (--by, DLQCTL_USER): on a PostgreSQL ledger, the role the
database authenticated, which the database itself records; on a SQLite
ledger, the operating system's account, which the ledger cannot vouch for
(anyone who can write its file can write any name). A team that relies on
four eyes shares a PostgreSQL ledger, a role a person.`,
		Example: `  $ dlqctl decisions approve 20261130T031502-9f3a --why "checked the plan: 40k orders, inventory fixed"
  $ dlqctl dlq replay --batch 20261130T031502-9f3a --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.BatchID = args[0]
			if strings.TrimSpace(o.Why) == "" {
				return cmdutil.FlagErrorf("--why is required: say why the plan is approved (it is recorded in the audit)")
			}
			return approveRun(cmd.Context(), f, o)
		},
	}
	cmd.Flags().StringVar(&o.Why, "why", "", "why the plan is approved (required; recorded in the audit)")
	return cmd
}

func approveRun(ctx context.Context, f *cmdutil.Factory, o *ApproveOptions) error {
	ld, err := f.Ledger(ctx)
	if err != nil {
		return err
	}
	b, a, err := batch.Approve(ctx, ld, o.BatchID, f.User(), o.Why, f.Now())
	switch {
	case errors.Is(err, ledger.ErrOwnApproval):
		return cmdutil.UsageError(fmt.Errorf("%v: ask someone else to approve it", err))
	case errors.Is(err, ledger.ErrNotApprovable):
		return cmdutil.UsageError(err)
	case err != nil:
		return err
	}
	verb := deadletter.VerbOf(b.Action)
	fmt.Fprintf(f.IO.ErrOut, "Approved %s batch %s (%s) by %s: %s\n", b.Action, b.ID, render.Plural(b.Size, "message", "messages"), present.Approver(a, ld.Vouches()), render.Clean(o.Why))
	if !ld.Vouches() {
		fmt.Fprintln(f.IO.ErrOut, "note: "+present.Unvouched)
	}
	fmt.Fprintf(f.IO.ErrOut, "Run it with: %s\n", f.Again("dlq", verb, "--batch", b.ID, "--yes"))
	return nil
}
