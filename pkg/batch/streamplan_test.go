package batch_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// A dry run planned from the rows as they stream (holding no items) is
// the plan the items make: over the seeded DLQ (envelopes, several groups
// a message, a failed replay) and a filled one, for replays and discards,
// with holds in the ledger (counted, or left out by --skip-held), a path
// pinned by an earlier manual attempt, --limit, --to-queue, order or
// none, a generation cap, and on the released server (one body, no
// /retry).
func TestStreamedPlanIsTheItemsPlan(t *testing.T) {
	for _, old := range []bool{false, true} {
		_, url := seeded(t, func(b *sandbox.Broker) {
			b.Fill(3_000, 3)
			if old {
				b.SetLine(sandbox.Queen015)
			}
		})
		env := batch.Env{Client: testkit.Client(t, url), Ledger: testkit.OpenLedger(t, "sqlite://"+t.TempDir()+"/l.db"), Now: func() time.Time { return now }, User: "tester"}
		ctx := context.Background()
		hold := &ledger.Batch{Action: ledger.ActionHold, By: "ann", At: now, Why: "INC", Until: now.Add(time.Hour)}
		if n, err := batch.Decide(ctx, env, selection(t, deadletter.Selection{Class: "f47c6181"}), hold); err != nil || n == 0 {
			t.Fatalf("hold: %d %v", n, err)
		}
		pinJournal(t, env)
		for _, c := range []struct {
			action string
			sel    deadletter.Selection
			set    func(*batch.Request)
		}{
			{deadletter.Replay, deadletter.Selection{All: true}, nil},
			{deadletter.Replay, deadletter.Selection{All: true}, func(r *batch.Request) { r.SkipHeld = true }},
			{deadletter.Replay, deadletter.Selection{Queue: "orders"}, func(r *batch.Request) { r.Settings.Order = replay.OrderNone }},
			{deadletter.Replay, deadletter.Selection{All: true, Limit: 700}, func(r *batch.Request) { r.Settings.ToQueue = "recovery" }},
			{deadletter.Replay, deadletter.Selection{Queue: "payments"}, func(r *batch.Request) { r.Settings.MaxGeneration = 1 }},
			{deadletter.Discard, deadletter.Selection{All: true}, nil},
			{deadletter.Discard, deadletter.Selection{Queue: "notifications"}, func(r *batch.Request) { r.SkipHeld = true }},
		} {
			name := fmt.Sprintf("old=%v %s %s", old, c.action, c.sel.String())
			plan := func(planOnly bool) (replay.Plan, int, int) {
				req := request(c.action, selection(t, c.sel))
				if c.set != nil {
					c.set(&req)
				}
				req.PlanOnly = planOnly
				p, err := prepare(t, env, req)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if err := p.MakePlan(ctx); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				return p.Plan(), p.Messages(), p.SkippedHeld()
			}
			want, wantN, wantSkipped := plan(false)
			got, n, skipped := plan(true)
			if want.Addresses == 0 {
				t.Fatalf("%s: an empty plan checks nothing", name)
			}
			if n != wantN || skipped != wantSkipped || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: streamed plan (%d messages, %d skipped)\n%+v\nthe items' plan (%d, %d)\n%+v", name, n, skipped, got, wantN, wantSkipped, want)
			}
		}
	}
}

// pinJournal records a manual attempt on the DLQ's first address, as a
// run that died after its push leaves it: the plan says it keeps the
// manual path.
func pinJournal(t *testing.T, env batch.Env) {
	t.Helper()
	ctx := context.Background()
	var a deadletter.Address
	for r, err := range env.Client.Rows(ctx, client.ListQuery{Limit: 100, NoData: true}) {
		if err != nil {
			t.Fatal(err)
		}
		a = r.Address()
		break
	}
	ents, err := env.Ledger.Acquire(ctx, env.Client.Broker(), "earlier", ledger.ActionReplay, []deadletter.Address{a}, ledger.PlainEnrolments(1), "o", now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	e := ents[a]
	e.State, e.Via, e.ReplayTxID = ledger.Inflight, replay.ViaManual, replay.ReplayTxID(a, 1)
	if errs := env.Ledger.SaveMany(ctx, []ledger.SaveItem{{Entry: e, Release: true}}, "o", now); errs[0] != nil {
		t.Fatal(errs[0])
	}
}

// A queue with more consumer groups than a streamed plan's mask holds is
// planned from the items, and says the same.
func TestStreamedPlanFallsBackOnManyGroups(t *testing.T) {
	b := sandbox.New(func() time.Time { return now })
	var dls []sandbox.DeadLetter
	for i := range 300 {
		dls = append(dls, sandbox.DeadLetter{Queue: "wide", Partition: fmt.Sprint(i % 5), TransactionID: fmt.Sprintf("m-%d", i%40),
			ConsumerGroup: fmt.Sprintf("g%02d", i%70), Error: "boom", RetryCount: 1, FailedAt: now.Add(-time.Duration(i) * time.Second)})
	}
	b.AddDeadLetters(dls...)
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	env := batch.Env{Client: testkit.Client(t, srv.URL), Ledger: testkit.OpenLedger(t, "sqlite://"+t.TempDir()+"/l.db"), Now: func() time.Time { return now }, User: "tester"}
	ctx := context.Background()
	var plans [2]replay.Plan
	for i, planOnly := range []bool{false, true} {
		req := request(deadletter.Replay, selection(t, deadletter.Selection{Queue: "wide"}))
		req.PlanOnly = planOnly
		p, err := prepare(t, env, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.MakePlan(ctx); err != nil {
			t.Fatal(err)
		}
		plans[i] = p.Plan()
	}
	if plans[0].Addresses != 40 || plans[0].Rows != 300 || !reflect.DeepEqual(plans[0], plans[1]) {
		t.Fatalf("plans differ or miss:\n%+v\n%+v", plans[0], plans[1])
	}
}
