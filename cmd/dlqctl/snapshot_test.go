package main

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// An operator who thinks a run is stuck starts the batch again in a
// second terminal while the first still works: the first deletes rows
// while the second pages through the list by offset, so the second's
// listing misses rows still there. A row a listing did not see is gone
// only when the broker says so for its address: the second leaves the
// ones it missed, the first (or a resume) replays them, and the broker
// holds each message once.
func TestASnapshotThatMissedRowsTakesNoneForGone(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	w := newWorld(t, 2400, 53, "")
	out, err := w.cmd("dlq", "decide", "--all", "--action", "replay", "--why", "two terminals").Output()
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	id := strings.TrimSpace(string(out))
	a := w.cmd("dlq", "replay", "--batch", id, "--yes", "--rate", "300", "--order", "none")
	var aOut bytes.Buffer
	a.Stdout, a.Stderr = &aOut, &aOut
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	// Once the first is deleting, every page of a listing takes a while:
	// the first's deletes between two pages slide rows onto the page
	// already read.
	time.Sleep(1500 * time.Millisecond)
	w.b.SetFaults(sandbox.Faults{RouteLatency: map[string]time.Duration{"GET /api/v1/dlq": 400 * time.Millisecond}})
	bOut, _ := w.run("dlq", "replay", "--batch", id, "--yes", "--rate", "0", "--order", "none")
	_ = a.Wait()
	w.b.SetFaults(sandbox.Faults{})
	rOut, _ := w.run("dlq", "replay", "--batch", id, "--yes", "--rate", "0", "--order", "none")
	summary := func(s string) string {
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, "Batch "+id+":") {
				return l
			}
		}
		return lastLines(s, 3)
	}
	t.Logf("first: %s\nsecond: %s\nresume: %s", summary(aOut.String()), summary(bOut), summary(rOut))
	for _, s := range []string{aOut.String(), bOut, rOut} {
		if strings.Contains(s, "dead-lettered again after this batch") {
			t.Errorf("a run says the batch acted on a message it never touched:\n%s", s)
		}
	}
	w.books(true)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Addresses given as arguments or in a file, under kills at random
// moments and a broker failing writes: each given message is live once
// in the end, the others untouched, judged by the broker.
func TestAddressesAndFromFileUnderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	rng := rand.New(rand.NewPCG(62, 1))
	for _, how := range []string{"arguments", "--from-file"} {
		t.Run(how, func(t *testing.T) {
			w := newWorld(t, 150, 61, "")
			chosen := map[string]bool{}
			var addrs []string
			for p, a := range w.orig {
				if !w.undec[p] && len(addrs) < 50 {
					chosen[p] = true
					addrs = append(addrs, a.String())
				}
			}
			args := append([]string{"dlq", "replay"}, addrs...)
			if how == "--from-file" {
				f := filepath.Join(w.dir, "addresses.txt")
				if err := os.WriteFile(f, []byte(strings.Join(addrs, "\n")+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				args = []string{"dlq", "replay", "--from-file", f}
			}
			base := args
			args = append(base[:len(base):len(base)], "--why", "these", "--yes", "--rate", "40", "--order", "none")
			w.b.SetFaults(sandbox.Faults{Fail503Every: 5, CutEvery: 7})
			for k := 0; k < 3; k++ {
				w.killAfter(time.Duration(200+rng.IntN(500))*time.Millisecond, args...)
				for _, b := range w.batches() {
					if b.Status != ledger.StatusDone {
						w.killAfter(time.Duration(100+rng.IntN(300))*time.Millisecond, "dlq", "replay", "--batch", b.ID, "--yes", "--rate", "40")
					}
				}
			}
			w.b.SetFaults(sandbox.Faults{})
			for _, b := range w.batches() {
				if b.Status != ledger.StatusDone {
					w.run("dlq", "replay", "--batch", b.ID, "--yes", "--rate", "0", "--retry-unknown")
				}
			}
			// Exit 5 when every given address is done: none is dead-lettered.
			if out, code := w.run(append(base, "--why", "finish", "--yes", "--rate", "0", "--retry-unknown")...); code != 0 && code != 1 && code != 5 {
				t.Fatalf("the last run: exit %d\n%s", code, out)
			}
			live := w.livePayloads()
			dead := map[string]bool{}
			for _, r := range w.b.DeadLetterRows() {
				dead[string(r.Payload)] = true
			}
			for p, a := range w.orig {
				switch {
				case chosen[p] && (live[p] != 1 || dead[p]):
					t.Errorf("%s (given): live %d, still dead-lettered %v", a, live[p], dead[p])
				case !chosen[p] && (live[p] != 0 || !dead[p]):
					t.Errorf("%s (not given): live %d, dead-lettered %v", a, live[p], dead[p])
				}
			}
		})
	}
}
