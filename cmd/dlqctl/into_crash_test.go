package main

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
)

// A DLQ replayed into a broker of another line by the real binary,
// SIGKILLed at random moments (while it reads, imports or deletes), under
// faults on both brokers (every 5th write answered 503, every 7th carried
// out and its answer cut off), then run again as it was until it
// finishes: every message the source dead-lettered is live exactly once
// in the destination and gone from the source; the undecryptable ones
// (no payload to publish) are left in the source, said, and published
// nowhere. With --keep, the same copies and the source untouched.
func TestReplayIntoAnotherBrokerKilledAndRunAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	rng := rand.New(rand.NewPCG(62, 2))
	for _, c := range []struct {
		from, to sandbox.Line
		keep     bool
	}{{sandbox.Queen015, sandbox.Queen22, false}, {sandbox.Queen16, sandbox.Queen16, true}, {sandbox.Queen22, sandbox.Queen015, false}} {
		name := c.from.String() + "→" + c.to.String()
		if c.keep {
			name += " --keep"
		}
		t.Run(name, func(t *testing.T) {
			src := newWorldOn(t, c.from, 150, 62, "")
			dst := newWorldOn(t, c.to, 0, 0, "") // the same queues, no dead letter
			args := []string{"dlq", "replay", "--all", "--to-server", dst.url, "--why", "to the new cluster", "--yes", "--rate", "150"}
			if c.keep {
				args = append(args, "--keep")
			}
			faults := sandbox.Faults{Fail503Every: 5, CutEvery: 7}
			src.b.SetFaults(faults)
			dst.b.SetFaults(faults)
			landed := 0
			for k := 0; k < 6; k++ {
				src.killAfter(time.Duration(150+rng.IntN(700))*time.Millisecond, args...)
				if n := len(dst.b.LiveMessages()); n > landed {
					landed = n
				}
				src.noDoubles(t, dst)
			}
			t.Logf("killed 6 times, %d live in the destination", landed)
			// Run again, faults and all, until it has done all it can:
			// the undecryptable messages it cannot publish are said, and
			// the run exits 1 for them.
			done := func() bool {
				left := 0
				for _, r := range src.b.DeadLetterRows() {
					if !src.undec[string(r.Payload)] {
						left++
					}
				}
				return len(dst.b.LiveMessages()) == len(src.orig)-len(src.undec) && (c.keep || left == 0)
			}
			for k := 0; !done(); k++ {
				out, code := src.run(args...)
				src.noDoubles(t, dst)
				if code > 1 || k == 8 {
					t.Fatalf("run %d again: exit %d\n%s", k, code, out)
				}
			}
			src.b.SetFaults(sandbox.Faults{})
			dst.b.SetFaults(sandbox.Faults{})
			out, code := src.run(args...)
			if code != 1 || !strings.Contains(out, "skipped (undecryptable)") || strings.Contains(out, " imported,") {
				t.Fatalf("a last run: exit %d, want 1 for the undecryptable alone\n%s", code, out)
			}
			live := map[string]int{}
			for _, m := range dst.b.LiveMessages() {
				if !strings.HasPrefix(m.TransactionID, "dlqi-") {
					t.Fatalf("a live message published under %s", m.TransactionID)
				}
				live[string(m.Payload)]++
			}
			dead := map[string]bool{}
			for _, r := range src.b.DeadLetterRows() {
				dead[string(r.Payload)] = true
			}
			moved := 0
			for p, a := range src.orig {
				switch n := live[p]; {
				case src.undec[p] && (n != 0 || !dead[p]):
					t.Errorf("undecryptable %s: live %d times in the destination, in the source's DLQ: %v", a, n, dead[p])
				case src.undec[p]:
				case n != 1:
					t.Errorf("%s is live %d times in the destination", a, n)
				case dead[p] != c.keep:
					t.Errorf("%s dead-lettered in the source: %v (--keep %v)", a, dead[p], c.keep)
				default:
					moved++
				}
			}
			t.Logf("%s: %d messages live once in the destination, %d undecryptable left in the source; %d pushes to the destination, %d deletes in the source",
				name, moved, len(src.undec), dst.b.Calls()["POST /api/v1/push"], deletes(src.b))
		})
	}
}

// noDoubles: no message is live twice in the destination, at any moment.
func (w *world) noDoubles(t *testing.T, dst *world) {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range dst.b.LiveMessages() {
		if seen[string(m.Payload)] {
			t.Fatalf("%s is live twice in the destination", m.Payload)
		}
		seen[string(m.Payload)] = true
	}
}

// deletes are the broker's DELETE calls.
func deletes(b *sandbox.Broker) int {
	n := 0
	for k, v := range b.Calls() {
		if strings.HasPrefix(k, "DELETE") {
			n += v
		}
	}
	return n
}
