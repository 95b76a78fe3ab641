package dlq

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
	"github.com/schollz/progressbar/v3"
)

// ExecFlags are the flags replay and rm share.
type ExecFlags struct {
	Why     string
	By      string
	Yes     bool
	DryRun  bool
	Rate    float64
	Burst   int
	BatchID string
}

// batchInput is what a batch executes: a fresh snapshot, or a recorded
// batch's frozen manifest.
type batchInput struct {
	items   []replay.Item
	batch   *ledger.Batch // set when executing a recorded batch
	fresh   bool
	missing []client.Address // explicit addresses that are not dead-lettered
	absent  map[client.Address]bool
	planAt  time.Time
}

// gather snapshots the selection, or loads a recorded batch's manifest and
// checks which of its addresses are still dead-lettered.
func gather(ctx context.Context, f *cmdutil.Factory, cl *client.Client, ld *ledger.Store, sel *replay.Selection, batchID, action string) (*batchInput, error) {
	in := &batchInput{planAt: f.Now()}
	if batchID != "" {
		b, err := ld.Batch(ctx, batchID)
		if err != nil {
			return nil, err
		}
		if b.Broker != cl.Server() {
			return nil, cmdutil.UsageError(fmt.Errorf("batch %s belongs to broker %s, not %s (use --server or --context)", b.ID, b.Broker, cl.Server()))
		}
		want := map[string]string{replay.Replay: ledger.ActionReplay, replay.Discard: ledger.ActionDiscard}[action]
		if b.Action != want {
			verb := map[string]string{ledger.ActionReplay: "dlq replay", ledger.ActionDiscard: "dlq rm", ledger.ActionHold: "nothing (a hold is not executed)"}[b.Action]
			return nil, cmdutil.UsageError(fmt.Errorf("batch %s records a %s decision; execute it with %s", b.ID, b.Action, verb))
		}
		man, err := ld.Manifest(ctx, b.ID)
		if err != nil {
			return nil, err
		}
		in.batch = b
		in.items = manifestItems(man)
		// A recorded manifest may be old: find what is still dead-lettered,
		// so nothing is deleted that is not (an older server's DELETE
		// removes live messages too).
		counts, err := rowCounts(ctx, cl, in.items)
		if err != nil {
			return nil, err
		}
		in.absent = map[client.Address]bool{}
		for _, it := range in.items {
			if counts[it.Address] == 0 {
				in.absent[it.Address] = true
			}
		}
		return in, nil
	}
	items, err := replay.Snapshot(ctx, cl, sel, pageSize)
	if err != nil {
		return nil, err
	}
	in.items, in.fresh = items, true
	if len(sel.Addresses) > 0 {
		found := map[client.Address]bool{}
		for _, it := range items {
			found[it.Address] = true
		}
		for _, a := range sel.Addresses {
			if !found[a] {
				in.missing = append(in.missing, a)
			}
		}
	}
	return in, nil
}

func manifestItems(man []ledger.ManifestItem) []replay.Item {
	items := make([]replay.Item, 0, len(man))
	for _, m := range man {
		it := replay.Item{Address: m.Address, Queue: m.Queue, Partition: m.Partition}
		groups := m.Groups
		if len(groups) == 0 {
			groups = []string{""}
		}
		for _, g := range groups {
			it.Rows = append(it.Rows, client.Row{PartitionID: m.Address.PartitionID, TransactionID: m.Address.TransactionID,
				Queue: m.Queue, Partition: m.Partition, ConsumerGroup: g, ErrorMessage: m.Error, RetryCount: m.RetryCount,
				FailedAt: m.FailedAt, Data: m.Payload})
		}
		items = append(items, it)
	}
	return items
}

func toManifest(items []replay.Item) []ledger.ManifestItem {
	out := make([]ledger.ManifestItem, len(items))
	for i, it := range items {
		r := it.Newest()
		out[i] = ledger.ManifestItem{Address: it.Address, Queue: it.Queue, Partition: it.Partition, Groups: it.Groups(),
			Error: r.ErrorMessage, RetryCount: r.RetryCount, FailedAt: r.FailedAt, Payload: r.Data, Undecryptable: it.Undecryptable()}
	}
	return out
}

// reportMissing names explicit addresses that are not dead-lettered.
func reportMissing(f *cmdutil.Factory, missing []client.Address) {
	for _, a := range missing {
		fmt.Fprintf(f.IO.ErrOut, "not found: no dead-letter row at %s (nothing done to it)\n", a)
	}
}

// printPlan writes the plan for people (stderr) or as a document.
func printPlan(f *cmdutil.Factory, fm render.Format, p replay.Plan, dry bool) error {
	if !fm.Human() && dry {
		return render.Document(f.IO.Out, fm, p)
	}
	w := f.IO.ErrOut
	pal := f.ErrPalette()
	verb := map[string]string{replay.Replay: "Replay", replay.Discard: "Discard"}[p.Action]
	fmt.Fprintf(w, "%s plan: %s (%s)\n", pal.Bold(verb), plural(p.Addresses, "message", "messages"), plural(p.Rows, "dead-letter row", "dead-letter rows"))
	queues := make([]string, 0, len(p.ByQueue))
	for q := range p.ByQueue {
		queues = append(queues, q)
	}
	sort.Strings(queues)
	for _, q := range queues {
		fmt.Fprintf(w, "  queue %-20s %d\n", q, p.ByQueue[q])
	}
	fmt.Fprintln(w, "  by failure class:")
	for i, c := range p.ByClass {
		if i == 10 {
			fmt.Fprintf(w, "    … and %d more classes\n", len(p.ByClass)-10)
			break
		}
		fmt.Fprintf(w, "    %s  %5d  %s\n", c.Class, c.Count, render.Truncate(c.Pattern, 80))
	}
	fmt.Fprintf(w, "  destination: %s\n", p.Destination)
	if p.Via != "" {
		fmt.Fprintf(w, "  path: %s\n", p.Via)
	}
	if p.Rate > 0 {
		fmt.Fprintf(w, "  rate: %g/s, estimated %s\n", p.Rate, p.Estimated.Round(time.Second))
	} else {
		fmt.Fprintln(w, "  rate: unlimited")
	}
	for _, fo := range p.FanOut {
		fmt.Fprintf(w, "  %s a re-push reaches every consumer group of %s (%s): %s failed in only some of them and will be delivered again to the others. Use --to-queue for a recovery queue only the failed group reads.\n",
			pal.Yellow("warning:"), fo.Queue, strings.Join(fo.AlsoReaches, ", "), plural(fo.Messages, "message", "messages"))
	}
	if p.Undecryptable > 0 {
		fmt.Fprintf(w, "  %s %s show an undecryptable envelope in the list; each is checked against the detail route and left in place if it cannot be decrypted.\n", pal.Yellow("warning:"), plural(p.Undecryptable, "message", "messages"))
	}
	if p.OverGenCap > 0 {
		fmt.Fprintf(w, "  %s %s past --max-generation will be skipped (they keep failing after replays).\n", pal.Yellow("warning:"), plural(p.OverGenCap, "message is", "messages are"))
	}
	if p.OtherGroups > 0 {
		fmt.Fprintf(w, "  %s deleting also discards %s of other consumer groups for the same messages (a delete acts on the message's address).\n", pal.Yellow("warning:"), plural(p.OtherGroups, "row", "rows"))
	}
	if dry {
		fmt.Fprintln(w, "Dry run: nothing was written to the broker or the ledger.")
	}
	return nil
}

// confirm asks for a yes on a terminal; without one, --yes is required.
func confirm(f *cmdutil.Factory, question string) error {
	if !f.IO.CanPrompt() {
		return cmdutil.FlagErrorf("refusing to act without --yes (not a terminal to ask on)")
	}
	fmt.Fprintf(f.IO.ErrOut, "%s [y/N] ", question)
	line, _ := bufio.NewReader(f.IO.In).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New("not confirmed; nothing done")}
}

// progress returns a progress callback drawing a bar on a TTY stderr.
func progress(f *cmdutil.Factory, total int, verb string) (func(int), func()) {
	if !f.IO.IsStderrTTY() || total == 0 {
		return nil, func() {}
	}
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(f.IO.ErrOut),
		progressbar.OptionSetDescription(verb),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("msg"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionEnableColorCodes(f.IO.ColorEnabledStderr()),
	)
	return func(done int) { _ = bar.Set(done) }, func() { _ = bar.Finish() }
}

// printReport writes the end summary and returns the command's error.
func printReport(f *cmdutil.Factory, fm render.Format, rep *replay.Report, resume string, missing []client.Address) error {
	if !fm.Human() {
		if err := render.Document(f.IO.Out, fm, rep); err != nil {
			return err
		}
	} else {
		w := f.IO.ErrOut
		pal := f.ErrPalette()
		fmt.Fprintf(w, "Batch %s: ", pal.Bold(rep.BatchID))
		var parts []string
		add := func(n int, s string, paint func(string) string) {
			if n > 0 || s == "failed" {
				parts = append(parts, paint(fmt.Sprintf("%d %s", n, s)))
			}
		}
		id := func(s string) string { return s }
		if rep.Action == replay.Replay {
			add(rep.Replayed, "replayed", pal.Green)
			add(rep.Duplicate, "duplicate-suppressed", id)
		} else {
			add(rep.Discarded, "discarded", pal.Green)
			add(rep.Replayed, "finished earlier replays", id)
		}
		add(rep.AlreadyGone, "already gone", id)
		add(rep.AlreadyDone, "already done", id)
		if rep.Failed > 0 {
			add(rep.Failed, "failed", pal.Red)
		} else {
			parts = append(parts, "0 failed")
		}
		add(rep.Unknown, "unknown", pal.Red)
		add(rep.SkippedEncrypted, "skipped-encrypted", pal.Yellow)
		add(rep.SkippedGeneration, "skipped-generation", pal.Yellow)
		add(rep.Claimed, "claimed by another run", id)
		add(rep.NotStarted, "not started", pal.Yellow)
		fmt.Fprintf(w, "%s in %s\n", strings.Join(parts, ", "), rep.Elapsed.Round(time.Millisecond))
		for _, l := range rep.Listed {
			fmt.Fprintf(w, "  %s  %s\n", l.Address, l.Reason)
		}
		if rep.Stopped != "" {
			fmt.Fprintf(w, "%s %s\n", pal.Yellow("Stopped:"), rep.Stopped)
		}
	}
	if rep.Interrupted || rep.Stopped != "" {
		fmt.Fprintf(f.IO.ErrOut, "Resume with: %s\n", resume)
	}
	reportMissing(f, missing)
	switch {
	case rep.Interrupted:
		return cmdutil.ErrInterrupted
	case !rep.Clean():
		return cmdutil.ErrBreach
	case len(missing) > 0:
		return &cmdutil.ExitError{Code: cmdutil.ExitNotFound, Silent: true}
	}
	return nil
}

// newSince counts dead letters matching a fresh selection that arrived
// after the plan (not in the batch, not this run's own re-failures): they
// are not silently added to a frozen batch.
func newSince(ctx context.Context, cl *client.Client, sel *replay.Selection, planAt time.Time, items []replay.Item, own map[string]bool) int {
	inBatch := make(map[client.Address]bool, len(items))
	for _, it := range items {
		inBatch[it.Address] = true
	}
	n := 0
	for r, err := range cl.Rows(ctx, sel.Query(pageSize)) {
		if err != nil || r.FailedAt.Before(planAt) {
			break // newest first: nothing older can be new
		}
		if sel.Match(r) && !own[r.TransactionID] && !inBatch[r.Address()] {
			n++
		}
	}
	return n
}

// queueGroups lists consumer groups per queue from the broker's queue list
// (where it names them) and from the rows in hand.
func queueGroups(ctx context.Context, cl *client.Client, items []replay.Item) map[string][]string {
	out := map[string][]string{}
	seen := map[string]map[string]bool{}
	add := func(q, g string) {
		if seen[q] == nil {
			seen[q] = map[string]bool{}
		}
		if !seen[q][g] {
			seen[q][g] = true
			out[q] = append(out[q], g)
		}
	}
	if qs, err := cl.Queues(ctx); err == nil {
		for _, q := range qs {
			for _, g := range q.ConsumerGroups {
				add(q.Name, g)
			}
		}
	}
	for _, it := range items {
		for _, g := range it.Groups() {
			add(it.Queue, g)
		}
	}
	return out
}

// execSpec is what differs between replay and rm.
type execSpec struct {
	action      string
	verb        string
	flags       *ExecFlags
	sel         *cmdutil.SelectionFlags
	args        []string
	configure   func(*replay.Options) error
	plan        func(*replay.PlanOptions)
	destination string
	allRows     bool // rm: count other groups' rows a delete also discards
}

func execute(ctx context.Context, f *cmdutil.Factory, sp execSpec) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	ef := sp.flags
	var sel *replay.Selection
	if ef.BatchID == "" {
		if sel, err = sp.sel.Build(f, sp.args); err != nil {
			return err
		}
		if err := cmdutil.RequireSelection(sel, "dlq "+sp.verb); err != nil {
			return err
		}
	} else if sp.sel.Any(sp.args) {
		return cmdutil.FlagErrorf("--batch executes a recorded batch; it takes no selection")
	}
	opts := replay.Options{Action: sp.action, Rate: ef.Rate, Burst: ef.Burst, Now: f.Now}
	if sp.configure != nil {
		if err := sp.configure(&opts); err != nil {
			return err
		}
	}
	cl, ld, err := f.Session(ctx)
	if err != nil {
		return err
	}
	in, err := gather(ctx, f, cl, ld, sel, ef.BatchID, sp.action)
	if err != nil {
		return err
	}
	why := ef.Why
	if in.batch != nil && why == "" {
		why = in.batch.Why
	}
	if why == "" && !ef.DryRun {
		return cmdutil.FlagErrorf("--why is required: say why this batch is %s (it is recorded in the ledger)", map[string]string{"replay": "replayed", "rm": "discarded"}[sp.verb])
	}
	if len(in.items) == 0 {
		reportMissing(f, in.missing)
		if len(in.missing) > 0 {
			return &cmdutil.ExitError{Code: cmdutil.ExitNotFound, Silent: true}
		}
		fmt.Fprintln(f.IO.ErrOut, "Nothing to "+sp.verb+": no dead letter matches.")
		return nil
	}
	po := replay.PlanOptions{Action: sp.action, Rate: ef.Rate}
	if sp.plan != nil {
		sp.plan(&po)
	}
	if sp.action == replay.Replay && sp.destination == "" {
		po.QueueGroups = queueGroups(ctx, cl, in.items)
	}
	if sp.allRows {
		if po.AllRows, err = rowCounts(ctx, cl, in.items); err != nil {
			return err
		}
	}
	plan := replay.MakePlan(in.items, po)
	if err := printPlan(f, fm, plan, ef.DryRun); err != nil {
		return err
	}
	if ef.DryRun {
		reportMissing(f, in.missing)
		return nil
	}
	if !ef.Yes {
		question := map[string]string{replay.Replay: "Replay", replay.Discard: "Discard"}[sp.action]
		if err := confirm(f, fmt.Sprintf("%s %s?", question, plural(len(in.items), "message", "messages"))); err != nil {
			return err
		}
	}
	by := ef.By
	if by == "" {
		by = f.User()
	}
	batch := in.batch
	now := f.Now()
	verb := "Executing recorded"
	if batch == nil {
		verb = "Recorded"
		batch = &ledger.Batch{Broker: cl.Server(), Action: map[string]string{replay.Replay: ledger.ActionReplay, replay.Discard: ledger.ActionDiscard}[sp.action],
			By: by, At: now, Why: why, Selection: sel.String(), Destination: sp.destination, Status: ledger.StatusRunning}
		if err := ld.CreateBatch(ctx, batch, toManifest(in.items)); err != nil {
			return err
		}
	}
	jctx := context.WithoutCancel(ctx)
	if err := ld.SetBatchStatus(jctx, batch.ID, ledger.StatusRunning, now, batch.Outcome); err != nil {
		return err
	}
	_ = ld.Audit(jctx, ledger.AuditEntry{At: now, Broker: cl.Server(), BatchID: batch.ID, Kind: "execution-started", By: by,
		Detail: fmt.Sprintf("%s of %d address(es) at rate %g", sp.verb, len(in.items), ef.Rate)})
	fmt.Fprintf(f.IO.ErrOut, "%s batch %s.\n", verb, batch.ID)

	opts.Broker, opts.BatchID, opts.Owner, opts.Fresh, opts.Absent = cl.Server(), batch.ID, ledger.NewOwner(cmdutil.Nonce()), in.fresh, in.absent
	if sp.action == replay.Discard {
		opts.Archive = func(ctx context.Context, rows []client.Row) error {
			a := ld.NewArchiver(cl.Server(), f.Now())
			for _, r := range rows {
				if err := a.Add(ctx, r); err != nil {
					return err
				}
			}
			return a.Flush(ctx)
		}
	}
	tick, finish := progress(f, len(in.items), sp.verb)
	opts.Progress = tick
	rep, err := replay.NewEngine(cl, ld, opts).Run(ctx, in.items)
	finish()
	if err != nil {
		return err
	}
	// The batch's record is its journal's, so a resumed batch shows
	// everything it did, not only its last run.
	outcome, err := ld.BatchOutcome(jctx, batch.ID)
	if err != nil {
		return err
	}
	status := ledger.StatusDone
	switch {
	case rep.Interrupted || rep.Stopped != "":
		status = ledger.StatusInterrupted
	case outcome[ledger.Failed]+outcome[ledger.Unknown]+outcome[ledger.Pending]+outcome[ledger.Inflight]+outcome[ledger.Published] > 0 || !rep.Clean():
		status = ledger.StatusFailed
	}
	end := f.Now()
	if err := ld.SetBatchStatus(jctx, batch.ID, status, now, outcome); err != nil {
		return err
	}
	_ = ld.Audit(jctx, ledger.AuditEntry{At: end, Broker: cl.Server(), BatchID: batch.ID, Kind: "execution-" + status, By: by,
		Detail: fmt.Sprintf("%v", rep.Outcome())})
	if in.fresh && !rep.Interrupted && sel != nil && len(sel.Addresses) == 0 {
		own := map[string]bool{}
		for _, t := range rep.ReplayTxIDs {
			own[t] = true
		}
		if n := newSince(ctx, cl, sel, in.planAt, in.items, own); n > 0 {
			fmt.Fprintf(f.IO.ErrOut, "%s matching the selection arrived since the plan; they are not in this batch.\n", plural(n, "new dead letter", "new dead letters"))
		}
	}
	cmdLine := "dlqctl dlq " + sp.verb + " --batch " + batch.ID + " --yes"
	return printReport(f, fm, rep, cmdLine, in.missing)
}

// rowCounts counts the rows each item's address has in the DLQ now, every
// consumer group included, reading only the items' queues.
func rowCounts(ctx context.Context, cl *client.Client, items []replay.Item) (map[client.Address]int, error) {
	want := map[client.Address]bool{}
	var queues []string
	for _, it := range items {
		want[it.Address] = true
		if !contains(queues, it.Queue) {
			queues = append(queues, it.Queue)
		}
	}
	out := map[client.Address]int{}
	for _, q := range queues {
		for r, err := range cl.Rows(ctx, client.ListQuery{Queue: q, Limit: pageSize}) {
			if err != nil {
				return nil, err
			}
			if r.Queue == q && want[r.Address()] {
				out[r.Address()]++
			}
		}
	}
	return out, nil
}
