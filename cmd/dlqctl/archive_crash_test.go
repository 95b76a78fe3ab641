package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// TestKilledDiscardArchivedWhatItRemoved kills the real binary at random
// moments of a discard, then resumes it: after the kill and after the
// resume, every row gone from the broker is in the ledger's archive with
// its payload (a discard is recoverable; an envelope the broker cannot
// decrypt is kept as it is), other groups' rows of a message
// included, wherever the kill fell (a run archives each claim's rows as
// it reads the claim, before acting on any of it).
func TestKilledDiscardArchivedWhatItRemoved(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	for i := range 6 {
		w := newWorld(t, 60, uint64(700+i), "")
		w.b.SetFaults(sandbox.Faults{Fail503Every: 7})
		before := w.b.DeadLetterRows()
		// At 40 a second the 57 messages take about 1.4 s after the plan.
		kill := time.Duration(100+rng.IntN(1700)) * time.Millisecond
		w.killAfter(kill, "dlq", "rm", "--all", "--rate", "40", "--why", "crash test", "--yes")
		gone := w.archivedWhatIsGone(before)
		t.Logf("trial %d: killed after %s with %d of %d rows removed", i, kill, gone, len(before))
		for _, b := range w.batches() {
			if b.Status != ledger.StatusDone && b.Action == ledger.ActionDiscard {
				if out, code := w.run("dlq", "rm", "--batch", b.ID, "--yes", "--rate", "0"); code != 0 {
					t.Fatalf("trial %d: resuming %s: exit %d\n%s", i, b.ID, code, out)
				}
			}
		}
		if w.b.Depth() > 0 { // killed before the batch was recorded
			if out, code := w.run("dlq", "rm", "--all", "--why", "finish", "--yes", "--rate", "0"); code != 0 {
				t.Fatalf("trial %d: finishing: exit %d\n%s", i, code, out)
			}
		}
		if n := w.archivedWhatIsGone(before); n != len(before) {
			t.Fatalf("trial %d: %d of %d rows removed after the resume", i, n, len(before))
		}
	}
}

// archivedWhatIsGone checks that every row of before that the broker no
// longer holds is in the archive (ls --archived), with its payload, and
// returns how many are gone.
func (w *world) archivedWhatIsGone(before []sandbox.Row) int {
	w.t.Helper()
	key := func(a deadletter.Address, group string, failed time.Time) string {
		return fmt.Sprintf("%s %s %d", a, group, failed.UnixMilli()) // ls prints milliseconds
	}
	out, code := w.run("dlq", "ls", "--archived", "-o", "ndjson")
	if code != 0 {
		w.t.Fatalf("ls --archived: exit %d\n%s", code, out)
	}
	archived := map[string]json.RawMessage{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r struct {
			deadletter.Row
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			w.t.Fatalf("ls --archived: %v: %s", err, sc.Bytes())
		}
		archived[key(r.Address(), r.ConsumerGroup, r.FailedAt)] = r.Data
	}
	now := map[string]bool{}
	for _, r := range w.b.DeadLetterRows() {
		now[key(deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}, r.ConsumerGroup, r.FailedAt)] = true
	}
	gone := 0
	for _, r := range before {
		k := key(deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}, r.ConsumerGroup, r.FailedAt)
		if now[k] {
			continue
		}
		gone++
		data, ok := archived[k]
		switch {
		case !ok:
			w.t.Errorf("row %s left the broker unarchived", k)
		case !w.undec[string(r.Payload)] && string(data) != string(r.Payload):
			w.t.Errorf("row %s archived with %s, its payload was %s", k, data, r.Payload)
		}
	}
	return gone
}
