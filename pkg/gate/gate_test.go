package gate_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/gate"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/policy"
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
		t.Run(map[bool]string{false: "paging", true: "one-body"}[old], func(t *testing.T) { sourceAnswersAsTheWholeHistory(t, old) })
	}
}

func sourceAnswersAsTheWholeHistory(t *testing.T, old bool) {
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
		whole := checkAlike(t, cl, ld, policy.Set{{Queue: "*", Policy: policy.Policy{MaxAge: time.Hour, TriageSLO: 30 * time.Minute}}}, ld)
		decided := 0
		for _, x := range whole.Scopes {
			decided += x.DecidedNotCarriedOut
		}
		if decided == 0 {
			t.Fatal("no decision not carried out: the comparison says little")
		}
	})
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
		t.Run(line.String(), func(t *testing.T) {
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

// lookups counts the addresses a check looks up one by one; refuse makes
// it refuse to read the holds in force, as holds over too many addresses
// are.
type lookups struct {
	*ledger.Store
	refuse bool
	looked int
}

func (l *lookups) LatestDecisionsFor(ctx context.Context, broker string, addrs []deadletter.Address) (map[deadletter.Address]ledger.Decision, error) {
	l.looked += len(addrs)
	return l.Store.LatestDecisionsFor(ctx, broker, addrs)
}

func (l *lookups) HoldsInForce(ctx context.Context, broker string, now time.Time, most int, into *ledger.DecisionSet) (bool, error) {
	if l.refuse {
		most = 0
	}
	return l.Store.HoldsInForce(ctx, broker, now, most, into)
}

// A queue whose oldest rows are held is read to its oldest row not held
// with the holds in force read once, not with a lookup a page: the answer
// is the one every decision in memory gives, and the one the lookups give
// when the holds name too many addresses to read. Holds renewed (the
// expired one behind the one in force) and a replay decided since on some
// held addresses (no longer held) are in it.
func TestHeldRowsAreJudgedByTheHoldsInForce(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, ld *ledger.Store, _ string) {
		b, cl := seeded(t, false)
		ctx := context.Background()
		byQueue := map[string][]sandbox.Row{}
		for _, r := range b.DeadLetterRows() {
			byQueue[r.Queue] = append(byQueue[r.Queue], r)
		}
		var held, replayed []ledger.ManifestItem
		seen := map[deadletter.Address]bool{}
		for _, rows := range byQueue {
			slices.SortFunc(rows, func(x, y sandbox.Row) int { return x.FailedAt.Compare(y.FailedAt) })
			for i, r := range rows[:len(rows)*3/4] { // the oldest three quarters of each queue
				a := deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}
				if seen[a] {
					continue
				}
				seen[a] = true
				it := ledger.ManifestItem{Address: a, Queue: r.Queue, FailedAt: r.FailedAt}
				held = append(held, it)
				if i%7 == 3 {
					replayed = append(replayed, it)
				}
			}
		}
		for _, bt := range []struct {
			b     *ledger.Batch
			items []ledger.ManifestItem
		}{
			{&ledger.Batch{Broker: cl.Broker(), Action: ledger.ActionHold, By: "ann", At: now.Add(-50 * time.Hour), Why: "w", Until: now.Add(-26 * time.Hour)}, held},
			{&ledger.Batch{Broker: cl.Broker(), Action: ledger.ActionHold, By: "ann", At: now.Add(-26 * time.Hour), Why: "renewed", Until: now.Add(time.Hour)}, held},
			{&ledger.Batch{Broker: cl.Broker(), Action: ledger.ActionReplay, By: "bob", At: now.Add(-time.Hour), Why: "fixed"}, replayed},
		} {
			if err := ld.CreateBatch(ctx, bt.b, bt.items); err != nil {
				t.Fatal(err)
			}
		}
		known, refused := &lookups{Store: ld}, &lookups{Store: ld, refuse: true}
		whole := checkAlike(t, cl, ld, policy.Set{{Queue: "*", Policy: policy.Policy{MaxAge: time.Hour}}}, known, refused)
		heldOldest := 0
		for _, s := range whole.Scopes {
			if s.OldestHeld {
				heldOldest++
			}
		}
		if heldOldest == 0 || refused.looked < len(held)/2 {
			t.Fatalf("%d scopes with their oldest row held, %d addresses looked up row by row: the comparison says little", heldOldest, refused.looked)
		}
		// The seed's DLQ is read whole (one request is cheaper than
		// probing): each row is looked up once, with its chunk, whether
		// the holds in force were read or not. Reading them never costs
		// lookups.
		if known.looked > refused.looked {
			t.Fatalf("%d addresses looked up row by row with the holds in force read, %d without", known.looked, refused.looked)
		}
	})
}

// checkAlike checks with every decision of ld in memory and then with
// each source, and fails unless they judge every scope alike; it returns
// the check from memory.
func checkAlike(t *testing.T, cl *client.Client, ld *ledger.Store, policies policy.Set, sources ...gate.DecisionSource) *gate.Result {
	t.Helper()
	ctx := context.Background()
	dec, err := ld.LatestDecisions(ctx, cl.Broker())
	if err != nil {
		t.Fatal(err)
	}
	want, err := gate.Check(ctx, cl, gate.Input{Policies: policies, Decisions: dec, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range sources {
		got, err := gate.Check(ctx, cl, gate.Input{Policies: policies, Source: src, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		sameScopes(t, want, got)
	}
	return want
}

// sameScopes fails unless two checks judged every scope alike.
func sameScopes(t *testing.T, want, got *gate.Result) {
	t.Helper()
	if len(want.Scopes) != len(got.Scopes) {
		t.Fatalf("%d scopes vs %d", len(want.Scopes), len(got.Scopes))
	}
	for i, x := range want.Scopes {
		y := got.Scopes[i]
		if x.Queue != y.Queue || x.ConsumerGroup != y.ConsumerGroup || x.UndecidedPastSLO != y.UndecidedPastSLO || x.DecidedNotCarriedOut != y.DecidedNotCarriedOut ||
			x.OldestHeld != y.OldestHeld || !x.OldestUnheldFailedAt.Equal(y.OldestUnheldFailedAt) || !reflect.DeepEqual(x.Breaches, y.Breaches) {
			t.Fatalf("scope %s/%s\nwant %+v\ngot  %+v", x.Queue, x.ConsumerGroup, x, y)
		}
	}
}

// Evaluate judges against the ledger as dlq check and the triage screen
// do: a held scope is held, and a ledger created where one with history
// was says so in the notes.
func TestEvaluateReadsTheLedger(t *testing.T) {
	_, cl := seeded(t, false)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "l.db")
	policies := policy.Set{{Queue: "*", Policy: policy.Policy{MaxAge: time.Minute, TriageSLO: time.Minute}}}
	first, err := ledger.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	var held []ledger.ManifestItem
	seen := map[deadletter.Address]bool{}
	for r, err := range cl.Rows(ctx, client.ListQuery{Queue: "payments"}) {
		if err != nil {
			t.Fatal(err)
		}
		if a := r.Address(); !seen[a] {
			seen[a] = true
			held = append(held, ledger.ManifestItem{Address: a, Queue: r.Queue, FailedAt: r.FailedAt})
		}
	}
	if err := first.CreateBatch(ctx, &ledger.Batch{Broker: cl.Broker(), Action: ledger.ActionHold, By: "x", At: now, Why: "w", Until: now.Add(time.Hour)}, held); err != nil {
		t.Fatal(err)
	}
	res, err := gate.Evaluate(ctx, cl, first, gate.Input{Policies: policies, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if s := scope(res, "payments", "ledger"); s.OldestHold == nil || len(res.Notes) != 0 {
		t.Fatalf("held scope: %+v, notes %q", s, res.Notes)
	}
	first.Close()
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		os.Remove(f)
	}
	anew := testkit.OpenLedger(t, "sqlite://"+path)
	res, err = gate.Evaluate(ctx, cl, anew, gate.Input{Policies: policies, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "was created anew") {
		t.Fatalf("a ledger made where one with history was: notes %q", res.Notes)
	}
}
