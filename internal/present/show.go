package present

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// Show writes a lookup for people: the record to w, the warning
// about an undecryptable payload to warn.
func Show(w, warn io.Writer, pal *render.Palette, res inspect.ShowResult) {
	c := render.Clean
	kv := func(k, v string) { fmt.Fprintf(w, "%-14s %s\n", k+":", v) }
	kv("Address", pal.Bold(c(res.Address)))
	kv("Queue", OrDash(c(res.Queue)))
	kv("Partition", OrDash(c(res.Partition)))
	kv("Message ID", OrDash(c(res.MessageID)))
	if st := statusWords(res); st != "" {
		kv("Status", st)
	}
	if !res.InDLQ {
		kv("In the DLQ", "no (its history below is the ledger's)")
	}
	enc := "no"
	if res.IsEncrypted {
		enc = "yes (decrypted)"
	}
	if res.Undecryptable {
		enc = pal.Red("undecryptable envelope")
	}
	kv("Encrypted", enc)
	showFailures(w, pal, res)
	if res.Undecryptable {
		fmt.Fprintln(warn, pal.Yellow("warning: the payload is an encryption envelope the broker could not decrypt (wrong or rotated key); it will not be replayed"))
	}
	showPayload(w, res.Data)
	showLineage(w, pal, res)
	fmt.Fprintln(w, "\nDecisions:")
	if len(res.Decisions) == 0 {
		fmt.Fprintln(w, "  none recorded")
	}
	for _, d := range res.Decisions {
		fmt.Fprintf(w, "  %s\n", decisionLine(d))
	}
	if j := res.Journal; j != nil {
		showJournal(w, res, j)
	}
}

// showFailures writes the message's dead-letter rows, or, when it is no
// longer dead-lettered, the ones the archive kept.
func showFailures(w io.Writer, pal *render.Palette, res inspect.ShowResult) {
	c := render.Clean
	if len(res.Rows) > 0 {
		fmt.Fprintf(w, "\nFailures (%d):\n", len(res.Rows))
		for _, r := range res.Rows {
			fmt.Fprintf(w, "  %s  group %s, %d retries, failed %s (%s ago)\n", pal.Red("✗"), c(deadletter.GroupLabel(r.ConsumerGroup)), r.RetryCount, r.FailedAt, render.AgeOfSeconds(float64(r.AgeSeconds)))
			fmt.Fprintf(w, "     %s  [class %s]\n", orNone(c(r.ErrorMessage)), r.ErrorClass)
		}
	} else if len(res.Archived) > 0 {
		fmt.Fprintf(w, "\nArchived failures (%d):\n", len(res.Archived))
		for _, a := range res.Archived {
			gone := "last seen in the DLQ " + render.Timestamp(a.LastSeen)
			if !a.GoneAt.IsZero() {
				gone = "left the DLQ by " + render.Timestamp(a.GoneAt)
				if a.Vanished {
					gone += ", with no decision (vanished)"
				}
			}
			fmt.Fprintf(w, "  %s  group %s, %d retries, failed %s; %s\n", pal.Red("✗"), c(deadletter.GroupLabel(a.ConsumerGroup)), a.RetryCount, render.Timestamp(a.FailedAt), gone)
			fmt.Fprintf(w, "     %s  [class %s]\n", orNone(c(a.Error)), deadletter.ClassID(a.Error))
		}
	}
}

// showPayload writes the payload, indented when it is JSON.
func showPayload(w io.Writer, data json.RawMessage) {
	c := render.Clean
	fmt.Fprintln(w, "\nPayload:")
	var pretty bytes.Buffer
	switch {
	case len(data) == 0:
		fmt.Fprintln(w, "  (none)")
	case json.Indent(&pretty, data, "  ", "  ") == nil:
		fmt.Fprintf(w, "  %s\n", render.CleanLines(pretty.String()))
	default:
		fmt.Fprintf(w, "  %s\n", c(string(data)))
	}
}

// showLineage writes, for a copy a batch published, what it is a copy of
// and what was decided of the original.
func showLineage(w io.Writer, pal *render.Palette, res inspect.ShowResult) {
	c := render.Clean
	if l := res.CopyOf; l != nil {
		fmt.Fprintln(w, "\nLineage:")
		a := deadletter.ActionOf(l.Action)
		if !a.Publishes {
			a = deadletter.ActReplay
		}
		if res.InDLQ {
			fmt.Fprintf(w, "  %s: a copy batch %s %s of %s (generation %d), dead-lettered again; no decision covers it\n",
				pal.Yellow("back after "+a.Name), l.BatchID, a.Past, c(l.Original.String()), l.Generation)
		} else {
			fmt.Fprintf(w, "  a copy batch %s %s of %s (generation %d)\n", l.BatchID, a.Past, c(l.Original.String()), l.Generation)
		}
		for _, d := range res.OriginalDecisions {
			fmt.Fprintf(w, "  the original: %s\n", decisionLine(d))
		}
	}
}

// showJournal writes what the journal says of the address, and of the
// copy it published.
func showJournal(w io.Writer, res inspect.ShowResult, j *ledger.Entry) {
	c := render.Clean
	fmt.Fprintln(w, "\nJournal:")
	fmt.Fprintf(w, "  %s, generation %d, %d attempt(s), batch %s, updated %s\n", journalSentence(j), j.Generation, j.Attempts, j.BatchID, render.Timestamp(j.UpdatedAt))
	if cp := res.ReplayedAs; cp != nil {
		now := "its status now is unknown"
		switch cp.Status {
		case "":
		case "not found":
			now = "the broker no longer holds it"
		default:
			now = "now " + c(cp.Status)
			if cp.Queue != "" {
				now += " in queue " + c(cp.Queue)
			}
		}
		via := j.Via
		if j.Outcome == deadletter.OutcomeMovedElsewhere {
			via = "another hand"
		}
		did := "replayed"
		if act := deadletter.ActionOf(j.Action); act.Outside() {
			did, via = act.Past, "a push from "+map[string]string{deadletter.FromArchive: "the archive", deadletter.FromFile: "an export file"}[act.From]
		}
		fmt.Fprintf(w, "  %s as transaction id %s (partition %s) via %s; %s\n", did, c(cp.TransactionID), c(cp.PartitionID), via, now)
		if cp.Envelope {
			fmt.Fprintln(w, "  warning: the copy is the encryption envelope of a row the broker could not decrypt, pushed as it was: no consumer can read it")
		}
	}
	if j.LastError != "" {
		fmt.Fprintf(w, "  last error: %s\n", c(j.LastError))
	}
}

// statusWords is what became of a message: what a batch did to it when
// the journal says it is done (the broker's own status of an original
// it no longer dead-letters, pending on a line that keeps it, reads as if
// it would be delivered again), else the broker's status.
func statusWords(res inspect.ShowResult) string {
	c := render.Clean
	j := res.Journal
	if res.InDLQ || j == nil || j.State != ledger.Removed {
		return c(res.Status)
	}
	var did string
	switch act := deadletter.ActionOf(j.Action); {
	case j.Outcome == deadletter.OutcomeMovedElsewhere:
		did = "replayed by another hand (the console) as " + c(j.ReplayTxID) + ", while batch " + j.BatchID + " held it"
	case j.Outcome == "gone":
		did = "gone from the DLQ with no copy (batch " + j.BatchID + " found it gone)"
	case act.From == deadletter.FromArchive:
		did = "discarded, then restored as " + c(j.ReplayTxID) + " by batch " + j.BatchID
	case act.From == deadletter.FromFile:
		did = "imported from another broker's export as " + c(j.ReplayTxID) + " by batch " + j.BatchID
	case act.Discards() && res.Went != "":
		did = c(res.Went) + ", then discarded here by batch " + j.BatchID + " (archived in the ledger)"
	case act.Discards():
		did = "discarded by batch " + j.BatchID + " (archived in the ledger)"
	default:
		did = "replayed as " + c(j.ReplayTxID) + " by batch " + j.BatchID
	}
	did += ", " + render.Timestamp(j.UpdatedAt)
	if res.Status != "" {
		did += fmt.Sprintf("; the broker keeps the original as %s, not to be delivered again", c(res.Status))
	}
	return did
}

// decisionLine is one decision of an address's history.
func decisionLine(d ledger.Decision) string {
	c := render.Clean
	until := ""
	if !d.Until.IsZero() {
		until = " until " + render.Timestamp(d.Until)
	}
	owner := ""
	if d.Owner != "" {
		owner = " for " + c(d.Owner)
	}
	return fmt.Sprintf("%s  %s%s by %s%s (batch %s, %s): %s", render.Timestamp(d.At), d.Action, until, c(d.By), owner, d.BatchID, d.Status, c(d.Why))
}

// journalSentence says an address's journal state in words.
func journalSentence(j *ledger.Entry) string {
	switch {
	case j.State == ledger.Removed && j.Outcome == "discarded":
		return "discarded (archived, then deleted)"
	case j.State == ledger.Removed && j.Outcome == deadletter.OutcomeRestored:
		return "discarded, then restored from the archive"
	case j.State == ledger.Removed && j.Outcome == deadletter.OutcomeImported:
		return "imported from another broker's export"
	case j.State == ledger.Removed && (j.Outcome == "replayed" || j.Outcome == "duplicate") && j.Via == replay.ViaMove:
		return "replayed by the broker's move, dead letter removed"
	case j.State == ledger.Removed && (j.Outcome == "replayed" || j.Outcome == "duplicate"):
		return "replayed, dead letter removed"
	case j.State == ledger.Removed && j.Outcome == deadletter.OutcomeMovedElsewhere:
		return "replayed by another hand (the broker's console) while a batch held it: moved elsewhere"
	case j.State == ledger.Removed && j.Outcome == "gone":
		return "gone before it was acted on"
	}
	return j.State
}

func orNone(s string) string { return ErrorText(s) }

// ErrorText is a row's error as people are shown it: "(no error
// message)" where the consumer left none, as ls --group-by names its
// class.
func ErrorText(s string) string {
	if s == "" {
		return "(no error message)"
	}
	return s
}

// OrDash is s, or "-" for nothing.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
