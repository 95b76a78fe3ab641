package dlq

import (
	"context"
	"fmt"
	"hash/maphash"
	"iter"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
	"github.com/spf13/cobra"
)

// LsOptions are `dlq ls`'s flags.
type LsOptions struct {
	Selection cmdutil.SelectionFlags
	GroupBy   string
	Sort      string
	Args      []string
}

// NewCmdLs lists dead letters.
func NewCmdLs(f *cmdutil.Factory, runF func(*LsOptions) error) *cobra.Command {
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
are held before the first is printed.`,
		Example: `  $ dlqctl dlq ls
  $ dlqctl dlq ls --sort oldest --limit 20
  $ dlqctl dlq ls --queue orders --failed-after 2h -o wide
  $ dlqctl dlq ls --group-by error
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
			if runF != nil {
				return runF(o)
			}
			return lsRun(cmd.Context(), f, o)
		},
	}
	cmdutil.AddSelectionFlags(cmd, &o.Selection, false)
	cmd.Flags().StringVar(&o.GroupBy, "group-by", "", "one row per group: error, queue, cg or partition")
	cmd.Flags().StringVar(&o.Sort, "sort", "newest", "newest (failure) first, or oldest first")
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
	if err := cmdutil.CheckNames(ctx, cl, sel); err != nil {
		return err
	}
	dec, err := decisions(ctx, f, cl.Broker())
	if err != nil {
		return err
	}
	now := f.Now()
	limited := false
	q := sel.Query(pageSize)
	src := cl.Rows
	if o.Sort == "oldest" {
		src = cl.RowsOldestFirst
	}
	if o.GroupBy != "" {
		q.NoData = true
		return lsGroups(f, fm, o.GroupBy, selected(src(ctx, q), sel, &limited), sel, now, heldBy(dec, now))
	}
	rows := selected(src(ctx, q), sel, &limited)
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	if !fm.Human() {
		st := render.NewStream(f.IO.Out, fm)
		if f.IO.IsStdoutTTY() {
			st.FlushEach()
		}
		for r, err := range rows {
			if err != nil {
				st.Close()
				return err
			}
			var d *ledger.Decision
			if x, ok := dec[r.Address()]; ok {
				d = &x
			}
			rec := lsRecord{r: r, now: now, d: d}
			if d != nil {
				rec.slo = triageSLO(cfg, r.Queue, r.ConsumerGroup)
			}
			if err := st.Write(rec); err != nil {
				return err
			}
		}
		return st.Close()
	}
	return lsTable(f, fm, cl, rows, sel, dec, now, func() bool { return limited }, o.Sort)
}

// selected streams the rows of src that sel matches, up to its --limit
// (then it stops reading, and sets *limited).
func selected(src iter.Seq2[client.Row, error], sel *replay.Selection, limited *bool) iter.Seq2[client.Row, error] {
	return func(yield func(client.Row, error) bool) {
		n := 0
		for r, err := range src {
			if err != nil {
				yield(r, err)
				return
			}
			if !sel.Match(r) {
				continue
			}
			if !yield(r, nil) {
				return
			}
			if n++; sel.Limit > 0 && n >= sel.Limit {
				// Stop reading: the rest of the answer is not needed.
				*limited = true
				return
			}
		}
	}
}

func lsTable(f *cmdutil.Factory, fm render.Format, cl *client.Client, rows func(func(client.Row, error) bool), sel *replay.Selection,
	dec map[client.Address]ledger.Decision, now time.Time, limited func() bool, order string) error {
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	pal := f.Palette()
	header := []string{"AGE", "QUEUE", "PARTITION", "CG", "RETRIES", "ERROR", "ADDRESS", "DECISION"}
	if fm == render.Wide {
		header = append(header, "MESSAGE-ID", "FAILED-AT", "ENCRYPTED")
	}
	var table [][]string
	var envelopes []int // rows whose list payload is an encryption envelope
	var ages []time.Duration
	var scopes [][2]string
	var oldest client.Row
	classes := map[string]struct{}{}
	undecided := 0
	for r, err := range rows {
		if err != nil {
			return err
		}
		age := now.Sub(r.FailedAt)
		decision := "-"
		if d, ok := dec[r.Address()]; ok {
			slo := triageSLO(cfg, r.Queue, r.ConsumerGroup)
			decision = decisionLabel(d, r, now, slo)
			if !d.Covers(r.FailedAt, now) || d.NotCarriedOut(now, slo) {
				undecided++
			}
		} else {
			undecided++
		}
		classes[replay.ClassID(r.ErrorMessage)] = struct{}{}
		if oldest.PartitionID == "" || r.FailedAt.Before(oldest.FailedAt) {
			oldest = r
		}
		line := []string{render.AgeSince(now, r.FailedAt), render.Clean(r.Queue), render.Clean(r.Partition), render.Clean(groupName(r.ConsumerGroup)),
			strconv.Itoa(r.RetryCount), render.Clean(r.ErrorMessage), render.Clean(r.Address().String()), decision}
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
		ages = append(ages, age)
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
		if sel.Class != "" && !replay.IsClassID(sel.Class) {
			return cmdutil.FlagErrorf("--class %q is not a class id: class ids are the 8 hex digits `dlq ls --group-by error` prints", sel.Class)
		}
		if sel.Class != "" {
			fmt.Fprintf(f.IO.ErrOut, "No dead letters match: no dead letter is in class %s now (see dlq ls --group-by error).\n", sel.Class)
			return nil
		}
		fmt.Fprintln(f.IO.ErrOut, "No dead letters match.")
		return nil
	}
	tty := f.IO.IsStdoutTTY()
	if tty {
		truncateColumn(table, header, 5, f.IO.TerminalWidth())
		for i := range table {
			maxAge := time.Duration(0)
			if p, ok := cfg.PolicyFor(scopes[i][0], scopes[i][1]); ok {
				maxAge = p.MaxAge.D()
			}
			table[i][0] = pal.Age(table[i][0], ages[i], maxAge)
		}
		what := plural(len(table), "dead letter", "dead letters")
		of := ""
		if limited() {
			// The rows shown are the newest (or oldest): the summary is of them.
			what = fmt.Sprintf("%d %s dead letters shown (--limit %d)", len(table), order, sel.Limit)
			of = " shown"
		}
		fmt.Fprintf(f.IO.Out, "%s, oldest%s %s (%s in %s), %s, %s\n\n",
			pal.Bold(what), of, render.AgeSince(now, oldest.FailedAt), render.Clean(oldest.Address().String()), render.Clean(oldest.Queue),
			plural(len(classes), "failure class", "failure classes"), plural(undecided, "undecided", "undecided"))
	}
	return render.WriteTable(f.IO.Out, header, table)
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

// Group is one row of `ls --group-by`: for error, a failure class.
type Group struct {
	Key      string    `json:"key"`
	Class    string    `json:"class,omitempty"`
	Pattern  string    `json:"pattern,omitempty"`
	Count    int       `json:"count"`    // dead-letter rows
	Messages int       `json:"messages"` // distinct addresses among them
	Oldest   time.Time `json:"oldestFailedAt"`
	Newest   time.Time `json:"newestFailedAt"`
	Example  string    `json:"exampleAddress"`
	Queues   []string  `json:"queues"`
	// Held counts the group's rows under an active hold; HeldBy names who
	// the holds are with (their owners, else who recorded them).
	Held   int      `json:"held"`
	HeldBy []string `json:"heldBy,omitempty"`
	// OldestQueue and OldestGroup are where the oldest row is: its age is
	// judged against that scope's max-age.
	OldestQueue string `json:"-"`
	OldestGroup string `json:"-"`
	queueSet    map[string]struct{}
	addrs       map[uint64]struct{} // hashes: counting messages costs 8 bytes each
}

// GroupBys are the groupings of `ls --group-by`.
var GroupBys = []string{"error", "queue", "cg", "partition"}

// GroupKey is the key of r's group under a grouping.
func GroupKey(by string, r client.Row) string {
	switch by {
	case "queue":
		return r.Queue
	case "cg":
		return r.Queue + "/" + r.ConsumerGroup
	case "partition":
		return r.Queue + "/" + r.Partition
	}
	return replay.ClassID(r.ErrorMessage)
}

// Grouper groups rows one at a time, so the groups can be shown while
// rows are still arriving (the triage screen does).
type Grouper struct {
	by     string
	groups map[string]*Group
	seed   maphash.Seed
	// Held, when set, says whether a row is under an active hold and
	// who it is with.
	Held func(client.Row) (string, bool)
}

// NewGrouper groups by one of GroupBys.
func NewGrouper(by string) *Grouper {
	return &Grouper{by: by, groups: map[string]*Group{}, seed: maphash.MakeSeed()}
}

// Add counts a row into its group and returns the group's key.
func (gr *Grouper) Add(r client.Row) string {
	key := GroupKey(gr.by, r)
	g := gr.groups[key]
	if g == nil {
		g = &Group{Key: key, Oldest: r.FailedAt, Newest: r.FailedAt, Example: r.Address().String(),
			OldestQueue: r.Queue, OldestGroup: r.ConsumerGroup, queueSet: map[string]struct{}{}, addrs: map[uint64]struct{}{}}
		if gr.by == "error" {
			g.Class, g.Pattern = key, replay.NormalizeError(r.ErrorMessage)
		}
		gr.groups[key] = g
	}
	g.Count++
	g.addrs[maphash.String(gr.seed, r.PartitionID+"/"+r.TransactionID)] = struct{}{}
	if r.FailedAt.Before(g.Oldest) {
		g.Oldest, g.OldestQueue, g.OldestGroup = r.FailedAt, r.Queue, r.ConsumerGroup
	}
	if r.FailedAt.After(g.Newest) {
		g.Newest = r.FailedAt
	}
	if _, ok := g.queueSet[r.Queue]; !ok {
		g.queueSet[r.Queue] = struct{}{}
		g.Queues = append(g.Queues, r.Queue)
	}
	if gr.Held != nil {
		if who, ok := gr.Held(r); ok {
			g.Held++
			if !slices.Contains(g.HeldBy, who) {
				g.HeldBy = append(g.HeldBy, who)
			}
		}
	}
	return key
}

// Lookup returns a copy of one group, as Groups does.
func (gr *Grouper) Lookup(key string) (Group, bool) {
	g, ok := gr.groups[key]
	if !ok {
		return Group{}, false
	}
	return g.snapshot(), true
}

// snapshot is a copy of the group the grouper can go on counting under.
func (g *Group) snapshot() Group {
	c := *g
	c.Queues = slices.Clone(g.Queues)
	sort.Strings(c.Queues)
	c.HeldBy = slices.Clone(g.HeldBy)
	sort.Strings(c.HeldBy)
	c.Messages = len(g.addrs)
	c.queueSet, c.addrs = nil, nil
	return c
}

// Groups returns copies of the groups, biggest first; ties by oldest
// first, then key, so the order is stable.
func (gr *Grouper) Groups() []Group {
	list := make([]Group, 0, len(gr.groups))
	for _, g := range gr.groups {
		list = append(list, g.snapshot())
	}
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i], list[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		if !a.Oldest.Equal(b.Oldest) {
			return a.Oldest.Before(b.Oldest)
		}
		return a.Key < b.Key
	})
	return list
}

// heldBy says whether a row is under an active hold, and who it is with.
func heldBy(dec map[client.Address]ledger.Decision, now time.Time) func(client.Row) (string, bool) {
	return func(r client.Row) (string, bool) {
		d, ok := dec[r.Address()]
		if !ok || d.Action != ledger.ActionHold || !d.Covers(r.FailedAt, now) {
			return "", false
		}
		if d.Owner != "" {
			return d.Owner, true
		}
		return d.By, true
	}
}

func lsGroups(f *cmdutil.Factory, fm render.Format, by string, rows func(func(client.Row, error) bool), sel *replay.Selection, now time.Time,
	held func(client.Row) (string, bool)) error {
	gr := NewGrouper(by)
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
		if sel.Class != "" && !replay.IsClassID(sel.Class) {
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
