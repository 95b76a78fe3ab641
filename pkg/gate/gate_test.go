package gate_test

import (
	"context"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/gate"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/policy"
	"github.com/dlqctl/dlqctl/pkg/sandbox"
)

var now = testkit.Now

// seeded is the project's seed on a sandbox of either kind.
func seeded(t *testing.T, old bool) (*sandbox.Broker, *client.Client) {
	b, url := testkit.Seeded(t, now, func(b *sandbox.Broker) {
		if old {
			b.SetLine(sandbox.Queen015)
		}
	})
	return b, testkit.Client(t, url)
}

func scope(res *gate.Result, q, g string) gate.Scope {
	for _, s := range res.Scopes {
		if s.Queue == q && s.ConsumerGroup == g {
			return s
		}
	}
	return gate.Scope{}
}

// One scope per queue and group, the same answer from a broker that
// pages and one that answers in one body: depth, oldest, the breach of a
// policy and the default max-age 0.
func TestScopesOnBothKindsOfBroker(t *testing.T) {
	policies := policy.Set{{Queue: "orders", Policy: policy.Policy{MaxAge: 30 * 24 * time.Hour, TriageSLO: time.Hour}}}
	var answers []*gate.Result
	for _, old := range []bool{false, true} {
		b, cl := seeded(t, old)
		res, err := gate.Check(context.Background(), cl, gate.Input{Policies: policies, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		depth := 0
		for _, s := range res.Scopes {
			depth += s.Depth
		}
		if depth != b.Depth() || res.OK {
			t.Fatalf("old %v: %d rows in scopes of %d; ok %v", old, depth, b.Depth(), res.OK)
		}
		billing := scope(res, "orders", "billing")
		if billing.MaxAgeSeconds == nil || *billing.MaxAgeSeconds != 30*24*3600 || billing.UndecidedPastSLO == 0 || len(billing.Breaches) != 1 {
			t.Fatalf("old %v: orders/billing %+v", old, billing)
		}
		if p := scope(res, "payments", "ledger"); !p.DefaultedMaxAge || len(p.Breaches) != 1 {
			t.Fatalf("old %v: payments/ledger %+v", old, p)
		}
		answers = append(answers, res)
	}
	for i, s := range answers[0].Scopes {
		o := answers[1].Scopes[i]
		if s.Queue != o.Queue || s.ConsumerGroup != o.ConsumerGroup || s.Depth != o.Depth || s.UndecidedPastSLO != o.UndecidedPastSLO || len(s.Breaches) != len(o.Breaches) {
			t.Fatalf("scope %d: paging %+v, one body %+v", i, s, o)
		}
	}
}

// A hold keeps max-age and the triage SLO quiet for what it covers; a
// replay decided and not carried out within the SLO does not.
func TestDecisionsAsCheckCountsThem(t *testing.T) {
	b, cl := seeded(t, false)
	ld := testkit.OpenLedger(t, "sqlite://"+t.TempDir()+"/l.db")
	ctx := context.Background()
	var held []ledger.ManifestItem
	seen := map[deadletter.Address]int{}
	for _, r := range b.DeadLetterRows() {
		a := deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}
		if r.Queue != "payments" {
			continue
		}
		if i, ok := seen[a]; ok {
			held[i].FailedAt = maxTime(held[i].FailedAt, r.FailedAt)
			continue
		}
		seen[a] = len(held)
		held = append(held, ledger.ManifestItem{Address: a, Queue: r.Queue, FailedAt: r.FailedAt})
	}
	if err := ld.CreateBatch(ctx, &ledger.Batch{Broker: cl.Broker(), Action: ledger.ActionHold, By: "x", At: now, Why: "w", Until: now.Add(time.Hour)}, held); err != nil {
		t.Fatal(err)
	}
	dec, err := ld.LatestDecisions(ctx, cl.Broker())
	if err != nil {
		t.Fatal(err)
	}
	policies := policy.Set{{Queue: "*", Policy: policy.Policy{MaxAge: time.Minute, TriageSLO: time.Minute}}}
	res, err := gate.Check(ctx, cl, gate.Input{Policies: policies, Decisions: dec, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if s := scope(res, "payments", "ledger"); s.UndecidedPastSLO != 0 || len(s.Breaches) != 0 || s.OldestHold == nil {
		t.Fatalf("held scope: %+v", s)
	}
	// The hold expires: the same scope breaches again.
	res, _ = gate.Check(ctx, cl, gate.Input{Policies: policies, Decisions: dec, Now: now.Add(2 * time.Hour)})
	if s := scope(res, "payments", "ledger"); len(s.Breaches) == 0 {
		t.Fatalf("expired hold: %+v", s)
	}
	// A replay decision on the same messages, never carried out: the
	// latest decision (a second later: two batches of the same instant
	// have no order).
	if err := ld.CreateBatch(ctx, &ledger.Batch{Broker: cl.Broker(), Action: ledger.ActionReplay, By: "ann", At: now.Add(time.Second), Why: "w"}, held); err != nil {
		t.Fatal(err)
	}
	dec, _ = ld.LatestDecisions(ctx, cl.Broker())
	res, _ = gate.Check(ctx, cl, gate.Input{Policies: policies, Decisions: dec, Now: now.Add(2 * time.Hour)})
	s := scope(res, "payments", "ledger")
	if s.DecidedNotCarriedOut == 0 || len(s.NotCarriedOut) != 1 || s.NotCarriedOut[0].By != "ann" || !hasBreach(s, gate.Unexecuted) {
		t.Fatalf("a replay not carried out: %+v", s)
	}
}

// On a broker that pages, a scope costs O(log N) list requests: 100,000
// rows do not make check read them.
func TestCheckIsLogarithmicOnAPagingBroker(t *testing.T) {
	b, url := testkit.Sandbox(t)
	b.Fill(100_000, 5)
	cl := testkit.Client(t, url)
	b.ResetCalls()
	res, err := gate.Check(context.Background(), cl, gate.Input{Policies: policy.Set{{Queue: "*", Policy: policy.Policy{MaxAge: time.Hour}}}, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	lists := b.Calls()["GET /api/v1/dlq"]
	if per := lists / max(len(res.Scopes), 1); per > 2*17+6 || res.ReadWhole {
		t.Fatalf("%d list requests for %d scopes of 100,000 rows", lists, len(res.Scopes))
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// With a Source, decisions are looked up for the rows read, a chunk at a
// time; the answer is the one every decision in memory gives, on both
// kinds of broker, with holds, a replay not carried out and a hold that
// expired.
func TestSourceAnswersAsTheWholeHistory(t *testing.T) {
	for _, old := range []bool{false, true} {
		testkit.ForEachLedger(t, func(t *testing.T, ld *ledger.Store, _ string) {
			b, cl := seeded(t, old)
			ctx := context.Background()
			var hold, replayed, expired []ledger.ManifestItem
			seen := map[deadletter.Address]bool{}
			for i, r := range b.DeadLetterRows() {
				a := deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}
				if seen[a] {
					continue
				}
				seen[a] = true
				it := ledger.ManifestItem{Address: a, Queue: r.Queue, FailedAt: now}
				switch i % 5 {
				case 0:
					hold = append(hold, it)
				case 1:
					replayed = append(replayed, it)
				case 2:
					expired = append(expired, it)
				}
			}
			for _, bt := range []struct {
				b     *ledger.Batch
				items []ledger.ManifestItem
			}{
				{&ledger.Batch{Broker: cl.Broker(), Action: ledger.ActionHold, By: "ann", At: now.Add(-3 * time.Hour), Why: "w", Until: now.Add(time.Hour)}, hold},
				{&ledger.Batch{Broker: cl.Broker(), Action: ledger.ActionReplay, By: "bob", At: now.Add(-2 * time.Hour), Why: "w"}, replayed},
				{&ledger.Batch{Broker: cl.Broker(), Action: ledger.ActionHold, By: "cy", At: now.Add(-time.Hour), Why: "w", Until: now.Add(-time.Minute)}, expired},
			} {
				if err := ld.CreateBatch(ctx, bt.b, bt.items); err != nil {
					t.Fatal(err)
				}
			}
			dec, err := ld.LatestDecisions(ctx, cl.Broker())
			if err != nil {
				t.Fatal(err)
			}
			policies := policy.Set{{Queue: "*", Policy: policy.Policy{MaxAge: time.Hour, TriageSLO: 30 * time.Minute}}}
			whole, err := gate.Check(ctx, cl, gate.Input{Policies: policies, Decisions: dec, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			looked, err := gate.Check(ctx, cl, gate.Input{Policies: policies, Source: ld, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			strip := func(r *gate.Result) []gate.Scope {
				out := append([]gate.Scope(nil), r.Scopes...)
				for i := range out {
					out[i].Requests, out[i].Bytes = 0, 0
				}
				return out
			}
			a, bb := strip(whole), strip(looked)
			if len(a) != len(bb) {
				t.Fatalf("old %v: %d scopes vs %d", old, len(a), len(bb))
			}
			decided := 0
			for i := range a {
				x, y := a[i], bb[i]
				if x.Queue != y.Queue || x.ConsumerGroup != y.ConsumerGroup || x.UndecidedPastSLO != y.UndecidedPastSLO || x.DecidedNotCarriedOut != y.DecidedNotCarriedOut ||
					x.OldestHeld != y.OldestHeld || !x.OldestUnheldFailedAt.Equal(y.OldestUnheldFailedAt) || !reflect.DeepEqual(x.Breaches, y.Breaches) {
					t.Fatalf("old %v: scope %s/%s\nwhole %+v\nsource %+v", old, x.Queue, x.ConsumerGroup, x, y)
				}
				decided += x.DecidedNotCarriedOut
			}
			if decided == 0 {
				t.Fatal("no decision not carried out: the comparison says little")
			}
		})
	}
}

// A consumer group's own policy is judged on every broker, its queue
// list naming the group or not: the group's scope comes from the
// policy. Here orders/billing holds a two-day-old dead letter under a
// 30m max-age, beside a default of 1000 days.
func TestGroupPolicyWhereTheQueueListNamesNoGroups(t *testing.T) {
	policies := policy.Set{
		{Queue: "*", Policy: policy.Policy{MaxAge: 1000 * 24 * time.Hour}},
		{Queue: "orders", ConsumerGroup: "billing", Policy: policy.Policy{MaxAge: 30 * time.Minute, Owner: "team-billing"}},
	}
	for _, line := range sandbox.Lines {
		t.Run(string(line), func(t *testing.T) {
			b := sandbox.New(func() time.Time { return now })
			b.SetLine(line)
			b.AddQueue("orders", false, 3) // no groups named
			b.AddDeadLetters(
				sandbox.DeadLetter{Queue: "orders", Partition: "p", TransactionID: "old", ConsumerGroup: "billing", Error: "e", FailedAt: now.Add(-48 * time.Hour), Data: []byte(`1`)},
				sandbox.DeadLetter{Queue: "orders", Partition: "p", TransactionID: "new", ConsumerGroup: "shipping", Error: "e", FailedAt: now.Add(-time.Minute), Data: []byte(`2`)},
			)
			srv := httptest.NewServer(b.Handler())
			defer srv.Close()
			for _, queues := range [][]string{nil, {"orders"}} {
				res, err := gate.Check(context.Background(), testkit.Client(t, srv.URL), gate.Input{Policies: policies, Now: now, Queues: queues})
				if err != nil {
					t.Fatal(err)
				}
				s := scope(res, "orders", "billing")
				if res.OK || len(s.Breaches) == 0 || s.Owner != "team-billing" {
					t.Fatalf("--queue %v: ok %v, billing's scope %+v; scopes %+v", queues, res.OK, s, res.Scopes)
				}
			}
		})
	}
}

func hasBreach(s gate.Scope, k gate.BreachKind) bool {
	for _, b := range s.Breaches {
		if b.Kind == k {
			return true
		}
	}
	return false
}
