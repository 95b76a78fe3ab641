package decisions

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// ThresholdOptions are `decisions threshold`'s arguments.
type ThresholdOptions struct {
	Set   bool
	Above int
	Why   string
	By    string
}

// NewCmdThreshold shows or sets the team's approval threshold, which the
// ledger keeps.
func NewCmdThreshold(f *cmdutil.Factory) *cobra.Command {
	o := &ThresholdOptions{}
	cmd := &cobra.Command{
		Use:   "threshold [N --why TEXT]",
		Short: "Show or set the team's four-eyes threshold, kept in the shared ledger",
		Long: `Threshold shows, or sets, the size past which a replay, discard or restore
needs a second person's approval for everyone who shares this ledger: a
batch of more than N messages is recorded awaiting approval (decisions
approve), not run. 0 removes it.

The ledger's threshold binds every person; a personal config's
approval: {min-messages: M} may ask for approval of smaller batches still
(the smaller of N and M applies), never exempt a larger one. On a
PostgreSQL ledger only the role that owns the ledger may set it, and the
database refuses a batch past it that does not await approval, whoever
writes it and however. On SQLite anyone who can write the file can change
it, as they can any record there.`,
		Example: `  $ dlqctl decisions threshold
  $ dlqctl decisions threshold 1000 --why "four eyes on large batches, agreed in the incident review"`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				n, err := strconv.Atoi(args[0])
				if err != nil || n < 0 {
					return cmdutil.FlagErrorf("threshold %q: want a number of messages, 0 or more (0 removes it)", args[0])
				}
				if strings.TrimSpace(o.Why) == "" {
					return cmdutil.FlagErrorf("--why is required to set the threshold (it is recorded in the audit)")
				}
				o.Set, o.Above = true, n
			}
			return thresholdRun(cmd.Context(), f, o)
		},
	}
	cmd.Flags().StringVar(&o.Why, "why", "", "why the threshold is set (required to set it; recorded in the audit)")
	cmd.Flags().StringVar(&o.By, "by", "", "who sets it, for people reading the audit (default: the OS user)")
	return cmd
}

func thresholdRun(ctx context.Context, f *cmdutil.Factory, o *ThresholdOptions) error {
	ld, err := f.Ledger(ctx)
	if err != nil {
		return err
	}
	if o.Set {
		by, err := f.Who(o.By)
		if err != nil {
			return err
		}
		if err := ld.SetApprovalThreshold(ctx, o.Above, by, o.Why, f.Now()); err != nil {
			return err
		}
	}
	t, err := ld.ApprovalThreshold(ctx)
	if err != nil {
		return err
	}
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	applies := batch.StricterThreshold(t.Above, cfg.Approval.MinMessages)
	fm, err := f.Format()
	if err != nil {
		return err
	}
	if !fm.Human() {
		return render.Document(f.IO.Out, fm, struct {
			Ledger  ledger.Threshold `json:"ledger"`
			Config  int              `json:"config"`
			Applies int              `json:"applies"`
		}{t, cfg.Approval.MinMessages, applies})
	}
	w := f.IO.Out
	if t.Above == 0 {
		fmt.Fprintln(w, "The ledger sets no approval threshold.")
	} else {
		fmt.Fprintf(w, "The ledger needs a second person's approval for batches of more than %d messages (set %s by %s: %s).\n",
			t.Above, render.Timestamp(t.At), present.Recorder(t.By, t.Role, ld.Vouches()), render.Clean(t.Why))
	}
	if cfg.Approval.MinMessages > 0 {
		fmt.Fprintf(w, "Your config asks for approval above %d messages.\n", cfg.Approval.MinMessages)
	}
	if applies > 0 {
		fmt.Fprintf(w, "Batches of more than %d messages await a second person's approval in this session.\n", applies)
	}
	if !ld.Vouches() {
		fmt.Fprintln(w, "note: "+present.Unvouched)
	}
	return nil
}
