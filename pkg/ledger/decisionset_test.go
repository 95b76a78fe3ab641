package ledger_test

import (
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// A DecisionSet gives back each decision as it was added, its address's
// own part included, though a batch's part is held once; a batch that
// reads differently later (its status moved) does not change the
// decisions held before.
func TestDecisionSetGivesBackWhatItHolds(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	a, b, c := deadletter.Address{PartitionID: "p", TransactionID: "a"}, deadletter.Address{PartitionID: "p", TransactionID: "b"}, deadletter.Address{PartitionID: "q", TransactionID: "dlqr-1-x"}
	hold := ledger.Decision{BatchID: "B1", Action: ledger.ActionHold, By: "ann", At: t0, Why: "fix coming", Until: t0.Add(time.Hour), Status: ledger.StatusRecorded, Owner: "team"}
	da, db := hold, hold
	da.Queue, da.Seen = "orders", t0.Add(-time.Minute)
	db.Queue, db.Seen = "payments", t0.Add(-2*time.Minute)
	dc := ledger.Decision{BatchID: "B2", Action: ledger.ActionReplay, By: "bob", At: t0, Why: "fixed", Status: ledger.StatusDone,
		Copy: &ledger.Lineage{Original: a, BatchID: "B2", Generation: 1}}
	s := ledger.NewDecisionSet(map[deadletter.Address]ledger.Decision{a: da, c: dc})
	moved := hold
	moved.Status = ledger.StatusResolved
	moved.Queue, moved.Seen = db.Queue, db.Seen
	s.Add(map[deadletter.Address]ledger.Decision{b: moved})
	for addr, want := range map[deadletter.Address]ledger.Decision{a: da, b: moved, c: dc} {
		if got, ok := s.Get(addr); !ok || got != want {
			t.Errorf("%s: %+v, %v; want %+v", addr, got, ok, want)
		}
	}
	if got, ok := s.Take(a); !ok || got != da {
		t.Fatalf("take %s: %+v, %v", a, got, ok)
	}
	if _, ok := s.Get(a); ok {
		t.Fatal("a decision taken is still held")
	}
	if _, ok := s.Get(deadletter.Address{PartitionID: "p", TransactionID: "none"}); ok {
		t.Fatal("a decision for an address never added")
	}
}

// A hold holds a row while it is in force and the row failed no later
// than the newest failure its batch saw; a replay, an expired hold and a
// copy back in the DLQ hold nothing. The holder is the owner, else who
// recorded it.
func TestWhatAHoldHolds(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	seen := now.Add(-2 * time.Hour)
	hold := ledger.Decision{Action: ledger.ActionHold, By: "ann", Until: now.Add(time.Hour), Seen: seen}
	expired, replay, copied, owned := hold, hold, hold, hold
	expired.Until = now.Add(-time.Second)
	replay.Action = ledger.ActionReplay
	copied.Copy = &ledger.Lineage{Generation: 1}
	owned.Owner = "payments-team"
	for _, c := range []struct {
		d      ledger.Decision
		failed time.Time
		want   bool
	}{
		{hold, seen, true}, {hold, seen.Add(-time.Hour), true}, {hold, seen.Add(time.Second), false},
		{expired, seen, false}, {replay, seen, false}, {copied, seen, false},
	} {
		if got := c.d.Holds(c.failed, now); got != c.want {
			t.Errorf("%s until %v over a row failed at %v: holds %v, want %v", c.d.Action, c.d.Until, c.failed, got, c.want)
		}
	}
	if hold.Holder() != "ann" || owned.Holder() != "payments-team" {
		t.Fatalf("holders %q, %q", hold.Holder(), owned.Holder())
	}
}
