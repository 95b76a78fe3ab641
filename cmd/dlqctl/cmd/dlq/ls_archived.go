package dlq

import (
	"context"
	"fmt"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// lsArchived lists the ledger's archive: the broker is not asked.
func lsArchived(ctx context.Context, f *cmdutil.Factory, fm render.Format, cl *client.Client, sel *deadletter.Selection) error {
	ld, err := f.Ledger(ctx)
	if err != nil {
		return err
	}
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	now := f.Now()
	policies := cfg.PolicySetFor(f.ContextName())
	defer func() {
		if p := sel.WherePredicate(); p != nil {
			if n, first := p.Errored(); n > 0 {
				fmt.Fprintf(f.IO.ErrOut, "note: --where failed on %s, not selected (the first: %s)\n", render.Plural(n, "row", "rows"), render.Clean(first))
			}
			for _, a := range p.Absent() {
				fmt.Fprintf(f.IO.ErrOut, "note: --where: %s\n", render.Clean(a))
			}
		}
	}()
	if !fm.Human() {
		st := render.NewStream(f.IO.Out, fm)
		err := inspect.EachArchived(ctx, ld, cl.Broker(), sel, policies, now, func(a inspect.ArchivedRow) error {
			l := a.Listed(now, inspect.TriageSLO(policies, a.Queue, a.ConsumerGroup))
			return st.Write(&l)
		})
		if err != nil {
			st.Abort()
			return err
		}
		return st.Close()
	}
	var rows [][]string
	c := render.Clean
	err = inspect.EachArchived(ctx, ld, cl.Broker(), sel, policies, now, func(a inspect.ArchivedRow) error {
		rows = append(rows, []string{render.AgeSince(now, a.FailedAt), c(a.Queue), c(present.OrDash(groupName(a.ConsumerGroup))), c(a.Address.String()),
			render.Truncate(c(a.Error), 50), c(a.Words())})
		return nil
	})
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintln(f.IO.ErrOut, "No archived row matches (the archive keeps what replay, rm and sync saw: run dlq sync to mirror the DLQ).")
		return nil
	}
	return render.WriteTable(f.IO.Out, []string{"AGE", "QUEUE", "CG", "ADDRESS", "ERROR", "WHAT BECAME OF IT"}, rows)
}
