package decisions

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// VerifyOptions are `decisions verify`'s flags.
type VerifyOptions struct {
	BatchID     string
	Concurrency int
	Rate        float64
}

// NewCmdVerify asks the broker what became of a replay's copies.
func NewCmdVerify(f *cmdutil.Factory, runF func(*VerifyOptions) error) *cobra.Command {
	o := &VerifyOptions{}
	cmd := &cobra.Command{
		Use:   "verify BATCH",
		Short: "Ask the broker what became of each copy a replay published",
		Long: `Verify asks the broker, for each copy a replay batch published, what its
status is now: completed (every consumer group consumed it), pending (not
yet, with the groups that have not where the broker says), dead-lettered
again (the copy is back in the DLQ), or missing (gone without completing:
deleted, or retained away). It prints the counts per destination queue and
the copies that are not completed, and records every answer and the counts
in the ledger (decisions show prints the last verification). When every
copy completed, the batch is "verified". A copy found completed is not
asked about again, so a large batch can be verified again until it is
done; --concurrency and --rate bound the load. Exit 1 when a copy is dead-
lettered again, missing or could not be asked about; pending is not a
failure (run it again later).`,
		Example: `  $ dlqctl decisions verify 20261130T031502-9f3a
  $ dlqctl decisions verify 20261130T031502-9f3a --rate 50 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.BatchID = args[0]
			if o.Concurrency < 1 || o.Concurrency > 256 {
				return cmdutil.FlagErrorf("invalid --concurrency %d: want 1 to 256", o.Concurrency)
			}
			if math.IsNaN(o.Rate) || o.Rate < 0 || o.Rate > 1e6 {
				return cmdutil.FlagErrorf("invalid --rate %v: want requests per second, or 0 for unlimited", o.Rate)
			}
			if runF != nil {
				return runF(o)
			}
			return verifyRun(cmd.Context(), f, o)
		},
	}
	cmd.Flags().IntVar(&o.Concurrency, "concurrency", 8, "at most this many requests in flight")
	cmd.Flags().Float64Var(&o.Rate, "rate", 0, "at most this many requests a second (0 = unlimited)")
	return cmd
}

func verifyRun(ctx context.Context, f *cmdutil.Factory, o *VerifyOptions) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	cl, ld, err := f.Session(ctx)
	if err != nil {
		return err
	}
	v, err := batch.Verify(ctx, cl, ld, o.BatchID, batch.VerifyOptions{Concurrency: o.Concurrency, Rate: o.Rate, By: f.User(), Now: f.Now})
	if v == nil {
		return err
	}
	if !fm.Human() {
		if derr := render.Document(f.IO.Out, fm, v); derr != nil {
			return derr
		}
	} else {
		writeVerification(f.IO.Out, v)
	}
	switch {
	case err != nil:
		return err
	case v.DeadLetteredAgain+v.Missing+v.Unchecked > 0:
		return cmdutil.ErrBreach
	}
	return nil
}

func writeVerification(w io.Writer, v *batch.Verification) {
	c := render.Clean
	fmt.Fprintf(w, "Batch %s: %d copies: %d completed, %d pending, %d dead-lettered again, %d missing", v.BatchID, v.Copies, v.Completed, v.Pending, v.DeadLetteredAgain, v.Missing)
	if v.Unchecked > 0 {
		fmt.Fprintf(w, ", %d not asked (see below)", v.Unchecked)
	}
	if v.Asked < v.Copies {
		fmt.Fprintf(w, " (%d asked now; the rest were completed at an earlier verify)", v.Asked)
	}
	fmt.Fprintln(w)
	if v.MovedElsewhere > 0 {
		fmt.Fprintf(w, "%d of the copies were published by another hand (moved elsewhere while the batch ran: the broker's console); they are counted with the rest\n", v.MovedElsewhere)
	}
	var rows [][]string
	for _, q := range v.ByQueue {
		var pg []string
		for g, n := range q.PendingGroups {
			pg = append(pg, fmt.Sprintf("%s %d", client.GroupLabel(g), n))
		}
		sort.Strings(pg)
		rows = append(rows, []string{c(q.Queue), strconv.Itoa(q.Completed), strconv.Itoa(q.Pending), strconv.Itoa(q.DeadLetteredAgain), strconv.Itoa(q.Missing),
			c(orDash(strings.Join(pg, ", ")))})
	}
	if len(rows) > 0 {
		_ = render.WriteTable(w, []string{"QUEUE", "COMPLETED", "PENDING", "DEAD-LETTERED-AGAIN", "MISSING", "NOT CONSUMED BY"}, rows)
	}
	const shown = 20
	if len(v.NotCompleted) > 0 {
		fmt.Fprintln(w, "\nNot completed:")
		rows = nil
		for i, s := range v.NotCompleted {
			if i == shown {
				break
			}
			groups := make([]string, len(s.Groups))
			for k, g := range s.Groups {
				groups[k] = client.GroupLabel(g)
			}
			detail := strings.Join(groups, ",")
			if s.Reason != "" {
				detail = s.Reason
			}
			rows = append(rows, []string{c(s.Address.String()), c(s.Of.String()), c(s.Queue), s.Status, render.Truncate(c(orDash(detail)), 60)})
		}
		_ = render.WriteTable(w, []string{"COPY", "OF", "QUEUE", "STATUS", "GROUPS / WHY"}, rows)
		if n := len(v.NotCompleted) - shown; n > 0 {
			fmt.Fprintf(w, "… and %d more (-o json lists every one)\n", n)
		}
	}
	switch {
	case v.Complete:
		fmt.Fprintln(w, "Every copy completed: the batch is verified.")
	case v.Copies == 0:
		fmt.Fprintln(w, "The batch published no copy (nothing replayed yet, or every one a duplicate).")
	case v.DeadLetteredAgain > 0:
		for _, s := range v.NotCompleted {
			if s.Status == "deadLetteredAgain" {
				fmt.Fprintf(w, "Dead-lettered again: their failures are in dlqctl dlq ls --queue %s; the batch does not replay them twice.\n", c(s.Queue))
				break
			}
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
