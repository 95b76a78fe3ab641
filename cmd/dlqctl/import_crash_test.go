package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// A DLQ moved to a broker of another line through a file, by the real
// binary killed with SIGKILL at random moments of the export --move and
// of the import, each resumed with what it printed (the discard's
// dlq rm --batch, the import's --batch), under faults on both brokers
// (every 5th write answered 503, every 7th carried out and its answer
// cut off): every message the source dead-lettered is live exactly once
// in the destination (the undecryptable ones, whose payload the file
// holds as an envelope, are said and left out), none is left in the
// source, and importing the file again publishes nothing.
func TestMoveThroughAFileKilledAndResumed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	rng := rand.New(rand.NewPCG(62, 1))
	for _, pair := range [][2]sandbox.Line{{sandbox.Queen015, sandbox.Queen22}, {sandbox.Queen16, sandbox.Queen16}, {sandbox.Queen22, sandbox.Queen015}} {
		t.Run(pair[0].String()+"→"+pair[1].String(), func(t *testing.T) {
			src := newWorldOn(t, pair[0], 150, 62, "")
			dst := newWorldOn(t, pair[1], 0, 0, "") // the same queues, no dead letter
			file := filepath.Join(src.dir, "dlq.ndjson.gz")
			src.b.SetFaults(sandbox.Faults{Fail503Every: 5, CutEvery: 7})
			// The move killed until the file is there; then its discard
			// resumed (killed too) and finished.
			for k := 0; ; k++ {
				src.killAfter(time.Duration(200+rng.IntN(400))*time.Millisecond, "dlq", "export", file, "--all", "--move", "--why", "to the new cluster", "--yes", "--rate", "200")
				if _, err := os.Stat(file); err == nil {
					break
				}
				if k == 8 {
					t.Fatal("the file never appeared")
				}
			}
			for _, b := range src.batches() {
				if b.Action == ledger.ActionDiscard && b.Status != ledger.StatusDone {
					src.killAfter(time.Duration(100+rng.IntN(200))*time.Millisecond, "dlq", "rm", "--batch", b.ID, "--yes", "--rate", "200")
					if out, code := src.run("dlq", "rm", "--batch", b.ID, "--yes", "--rate", "0"); code > 1 {
						t.Fatalf("resume %s: exit %d\n%s", b.ID, code, out)
					}
				}
			}
			src.b.SetFaults(sandbox.Faults{})
			if n := len(src.b.DeadLetterRows()); n != 0 {
				t.Fatalf("%d dead-letter rows left in the source after the move", n)
			}
			out, code := dst.run("dlq", "import", file, "--dry-run")
			if code != 0 || !strings.Contains(out, "Import plan:") || len(dst.b.LiveMessages()) != 0 {
				t.Fatalf("dry run: exit %d, %d live\n%s", code, len(dst.b.LiveMessages()), out)
			}
			dst.b.SetFaults(sandbox.Faults{Fail503Every: 5, CutEvery: 7})
			for k := 0; ; k++ {
				dst.killAfter(time.Duration(300+rng.IntN(400))*time.Millisecond, "dlq", "import", file, "--why", "moved", "--yes", "--rate", "100")
				if len(dst.b.LiveMessages()) > 0 {
					t.Logf("killed with %d imported", len(dst.b.LiveMessages()))
					break
				}
				if k == 5 {
					t.Fatal("no kill landed while the import published")
				}
			}
			resumeAll := func(kill bool) {
				for _, b := range dst.batches() {
					if b.Action != ledger.ActionImport || b.Status == ledger.StatusDone {
						continue
					}
					if kill {
						dst.killAfter(time.Duration(200+rng.IntN(300))*time.Millisecond, "dlq", "import", "--batch", b.ID, "--yes", "--rate", "100")
					} else if out, code := dst.run("dlq", "import", "--batch", b.ID, "--yes", "--rate", "0"); code > 1 {
						t.Fatalf("resume %s: exit %d\n%s", b.ID, code, out)
					}
				}
			}
			resumeAll(true)
			resumeAll(false)
			t.Logf("%d pushes under the faults", dst.b.Calls()["POST /api/v1/push"])
			dst.b.SetFaults(sandbox.Faults{})
			dst.run("dlq", "import", file, "--why", "finish", "--yes", "--rate", "0")
			live := map[string]int{}
			for _, m := range dst.b.LiveMessages() {
				if !strings.HasPrefix(m.TransactionID, "dlqi-") {
					t.Fatalf("a live message imported under %s", m.TransactionID)
				}
				live[string(m.Payload)]++
			}
			imported := 0
			for p, a := range src.orig {
				switch n := live[p]; {
				case src.undec[p] && n != 0:
					t.Errorf("undecryptable %s imported %d times", a, n)
				case src.undec[p]:
				case n != 1:
					t.Errorf("%s is live %d times in the destination", a, n)
				default:
					imported++
				}
			}
			out, code = dst.run("dlq", "import", file, "--why", "once more", "--yes", "--rate", "0")
			if len(dst.b.LiveMessages()) != imported || code > 1 {
				t.Fatalf("a second import: exit %d, %d live (want %d)\n%s", code, len(dst.b.LiveMessages()), imported, out)
			}
			t.Logf("%s: %d messages imported once, %d undecryptable left out", pair, imported, len(src.undec))
		})
	}
}
