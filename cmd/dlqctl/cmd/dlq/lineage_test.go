package dlq_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/dlqctl/dlqctl/internal/sandbox"
)

// A copy a replay published that fails again is a dead letter of its own
// address: no batch's manifest names it. It is labelled with its lineage
// wherever it is shown (ls, show, check's notes), and resuming its batch
// says it is back and exits 1, as decisions verify does. On each line:
// the 0.x endpoint mints the copy's id, the manual path derives it
// (dlqr-…), the 1.6 move names it dlq:<row id>.
func TestCopyThatFailsAgainShowsItsLineage(t *testing.T) {
	for _, line := range []sandbox.Line{sandbox.Queen015, sandbox.Queen15, sandbox.Queen16} {
		t.Run(line.String(), func(t *testing.T) {
			b, cli := onLine(t, line)
			// Single-row messages of one queue: each is replayed whole (on
			// 1.6, by the broker's move).
			_, stderr, code := cli.Exec("dlq", "replay", "--class", "3ce87dde", "--why", "fixed", "--yes", "--rate", "0")
			id := regexp.MustCompile(`Batch (\S+): `).FindStringSubmatch(stderr)
			if code != 0 || id == nil {
				t.Fatalf("replay: exit %d\n%s", code, stderr)
			}
			live := b.LiveMessages()
			if len(live) < 2 {
				t.Fatalf("%d copies live", len(live))
			}
			for _, m := range live[:2] {
				if !b.FailAgain(m.Queue, m.TransactionID, "billing", "still broken") {
					t.Fatalf("no live %s", m.TransactionID)
				}
			}
			copyAddr := live[0].PartitionID + "/" + live[0].TransactionID

			out, _, _ := cli.Exec("dlq", "ls", "--queue", live[0].Queue, "-o", "ndjson")
			var found int
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				var r struct {
					Address, Decision, DecisionBatch, CopyOf string
					Generation                               int
				}
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					t.Fatal(err)
				}
				if r.CopyOf != "" {
					found++
					if r.Decision != "back after replay" || r.DecisionBatch != id[1] || r.Generation != 2 {
						t.Fatalf("a copy back in the DLQ: %s", l)
					}
				}
			}
			if found != 2 {
				t.Fatalf("ls names %d copies back, want 2:\n%s", found, out)
			}

			out, _, code = cli.Exec("dlq", "show", copyAddr)
			if code != 0 || !strings.Contains(out, "Lineage:") || !strings.Contains(out, "back after replay: a copy batch "+id[1]+" replayed of ") || !strings.Contains(out, "the original: ") {
				t.Fatalf("show of a copy: exit %d\n%s", code, out)
			}

			// check notes the copies among the rows it reads: all of them
			// on a broker that answers in one body; on one that pages, it
			// probes and reads only rows past a triage SLO.
			_, stderr, _ = cli.Exec("dlq", "check")
			if line == sandbox.Queen015 && !strings.Contains(stderr, "2 dead letter(s) are copies batch "+id[1]+" replayed that failed again") {
				t.Fatalf("check's notes do not name the copies:\n%s", stderr)
			}

			_, stderr, code = cli.Exec("dlq", "replay", "--batch", id[1], "--yes", "--rate", "0")
			if code != 1 || !strings.Contains(stderr, "2 dead-lettered again") || !strings.Contains(stderr, "which this batch published, is dead-lettered again") {
				t.Fatalf("resuming a batch whose copies came back: exit %d\n%s", code, stderr)
			}
			out, _, code = cli.Exec("decisions", "verify", id[1], "-o", "json")
			var v struct{ DeadLetteredAgain int }
			if json.Unmarshal([]byte(out), &v) != nil || code != 1 || v.DeadLetteredAgain != 2 {
				t.Fatalf("verify: exit %d\n%s", code, out)
			}
		})
	}
}
