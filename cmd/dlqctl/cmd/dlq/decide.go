package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"

	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// DecideOptions are `dlq decide`'s flags.
type DecideOptions struct {
	Selection cmdutil.SelectionFlags
	Action    string
	Why       string
	By        string
	Owner     string
	Until     string
	Args      []string
}

// NewCmdDecide records a decision for a batch without executing it.
func NewCmdDecide(f *cmdutil.Factory) *cobra.Command {
	o := &DecideOptions{}
	cmd := &cobra.Command{
		Use:   "decide [ADDRESS...] [selection flags] --action replay|discard|hold --why TEXT",
		Short: "Record a decision (replay, discard, hold) for a batch without executing it",
		Long: `Decide snapshots the selection into a batch and records who decided what,
when and why. It executes nothing: run the batch later with
dlq replay --batch ID or dlq rm --batch ID. hold means "under
investigation until --until": it stops the undecided alert of dlq check
until then. Prints the batch id.`,
		Example: `  $ dlqctl dlq decide --class 1a2b3c4d --action hold --until 24h --why "waiting on the inventory fix" --owner team-billing
  $ dlqctl dlq decide --queue orders --action replay --why "v4 parser deployed"
  $ dlqctl dlq replay --batch "$(dlqctl dlq decide --queue orders --action replay --why fixed)" --yes`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Args = args
			switch {
			case o.Action == "":
				return cmdutil.FlagErrorf("--action is required: replay, discard or hold")
			case !slices.Contains(ledger.DecisionActions(), o.Action):
				return cmdutil.FlagErrorf("invalid --action %q: valid actions are replay, discard, hold", o.Action)
			}
			if err := batch.CheckDecision(o.request(nil)); err != nil {
				return decisionError(err)
			}
			return decideRun(cmd.Context(), f, o)
		},
	}
	cmdutil.AddSelectionFlags(cmd, &o.Selection, true)
	fl := cmd.Flags()
	fl.StringVar(&o.Action, "action", "", "replay, discard or hold")
	fl.StringVar(&o.Why, "why", "", "why (required)")
	fl.StringVar(&o.By, "by", "", "who decided (default: the OS user)")
	fl.StringVar(&o.Owner, "owner", "", "the team that owns the follow-up")
	fl.StringVar(&o.Until, "until", "", "for hold: until when (RFC 3339, or a duration from now such as 24h)")
	return cmd
}

func decideRun(ctx context.Context, f *cmdutil.Factory, o *DecideOptions) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	sel, err := o.Selection.BuildRequired(f, o.Args, "dlq decide")
	if err != nil {
		return err
	}
	sel.Acting = "dlq decide"
	req := o.request(sel)
	if req.By, err = f.Who(o.By); err != nil {
		return err
	}
	if o.Until != "" {
		if _, err := batch.ParseUntil(o.Until, f.Now()); err != nil {
			return &cmdutil.FlagError{Err: err}
		}
	}
	e, err := f.BatchEnv(ctx)
	if err != nil {
		return err
	}
	d, err := batch.Record(ctx, e, req)
	if err != nil {
		return decisionError(err)
	}
	for _, n := range d.Notes {
		fmt.Fprintln(f.IO.ErrOut, "note: "+n)
	}
	// Awaiting approval, it exits 6 as a replay or rm recorded so does: a
	// script's "decide && replay --batch" does not go on.
	awaiting := error(nil)
	if d.Batch.NeedsApproval {
		awaiting = &cmdutil.ExitError{Code: cmdutil.ExitAwaiting, Silent: true}
	}
	if !fm.Human() {
		if err := render.Document(f.IO.Out, fm, d.Batch); err != nil {
			return err
		}
		return awaiting
	}
	fmt.Fprintf(f.IO.ErrOut, "Recorded %s of %s by %s.\n", o.Action, render.Plural(d.Messages, "message", "messages"), d.Batch.By)
	if d.Batch.NeedsApproval {
		verb := deadletter.VerbOf(d.Batch.Action)
		fmt.Fprintln(f.IO.ErrOut, strings.Join(present.Awaiting(d.Batch.ID, d.Messages, e.ApprovalAbove, d.Batch.Author, e.Ledger.Vouches(), verb, f.Again, f.Another), "\n"))
	}
	fmt.Fprintln(f.IO.Out, d.Batch.ID)
	return awaiting
}

// request is the decision the flags state.
func (o *DecideOptions) request(sel *deadletter.Selection) batch.DecideRequest {
	return batch.DecideRequest{Selection: sel, Action: o.Action, By: o.By, Why: o.Why, Owner: o.Owner, Until: o.Until}
}

// decisionError words a decision's refusal in the command's flags.
func decisionError(err error) error {
	switch {
	case errors.Is(err, batch.ErrNoReason):
		return cmdutil.FlagErrorf("--why is required: say why (it is recorded in the ledger)")
	case errors.Is(err, batch.ErrNoUntil):
		return cmdutil.FlagErrorf("--action hold needs --until (a time, or a duration from now such as 24h)")
	case errors.Is(err, batch.ErrUntilNotHold):
		return cmdutil.FlagErrorf("--until goes with --action hold only")
	}
	return err
}
