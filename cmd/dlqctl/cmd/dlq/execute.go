package dlq

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/pflag"
)

// ExecFlags are the flags replay and rm share.
type ExecFlags struct {
	Why          string
	By           string
	Yes          bool
	DryRun       bool
	Rate         float64
	Burst        int
	BatchID      string
	OverrideHold bool
	SkipHeld     bool
}

// Settings are what a batch runs with, recorded in the ledger when it
// starts: resuming it (--batch) reuses them, except what the command line
// sets again.
type Settings struct {
	Rate          float64 `json:"rate"`
	Burst         int     `json:"burst"`
	Concurrency   int     `json:"concurrency,omitempty"`
	Via           string  `json:"via,omitempty"`
	ToQueue       string  `json:"toQueue,omitempty"`
	Transform     string  `json:"transform,omitempty"`
	MaxGeneration int     `json:"maxGeneration,omitempty"`
	MaxFailures   int     `json:"maxFailures,omitempty"`
	MaxRefailures int     `json:"maxRefailures,omitempty"`
	// Order is the replay order; recorded, it also says the manifest is
	// already in that order.
	Order string `json:"order,omitempty"`
}

// settingFlags are the flags that set Settings' fields, by JSON key.
var settingFlags = []struct {
	flag, key string
	copy      func(dst, src *Settings)
}{
	{"rate", "rate", func(d, s *Settings) { d.Rate = s.Rate }},
	{"burst", "burst", func(d, s *Settings) { d.Burst = s.Burst }},
	{"concurrency", "concurrency", func(d, s *Settings) { d.Concurrency = s.Concurrency }},
	{"via", "via", func(d, s *Settings) { d.Via = s.Via }},
	{"to-queue", "toQueue", func(d, s *Settings) { d.ToQueue = s.ToQueue }},
	{"transform", "transform", func(d, s *Settings) { d.Transform = s.Transform }},
	{"max-generation", "maxGeneration", func(d, s *Settings) { d.MaxGeneration = s.MaxGeneration }},
	{"max-failures", "maxFailures", func(d, s *Settings) { d.MaxFailures = s.MaxFailures }},
	{"max-refailures", "maxRefailures", func(d, s *Settings) { d.MaxRefailures = s.MaxRefailures }},
	{"order", "order", func(d, s *Settings) { d.Order = s.Order }},
}

// resumeSettings merges a batch's recorded settings under the flags the
// command line set: a setting the record has (decide records only the
// order) and the command line does not set is the record's. The
// destination and the payload transform cannot change half-way: the
// copies already published went where the batch said.
func resumeSettings(recorded json.RawMessage, cur Settings, changed func(string) bool) (Settings, error) {
	if len(recorded) == 0 {
		return cur, nil
	}
	var rec Settings
	var keys map[string]json.RawMessage
	if json.Unmarshal(recorded, &rec) != nil || json.Unmarshal(recorded, &keys) != nil {
		return cur, nil // an unreadable record: the command line's settings stand
	}
	if changed("to-queue") && cur.ToQueue != rec.ToQueue {
		return cur, cmdutil.FlagErrorf("this batch publishes to %s; a resume cannot change --to-queue", destName(rec.ToQueue))
	}
	if changed("transform") && cur.Transform != rec.Transform {
		return cur, cmdutil.FlagErrorf("this batch was started with --transform %q; a resume cannot change it", rec.Transform)
	}
	out := cur
	for _, f := range settingFlags {
		if _, ok := keys[f.key]; ok && !changed(f.flag) {
			f.copy(&out, &rec)
		}
	}
	return out, nil
}

func destName(q string) string {
	if q == "" {
		return "each message's own queue"
	}
	return "queue " + q
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
		if b.Broker != cl.Broker() {
			return nil, cmdutil.UsageError(fmt.Errorf("batch %s belongs to broker %s, not %s (use --server or --context)", b.ID, b.Broker, cl.Broker()))
		}
		if b.Status == ledger.StatusCancelled {
			return nil, cmdutil.UsageError(fmt.Errorf("batch %s was cancelled (see dlqctl decisions show %s): it is no longer a decision; select the dead letters again for a new batch", b.ID, b.ID))
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
		// removes live messages too), and every row a delete removes now.
		current, err := currentRows(ctx, cl, in.items)
		if err != nil {
			return nil, err
		}
		in.absent = map[client.Address]bool{}
		for i := range in.items {
			it := &in.items[i]
			rows := current[it.Address]
			if len(rows) == 0 {
				in.absent[it.Address] = true
				continue
			}
			have := map[string]bool{}
			for _, r := range it.AllRows() {
				have[r.ConsumerGroup+"\x00"+r.FailedAt.String()] = true
			}
			for _, r := range rows {
				if !have[r.ConsumerGroup+"\x00"+r.FailedAt.String()] {
					it.Others = append(it.Others, r)
				}
			}
		}
		return in, nil
	}
	var items []replay.Item
	var err error
	if sel.OnlyAddresses() {
		items, in.missing, err = snapshotAddresses(ctx, cl, sel.Addresses)
	} else {
		items, err = replay.Snapshot(ctx, cl, sel, pageSize)
	}
	if err != nil {
		return nil, err
	}
	in.items, in.fresh = items, true
	if len(sel.Addresses) > 0 && !sel.OnlyAddresses() {
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

// snapshotAddresses snapshots explicit addresses without reading the
// whole DLQ: the detail route says whether each is dead-lettered (and
// gives its payload, decrypted); the rows are read from their queues
// only, without payloads. An address the broker cannot be asked about
// (see Address.Unreachable) is looked for in the list.
func snapshotAddresses(ctx context.Context, cl *client.Client, addrs []client.Address) ([]replay.Item, []client.Address, error) {
	type got struct {
		m   *client.Message
		err error
	}
	res := make([]got, len(addrs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, a := range addrs {
		if !a.PathSafe() {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res[i].m, res[i].err = cl.Get(ctx, a)
		}()
	}
	wg.Wait()
	var items []replay.Item
	var missing []client.Address
	byAddr := map[client.Address]int{} // -1: dead-lettered, not yet seen in the list
	seen := map[client.Address]bool{}
	var queues []string
	readAll := false
	for i, a := range addrs {
		if seen[a] {
			continue
		}
		seen[a] = true
		r := res[i]
		switch {
		case !a.PathSafe():
			readAll = true
		case errors.Is(r.err, client.ErrNoDeadLetterRow):
			missing = append(missing, a)
			continue
		case errors.Is(r.err, client.ErrRouteMissing):
			readAll = true
		case r.err != nil:
			return nil, nil, r.err
		case r.m.Status != "" && r.m.Status != "dead_letter":
			missing = append(missing, a)
			continue
		default:
			if !contains(queues, r.m.Queue) {
				queues = append(queues, r.m.Queue)
			}
		}
		byAddr[a] = -1
	}
	if readAll {
		queues = []string{""}
	}
	// The rows of the addresses found, in list order (newest first).
	for _, q := range queues {
		for row, err := range cl.Rows(ctx, client.ListQuery{Queue: q, Limit: pageSize, NoData: !readAll}) {
			if err != nil {
				return nil, nil, err
			}
			a := row.Address()
			i, want := byAddr[a]
			if !want || q != "" && row.Queue != q {
				continue
			}
			if i < 0 {
				byAddr[a] = len(items)
				items = append(items, replay.Item{Address: a, Queue: row.Queue, Partition: row.Partition, Rows: []client.Row{row}})
				continue
			}
			items[i].Rows = append(items[i].Rows, row)
		}
	}
	clear(seen)
	for k, a := range addrs {
		i, ok := byAddr[a]
		if !ok || seen[a] {
			continue
		}
		seen[a] = true
		switch {
		case i < 0:
			// Dead-lettered a moment ago, gone by the time the list was read.
			missing = append(missing, a)
		case res[k].m != nil:
			items[i].Payload, items[i].Checked = res[k].m.Payload, true
		}
	}
	return items, missing, nil
}

// checkEnvelopes asks the detail route for each item whose list payload
// is an encryption envelope: the released server's list never decrypts,
// so only the detail route tells an encrypted payload (it decrypts) from
// an undecryptable one. The answer is what the batch publishes.
func checkEnvelopes(ctx context.Context, cl *client.Client, items []replay.Item) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	var mu sync.Mutex
	var first error
	for i := range items {
		it := &items[i]
		if it.Checked || !it.Envelope() || !it.Address.PathSafe() {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			m, err := cl.Get(ctx, it.Address)
			switch {
			case err == nil:
				it.Payload, it.Checked = m.Payload, true
			case errors.Is(err, client.ErrNoDeadLetterRow), errors.Is(err, client.ErrRouteMissing):
				// Left unchecked: the run settles it (gone, or asked again).
			default:
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

func manifestItems(man []ledger.ManifestItem) []replay.Item {
	items := make([]replay.Item, 0, len(man))
	for _, m := range man {
		it := replay.Item{Address: m.Address, Queue: m.Queue, Partition: m.Partition, Payload: m.Payload, Checked: m.Checked}
		row := func(g, errText string, retries int, failed time.Time) client.Row {
			return client.Row{ID: m.MessageID, PartitionID: m.Address.PartitionID, TransactionID: m.Address.TransactionID, Queue: m.Queue,
				Partition: m.Partition, ConsumerGroup: g, ErrorMessage: errText, RetryCount: retries, FailedAt: failed, Data: m.Payload}
		}
		if len(m.Rows) > 0 {
			for _, r := range m.Rows {
				if r.Selected {
					it.Rows = append(it.Rows, row(r.ConsumerGroup, r.Error, r.RetryCount, r.FailedAt))
				} else {
					it.Others = append(it.Others, row(r.ConsumerGroup, r.Error, r.RetryCount, r.FailedAt))
				}
			}
		}
		if len(it.Rows) == 0 {
			// Manifests written before rows were recorded: one row per group.
			groups := m.Groups
			if len(groups) == 0 {
				groups = []string{""}
			}
			for _, g := range groups {
				it.Rows = append(it.Rows, row(g, m.Error, m.RetryCount, m.FailedAt))
			}
		}
		items = append(items, it)
	}
	return items
}

func toManifest(items []replay.Item) []ledger.ManifestItem {
	out := make([]ledger.ManifestItem, len(items))
	for i, it := range items {
		r := it.Newest()
		mi := ledger.ManifestItem{Address: it.Address, MessageID: r.ID, Queue: it.Queue, Partition: it.Partition, Groups: it.Groups(),
			Error: r.ErrorMessage, RetryCount: r.RetryCount, Payload: it.Data(), Undecryptable: it.Undecryptable(), Checked: it.Checked}
		for _, x := range it.Rows {
			mi.Rows = append(mi.Rows, ledger.ManifestRow{ConsumerGroup: x.ConsumerGroup, Error: x.ErrorMessage, RetryCount: x.RetryCount, FailedAt: x.FailedAt, Selected: true})
		}
		for _, x := range it.Others {
			mi.Rows = append(mi.Rows, ledger.ManifestRow{ConsumerGroup: x.ConsumerGroup, Error: x.ErrorMessage, RetryCount: x.RetryCount, FailedAt: x.FailedAt})
		}
		// The newest failure the batch saw: a row that fails later is a
		// new dead letter the decision does not cover.
		for _, x := range mi.Rows {
			if x.FailedAt.After(mi.FailedAt) {
				mi.FailedAt = x.FailedAt
			}
		}
		out[i] = mi
	}
	return out
}

// reportMissing names explicit addresses that are not dead-lettered.
func reportMissing(w io.Writer, missing []client.Address) {
	for _, a := range missing {
		fmt.Fprintf(w, "not found: no dead-letter row at %s (nothing done to it)\n", render.Clean(a.String()))
	}
}

// writePlan writes the plan for people.
func writePlan(w io.Writer, pal *render.Palette, p replay.Plan) {
	c := render.Clean
	verb := map[string]string{replay.Replay: "Replay", replay.Discard: "Discard"}[p.Action]
	rows := plural(p.Rows, "dead-letter row", "dead-letter rows")
	if p.OtherGroups > 0 {
		rows = fmt.Sprintf("%d dead-letter rows: %d selected, %d more of the same messages", p.Rows+p.OtherGroups, p.Rows, p.OtherGroups)
	}
	fmt.Fprintf(w, "%s plan: %s (%s)\n", pal.Bold(verb), plural(p.Addresses, "message", "messages"), rows)
	queues := make([]string, 0, len(p.ByQueue))
	for q := range p.ByQueue {
		queues = append(queues, q)
	}
	sort.Strings(queues)
	for _, q := range queues {
		fmt.Fprintf(w, "  queue %-20s %s\n", c(q), plural(p.ByQueue[q], "message", "messages"))
	}
	fmt.Fprintln(w, "  by failure class (messages):")
	for i, cc := range p.ByClass {
		if i == 10 {
			fmt.Fprintf(w, "    … and %d more classes\n", len(p.ByClass)-10)
			break
		}
		fmt.Fprintf(w, "    %s  %5d  %s\n", cc.Class, cc.Count, render.Truncate(c(cc.Pattern), 80))
	}
	fmt.Fprintf(w, "  destination: %s\n", c(p.Destination))
	if p.Via != "" {
		fmt.Fprintf(w, "  path: %s\n", p.Via)
	}
	if p.Pinned > 0 {
		fmt.Fprintf(w, "    %s the manual path an earlier attempt took (its derived id makes a repeat a duplicate)\n", plural(p.Pinned, "address keeps", "addresses keep"))
	}
	if p.NoCall > 0 {
		fmt.Fprintf(w, "  %s already done or gone from the DLQ: no call needed\n", plural(p.NoCall, "message is", "messages are"))
	}
	if o := p.Order; o != nil {
		switch {
		case o.Recorded && replay.Ordered(o.Mode):
			fmt.Fprintln(w, "  order: per partition, in the order the batch recorded, one at a time in each")
		case !replay.Ordered(o.Mode):
			fmt.Fprintln(w, "  order: none (--order none): messages of one partition may be published in any order")
		case o.Partitions == 0:
			fmt.Fprintln(w, "  order: per partition (no partition has more than one of these messages)")
		default:
			fmt.Fprintf(w, "  order: per partition, oldest first, one at a time in each; %s with several messages, the longest %s/%s (%d)\n",
				plural(o.Partitions, "partition", "partitions"), c(o.Chain.Queue), c(o.Chain.Partition), o.LongestChain)
			if o.Mode == replay.OrderPartition {
				fmt.Fprintln(w, "    a message not replayed holds back the later ones of its partition (--order skip-gaps goes on past it)")
			}
			fmt.Fprintln(w, "    each replay lands after whatever its partition delivered since it failed: handlers must accept an older version")
		}
		switch {
		case o.Recorded && o.ByFailure > 0:
			fmt.Fprintf(w, "    %s recorded by an older dlqctl without message ids: they keep the order it recorded\n", plural(o.ByFailure, "message was", "messages were"))
		case o.ByFailure > 0:
			fmt.Fprintf(w, "    %s ordered by first failure: their message ids are not time-ordered\n", plural(o.ByFailure, "message is", "messages are"))
		}
	}
	if p.Rate > 0 {
		est := "under a second"
		if p.Estimated >= time.Second {
			est = render.Duration(p.Estimated.Round(time.Second))
		}
		fmt.Fprintf(w, "  rate: %g/s, estimated %s\n", p.Rate, est)
	} else {
		fmt.Fprintln(w, "  rate: unlimited")
	}
	warn := pal.Yellow("warning:")
	if p.OtherGroups > 0 {
		var parts []string
		for i, a := range p.AlsoRemoves {
			if i == 8 {
				parts = append(parts, fmt.Sprintf("… %d more", len(p.AlsoRemoves)-8))
				break
			}
			parts = append(parts, fmt.Sprintf("%d of group %s, class %s (%s)", a.Rows, c(groupName(a.ConsumerGroup)), a.Class, render.Truncate(c(a.Pattern), 40)))
		}
		fmt.Fprintf(w, "  %s a %s acts on the message, so it also removes %s the selection left out: %s. They are archived and recorded in this batch.\n",
			warn, map[string]string{replay.Replay: "replay's delete", replay.Discard: "delete"}[p.Action],
			plural(p.OtherGroups, "dead-letter row", "dead-letter rows"), strings.Join(parts, "; "))
		if p.Action == replay.Replay {
			fmt.Fprintf(w, "  To replay for one consumer group alone, publish to a recovery queue only that group reads: --to-queue.\n")
		}
	}
	for _, fo := range p.FanOut {
		fmt.Fprintf(w, "  %s a re-push reaches every consumer group of %s (%s): %s failed in only some of them and will be delivered again to the others. Use --to-queue for a recovery queue only the failed group reads.\n",
			warn, c(fo.Queue), c(strings.Join(groupLabels(fo.AlsoReaches), ", ")), plural(fo.Messages, "message", "messages"))
	}
	if p.Undecryptable > 0 {
		if p.Action == replay.Replay {
			fmt.Fprintf(w, "  %s %s an encryption envelope the broker cannot decrypt; they are skipped and left in place.\n", warn, plural(p.Undecryptable, "message is", "messages are"))
		} else {
			fmt.Fprintf(w, "  %s %s an encryption envelope the broker cannot decrypt; they are discarded like the rest (the archive keeps the envelope).\n", warn, plural(p.Undecryptable, "message is", "messages are"))
		}
	}
	if p.OverGenCap > 0 {
		fmt.Fprintf(w, "  %s %s past --max-generation will be skipped (they keep failing after replays).\n", warn, plural(p.OverGenCap, "message is", "messages are"))
	}
	if p.SkippedHeld > 0 {
		fmt.Fprintf(w, "  %s under an active hold left out of the batch (--skip-held)\n", plural(p.SkippedHeld, "message", "messages"))
	}
	for _, h := range p.Holds {
		until := ""
		if !h.Until.IsZero() {
			until = " until " + render.Timestamp(h.Until)
		}
		fmt.Fprintf(w, "  %s %s under hold %s by %s%s: %s\n", warn, plural(h.Messages, "message is", "messages are"), h.BatchID, c(h.By), until, c(h.Why))
	}
}

// groupLabels are consumer groups as people are shown them.
func groupLabels(gs []string) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = client.GroupLabel(g)
	}
	return out
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
func printReport(f *cmdutil.Factory, fm render.Format, rep *replay.Report, next []string, missing []client.Address) error {
	if !fm.Human() {
		if err := render.Document(f.IO.Out, fm, rep); err != nil {
			return err
		}
	} else {
		writeReport(f.IO.ErrOut, f.ErrPalette(), rep)
	}
	for _, l := range next {
		fmt.Fprintln(f.IO.ErrOut, l)
	}
	reportMissing(f.IO.ErrOut, missing)
	switch {
	case rep.Interrupted:
		return cmdutil.ErrInterrupted
	case rep.AuthRefused:
		return &cmdutil.ExitError{Code: cmdutil.ExitAuth, Silent: true}
	case rep.BrokerDown:
		return &cmdutil.ExitError{Code: cmdutil.ExitBroker, Silent: true}
	case !rep.Clean():
		return cmdutil.ErrBreach
	case len(missing) > 0:
		return &cmdutil.ExitError{Code: cmdutil.ExitNotFound, Silent: true}
	}
	return nil
}

// resumable reports whether running the batch again can do more of it:
// something was stopped, not started, failed (and is retryable), left to
// another run, unrecorded, or waits behind a gap a resume can close.
func resumable(rep *replay.Report) bool {
	if rep.Interrupted || rep.Stopped != "" || rep.NotStarted > 0 || rep.Claimed > 0 || rep.LedgerError != "" || rep.Unrecorded > 0 || rep.Failed > 0 {
		return true
	}
	for _, b := range rep.BlockedPartitions {
		if !b.Permanent {
			return true
		}
	}
	return false
}

// nextSteps are the lines that say how to finish a batch a run left
// unfinished, each a command that works when pasted: the resume line
// when resuming can do more; --retry-unknown for unknowns, once the live
// queue is checked; --order skip-gaps and a discard for what a resume
// will never replay (undecryptable envelopes, the generation cap) and
// the partitions waiting behind it.
func nextSteps(f *cmdutil.Factory, verb, batchID string, rep *replay.Report) []string {
	var out []string
	if resumable(rep) {
		out = append(out, "Resume with: "+f.Again("dlq", verb, "--batch", batchID, "--yes"))
	}
	if rep.Unknown > 0 {
		out = append(out, fmt.Sprintf("%s unknown: check the live queue for a copy (discard the dead letter if one is there), then: %s",
			plural(rep.Unknown, "address is", "addresses are"), f.Again("dlq", verb, "--batch", batchID, "--retry-unknown", "--yes")))
	}
	stuck := 0
	for _, b := range rep.BlockedPartitions {
		if b.Permanent {
			stuck++
		}
	}
	if stuck > 0 {
		out = append(out, fmt.Sprintf("%s behind a message a resume will not replay: go on past it with %s",
			plural(stuck, "partition waits", "partitions wait"), f.Again("dlq", verb, "--batch", batchID, "--order", replay.OrderSkipGaps, "--yes")))
	}
	var skipped []string
	for _, l := range rep.Listed {
		if strings.HasPrefix(l.Reason, "skipped") {
			skipped = append(skipped, l.Address.String())
		}
	}
	if len(skipped) > 0 {
		args := []string{"dlq", "rm"}
		if len(skipped) <= 10 {
			args = append(args, skipped...)
		} else {
			args = append(args, "--batch", batchID)
		}
		args = append(args, "--why", "…")
		what := "they"
		if len(skipped) > 10 {
			what = "the batch's remaining dead letters"
		}
		out = append(out, fmt.Sprintf("%s cannot be replayed as %s (undecryptable, or past --max-generation); to discard %s, archived first: %s",
			plural(len(skipped), "message", "messages"), map[bool]string{true: "it is", false: "they are"}[len(skipped) == 1], what, f.Again(args...)))
	}
	return out
}

// writeReport writes what a run did, for people.
func writeReport(w io.Writer, pal *render.Palette, rep *replay.Report) {
	fmt.Fprintf(w, "Batch %s: ", pal.Bold(rep.BatchID))
	var parts []string
	add := func(n int, s string, paint func(string) string) {
		if n > 0 {
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
	add(rep.Unreachable, "unreachable", pal.Red)
	add(rep.DeadLetteredAgain, "dead-lettered again", pal.Red)
	add(rep.SkippedEncrypted, "skipped (undecryptable)", pal.Yellow)
	add(rep.SkippedGeneration, "skipped (generation cap)", pal.Yellow)
	add(rep.Claimed, "claimed by another run", pal.Yellow)
	add(rep.HeldBack, "held back behind a message not replayed", pal.Yellow)
	add(rep.NotStarted, "not started", pal.Yellow)
	fmt.Fprintf(w, "%s in %s\n", strings.Join(parts, ", "), rep.Elapsed.Round(time.Millisecond))
	for _, l := range rep.Listed {
		fmt.Fprintf(w, "  %s  %s\n", render.Clean(l.Address.String()), render.Clean(l.Reason))
	}
	for _, b := range rep.BlockedPartitions {
		by := "an earlier run's gap"
		if b.Address.PartitionID != "" {
			by = render.Clean(b.Address.String()) + " (" + render.Clean(b.Reason) + ")"
		}
		fmt.Fprintf(w, "  partition %s/%s: %s held back behind %s\n", render.Clean(b.Queue), render.Clean(b.Partition), plural(b.Messages, "message", "messages"), by)
	}
	if rep.Stopped != "" {
		fmt.Fprintf(w, "%s %s\n", pal.Yellow("Stopped:"), render.Clean(rep.Stopped))
	}
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
	q := sel.Query(pageSize)
	q.NoData = true
	for r, err := range cl.Rows(ctx, q) {
		if err != nil || r.FailedAt.Before(planAt) {
			break // newest first: nothing older can be new
		}
		if sel.Match(r) && !own[r.TransactionID] && !inBatch[r.Address()] {
			n++
		}
	}
	return n
}

// queueGroups lists consumer groups per queue from the broker's queue and
// consumer-group lists and from the rows in hand.
func queueGroups(ctx context.Context, cl *client.Client, items []replay.Item) map[string][]string {
	out := map[string][]string{}
	add := func(q, g string) {
		if !contains(out[q], g) {
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
	if cgs, err := cl.ConsumerGroups(ctx); err == nil {
		for _, g := range cgs {
			add(g.Queue, g.Name)
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
	action   string
	verb     string
	flags    *ExecFlags
	sel      *cmdutil.SelectionFlags
	args     []string
	settings Settings
	changed  func(flag string) bool
	// configure turns the settings in force into engine options.
	configure func(*replay.Options, Settings) error
}

// viaWords says which path a replay takes, for the plan and the audit.
func viaWords(s Settings, resolved string) string {
	switch {
	case s.Transform != "":
		return "manual (get, push, delete: --transform needs it)"
	case s.ToQueue != "":
		return "manual (get, push, delete: --to-queue needs it)"
	case resolved == replay.ViaEndpoint:
		return "endpoint (/retry)"
	case resolved == replay.ViaManual:
		return "manual (get, push, delete)"
	}
	return "auto: the /retry endpoint where the broker has one, else get, push, delete"
}

// resolvePath settles which path this broker gets: --via auto asks once,
// with an address that cannot exist, whether the broker has /retry (in
// any doubt the manual path, always safe to repeat); --via endpoint
// stops here when it has none. It returns the path in words.
func (p *pending) resolvePath(ctx context.Context) (string, error) {
	s := p.settings
	if s.Transform != "" || s.ToQueue != "" || p.opts.Via == replay.ViaManual {
		p.opts.Via = replay.ViaManual
		return viaWords(s, replay.ViaManual), nil
	}
	ok, err := p.cl.HasRetryRoute(ctx)
	switch {
	case ok && p.opts.Via == replay.ViaEndpoint:
		return viaWords(s, replay.ViaEndpoint), nil
	case ok:
		p.opts.Via = replay.ViaEndpoint
		return "endpoint (/retry): this broker has it", nil
	case p.opts.Via == replay.ViaEndpoint && err != nil:
		return "", err
	case p.opts.Via == replay.ViaEndpoint:
		return "", cmdutil.UsageError(errors.New("--via endpoint: the broker has no /retry route (use --via auto or manual)"))
	case err != nil:
		p.opts.Via = replay.ViaManual
		return "manual (get, push, delete): the /retry probe got no clear answer (" + render.Truncate(err.Error(), 80) + "), and the manual path is always safe to repeat", nil
	}
	p.opts.Via = replay.ViaManual
	return "manual (get, push, delete): this broker has no /retry route", nil
}

// pending is a batch planned and not yet executed: what execute prints
// as the plan, and what the triage screen shows before it asks.
type pending struct {
	f        *cmdutil.Factory
	sp       execSpec
	sel      *replay.Selection // nil for a recorded batch
	cl       *client.Client
	ld       *ledger.Store
	in       *batchInput
	settings Settings
	opts     replay.Options
	po       replay.PlanOptions
	plan     replay.Plan
	why      string // the recorded batch's, unless given again
	now      time.Time
	// skippedHeld counts the messages --skip-held left out of the batch.
	skippedHeld int
	// id is the id a fresh batch will be recorded under, minted with the
	// plan so it can be said before the run.
	id string
}

// batchID is the recorded batch's id, or the one a fresh batch gets.
func (p *pending) batchID() string {
	if p.in.batch != nil {
		return p.in.batch.ID
	}
	if p.id == "" {
		p.id = ledger.NewBatchID(p.f.Now())
	}
	return p.id
}

// prepare snapshots the selection (or loads the recorded batch), settles
// the settings and the replay order; nothing is written anywhere.
func prepare(ctx context.Context, f *cmdutil.Factory, sp execSpec) (*pending, error) {
	ef := sp.flags
	p := &pending{f: f, sp: sp}
	var err error
	if ef.BatchID == "" {
		if p.sel, err = sp.sel.Build(f, sp.args); err != nil {
			return nil, err
		}
		if err := cmdutil.RequireSelection(p.sel, "dlq "+sp.verb); err != nil {
			return nil, err
		}
	} else if sp.sel.Any(sp.args) {
		return nil, cmdutil.FlagErrorf("--batch executes a recorded batch; it takes no selection")
	}
	if p.cl, p.ld, err = f.Session(ctx); err != nil {
		return nil, err
	}
	if p.sel != nil {
		if err := cmdutil.CheckNames(ctx, p.cl, p.sel); err != nil {
			return nil, err
		}
	}
	in, err := gather(ctx, f, p.cl, p.ld, p.sel, ef.BatchID, sp.action)
	if err != nil {
		return nil, err
	}
	p.in, p.settings = in, sp.settings
	if in.batch != nil {
		if p.settings, err = resumeSettings(in.batch.Settings, p.settings, sp.changed); err != nil {
			return nil, err
		}
	}
	p.opts = replay.Options{Action: sp.action, Rate: p.settings.Rate, Burst: p.settings.Burst, Now: f.Now}
	if err := sp.configure(&p.opts, p.settings); err != nil {
		return nil, err
	}
	// A fresh batch is put in replay order before it is recorded, so its
	// manifest keeps that order for every resume; a recorded batch whose
	// settings say no order (decided by an older dlqctl) is arranged by
	// failure time, the same way every time.
	if sp.action == replay.Replay {
		recordedOrder := ""
		if in.batch != nil {
			var rec Settings
			_ = json.Unmarshal(in.batch.Settings, &rec)
			recordedOrder = rec.Order
		}
		if in.batch == nil || recordedOrder == "" {
			in.items, p.po.Order = replay.Arrange(in.items, p.settings.Order, p.settings.ToQueue)
		} else {
			_, p.po.Order = replay.Arrange(slices.Clone(in.items), p.settings.Order, p.settings.ToQueue)
			p.po.Order.Recorded = true
		}
	}
	p.why = ef.Why
	if in.batch != nil && p.why == "" {
		p.why = in.batch.Why
	}
	return p, nil
}

// makePlan settles what the list could not say (undecryptable
// envelopes), finds the holds, and makes the plan.
func (p *pending) makePlan(ctx context.Context) error {
	if err := checkEnvelopes(ctx, p.cl, p.in.items); err != nil {
		return err
	}
	dec, err := p.ld.LatestDecisions(ctx, p.cl.Broker())
	if err != nil {
		return err
	}
	p.now = p.f.Now()
	s := p.settings
	p.po.Action, p.po.Rate, p.po.ToQueue, p.po.MaxGeneration = p.sp.action, s.Rate, s.ToQueue, s.MaxGeneration
	p.po.Hold = func(it replay.Item) (replay.HoldShare, bool) {
		d, ok := dec[it.Address]
		if !ok || d.Action != ledger.ActionHold || !d.Covers(it.Newest().FailedAt, p.now) || p.in.batch != nil && d.BatchID == p.in.batch.ID {
			return replay.HoldShare{}, false
		}
		return replay.HoldShare{BatchID: d.BatchID, By: d.By, Until: d.Until, Why: d.Why}, true
	}
	if p.sp.flags.SkipHeld {
		// Held messages leave the batch before it is planned or recorded.
		kept := p.in.items[:0:0]
		for _, it := range p.in.items {
			if _, held := p.po.Hold(it); !held {
				kept = append(kept, it)
			}
		}
		p.skippedHeld = len(p.in.items) - len(kept)
		p.in.items = kept
	}
	if p.sp.action == replay.Replay {
		if p.po.Via, err = p.resolvePath(ctx); err != nil {
			return err
		}
		if s.ToQueue == "" {
			p.po.QueueGroups = queueGroups(ctx, p.cl, p.in.items)
		}
		if p.po.Pinned, err = p.pinned(ctx); err != nil {
			return err
		}
	}
	p.po.NoCall = func(it replay.Item) bool { return p.in.absent[it.Address] }
	p.plan = replay.MakePlan(p.in.items, p.po)
	p.plan.SkippedHeld = p.skippedHeld
	return nil
}

// pinned counts the addresses whose journal keeps them on the manual
// path (an earlier attempt may have published their derived id): they
// take it whatever the path resolved to.
func (p *pending) pinned(ctx context.Context) (int, error) {
	addrs := make([]client.Address, len(p.in.items))
	for i, it := range p.in.items {
		addrs[i] = it.Address
	}
	ents, err := p.ld.Entries(ctx, p.cl.Broker(), addrs)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if replay.Pinned(e) {
			n++
		}
	}
	return n, nil
}

// setRate changes the rate of a planned batch, and its estimate.
func (p *pending) setRate(r float64) error {
	if err := validateRate(r); err != nil {
		return err
	}
	p.settings.Rate, p.opts.Rate, p.po.Rate = r, r, r
	p.plan = replay.MakePlan(p.in.items, p.po)
	p.plan.SkippedHeld = p.skippedHeld
	return nil
}

func execute(ctx context.Context, f *cmdutil.Factory, sp execSpec) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	ef := sp.flags
	p, err := prepare(ctx, f, sp)
	if err != nil {
		return err
	}
	if p.why == "" && !ef.DryRun {
		return cmdutil.FlagErrorf("--why is required: say why this batch is %s (it is recorded in the ledger)", map[string]string{"replay": "replayed", "rm": "discarded"}[sp.verb])
	}
	if len(p.in.items) == 0 {
		reportMissing(f.IO.ErrOut, p.in.missing)
		if len(p.in.missing) > 0 {
			return &cmdutil.ExitError{Code: cmdutil.ExitNotFound, Silent: true}
		}
		fmt.Fprintln(f.IO.ErrOut, "Nothing to "+sp.verb+": no dead letter matches.")
		return nil
	}
	if err := p.makePlan(ctx); err != nil {
		return err
	}
	if len(p.in.items) == 0 {
		fmt.Fprintf(f.IO.ErrOut, "Nothing to %s: every dead letter that matches is under an active hold (%d left out by --skip-held).\n", sp.verb, p.skippedHeld)
		return nil
	}
	// A dry run's plan is its output (stdout: replay --dry-run > plan.txt);
	// before a real run, the plan is said on stderr with the progress.
	switch {
	case ef.DryRun && !fm.Human():
		if err := render.Document(f.IO.Out, fm, p.plan); err != nil {
			return err
		}
	case ef.DryRun:
		writePlan(f.IO.Out, f.Palette(), p.plan)
	default:
		writePlan(f.IO.ErrOut, f.ErrPalette(), p.plan)
	}
	if ef.DryRun {
		fmt.Fprintln(f.IO.ErrOut, "Dry run: nothing was written to the broker or the ledger.")
		reportMissing(f.IO.ErrOut, p.in.missing)
		return nil
	}
	if p.plan.Held > 0 && !ef.OverrideHold {
		return cmdutil.UsageError(fmt.Errorf("%s under an active hold (see the plan); pass --override-hold to %s them anyway", plural(p.plan.Held, "message is", "messages are"), sp.verb))
	}
	if !ef.Yes {
		question := map[string]string{replay.Replay: "Replay", replay.Discard: "Discard"}[sp.action]
		if err := confirm(f, fmt.Sprintf("%s %s?", question, plural(len(p.in.items), "message", "messages"))); err != nil {
			return err
		}
	}
	tick, finish := progress(f, len(p.in.items), sp.verb)
	res, err := p.run(ctx, f.IO.ErrOut, tick)
	finish()
	if res == nil {
		return err
	}
	if err != nil {
		// The journal could not be written: say what was done and how to
		// go on, then the cause (exit 3).
		_ = printReport(f, fm, res.rep, res.next, p.in.missing)
		return err
	}
	if res.newSince > 0 {
		fmt.Fprintf(f.IO.ErrOut, "%s matching the selection arrived since the plan; they are not in this batch.\n", plural(res.newSince, "new dead letter", "new dead letters"))
	}
	return printReport(f, fm, res.rep, res.next, p.in.missing)
}

// runResult is what a run of a planned batch did.
type runResult struct {
	rep      *replay.Report
	next     []string // how to finish the batch, when the run did not (nextSteps)
	newSince int      // dead letters matching the selection that arrived since the plan
}

// run records the batch (or takes up the recorded one), archives every
// row its deletes may remove, and executes it. w gets the line naming
// the batch. A nil result is an error before anything was published; a
// result with an error is a run the ledger failed under.
func (p *pending) run(ctx context.Context, w io.Writer, tick func(int)) (*runResult, error) {
	sp, cl, ld, in, settings := p.sp, p.cl, p.ld, p.in, p.settings
	opts := p.opts
	by := sp.flags.By
	if by == "" {
		by = p.f.User()
	}
	now := p.now
	record, _ := json.Marshal(settings)
	batch := in.batch
	verb := "Executing recorded"
	if batch == nil {
		verb = "Recorded"
		batch = &ledger.Batch{ID: p.batchID(), Broker: cl.Broker(), Action: map[string]string{replay.Replay: ledger.ActionReplay, replay.Discard: ledger.ActionDiscard}[sp.action],
			By: by, At: now, Why: p.why, Selection: p.sel.String(), Destination: settings.ToQueue, Status: ledger.StatusRunning, Settings: record}
		if err := ld.CreateBatch(ctx, batch, toManifest(in.items)); err != nil {
			return nil, err
		}
	} else if err := ld.SetBatchSettings(ctx, batch.ID, record); err != nil {
		return nil, err
	}
	jctx := context.WithoutCancel(ctx)
	// Every row the batch's deletes may remove is archived before the
	// first one: a discard is recoverable, and no row leaves the broker
	// unrecorded (other groups' rows included).
	if err := archiveItems(jctx, ld, cl.Broker(), now, in); err != nil {
		return nil, err
	}
	if err := ld.SetBatchStatus(jctx, batch.ID, ledger.StatusRunning, now, batch.Outcome); err != nil {
		return nil, err
	}
	_ = ld.Audit(jctx, ledger.AuditEntry{At: now, Broker: cl.Broker(), BatchID: batch.ID, Kind: "execution-started", By: by,
		Detail: fmt.Sprintf("%s of %s at %s, %s", sp.verb, plural(len(in.items), "address", "addresses"), rateWords(settings.Rate), viaWords(settings, opts.Via))})
	fmt.Fprintf(w, "%s batch %s.\n", verb, batch.ID)

	opts.Broker, opts.BatchID, opts.Owner, opts.Absent = cl.Broker(), batch.ID, ledger.NewOwner(cmdutil.Nonce()), in.absent
	opts.Progress = tick
	rep, runErr := replay.NewEngine(cl, ld, opts).Run(ctx, in.items)
	res := &runResult{rep: rep, next: nextSteps(p.f, sp.verb, batch.ID, rep)}
	if runErr != nil {
		return res, runErr
	}
	// The batch's record is its journal's, so a resumed batch shows
	// everything it did, not only its last run.
	outcome, err := ld.BatchOutcome(jctx, batch.ID)
	if err != nil {
		return res, err
	}
	status := ledger.StatusDone
	switch {
	case rep.Interrupted || rep.Stopped != "":
		status = ledger.StatusInterrupted
	case outcome[ledger.Failed]+outcome[ledger.Unknown]+outcome[ledger.Pending]+outcome[ledger.Inflight]+outcome[ledger.Published] > 0 || !rep.Clean():
		status = ledger.StatusFailed
	}
	end := p.f.Now()
	if err := ld.SetBatchStatus(jctx, batch.ID, status, now, outcome); err != nil {
		return res, err
	}
	_ = ld.Audit(jctx, ledger.AuditEntry{At: end, Broker: cl.Broker(), BatchID: batch.ID, Kind: "execution-" + status, By: by,
		Detail: render.Counts(rep.Outcome())})
	if err := ld.MarkRemoved(jctx, cl.Broker(), batch.ID, end); err != nil {
		return res, err
	}
	_, _ = ld.ResolveHolds(jctx, cl.Broker())
	if in.fresh && !rep.Interrupted && p.sel != nil && len(p.sel.Addresses) == 0 {
		own := map[string]bool{}
		for _, t := range rep.ReplayTxIDs {
			own[t] = true
		}
		res.newSince = newSince(ctx, cl, p.sel, in.planAt, in.items, own)
	}
	return res, nil
}

func rateWords(r float64) string {
	if r <= 0 {
		return "an unlimited rate"
	}
	return fmt.Sprintf("%g/s", r)
}

// archiveItems archives every row of the batch that is in the DLQ, with
// the message's payload.
func archiveItems(ctx context.Context, ld *ledger.Store, broker string, now time.Time, in *batchInput) error {
	a := ld.NewArchiver(broker, now)
	for _, it := range in.items {
		if in.absent[it.Address] {
			continue
		}
		for _, r := range it.AllRows() {
			if len(r.Data) == 0 || it.Checked {
				r.Data = it.Data()
			}
			if err := a.Add(ctx, r); err != nil {
				return err
			}
		}
	}
	return a.Flush(ctx)
}

// currentRows reads, without payloads, the rows each item's address has
// in the DLQ now (every consumer group), reading only the items' queues.
func currentRows(ctx context.Context, cl *client.Client, items []replay.Item) (map[client.Address][]client.Row, error) {
	want := map[client.Address]bool{}
	var queues []string
	for _, it := range items {
		want[it.Address] = true
		if !contains(queues, it.Queue) {
			queues = append(queues, it.Queue)
		}
	}
	out := map[client.Address][]client.Row{}
	for _, q := range queues {
		for r, err := range cl.Rows(ctx, client.ListQuery{Queue: q, Limit: pageSize, NoData: true}) {
			if err != nil {
				return nil, err
			}
			if r.Queue == q && want[r.Address()] {
				out[r.Address()] = append(out[r.Address()], r)
			}
		}
	}
	return out, nil
}

// validateRate refuses rates that are not a number of messages a second
// a person means: NaN, infinities, negatives, and rates so low a batch
// would take months.
func validateRate(r float64) error {
	if math.IsNaN(r) || math.IsInf(r, 0) || r < 0 || (r > 0 && r < 0.01) || r > 1e6 {
		return cmdutil.FlagErrorf("invalid --rate %v: want messages per second between 0.01 and 1000000, or 0 for unlimited", r)
	}
	return nil
}

// changedIn reports whether a flag was set on the command line.
func changedIn(fs *pflag.FlagSet) func(string) bool {
	return func(name string) bool {
		fl := fs.Lookup(name)
		return fl != nil && fl.Changed
	}
}
