package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
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
