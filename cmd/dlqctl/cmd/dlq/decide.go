package dlq

import (
	"context"
	"fmt"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/inspect"
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
func NewCmdDecide(f *cmdutil.Factory, runF func(*DecideOptions) error) *cobra.Command {
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
			switch o.Action {
			case ledger.ActionReplay, ledger.ActionDiscard, ledger.ActionHold:
			case "":
				return cmdutil.FlagErrorf("--action is required: replay, discard or hold")
			default:
				return cmdutil.FlagErrorf("invalid --action %q: valid actions are replay, discard, hold", o.Action)
			}
			if o.Why == "" {
				return cmdutil.FlagErrorf("--why is required: say why (it is recorded in the ledger)")
			}
			if o.Action == ledger.ActionHold && o.Until == "" {
				return cmdutil.FlagErrorf("--action hold needs --until (a time, or a duration from now such as 24h)")
			}
			if o.Action != ledger.ActionHold && o.Until != "" {
				return cmdutil.FlagErrorf("--until goes with --action hold only")
			}
			if runF != nil {
				return runF(o)
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
	sel, err := o.Selection.Build(f, o.Args)
	if err != nil {
		return err
	}
	sel.Acting = "dlq decide"
	if err := cmdutil.RequireSelection(sel, "dlq decide"); err != nil {
		return err
	}
	by, err := f.Who(o.By)
	if err != nil {
		return err
	}
	now := f.Now()
	var until time.Time
	if o.Until != "" {
		if until, err = batch.ParseUntil(o.Until, now); err != nil {
			return cmdutil.FlagErrorf("%v", err)
		}
	}
	cl, ld, err := f.Session(ctx)
	if err != nil {
		return err
	}
	if err := inspect.CheckNames(ctx, cl, sel); err != nil {
		return err
	}
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	ws, err := batch.PrepareWhere(ctx, batch.Env{Client: cl, Ledger: ld, Now: f.Now, Policies: cfg.PolicySet()}, sel)
	if err != nil {
		return err
	}
	defer func() {
		for _, n := range ws.Notes() {
			fmt.Fprintln(f.IO.ErrOut, "note: "+n)
		}
	}()
	b := &ledger.Batch{Action: o.Action, By: by, At: now, Why: o.Why, Owner: o.Owner, Until: until}
	n, err := batch.Decide(ctx, cl, ld, sel, b)
	if err != nil {
		return err
	}
	if !fm.Human() {
		return render.Document(f.IO.Out, fm, b)
	}
	fmt.Fprintf(f.IO.ErrOut, "Recorded %s of %s by %s.\n", o.Action, plural(n, "message", "messages"), by)
	fmt.Fprintln(f.IO.Out, b.ID)
	return nil
}
