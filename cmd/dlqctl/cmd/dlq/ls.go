package dlq

import (
	"context"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/policy"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// LsOptions are `dlq ls`'s flags.
type LsOptions struct {
	Selection cmdutil.SelectionFlags
	GroupBy   string
	Sort      string
	Archived  bool
	Args      []string
}

// NewCmdLs lists dead letters.
func NewCmdLs(f *cmdutil.Factory) *cobra.Command {
	o := &LsOptions{}
	cmd := &cobra.Command{
		Use:   "ls [ADDRESS...]",
		Short: "List dead letters, newest failure first, or grouped",
		Long: `List dead letters, newest failure first (--sort oldest for the oldest first;
with --limit N, the N oldest). AGE is coloured against the queue's
max-age policy on a terminal. --group-by prints one row per group; for
error, the group is a failure class: error texts with numbers, UUIDs, hex
ids and quoted values replaced by placeholders, with a stable class id to
pass to --class. -o ndjson streams: output starts before the last page.
--sort oldest streams too on a broker that pages (its end is found in
O(log N) requests, then read backwards); a broker that answers the whole
DLQ in one body (the released server) sends it newest first, so the rows
are held before the first is printed. --where selects by anything in the
row, payload included: a jq predicate over the row as -o ndjson prints it.
--archived lists the ledger's archive instead (every row replay, rm and
sync kept) with what became of each: replayed as which transaction id by
which batch, discarded, vanished.`,
		Example: `  $ dlqctl dlq ls
  $ dlqctl dlq ls --sort oldest --limit 20
  $ dlqctl dlq ls --queue orders --failed-after 2h -o wide
  $ dlqctl dlq ls --group-by error
  $ dlqctl dlq ls --where '.data.customerId == 42' --queue payments
  $ dlqctl dlq ls --archived --where '.data.orderId == 8812'
  $ dlqctl dlq ls --class 1a2b3c4d -o ndjson | dlqctl dlq replay --from-file - --dry-run`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Args = args
			switch o.GroupBy {
			case "", "error", "queue", "cg", "partition":
			default:
				return cmdutil.FlagErrorf("invalid --group-by %q: valid values are error, queue, cg, partition", o.GroupBy)
			}
			switch o.Sort {
			case "newest", "oldest":
			default:
				return cmdutil.FlagErrorf("invalid --sort %q: valid values are newest, oldest", o.Sort)
			}
			switch {
			case o.Archived && o.GroupBy != "":
				return cmdutil.FlagErrorf("--archived lists archived rows; --group-by groups the live DLQ")
			case o.Archived && o.Sort == "oldest":
				return cmdutil.FlagErrorf("--archived lists the newest failures first; --sort oldest is for the live DLQ")
			case o.Archived && o.Selection.WhereDecrypt:
				return cmdutil.FlagErrorf("--where-decrypt asks the broker; the archive keeps the payloads as they were listed")
			}
			return lsRun(cmd.Context(), f, o)
		},
	}
	cmdutil.AddSelectionFlags(cmd, &o.Selection, false)
	cmd.Flags().StringVar(&o.GroupBy, "group-by", "", "one row per group: error, queue, cg or partition")
	cmd.Flags().StringVar(&o.Sort, "sort", "newest", "newest (failure) first, or oldest first")
	cmd.Flags().BoolVar(&o.Archived, "archived", false, "list the ledger's archive (what replay, rm and sync kept), with what became of each row")
	return cmd
}

func lsRun(ctx context.Context, f *cmdutil.Factory, o *LsOptions) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	sel, err := o.Selection.Build(f, o.Args)
	if err != nil {
		return err
	}
	cl, err := f.Client()
	if err != nil {
		return err
	}
	if o.Archived {
		return lsArchived(ctx, f, fm, cl, sel)
	}
	dc, err := decisionsFor(ctx, f, cl.Broker())
	if err != nil {
		return err
	}
	dec := dc.Lookup()
	defer func() {
		if err := dc.Err(); err != nil {
			fmt.Fprintf(f.IO.ErrOut, "warning: decisions not shown from here on: %v\n", err)
		}
	}()
	now := f.Now()
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	policies := cfg.PolicySetFor(f.ContextName())
	// Groups need no payload, unless --where looks at it.
	listing, err := inspect.List(ctx, cl, sel, dc, inspect.ListOptions{OldestFirst: o.Sort == "oldest", NoData: o.GroupBy != "", Policies: policies, Now: now})
	if err != nil {
		return err
	}
	defer func() {
		for _, n := range listing.Notes() {
			fmt.Fprintln(f.IO.ErrOut, "note: "+n)
		}
	}()
	rows := listing.Rows()
	if o.GroupBy != "" {
		// What the groups hold (8 bytes a message) is most of the live
		// heap and every row read is garbage at once: collecting at half
		// the default growth holds the peak near what is held, for a
		// little more CPU (docs/performance.md, BenchmarkLsMemory).
		defer debug.SetGCPercent(debug.SetGCPercent(50))
		return lsGroups(f, fm, o.GroupBy, rows, sel, now, inspect.HeldBy(dec, now))
	}
	if !fm.Human() {
		return lsStream(f, fm, rows, dec, policies, now)
	}
	return lsTable(f, fm, cl, rows, sel, dec, policies, now, listing.Limited, o.Sort)
}

// lsStream writes each row as it is read (json, ndjson, yaml). Every row
// read is garbage once written and little is held, so the default
// collection pace serves (BenchmarkLsMemory).
func lsStream(f *cmdutil.Factory, fm render.Format, rows func(func(deadletter.Row, error) bool), dec inspect.DecisionLookup, policies policy.Set, now time.Time) error {
	st := render.NewStream(f.IO.Out, fm)
	if f.IO.IsStdoutTTY() {
		st.FlushEach()
	}
	var row inspect.Row
	for r, err := range rows {
		if err != nil {
			st.Abort()
			return err
		}
		var decided *ledger.Decision
		var slo time.Duration
		if d, ok := dec(r.Address()); ok {
			decided, slo = &d, inspect.TriageSLO(policies, r.Queue, r.ConsumerGroup)
		}
		row = inspect.ToRow(r, now, decided, slo)
		if err := st.Write(&row); err != nil {
			return err
		}
	}
	return st.Close()
}

func lsTable(f *cmdutil.Factory, fm render.Format, cl *client.Client, rows func(func(deadletter.Row, error) bool), sel *deadletter.Selection,
	dec inspect.DecisionLookup, policies policy.Set, now time.Time, limited func() bool, order string) error {
	pal := f.Palette()
	header := []string{"AGE", "QUEUE", "PARTITION", "CG", "RETRIES", "ERROR", "ADDRESS", "DECISION"}
	if fm == render.Wide {
		header = append(header, "MESSAGE-ID", "FAILED-AT", "ENCRYPTED")
	}
	var table [][]string
	var envelopes []int // rows whose list payload is an encryption envelope
	var ages []time.Duration
	var scopes [][2]string
	var tally inspect.Tally
	for r, err := range rows {
		if err != nil {
			return err
		}
		decision := "-"
		d, ok := dec(r.Address())
		slo := inspect.TriageSLO(policies, r.Queue, r.ConsumerGroup)
		if ok {
			decision = inspect.DecisionLabel(d, r, now, slo)
		}
		tally.Add(r, d, ok, now, slo)
		line := []string{render.AgeSince(now, r.FailedAt), render.Clean(r.Queue), render.Clean(r.Partition), render.Clean(groupName(r.ConsumerGroup)),
			strconv.Itoa(r.RetryCount), present.ErrorText(render.Clean(r.ErrorMessage)), render.Clean(r.Address().String()), decision}
		if fm == render.Wide {
			enc := "no"
			if r.IsEncrypted {
				enc = "yes"
			}
			line = append(line, render.Clean(r.ID), render.Timestamp(r.FailedAt), enc)
		}
		if r.Undecryptable() {
			envelopes = append(envelopes, len(table))
		}
		table = append(table, line)
		ages = append(ages, now.Sub(r.FailedAt))
		scopes = append(scopes, [2]string{r.Queue, r.ConsumerGroup})
	}
	// What an envelope means is known once the list has answered: in a
	// list that decrypts the broker could not decrypt it; the released
	// server's list never decrypts, and its envelopes are merely
	// encrypted (dlq show asks the detail route).
	for _, i := range envelopes {
		if cl.ListDecrypts() {
			table[i][5] = "[undecryptable] " + table[i][5]
		}
		if fm == render.Wide {
			table[i][10] = map[bool]string{true: "undecryptable", false: "yes (list shows the envelope)"}[cl.ListDecrypts()]
		}
	}
	if len(table) == 0 {
		return noneMatch(f, sel)
	}
	if f.IO.IsStdoutTTY() {
		truncateColumn(table, header, 5, f.IO.TerminalWidth())
		for i := range table {
			maxAge := time.Duration(0)
			if p, ok := policies.For(scopes[i][0], scopes[i][1]); ok {
				maxAge = p.MaxAge
			}
			table[i][0] = pal.Age(table[i][0], ages[i], maxAge)
		}
		lsSummary(f, len(table), tally, now, sel, limited(), order)
	}
	return render.WriteTable(f.IO.Out, header, table)
}

// noneMatch says that no dead letter matches.
func noneMatch(f *cmdutil.Factory, sel *deadletter.Selection) error {
	fmt.Fprintln(f.IO.ErrOut, "No dead letters match"+inNoClass(sel)+".")
	return nil
}

// inNoClass says why a selection of a failure class matched nothing: the
// class is a class id (SelectionFlags.Build), just none of the DLQ's now.
func inNoClass(sel *deadletter.Selection) string {
	if sel == nil || sel.Class == "" {
		return ""
	}
	return fmt.Sprintf(": no dead letter is in class %s now (see dlq ls --group-by error)", sel.Class)
}

// lsSummary is the line above a terminal's table: how many, the oldest,
// the classes and the undecided (of the rows shown, when --limit cut them).
func lsSummary(f *cmdutil.Factory, n int, tally inspect.Tally, now time.Time, sel *deadletter.Selection, limited bool, order string) {
	pal := f.Palette()
	what := render.Plural(n, "dead letter", "dead letters")
	of := ""
	if limited {
		what = fmt.Sprintf("%d %s dead letters shown (--limit %d)", n, order, sel.Limit)
		of = " shown"
	}
	oldest := tally.Oldest
	fmt.Fprintf(f.IO.Out, "%s, oldest%s %s (%s in %s), %s, %s\n\n",
		pal.Bold(what), of, render.AgeSince(now, oldest.FailedAt), render.Clean(oldest.Address().String()), render.Clean(oldest.Queue),
		render.Plural(tally.Classes(), "failure class", "failure classes"), render.Plural(tally.Undecided, "undecided", "undecided"))
}

// truncateColumn shortens column col so the table fits width.
func truncateColumn(table [][]string, header []string, col, width int) {
	if width <= 0 {
		return
	}
	widths := make([]int, len(header))
	for i, h := range header {
		widths[i] = len(h)
	}
	for _, r := range table {
		for i, c := range r {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	others := 0
	for i, w := range widths {
		if i != col {
			others += w + 3
		}
	}
	room := max(width-others, 16)
	for _, r := range table {
		r[col] = render.Truncate(r[col], room)
	}
}

func lsGroups(f *cmdutil.Factory, fm render.Format, by string, rows func(func(deadletter.Row, error) bool), sel *deadletter.Selection, now time.Time,
	held func(deadletter.Row) (string, bool)) error {
	gr := inspect.NewGrouper(by)
	gr.Held = held
	for r, err := range rows {
		if err != nil {
			return err
		}
		gr.Add(r)
	}
	list := gr.Groups()
	if !fm.Human() {
		st := render.NewStream(f.IO.Out, fm)
		for _, g := range list {
			if err := st.Write(g); err != nil {
				return err
			}
		}
		return st.Close()
	}
	if len(list) == 0 {
		if sel.Class != "" && !deadletter.IsClassID(sel.Class) {
			return cmdutil.FlagErrorf("--class %q is not a class id: class ids are the 8 hex digits `dlq ls --group-by error` prints", sel.Class)
		}
		fmt.Fprintln(f.IO.ErrOut, "No dead letters match.")
		return nil
	}
	var header []string
	var table [][]string
	for _, g := range list {
		age := func(t time.Time) string { return render.AgeSince(now, t) }
		held := "-"
		if g.Held > 0 {
			held = strconv.Itoa(g.Held) + " (" + render.Clean(joinComma(g.HeldBy)) + ")"
		}
		switch by {
		case "error":
			header = []string{"CLASS", "ROWS", "MESSAGES", "OLDEST", "NEWEST", "HELD", "QUEUES", "ERROR", "EXAMPLE"}
			table = append(table, []string{g.Class, strconv.Itoa(g.Count), strconv.Itoa(g.Messages), age(g.Oldest), age(g.Newest), held,
				render.Clean(joinComma(g.Queues)), render.Clean(g.Pattern), render.Clean(g.Example)})
		default:
			key := g.Key
			if by == "cg" {
				q, grp, _ := strings.Cut(key, "/")
				key = q + "/" + groupName(grp)
			}
			header = []string{map[string]string{"queue": "QUEUE", "cg": "QUEUE/CG", "partition": "QUEUE/PARTITION"}[by], "ROWS", "MESSAGES", "OLDEST", "NEWEST", "HELD", "EXAMPLE"}
			table = append(table, []string{render.Clean(key), strconv.Itoa(g.Count), strconv.Itoa(g.Messages), age(g.Oldest), age(g.Newest), held, render.Clean(g.Example)})
		}
	}
	if f.IO.IsStdoutTTY() && by == "error" {
		truncateColumn(table, header, 7, f.IO.TerminalWidth())
	}
	return render.WriteTable(f.IO.Out, header, table)
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}
