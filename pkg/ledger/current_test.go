package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// The current decision of each address (one row, kept as batches are
// recorded and cancelled) is what the whole history says is latest:
// LatestDecisionsFor against LatestDecisions, over random batches of
// overlapping addresses, equal times, and cancellations of the latest and
// of older ones, on every engine; and a ledger migrated from before the
// table (schema 15), or from before it held each address's queue and
// failure time (17), holds the same. HoldsInForce puts exactly the
// addresses whose latest decision is a hold in force, whichever way it
// reads them.
func TestCurrentDecisionIsTheLatest(t *testing.T) {
	for _, from := range []int{15, 17} {
		t.Run(fmt.Sprintf("from-schema-%d", from), func(t *testing.T) {
			for _, l := range testkit.Ledgers(t) {
				t.Run(l.Name, func(t *testing.T) { currentIsTheLatest(t, l.DSN, from) })
			}
		})
	}
}

func currentIsTheLatest(t *testing.T, dsn string, from int) {
	ctx := context.Background()
	old, err := ledger.OpenAtSchema(ctx, dsn, from)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 9))
	const broker = "http://prod"
	addrs := make([]deadletter.Address, 60)
	for i := range addrs {
		addrs[i] = deadletter.Address{PartitionID: fmt.Sprintf("p%d", i%3), TransactionID: fmt.Sprintf("t%d", i)}
	}
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	record := func(s *ledger.Store, n int) {
		for k := 0; k < n; k++ {
			var items []ledger.ManifestItem
			for _, i := range rng.Perm(len(addrs))[:1+rng.IntN(25)] {
				items = append(items, ledger.ManifestItem{Address: addrs[i], Queue: queueOf(addrs[i]), Partition: "0", FailedAt: t0.Add(time.Duration(i) * time.Minute)})
			}
			action := []string{ledger.ActionHold, ledger.ActionReplay, ledger.ActionDiscard}[rng.IntN(3)]
			b := &ledger.Batch{Broker: broker, Action: action, By: "ann", At: t0.Add(time.Duration(rng.IntN(6)) * time.Hour), Why: "w"}
			if action == ledger.ActionHold {
				b.Until = b.At.Add(time.Hour)
			}
			if err := s.CreateBatch(ctx, b, items); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, b.ID)
		}
	}
	record(old, 10) // before the table: the migration fills it
	old.Close()
	s, err := ledger.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	same := func(when string) {
		t.Helper()
		all, err := s.LatestDecisions(ctx, broker)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.LatestDecisionsFor(ctx, broker, addrs)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, all) {
			t.Fatalf("%s: the current decisions (%d) are not the history's latest (%d)", when, len(got), len(all))
		}
		holdsAreTheLatest(t, s, broker, all, when)
	}
	same("migrated")
	for round := 0; round < 8; round++ {
		record(s, 4)
		same(fmt.Sprintf("round %d, recorded", round))
		id := ids[rng.IntN(len(ids))]
		if round%2 == 0 {
			id = ids[len(ids)-1] // the latest, most often current
		}
		if _, err := s.CancelBatch(ctx, id, "bob", "wrong", t0); err != nil && !errors.Is(err, ledger.ErrNotCancellable) {
			t.Fatal(err)
		}
		same(fmt.Sprintf("round %d, %s cancelled", round, id))
	}
}

// queueOf is the queue of an address of currentIsTheLatest: its
// partition's.
func queueOf(a deadletter.Address) string {
	if a.PartitionID == "p2" {
		return "payments"
	}
	return "orders"
}

// holdsAreTheLatest holds HoldsInForce, at moments before, among and
// after the holds' ends, to the addresses of all (the latest decisions)
// that a hold in force decides, reading the holds' manifests whole and
// through current_decisions.
func holdsAreTheLatest(t *testing.T, s *ledger.Store, broker string, all map[deadletter.Address]ledger.Decision, when string) {
	t.Helper()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, now := range []time.Time{t0.Add(-time.Hour), t0.Add(90 * time.Minute), t0.Add(270 * time.Minute), t0.Add(7 * time.Hour)} {
		want := map[deadletter.Address]ledger.Decision{}
		for a, d := range all {
			if d.Action == ledger.ActionHold && d.Active(now) {
				want[a] = describe(d)
			}
		}
		// 0: every hold looked up in current_decisions; 1<<30: the
		// manifests read whole, however many batches followed.
		for _, direct := range []int{0, 1 << 30} {
			got := holdsPut(t, s, broker, now, direct, nil)
			for a := range got {
				got[a] = describe(got[a])
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s, at %s, read whole up to %d×: the holds in force put %d addresses, the latest decisions say %d:\n%v\n%v",
					when, now.Sub(t0), direct, len(got), len(want), got, want)
			}
			// What a reader already looked up (an address's current
			// decision) stays as it was.
			looked := holdsPut(t, s, broker, now, direct, all)
			if !reflect.DeepEqual(looked, all) {
				t.Fatalf("%s, at %s, read whole up to %d×: reading the holds changed decisions already looked up", when, now.Sub(t0), direct)
			}
		}
	}
}

// holdsPut runs HoldsInForce, with holdsReadDirect at direct, into a set
// holding known, and gives what the set then holds of known's addresses
// and of the holds' (known: nil for none).
func holdsPut(t *testing.T, s *ledger.Store, broker string, now time.Time, direct int, known map[deadletter.Address]ledger.Decision) map[deadletter.Address]ledger.Decision {
	t.Helper()
	was := ledger.SetHoldsReadDirect(direct)
	defer ledger.SetHoldsReadDirect(was)
	set := ledger.NewDecisionSet(known)
	ok, err := s.HoldsInForce(context.Background(), broker, now, 1_000, set)
	if err != nil || !ok {
		t.Fatalf("HoldsInForce: %v, %v", ok, err)
	}
	all, err := s.LatestDecisions(context.Background(), broker)
	if err != nil {
		t.Fatal(err)
	}
	out := map[deadletter.Address]ledger.Decision{}
	for a := range all {
		if d, ok := set.Get(a); ok {
			out[a] = d
		}
	}
	return out
}

// describe is what HoldsInForce must get right of a decision: its batch,
// and the address's queue and newest failure the batch saw.
func describe(d ledger.Decision) ledger.Decision {
	return ledger.Decision{BatchID: d.BatchID, Queue: d.Queue, Seen: d.Seen}
}
