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
