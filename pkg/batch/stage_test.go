package batch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
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

// Every kind of batch is staged, planned and recorded as the plainest
// reading of it says (testkit.Snapshot: the selection read into memory,
// each message widened to all its rows; the envelopes asked of the
// detail route; held messages left out by --skip-held; testkit.Arrange's
// replay order): its manifest item by item, its archive row by row, and
// the plan's figures. Over the seeded DLQ (envelopes the detail route
// decrypts, several groups a message), a filled one, ordered partitions
// whose ids are UUIDv7 and others whose are not, a message whose groups
// failed hours apart (its rows far apart in the list), with holds in the
// ledger and a path pinned by an earlier attempt; for --all, a queue, a
// failure class, a consumer group, an --error with a time filter (each
// choosing some rows of a message and not others), explicit addresses
// (one not dead-lettered), --limit, --to-queue, no order, --skip-held,
// discards, and on the released server (one body, no /retry).
func TestEveryBatchIsItsItems(t *testing.T) {
	for _, old := range []bool{false, true} {
		_, url := seeded(t, func(b *sandbox.Broker) {
			b.Fill(500, 3)
			b.FillChains(6, 40, 9)
			var far []sandbox.DeadLetter
			for i := range 30 {
				for g, ago := range []time.Duration{time.Minute, 3 * time.Hour} {
					far = append(far, sandbox.DeadLetter{Queue: "wide", Partition: fmt.Sprint(i % 4), TransactionID: fmt.Sprintf("far-%d", i),
						ConsumerGroup: fmt.Sprintf("g%d", g), Error: "boom " + fmt.Sprint(i), RetryCount: g + 1, FailedAt: now.Add(-ago - time.Duration(i)*time.Second),
						Data: json.RawMessage(fmt.Sprintf(`{"far":%d}`, i))})
				}
			}
			b.AddDeadLetters(far...)
			if old {
				b.SetLine(sandbox.Queen015)
			}
		})
		cl := testkit.Client(t, url)
		ctx := context.Background()
		holds := testkit.OpenLedger(t, "sqlite://"+t.TempDir()+"/h.db")
		hold := &ledger.Batch{Action: ledger.ActionHold, By: "ann", At: now, Why: "INC", Until: now.Add(time.Hour)}
		if d, err := batch.Decide(ctx, batch.Env{Client: cl, Ledger: holds, Now: time.Now}, selection(t, deadletter.Selection{Class: "f47c6181"}), hold); err != nil || d.Messages == 0 {
			t.Fatalf("hold: %+v %v", d, err)
		}
		holdItems, err := holds.Manifest(ctx, hold.ID)
		if err != nil {
			t.Fatal(err)
		}
		var some []deadletter.Address
		for r, err := range cl.Rows(ctx, client.ListQuery{Limit: 100, NoData: true}) {
			if err != nil {
				t.Fatal(err)
			}
			if len(some) < 60 && !slices.Contains(some, r.Address()) && len(r.PartitionID)%3 == 0 {
				some = append(some, r.Address())
			}
		}
		some = append(some, deadletter.Address{PartitionID: "p-none", TransactionID: "never-failed"})
		for _, c := range []struct {
			action string
			sel    deadletter.Selection
			set    func(*batch.Request)
		}{
			{deadletter.Replay, deadletter.Selection{All: true}, nil},
			{deadletter.Replay, deadletter.Selection{All: true}, func(r *batch.Request) { r.SkipHeld = true }},
			{deadletter.Replay, deadletter.Selection{All: true}, func(r *batch.Request) { r.Settings.Order = replay.OrderNone }},
			{deadletter.Replay, deadletter.Selection{All: true, Limit: 300}, func(r *batch.Request) { r.Settings.ToQueue = "recovery" }},
			{deadletter.Replay, deadletter.Selection{Queue: "wide"}, nil},
			{deadletter.Replay, deadletter.Selection{Class: "f47c6181"}, nil},
			{deadletter.Replay, deadletter.Selection{ConsumerGroup: "g1"}, nil},
			{deadletter.Replay, deadletter.Selection{Error: "boom|timeout", FailedAfter: now.Add(-2 * time.Hour)}, func(r *batch.Request) { r.Settings.MaxGeneration = 1 }},
			{deadletter.Replay, deadletter.Selection{Addresses: some}, nil},
			{deadletter.Discard, deadletter.Selection{All: true}, nil},
			{deadletter.Discard, deadletter.Selection{Queue: "notifications"}, func(r *batch.Request) { r.SkipHeld = true }},
			{deadletter.Discard, deadletter.Selection{ConsumerGroup: "g0"}, nil},
		} {
			name := fmt.Sprintf("old=%v %s %s", old, c.action, c.sel.String())
			ld := testkit.OpenLedger(t, "sqlite://"+t.TempDir()+"/l.db")
			if err := ld.CreateBatch(ctx, &ledger.Batch{ID: hold.ID, Broker: cl.Broker(), Action: hold.Action, By: hold.By, At: hold.At, Why: hold.Why, Until: hold.Until}, holdItems); err != nil {
				t.Fatal(err)
			}
			env := batch.Env{Client: cl, Ledger: ld, Now: func() time.Time { return now }, User: "tester"}
			pinJournal(t, env)
			req := request(c.action, selection(t, c.sel))
			if c.set != nil {
				c.set(&req)
			}
			want, plan := reference(t, env, req)
			if len(want) < 20 {
				t.Fatalf("%s: %d items check little", name, len(want))
			}
			p, err := prepare(t, env, req)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			pl, err := p.MakePlan(ctx)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got := figures(pl.Plan()); !reflect.DeepEqual(got, plan) {
				t.Fatalf("%s: the plan's figures\n%+v\nthe items'\n%+v", name, got, plan)
			}
			if c.sel.OnlyAddresses() && (len(p.Missing()) != 1 || p.Missing()[0].TransactionID != "never-failed") {
				t.Fatalf("%s: missing %v", name, p.Missing())
			}
			id, err := p.RecordForTest(ctx)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			man, err := ld.Manifest(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if len(man) != len(want) {
				t.Fatalf("%s: a manifest of %d items, the items are %d", name, len(man), len(want))
			}
			for i, it := range want {
				m := batch.ManifestItemOf(it)
				if !reflect.DeepEqual(man[i], m) {
					t.Fatalf("%s: manifest item %d:\nstaged %+v\nitems  %+v", name, i, man[i], m)
				}
			}
			arch, err := ld.ArchivedRows(ctx, cl.Broker(), ledger.ArchiveFilter{})
			if err != nil {
				t.Fatal(err)
			}
			var gotRows, wantRows []string
			for _, a := range arch {
				gotRows = append(gotRows, fmt.Sprintf("%s %s %s %s", a.Address, a.ConsumerGroup, a.FailedAt.Format(time.RFC3339Nano), a.Payload))
			}
			for _, it := range want {
				for _, r := range it.AllRows() {
					gotData := it.Data()
					wantRows = append(wantRows, fmt.Sprintf("%s %s %s %s", it.Address, r.ConsumerGroup, r.FailedAt.Format(time.RFC3339Nano), gotData))
				}
			}
			slices.Sort(gotRows)
			slices.Sort(wantRows)
			if !slices.Equal(gotRows, wantRows) {
				t.Fatalf("%s: the archive's %d rows are not the items' %d", name, len(gotRows), len(wantRows))
			}
		}
	}
}

// planFigures are what a plan says of its items.
type planFigures struct {
	Addresses, Rows, NoCall, Undecryptable, OverGenCap, OtherGroups, Held, SkippedHeld, Pinned int
	ByQueue                                                                                    map[string]int
	ByClass                                                                                    []batch.ClassCount
	AlsoRemoves                                                                                []batch.AlsoRemoved
	Holds                                                                                      []batch.HoldShare
}

func figures(p batch.Plan) planFigures {
	return planFigures{p.Messages, p.Rows, p.NoCall, p.Undecryptable, p.OverGenCap, p.OtherGroups, p.Held, p.SkippedHeld, p.Pinned,
		p.ByQueue, p.ByClass, p.AlsoRemoves, p.Holds}
}

// reference is what a fresh batch of req holds, read the plainest way,
// in the order it runs, and its plan's figures.
func reference(t *testing.T, env batch.Env, req batch.Request) ([]replay.Item, planFigures) {
	t.Helper()
	ctx := context.Background()
	cl, ld := env.Client, env.Ledger
	items, err := testkit.Snapshot(ctx, cl, req.Selection, 500)
	if err != nil {
		t.Fatal(err)
	}
	for i := range items {
		it := &items[i]
		if req.Selection.OnlyAddresses() || it.Envelope() {
			m, err := cl.Get(ctx, it.Address)
			if err != nil {
				t.Fatal(err)
			}
			it.Payload, it.Checked = m.Payload, true
		}
	}
	addrs := make([]deadletter.Address, len(items))
	for i, it := range items {
		addrs[i] = it.Address
	}
	dec, err := ld.LatestDecisionsFor(ctx, cl.Broker(), addrs)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := ld.Entries(ctx, cl.Broker(), addrs)
	if err != nil {
		t.Fatal(err)
	}
	s := req.Settings
	pl := batch.NewPlanner(batch.PlanOptions{Action: req.Action, ToQueue: s.ToQueue, MaxGeneration: s.MaxGeneration})
	var kept []replay.Item
	skipped := 0
	for _, it := range items {
		var f batch.ItemFacts
		if d, ok := dec[it.Address]; ok && d.Holds(it.Newest().FailedAt, now) {
			if req.SkipHeld {
				skipped++
				continue
			}
			f.Hold = &batch.HoldShare{BatchID: d.BatchID, By: d.By, Until: d.Until, Why: d.Why}
		}
		e, ok := ents[it.Address]
		f.Pinned = ok && req.Action == deadletter.Replay && replay.Pinned(e)
		pl.Add(it, f)
		kept = append(kept, it)
	}
	if req.Action == deadletter.Replay {
		kept, _ = testkit.Arrange(kept, s.Order, s.ToQueue)
	}
	for i := range kept {
		for j := range kept[i].Rows {
			kept[i].Rows[j].Data = kept[i].Rows[0].Data // a message's rows carry its payload
		}
	}
	fig := figures(pl.Plan())
	fig.SkippedHeld = skipped
	return kept, fig
}

// An interrupt while the rows are staged is said as one (the command
// exits 130, "interrupted"), not as what the stage made of it, and
// records nothing.
func TestInterruptWhileStagingIsAnInterrupt(t *testing.T) {
	_, url := seeded(t, func(b *sandbox.Broker) { b.Fill(3_000, 5) })
	ld := testkit.OpenLedger(t, "sqlite://"+t.TempDir()+"/l.db")
	env := batch.Env{Client: testkit.Client(t, url), Ledger: ld, Now: func() time.Time { return now }, User: "tester"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sel := selection(t, deadletter.Selection{All: true})
	sel.WhereRows = func(ctx context.Context, rows iter.Seq2[deadletter.Row, error]) iter.Seq2[deadletter.Row, error] {
		return func(yield func(deadletter.Row, error) bool) {
			n := 0
			for r, err := range rows {
				if n++; n == 500 {
					// SIGINT, half-way through the list; the stage's
					// transaction is rolled back as the signal lands.
					cancel()
					time.Sleep(100 * time.Millisecond)
				}
				if !yield(r, err) {
					return
				}
			}
		}
	}
	req := request(deadletter.Replay, sel)
	p, err := batch.Prepare(ctx, env, req)
	if err == nil {
		p.Close()
		t.Fatal("an interrupted snapshot was planned")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the interrupt", err)
	}
	if bs, err := ld.Batches(context.Background(), ledger.BatchFilter{}); err != nil || len(bs) != 0 {
		t.Fatalf("%d batches recorded (%v)", len(bs), err)
	}
}

// Preparing a batch holds the collector's settings for it, whichever
// front end asks (the command line, the triage screen): half the default
// growth, and the heap kept within 80 MiB of what the process held (the
// screen's rows, here 64 MiB), under the user's own GOMEMLIMIT, for a
// selection and a list of addresses alike. Closing the batch gives the
// settings back.
func TestPrepareHoldsTheHeap(t *testing.T) {
	ctx := context.Background()
	_, env := world(t, "sqlite://"+t.TempDir()+"/l.db")
	settings := func() (int, int64) {
		gc := debug.SetGCPercent(100)
		debug.SetGCPercent(gc)
		return gc, debug.SetMemoryLimit(-1)
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(1 << 40)) // the user's GOMEMLIMIT
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	var first deadletter.Row
	for r, err := range env.Client.Rows(ctx, client.ListQuery{Limit: 10}) {
		if err != nil {
			t.Fatal(err)
		}
		first = r
		break
	}
	held := make([]byte, 64<<20) // what the screen holds
	runtime.GC()
	for _, c := range []struct {
		sel         deadletter.Selection
		least, most int64
	}{
		{deadletter.Selection{All: true}, (64 + 80) << 20, (64 + 80 + 16) << 20},
		{deadletter.Selection{Addresses: []deadletter.Address{first.Address()}}, (64 + 80) << 20, (64 + 80 + 16) << 20},
	} {
		p, err := batch.Prepare(ctx, env, request(deadletter.Replay, selection(t, c.sel)))
		if err != nil {
			t.Fatal(err)
		}
		if gc, limit := settings(); gc != 50 || limit < c.least || limit > c.most {
			t.Errorf("%s prepared: GOGC %d, memory limit %d MiB; want 50 and %d–%d MiB", c.sel.String(), gc, limit>>20, c.least>>20, c.most>>20)
		}
		p.Close()
		if gc, limit := settings(); gc != 100 || limit != 1<<40 {
			t.Errorf("%s closed: GOGC %d, memory limit %d; want them back at 100 and %d", c.sel.String(), gc, limit, int64(1<<40))
		}
	}
	runtime.KeepAlive(held)
	// The user's own limit, lower, stands.
	debug.SetMemoryLimit(100 << 20)
	p, err := batch.Prepare(ctx, env, request(deadletter.Replay, selection(t, deadletter.Selection{All: true})))
	if err != nil {
		t.Fatal(err)
	}
	if _, limit := settings(); limit != 100<<20 {
		t.Errorf("under GOMEMLIMIT=100MiB: memory limit %d MiB", limit>>20)
	}
	p.Close()
}
