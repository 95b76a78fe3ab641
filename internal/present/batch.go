// Package present writes for people what the domain packages return:
// plans, run reports, the way to finish a batch, one message's record.
// The commands and the triage screen print through it, so both say the
// same thing the same way. Machine formats (-o json …) never come here.
package present

import (
	"fmt"
	"github.com/dlqctl/dlqctl/pkg/client"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// Missing names explicit addresses that are not dead-lettered.
func Missing(w io.Writer, missing []deadletter.Address) {
	for _, a := range missing {
		fmt.Fprintf(w, "not found: no dead-letter row at %s (nothing done to it)\n", render.Clean(a.String()))
	}
}

// Plan writes the plan for people.
func Plan(w io.Writer, pal *render.Palette, p batch.Plan) {
	c := render.Clean
	verb := deadletter.ActionOf(p.Action).Title
	rows := render.Plural(p.Rows, "dead-letter row", "dead-letter rows")
	if p.OtherGroups > 0 {
		rows = fmt.Sprintf("%d dead-letter rows: %d selected, %d more of the same messages", p.Rows+p.OtherGroups, p.Rows, p.OtherGroups)
	}
	fmt.Fprintf(w, "%s plan: %s (%s)\n", pal.Bold(verb), render.Plural(p.Messages, "message", "messages"), rows)
	queues := make([]string, 0, len(p.ByQueue))
	for q := range p.ByQueue {
		queues = append(queues, q)
	}
	sort.Strings(queues)
	for _, q := range queues {
		fmt.Fprintf(w, "  queue %-20s %s\n", c(q), render.Plural(p.ByQueue[q], "message", "messages"))
	}
	fmt.Fprintln(w, "  by failure class (messages):")
	for i, cc := range p.ByClass {
		if i == 10 {
			fmt.Fprintf(w, "    … and %d more classes\n", len(p.ByClass)-10)
			break
		}
		fmt.Fprintf(w, "    %s  %5d  %s\n", cc.Class, cc.Count, render.Truncate(c(cc.Pattern), 80))
	}
	if b := p.Broker; b != nil {
		words := b.ReplayWords()
		switch act := deadletter.ActionOf(p.Action); {
		case act.Discards():
			words = b.DeleteWords()
		case act.Outside():
			words = article(act.Name) + " is a push under its own id, on every line"
		}
		fmt.Fprintf(w, "  broker: %s — %s\n", c(b.Name()), words)
	}
	if p.Source != "" {
		fmt.Fprintf(w, "  source: %s\n", c(p.Source))
	}
	fmt.Fprintf(w, "  destination: %s\n", c(p.Destination))
	if p.ApprovalAbove > 0 {
		fmt.Fprintf(w, "  %s more than %d messages: the batch is recorded awaiting a second person's approval (decisions approve), not run\n", pal.Yellow("approval:"), p.ApprovalAbove)
	}
	if p.Trace {
		fmt.Fprintf(w, "  trace: each copy gets a trace event in the broker naming this batch, its reason and the original (trace name %s:batch:ID; --no-trace leaves them out)\n", batch.TraceName)
	}
	if p.Via != "" {
		fmt.Fprintf(w, "  path: %s\n", p.Via)
	}
	if p.Pinned > 0 {
		fmt.Fprintf(w, "    %s the manual path an earlier attempt took (its derived id makes a repeat a duplicate)\n", render.Plural(p.Pinned, "address keeps", "addresses keep"))
	}
	if p.NoCall > 0 {
		fmt.Fprintf(w, "  %s already done or gone from the DLQ: no call needed\n", render.Plural(p.NoCall, "message is", "messages are"))
	}
	planOrder(w, p.Order, p.Broker)
	if p.Rate > 0 {
		est := "under a second"
		if p.Estimated >= time.Second {
			est = render.Duration(p.Estimated.Round(time.Second))
		}
		fmt.Fprintf(w, "  rate: %g/s, estimated %s\n", p.Rate, est)
	} else {
		fmt.Fprintln(w, "  rate: unlimited")
	}
	lagAndWindow(w, p)
	planWarnings(w, pal, p)
}

// NothingToRestore says why a restore found nothing to publish.
func NothingToRestore(unrestorable map[string]int) string {
	if len(unrestorable) == 0 {
		return "Nothing to restore: no archived message a discard deleted matches (dlq ls --archived lists the archive)."
	}
	return "Nothing to restore: every archived message that matches is left out: " + unrestorableWords(unrestorable) + "."
}

// NothingToImport says why an import found nothing to publish.
func NothingToImport(left map[string]int) string {
	if len(left) == 0 {
		return "Nothing to import: the file holds no dead letter."
	}
	return "Nothing to import: every message of the file is left out: " + unrestorableWords(left) + " (dlqctl decisions ls --action import names the batches)."
}

// unrestorableWords counts the messages a restore leaves out, by why.
func unrestorableWords(m map[string]int) string {
	var parts []string
	for _, why := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%d %s", m[why], why))
	}
	return strings.Join(parts, ", ")
}

// sortedKeys are a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// planOrder writes the order a plan publishes in.
func planOrder(w io.Writer, o *replay.OrderInfo, broker *client.Release) {
	if o == nil {
		return
	}
	c := render.Clean
	switch {
	case o.Recorded && replay.Ordered(o.Mode):
		fmt.Fprintln(w, "  order: per partition, in the order the batch recorded, one at a time in each")
	case !replay.Ordered(o.Mode):
		fmt.Fprintln(w, "  order: none (--order none): messages of one partition may be published in any order")
	case o.Partitions == 0:
		fmt.Fprintln(w, "  order: per partition (no partition has more than one of these messages)")
	default:
		fmt.Fprintf(w, "  order: per partition, oldest first, one at a time in each; %s with several messages, the longest %s/%s (%d)\n",
			render.Plural(o.Partitions, "partition", "partitions"), c(o.Chain.Queue), c(o.Chain.Partition), o.LongestChain)
		if o.Mode == replay.OrderPartition {
			fmt.Fprintln(w, "    a message not replayed holds back the later ones of its partition (--order skip-gaps goes on past it)")
		}
		fmt.Fprintln(w, "    each replay lands after whatever its partition delivered since it failed: handlers must accept an older version")
	}
	switch {
	case o.Recorded && o.ByFailure > 0:
		// The 0.x server lists the message's own UUIDv7; the Rust lines
		// list the dead-letter row's id, random.
		why := "the broker lists each dead-letter row's own id, not the message's time-ordered one"
		if broker != nil && broker.Line == client.Line0x {
			why = "recorded by an older dlqctl, which kept none"
		}
		fmt.Fprintf(w, "    %s no time-ordered message id (%s): they keep the order the batch recorded, oldest failure first\n", render.Plural(o.ByFailure, "message has", "messages have"), why)
	case o.ByFailure > 0:
		fmt.Fprintf(w, "    %s ordered by first failure: their message ids are not time-ordered\n", render.Plural(o.ByFailure, "message is", "messages are"))
	}
}

// planWarnings writes what a plan does beyond the selection, and what it
// leaves out: other groups' rows, fan-out, envelopes, generations, holds.
func planWarnings(w io.Writer, pal *render.Palette, p batch.Plan) {
	c := render.Clean
	warn := pal.Yellow("warning:")
	if p.OtherGroups > 0 {
		var parts []string
		for i, a := range p.AlsoRemoves {
			if i == 8 {
				parts = append(parts, fmt.Sprintf("… %d more", len(p.AlsoRemoves)-8))
				break
			}
			parts = append(parts, fmt.Sprintf("%d of group %s, class %s (%s)", a.Rows, c(deadletter.GroupLabel(a.ConsumerGroup)), a.Class, render.Truncate(c(a.Pattern), 40)))
		}
		fmt.Fprintf(w, "  %s a %s acts on the message, so it also removes %s the selection left out: %s. They are archived and recorded in this batch.\n",
			warn, map[bool]string{true: deadletter.ActionOf(p.Action).Verb + "'s delete", false: "delete"}[deadletter.ActionOf(p.Action).Publishes],
			render.Plural(p.OtherGroups, "dead-letter row", "dead-letter rows"), strings.Join(parts, "; "))
		if deadletter.ActionOf(p.Action).Republishes() {
			fmt.Fprintf(w, "  To replay for one consumer group alone, publish to a recovery queue only that group reads: --to-queue.\n")
		}
	}
	for _, fo := range p.FanOut {
		fmt.Fprintf(w, "  %s a re-push reaches every consumer group of %s (%s): %s failed in only some of them and will be delivered again to the others. Use --to-queue for a recovery queue only the failed group reads.\n",
			warn, c(fo.Queue), c(strings.Join(groupLabels(fo.AlsoReaches), ", ")), render.Plural(fo.Messages, "message", "messages"))
	}
	if p.NewQueue != "" {
		fmt.Fprintf(w, "  %s queue %s is not on the broker: the first copy creates it, and no consumer reads it yet (a misspelled --to-queue sends every copy there, out of the DLQ)\n", warn, c(p.NewQueue))
	}
	for _, q := range sortedKeys(p.QueueGone) {
		act := deadletter.ActionOf(p.Action)
		fmt.Fprintf(w, "  %s queue %s does not exist: %s not %s (%s them --to-queue another)\n", warn, c(q), render.Plural(p.QueueGone[q], "message is", "messages are"), act.Past, act.Verb)
	}
	if len(p.Unrestorable) > 0 {
		fmt.Fprintf(w, "  left out: %s\n", unrestorableWords(p.Unrestorable))
	}
	if p.Undecryptable > 0 {
		if act := deadletter.ActionOf(p.Action); act.Outside() {
			kept := map[bool]string{true: "the file holds it", false: "the archive kept it"}[act.From == deadletter.FromFile]
			fmt.Fprintf(w, "  %s %s an encryption envelope the broker could not decrypt, as %s; not %s.\n", warn, render.Plural(p.Undecryptable, "message is", "messages are"), kept, act.Past)
		} else if act.Publishes {
			fmt.Fprintf(w, "  %s %s an encryption envelope the broker cannot decrypt; they are skipped and left in place.\n", warn, render.Plural(p.Undecryptable, "message is", "messages are"))
		} else {
			fmt.Fprintf(w, "  %s %s an encryption envelope the broker cannot decrypt; they are discarded like the rest (the archive keeps the envelope).\n", warn, render.Plural(p.Undecryptable, "message is", "messages are"))
		}
	}
	if p.OverGenCap > 0 {
		fmt.Fprintf(w, "  %s %s past --max-generation and will be skipped (%s failing after replays).\n", warn, render.Plural(p.OverGenCap, "message is", "messages are"),
			map[bool]string{true: "it keeps", false: "they keep"}[p.OverGenCap == 1])
	}
	if p.SkippedHeld > 0 {
		fmt.Fprintf(w, "  %s under an active hold left out of the batch (--skip-held)\n", render.Plural(p.SkippedHeld, "message", "messages"))
	}
	for _, h := range p.Holds {
		until := ""
		if !h.Until.IsZero() {
			until = " until " + render.Timestamp(h.Until)
		}
		fmt.Fprintf(w, "  %s %s under hold %s by %s%s: %s\n", warn, render.Plural(h.Messages, "message is", "messages are"), h.BatchID, c(h.By), until, c(h.Why))
	}
	for _, d := range p.Decided {
		fmt.Fprintf(w, "  %s %s already batch %s's, decided by %s and never run (%s): %s\n", warn, render.Plural(d.Messages, "message is", "messages are"),
			d.BatchID, c(d.By), d.Status, c(d.Why))
	}

}

// groupLabels are consumer groups as people are shown them.
func groupLabels(gs []string) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = deadletter.GroupLabel(g)
	}
	return out
}

// lagAndWindow writes what a replay is paced by besides its rate: the
// destination's consumer lag (and --max-lag), and --window.
func lagAndWindow(w io.Writer, p batch.Plan) {
	c := render.Clean
	if l := p.Lag; l != nil && deadletter.ActionOf(p.Action).Republishes() {
		switch {
		case len(l.Groups) > 0:
			fmt.Fprintln(w, "  consumer lag of the destination:")
			for i, g := range l.Groups {
				if i == 8 {
					fmt.Fprintf(w, "    … and %d more groups\n", len(l.Groups)-8)
					break
				}
				behind := ""
				if g.Messages != nil {
					behind = ", " + render.Plural(*g.Messages, "message", "messages") + " behind"
				}
				lag := "0s"
				if g.Lag >= time.Second {
					lag = render.Duration(g.Lag.Round(time.Second))
				}
				fmt.Fprintf(w, "    %s/%s  %s (%s%s)\n", c(g.Queue), c(deadletter.GroupLabel(g.ConsumerGroup)), lag, c(g.State), behind)
			}
		case l.Reported || l.MaxLag > 0:
			fmt.Fprintln(w, "  consumer lag: no consumer group reads the destination")
		default:
			fmt.Fprintln(w, "  consumer lag: not reported by this broker (--max-lag cannot pace by it)")
		}
		if l.MaxLag > 0 {
			fmt.Fprintf(w, "    --max-lag %s: publishing waits while any of them lags more (read every 5s)\n", render.Duration(l.MaxLag))
		}
	}
	if p.Window != "" {
		fmt.Fprintf(w, "  window: publishing only %s; outside it the run waits\n", c(p.Window))
	}
	for _, n := range p.Where {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// Report writes what a run did, for people.
func Report(w io.Writer, pal *render.Palette, rep *replay.Report) {
	fmt.Fprintf(w, "Batch %s: ", pal.Bold(rep.BatchID))
	if rep.MovedElsewhere > 0 {
		// Say what the parts add up to: some of the batch went by another hand.
		fmt.Fprintf(w, "%d in batch: ", rep.Total)
	}
	var parts []string
	add := func(n int, s string, paint func(string) string) {
		if n > 0 {
			parts = append(parts, paint(fmt.Sprintf("%d %s", n, s)))
		}
	}
	id := func(s string) string { return s }
	switch act := deadletter.ActionOf(rep.Action); {
	case act.Republishes():
		add(rep.Replayed, act.Past, pal.Green)
		add(rep.Duplicate, "duplicate-suppressed", id)
	case act.Outside():
		// A restore counts what it restored, an import what it imported.
		add(rep.Restored+rep.Imported, act.Past, pal.Green)
		add(rep.Duplicate, "already in the broker (duplicate-suppressed)", id)
	default:
		add(rep.Discarded, "discarded", pal.Green)
		add(rep.Replayed, "finished earlier replays", id)
	}
	add(rep.AlreadyGone, "already gone", id)
	add(rep.MovedElsewhere, "moved elsewhere while this batch ran", pal.Yellow)
	add(rep.AlreadyDone, "already done", id)
	if rep.Failed > 0 {
		add(rep.Failed, "failed", pal.Red)
	} else {
		parts = append(parts, "0 failed")
	}
	add(rep.Unknown, "unknown", pal.Red)
	add(rep.Unreachable, "unreachable", pal.Red)
	add(rep.QueueGone, "not "+deadletter.ActionOf(rep.Action).Past+" (queue gone)", pal.Red)
	add(rep.DeadLetteredAgain, "dead-lettered again", pal.Red)
	add(rep.Missed, "missed by this run's listing (left for the next run)", pal.Yellow)
	add(rep.SkippedEncrypted, "skipped (undecryptable)", pal.Yellow)
	add(rep.SkippedGeneration, "skipped (generation cap)", pal.Yellow)
	add(rep.Claimed, "claimed by another run", pal.Yellow)
	add(rep.HeldBack, "held back behind a message not replayed", pal.Yellow)
	add(rep.NotStarted, "not started", pal.Yellow)
	fmt.Fprintf(w, "%s in %s\n", strings.Join(parts, ", "), rep.Elapsed.Round(time.Millisecond))
	if rep.HeldMoreThanOnce > 0 {
		fmt.Fprintf(w, "%s the broker now holds %s more than once, by the hands listed below (this batch published none of them twice)\n",
			pal.Red("warning:"), render.Plural(rep.HeldMoreThanOnce, "message", "messages"))
	}
	for _, l := range rep.Listed {
		fmt.Fprintf(w, "  %s  %s%s\n", render.Clean(l.Address.String()), render.Clean(l.Reason), render.Clean(advice(l.Next, l)))
	}
	for _, b := range rep.BlockedPartitions {
		by := "an earlier run's gap"
		if b.Address.PartitionID != "" {
			by = render.Clean(b.Address.String()) + " (" + render.Clean(b.Reason) + ")"
		}
		fmt.Fprintf(w, "  partition %s/%s: %s held back behind %s\n", render.Clean(b.Queue), render.Clean(b.Partition), render.Plural(b.Messages, "message", "messages"), by)
	}
	for _, ps := range rep.Pauses {
		fmt.Fprintf(w, "Paused %s in all for %s (%s; last: %s)\n", render.Duration(ps.For.Round(time.Second)), ps.Kind,
			render.Plural(ps.Times, "time", "times"), render.Clean(ps.Last))
	}
	if st := rep.StoppedBy; st != nil {
		c := render.Clean
		who := c(st.By)
		if st.Role != "" && st.Role != st.By {
			who += " (" + c(st.Role) + ")"
		}
		fmt.Fprintf(w, "%s by %s with decisions stop at %s: %s\n", pal.Yellow("Stopped"), who, render.Timestamp(st.At), c(st.Why))
	}
	if rep.Stopped != "" {
		fmt.Fprintf(w, "%s %s%s\n", pal.Yellow("Stopped:"), render.Clean(rep.Stopped), advice(rep.StopNext, replay.AddrResult{}))
	}
	if rep.Traced > 0 {
		fmt.Fprintf(w, "Traced %s in the broker (their lineage: this batch, its reason, the original).\n", render.Plural(rep.Traced, "copy", "copies"))
	}
	if rep.TraceFailed > 0 {
		fmt.Fprintf(w, "%s %s not written (%s); the replay is not affected.\n", pal.Yellow("warning:"), render.Plural(rep.TraceFailed, "trace event", "trace events"), render.Clean(rep.TraceError))
	}
}

// Next writes, as lines, how to finish a batch a run left unfinished:
// each a command that works when pasted, built by again (the dlqctl
// command line with this run's connection flags).
func Next(steps []batch.Step, verb, batchID string, again func(args ...string) string) []string {
	var out []string
	for _, s := range steps {
		switch s.Kind {
		case batch.Resume:
			out = append(out, "Resume with: "+again("dlq", verb, "--batch", batchID, "--yes"))
		case batch.RetryUnknown:
			out = append(out, fmt.Sprintf("%s unknown: check the live queue for a copy (discard the dead letter if one is there), then: %s",
				render.Plural(s.N, "address is", "addresses are"), again("dlq", verb, "--batch", batchID, "--retry-unknown", "--yes")))
		case batch.SkipGaps:
			out = append(out, fmt.Sprintf("%s behind a message a resume will not replay: go on past it with %s",
				render.Plural(s.N, "partition waits", "partitions wait"), again("dlq", verb, "--batch", batchID, "--order", replay.OrderSkipGaps, "--yes")))
		case batch.Unreplayable:
			args := []string{"dlq", "rm"}
			what := map[bool]string{true: "it", false: "them"}[s.N == 1]
			if len(s.Addresses) > 0 {
				for _, a := range s.Addresses {
					args = append(args, a.String())
				}
			} else {
				args, what = append(args, "--batch", batchID), "the batch's remaining dead letters"
			}
			args = append(args, "--why", "…")
			out = append(out, fmt.Sprintf("%s cannot be replayed as %s (undecryptable, or past --max-generation); to discard %s, archived first: %s",
				render.Plural(s.N, "message", "messages"), map[bool]string{true: "it is", false: "they are"}[s.N == 1], what, again(args...)))
		}
	}
	return out
}

// Awaiting says, as lines, that a batch was recorded awaiting a second
// person's approval rather than run, who may not approve it (its author
// as the ledger knows them), and the commands that approve it and then
// run it. The approval is another person's command: it carries none of
// this run's connection flags (their own context or --ledger reaches the
// ledger as them); the run is the author's, as this one connected.
func Awaiting(batchID string, messages, above int, author string, vouched bool, verb string, again, another func(args ...string) string) []string {
	return []string{
		fmt.Sprintf("%s: more than %d need a second person's approval, so batch %s is recorded and not run.", render.Plural(messages, "message", "messages"), above, batchID),
		fmt.Sprintf("Someone other than %s approves it, connected to this ledger as themselves: %s", Identity(author, vouched), another("decisions", "approve", batchID, "--why", "…")),
		"then it runs with: " + again("dlq", verb, "--batch", batchID, "--yes"),
	}
}

// NewSince says how many dead letters matching a batch's selection
// arrived after its plan.
func NewSince(n int) string {
	return render.Plural(n, "new dead letter", "new dead letters") + " matching the selection arrived since the plan; they are not in this batch."
}

// advice words what a run left to an operator (about the address of l,
// or about the whole run) as the commands and flags to type; it is
// written after the reason, from its separator on.
func advice(n replay.Next, l replay.AddrResult) string {
	a := l.Address.String()
	switch n {
	case replay.RetryUnknownNext:
		return "; check the live queue, then re-run with --retry-unknown"
	case replay.OtherPathNext:
		return " (use --via auto or manual)"
	case replay.ManualPathNext:
		return "; replay with --via manual"
	case replay.AnotherQueueNext:
		if strings.HasPrefix(l.Reason, "not imported") {
			return " (import it --to-queue another)"
		}
		return " (restore it --to-queue another)"
	case replay.ReplayOrDiscardNext:
		return fmt.Sprintf(": replay it as generation %d with dlqctl dlq replay %s --why …, or discard it with dlqctl dlq rm %s --why …", l.Generation, a, a)
	case replay.CheckEarlierCopyNext:
		return fmt.Sprintf(". Check that queue for that id: if it is there, discard this dead letter (dlqctl dlq rm %s --why …) and publish the correction yourself; if not, replay it with the earlier batch's --transform", a)
	case replay.GenerationCapNext:
		return "; --max-generation sets the cap"
	case replay.PrimaryNext:
		return "; point --server at the primary, or resume once this cluster is promoted"
	case replay.FailureLimitNext:
		return " (--max-failures)"
	case replay.RefailureLimitNext:
		return " (--max-refailures)"
	case replay.RerunNext:
		return "; the resume line below runs the batch again"
	}
	return ""
}

// article is word with its indefinite article ("a restore", "an import").
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}
