package decisions

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// VerifyOptions are `decisions verify`'s flags.
type VerifyOptions struct {
	BatchID     string
	Concurrency int
	Rate        float64
	// Wait: ask again while copies are pending, for up to this long.
	Wait time.Duration
}

// NewCmdVerify asks the broker what became of a replay's copies.
func NewCmdVerify(f *cmdutil.Factory) *cobra.Command {
	o := &VerifyOptions{}
	cmd := &cobra.Command{
		Use:   "verify BATCH|last",
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
failure (run it again later, or give --wait). BATCH "last" is this broker's
newest replay or restore.`,
		Example: `  $ dlqctl decisions verify 20261130T031502-9f3a
  $ dlqctl decisions verify last --wait 10m
  $ dlqctl decisions verify 20261130T031502-9f3a --rate 50 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.BatchID = args[0]
			if err := batch.ValidateConcurrency(o.Concurrency); err != nil {
				return err
			}
			if o.Wait < 0 {
				return cmdutil.FlagErrorf("invalid --wait %s: want a duration, or 0 to ask once", o.Wait)
			}
			if math.IsNaN(o.Rate) || o.Rate < 0 || o.Rate > 1e6 {
				return cmdutil.FlagErrorf("invalid --rate %v: want requests per second, or 0 for unlimited", o.Rate)
			}
			return verifyRun(cmd.Context(), f, o)
		},
	}
	cmd.Flags().IntVar(&o.Concurrency, "concurrency", 8, "at most this many requests in flight")
	cmd.Flags().Float64Var(&o.Rate, "rate", 0, "at most this many requests a second (0 = unlimited)")
	cmd.Flags().DurationVar(&o.Wait, "wait", 0, "while copies are pending, ask again every 2s for up to this long (a CI job waiting for the consumers)")
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
	if o.BatchID, err = f.ResolveBatch(ctx, ld, o.BatchID, ledger.ActionReplay, ledger.ActionRestore, ledger.ActionImport); err != nil {
		return err
	}
	until := time.Now().Add(o.Wait)
	for {
		v, nc, err := verifyOnce(ctx, f, cl, ld, o, fm)
		if nc != nil {
			defer nc.close()
		}
		if v == nil {
			return err
		}
		if err == nil && v.Pending > 0 && v.NotAsked == 0 && time.Now().Add(verifyEvery).Before(until) {
			fmt.Fprintf(f.IO.ErrOut, "%s of %s pending; asking again in %s (--wait %s)\n", render.Count(v.Pending), render.Plural(v.Copies, "copy", "copies"),
				verifyEvery, render.Duration(o.Wait))
			if err := client.Sleep(ctx, verifyEvery); err != nil {
				return err
			}
			continue
		}
		if !fm.Human() {
			if derr := nc.writeDocument(f.IO.Out, fm, v); derr != nil {
				return derr
			}
		} else {
			writeVerification(f.IO.Out, v, nc)
		}
		switch {
		case err != nil:
			return err
		case v.DeadLetteredAgain+v.Missing+v.Unchecked > 0:
			return cmdutil.ErrBreach
		}
		return nil
	}
}

// verifyEvery is how often --wait asks again about the copies pending.
const verifyEvery = 2 * time.Second

// verifyOnce asks about the batch's copies once.
func verifyOnce(ctx context.Context, f *cmdutil.Factory, cl *client.Client, ld *ledger.Store, o *VerifyOptions, fm render.Format) (*batch.Verification, *notCompleted, error) {
	nc := &notCompleted{}
	if !fm.Human() {
		// -o json lists every copy not completed: a million of them go
		// to a file as they come, not to memory, and are copied out last.
		var err error
		if nc.spool, err = os.CreateTemp("", "dlqctl-verify-*.ndjson"); err != nil {
			return nil, nil, spoolErr(err)
		}
		nc.w = bufio.NewWriter(nc.spool)
	}
	v, err := batch.Verify(ctx, cl, ld, o.BatchID, batch.VerifyOptions{Concurrency: o.Concurrency, Rate: o.Rate, By: f.User(), Now: f.Now, NotCompleted: nc.add})
	return v, nc, err
}

// shownNotCompleted is how many copies not completed a person is shown.
const shownNotCompleted = 20

// notCompleted takes the copies a verification found not completed: the
// first few for a person, the queue of the first dead-lettered again,
// and, for a machine format, every one spooled to a file.
type notCompleted struct {
	first     []batch.CopyState
	n         int
	deadQueue string
	spool     *os.File
	w         *bufio.Writer
}

// close lets the spool go.
func (nc *notCompleted) close() {
	if nc.spool != nil {
		nc.spool.Close()
		os.Remove(nc.spool.Name())
	}
}

func (nc *notCompleted) add(st batch.CopyState) error {
	nc.n++
	if len(nc.first) < shownNotCompleted {
		nc.first = append(nc.first, st)
	}
	if nc.deadQueue == "" && st.Status == ledger.CopyDeadAgain {
		nc.deadQueue = st.Queue
	}
	if nc.w == nil {
		return nil
	}
	line, err := json.Marshal(st)
	if err == nil {
		_, err = nc.w.Write(append(line, '\n'))
	}
	if err != nil {
		return spoolErr(err)
	}
	return nil
}

// writeDocument prints the verification with every copy not completed.
func (nc *notCompleted) writeDocument(w io.Writer, fm render.Format, v *batch.Verification) error {
	if err := nc.w.Flush(); err != nil {
		return spoolErr(err)
	}
	if _, err := nc.spool.Seek(0, io.SeekStart); err != nil {
		return spoolErr(err)
	}
	return render.DocumentWithList(w, fm, v, "notCompleted", nc.spool)
}

func spoolErr(err error) error {
	return fmt.Errorf("keeping the copies not completed (in TMPDIR, %s): %w", os.TempDir(), err)
}

func writeVerification(w io.Writer, v *batch.Verification, nc *notCompleted) {
	c := render.Clean
	fmt.Fprintf(w, "Batch %s: %s: %d completed, %d pending, %d dead-lettered again, %d missing", v.BatchID, render.Plural(v.Copies, "copy", "copies"), v.Completed, v.Pending, v.DeadLetteredAgain, v.Missing)
	if v.Unchecked > 0 {
		fmt.Fprintf(w, ", %d not asked (see below)", v.Unchecked)
	}
	if v.Asked < v.Copies {
		fmt.Fprintf(w, " (%d asked now; the rest were completed at an earlier verify)", v.Asked)
	}
	fmt.Fprintln(w)
	if v.NotAsked > 0 {
		fmt.Fprintf(w, "Interrupted: %s not reached; run it again to ask about them\n", render.Plural(v.NotAsked, "copy was", "copies were"))
	}
	if v.MovedElsewhere > 0 {
		fmt.Fprintf(w, "%d of the copies were published by another hand (moved elsewhere while the batch ran: the broker's console); they are counted with the rest\n", v.MovedElsewhere)
	}
	var rows [][]string
	for _, q := range v.ByQueue {
		var pg []string
		for g, n := range q.PendingGroups {
			pg = append(pg, fmt.Sprintf("%s %d", deadletter.GroupLabel(g), n))
		}
		sort.Strings(pg)
		rows = append(rows, []string{c(q.Queue), strconv.Itoa(q.Completed), strconv.Itoa(q.Pending), strconv.Itoa(q.DeadLetteredAgain), strconv.Itoa(q.Missing),
			c(present.OrDash(strings.Join(pg, ", ")))})
	}
	if len(rows) > 0 {
		_ = render.WriteTable(w, []string{"QUEUE", "COMPLETED", "PENDING", "DEAD-LETTERED-AGAIN", "MISSING", "NOT CONSUMED BY"}, rows)
	}
	for _, q := range v.ByQueue {
		if len(q.Groups) == 0 {
			continue
		}
		parts := make([]string, len(q.Groups))
		for i, g := range q.Groups {
			parts[i] = fmt.Sprintf("%s: %s of %s consumed", c(deadletter.GroupLabel(g.Name)), render.Count(g.Consumed), render.Count(g.Of))
		}
		fmt.Fprintf(w, "%s, by consumer group (of the copies asked now): %s\n", c(q.Queue), strings.Join(parts, "; "))
	}
	if v.Envelopes > 0 {
		fmt.Fprintf(w, "%s the encryption envelope of a row the broker could not decrypt, pushed as it was (a 2.x move, the console's or dlqctl's): no consumer can read %s\n",
			render.Plural(v.Envelopes, "copy is", "copies are"), map[bool]string{true: "it", false: "them"}[v.Envelopes == 1])
	}
	if v.NotPublished > 0 {
		fmt.Fprintf(w, "%s of killed or failed runs left no copy in the broker: not copies, not counted\n", render.Plural(v.NotPublished, "attempt", "attempts"))
	}
	if len(nc.first) > 0 {
		fmt.Fprintln(w, "\nNot completed:")
		rows = nil
		for _, s := range nc.first {
			groups := make([]string, len(s.Groups))
			for k, g := range s.Groups {
				groups[k] = deadletter.GroupLabel(g)
			}
			detail := strings.Join(groups, ",")
			if s.Reason != "" {
				detail = s.Reason
			}
			rows = append(rows, []string{c(s.Address.String()), c(s.Of.String()), c(s.Queue), s.Status, render.Truncate(c(present.OrDash(detail)), 60)})
		}
		_ = render.WriteTable(w, []string{"COPY", "OF", "QUEUE", "STATUS", "GROUPS / WHY"}, rows)
		if n := nc.n - len(nc.first); n > 0 {
			fmt.Fprintf(w, "… and %d more (-o json lists every one)\n", n)
		}
	}
	switch {
	case v.Complete:
		fmt.Fprintln(w, "Every copy completed: the batch is verified.")
	case v.Copies == 0:
		fmt.Fprintln(w, "The batch published no copy (nothing replayed yet, or every one a duplicate).")
	case nc.deadQueue != "":
		fmt.Fprintf(w, "Dead-lettered again: their failures are in dlqctl dlq ls --queue %s; the batch does not replay them twice.\n", c(nc.deadQueue))
	}
}
