package ledger_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// DecisionLatencies gives, for every failure first decided since a
// moment, the time from the failure to that first decision: the same
// whether the history is read whole or only from what was decided since
// (addresses decided before and after the moment, one address failing
// twice, decisions of another broker).
func TestDecisionLatenciesAreOfFirstDecisions(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, _ string) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(11, 12))
		base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
		type key struct {
			a deadletter.Address
			f time.Time
		}
		first := map[key]time.Time{} // what a pass over everything says
		for b := 0; b < 40; b++ {
			at := base.Add(time.Duration(b) * 12 * time.Hour)
			broker := "http://a:6632"
			if b%9 == 0 {
				broker = "http://b:6632"
			}
			var items []ledger.ManifestItem
			seen := map[deadletter.Address]bool{}
			for range 25 {
				a := deadletter.Address{PartitionID: "p", TransactionID: "t" + string(rune('a'+rng.IntN(26))) + string(rune('a'+rng.IntN(26)))}
				if seen[a] {
					continue
				}
				seen[a] = true
				f := base.Add(-time.Duration(rng.IntN(3)) * time.Hour) // a few failures an address
				items = append(items, ledger.ManifestItem{Address: a, Queue: "q", FailedAt: f})
				if broker == "http://a:6632" {
					if k := (key{a, f}); first[k].IsZero() || at.Before(first[k]) {
						first[k] = at
					}
				}
			}
			if err := s.CreateBatch(ctx, &ledger.Batch{Broker: broker, Action: ledger.ActionReplay, By: "x", At: at, Why: "w", Status: ledger.StatusDone}, items); err != nil {
				t.Fatal(err)
			}
		}
		for _, since := range []time.Time{base.Add(-time.Hour), base.Add(7 * 24 * time.Hour), base.Add(19 * 24 * time.Hour), base.Add(30 * 24 * time.Hour)} {
			var want []time.Duration
			for k, d := range first {
				if !d.Before(since) {
					want = append(want, d.Sub(k.f))
				}
			}
			got, err := s.DecisionLatencies(ctx, "http://a:6632", since)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("since %s: %d latencies %v, want %d %v", since, len(got), got, len(want), want)
			}
		}
	})
}
