package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// A discard undone on every Queen line, by the real binary killed with
// SIGKILL at random moments of the restore and resumed with the line it
// printed: every message the discard deleted is live again exactly once
// (none twice, none lost), the undecryptable ones the archive kept as
// envelopes are said and left out, and restoring again publishes
// nothing and says so. The broker fails writes throughout the killed
// runs and their resumes: every 5th answered 503, every 7th carried out
// and its answer cut off.
func TestRestoreKilledAndResumedPublishesEachOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	rng := rand.New(rand.NewPCG(54, 1))
	for _, line := range []sandbox.Line{sandbox.Queen015, sandbox.Queen15, sandbox.Queen16, sandbox.Queen22} {
		t.Run(line.String(), func(t *testing.T) {
			w := newWorldOn(t, line, 400, 7, "")
			if out, code := w.run("dlq", "rm", "--all", "--why", "a bad deploy's failures", "--yes", "--rate", "0"); code != 0 {
				t.Fatalf("rm: exit %d\n%s", code, out)
			}
			if n := len(w.b.DeadLetterRows()); n != 0 {
				t.Fatalf("%d dead-letter rows left after rm --all", n)
			}
			out, code := w.run("dlq", "restore", "--all", "--dry-run")
			if code != 0 || !strings.Contains(out, "Restore plan:") || len(w.b.LiveMessages()) != 0 {
				t.Fatalf("dry run: exit %d, %d live\n%s", code, len(w.b.LiveMessages()), out)
			}
			w.b.SetFaults(sandbox.Faults{Fail503Every: 5, CutEvery: 7})
			w.b.ResetCalls()
			// Killed, a few tens of messages in, until a kill lands mid-run;
			// then its resume killed too.
			for k := 0; ; k++ {
				w.killAfter(time.Duration(300+rng.IntN(400))*time.Millisecond, "dlq", "restore", "--all", "--why", "undo", "--yes", "--rate", "100")
				if n := len(w.b.LiveMessages()); n > 0 {
					t.Logf("killed with %d of %d restored", n, len(w.orig)-len(w.undec))
					break
				}
				if k == 5 {
					t.Fatal("no kill landed while the restore published")
				}
			}
			for _, b := range w.batches() {
				if b.Action == ledger.ActionRestore && b.Status != ledger.StatusDone {
					w.killAfter(time.Duration(200+rng.IntN(300))*time.Millisecond, "dlq", "restore", "--batch", b.ID, "--yes", "--rate", "100")
				}
			}
			// Finished: the recorded batches resumed (the faults still on),
			// then, the broker well again, a fresh selection for what a
			// kill before the record or a fault left.
			for _, b := range w.batches() {
				if b.Action == ledger.ActionRestore && b.Status != ledger.StatusDone {
					if out, code := w.run("dlq", "restore", "--batch", b.ID, "--yes", "--rate", "0"); code != 0 && code != 1 {
						t.Fatalf("resume %s: exit %d\n%s", b.ID, code, out)
					}
				}
			}
			pushes := w.b.Calls()["POST /api/v1/push"]
			if pushes < 35 {
				t.Fatalf("%d pushes under the faults: too few to meet them", pushes)
			}
			t.Logf("%d pushes under the faults", pushes)
			w.b.SetFaults(sandbox.Faults{})
			w.run("dlq", "restore", "--all", "--why", "finish", "--yes", "--rate", "0")
			live := map[string]int{}
			for _, m := range w.b.LiveMessages() {
				if !strings.HasPrefix(m.TransactionID, "dlqa-") {
					t.Fatalf("a live message restored under %s", m.TransactionID)
				}
				live[string(m.Payload)]++
			}
			restored := 0
			for p, a := range w.orig {
				switch n := live[p]; {
				case w.undec[p] && n != 0:
					t.Errorf("undecryptable %s restored %d times", a, n)
				case w.undec[p]:
				case n != 1:
					t.Errorf("%s is live %d times", a, n)
				default:
					restored++
				}
			}
			// The undecryptable ones are planned and said again (exit 1:
			// not everything could be restored).
			out, code = w.run("dlq", "restore", "--all", "--why", "once more", "--yes", "--rate", "0")
			if code != 1 || !strings.Contains(out, fmt.Sprintf("%d already restored", restored)) || !strings.Contains(out, "skipped (undecryptable)") || len(w.b.LiveMessages()) != restored {
				t.Fatalf("a second restore: exit %d, %d live (want %d)\n%s", code, len(w.b.LiveMessages()), restored, out)
			}
			t.Logf("%s: %d messages restored once, %d undecryptable left out", line, restored, len(w.undec))
		})
	}
}
