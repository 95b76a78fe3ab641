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

// A batch staged on disk as its rows stream records the manifest (its
// items, their rows and payloads, in replay order) and the archive that
// the items held in memory record: over the seeded DLQ (envelopes the
// detail route decrypts, several groups a message), a filled one,
// ordered partitions whose ids are UUIDv7 and others whose are not, a
// message whose groups failed hours apart (its rows far apart in the
// list), holds (counted, or left out by --skip-held), --limit,
// --to-queue, no order, discards, and on the released server.
func TestStagedBatchIsTheItemsBatch(t *testing.T) {
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
		if n, err := batch.Decide(ctx, batch.Env{Client: cl, Ledger: holds}, selection(t, deadletter.Selection{Class: "f47c6181"}), hold); err != nil || n == 0 {
			t.Fatalf("hold: %d %v", n, err)
		}
		holdItems, err := holds.Manifest(ctx, hold.ID)
		if err != nil {
			t.Fatal(err)
		}
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
			{deadletter.Discard, deadletter.Selection{All: true}, nil},
			{deadletter.Discard, deadletter.Selection{Queue: "notifications"}, func(r *batch.Request) { r.SkipHeld = true }},
		} {
			name := fmt.Sprintf("old=%v %s %s", old, c.action, c.sel.String())
			record := func(staged bool) ([]ledger.ManifestItem, []ledger.Archived) {
				ld := testkit.OpenLedger(t, "sqlite://"+t.TempDir()+"/l.db")
				if err := ld.CreateBatch(ctx, &ledger.Batch{ID: hold.ID, Broker: cl.Broker(), Action: hold.Action, By: hold.By, At: hold.At, Why: hold.Why, Until: hold.Until}, holdItems); err != nil {
					t.Fatal(err)
				}
				env := batch.Env{Client: cl, Ledger: ld, Now: func() time.Time { return now }, User: "tester"}
				req := request(c.action, selection(t, c.sel))
				if c.set != nil {
					c.set(&req)
				}
				if !staged {
					batch.HoldInMemory(&req)
				}
				p, err := batch.Prepare(ctx, env, req)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				defer p.Close()
				if err := p.MakePlan(ctx); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if p.Staged() != staged {
					t.Fatalf("%s: staged %v, want %v", name, p.Staged(), staged)
				}
				id, err := p.RecordForTest(ctx)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				man, err := ld.Manifest(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				arch, err := ld.ArchivedRows(ctx, cl.Broker(), ledger.ArchiveFilter{})
				if err != nil {
					t.Fatal(err)
				}
				return man, arch
			}
			wantMan, wantArch := record(false)
			gotMan, gotArch := record(true)
			if len(wantMan) < 30 {
				t.Fatalf("%s: a manifest of %d checks little", name, len(wantMan))
			}
			if len(gotMan) != len(wantMan) {
				t.Fatalf("%s: staged manifest of %d items, the items' %d", name, len(gotMan), len(wantMan))
			}
			for i := range wantMan {
				if !reflect.DeepEqual(gotMan[i], wantMan[i]) {
					t.Fatalf("%s: manifest item %d:\nstaged %+v\nitems  %+v", name, i, gotMan[i], wantMan[i])
				}
			}
			if !reflect.DeepEqual(gotArch, wantArch) {
				t.Fatalf("%s: the archives differ (%d rows staged, %d from the items)", name, len(gotArch), len(wantArch))
			}
		}
	}
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
// growth, and a fresh selection planned from the rows kept within 80 MiB
// of what the process held (the screen's rows, here 64 MiB), under the
// user's own GOMEMLIMIT; a list of addresses, held in memory, is not
// limited. Closing the batch gives the settings back.
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
		{deadletter.Selection{Addresses: []deadletter.Address{first.Address()}}, 1 << 40, 1 << 40},
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
