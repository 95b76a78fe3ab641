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
// failure time (17), holds the same.
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
				items = append(items, ledger.ManifestItem{Address: addrs[i], Queue: "orders", Partition: "0", FailedAt: t0})
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
