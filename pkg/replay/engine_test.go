package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

type rig struct {
	b     *sandbox.Broker
	c     *client.Client
	store *ledger.Store
	orig  map[string]deadletter.Address // payload -> address, for the originals
	undec map[deadletter.Address]bool
}

func newRig(t *testing.T, n int, dsn string) *rig {
	t.Helper()
	b, url := testkit.Sandbox(t)
	b.Fill(n, 11)
	if dsn == "" {
		dsn = "sqlite://" + filepath.Join(t.TempDir(), "l.db")
	}
	r := &rig{b: b, c: testkit.Client(t, url), store: testkit.OpenLedger(t, dsn), orig: map[string]deadletter.Address{}, undec: map[deadletter.Address]bool{}}
	// The books before: each message's payload is unique, so a live
	// message can be traced back to the dead letter it replays.
	for _, row := range b.DeadLetterRows() {
		a := deadletter.Address{PartitionID: row.PartitionID, TransactionID: row.TransactionID}
		r.orig[string(row.Payload)] = a
	}
	sel := &deadletter.Selection{All: true}
	sel.Compile()
	items, err := testkit.Snapshot(context.Background(), r.c, sel, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Undecryptable() {
			r.undec[it.Address] = true
		}
	}
	return r
}

func (r *rig) items(t *testing.T) []replay.Item {
	sel := &deadletter.Selection{All: true}
	sel.Compile()
	items, err := testkit.Snapshot(context.Background(), r.c, sel, 100)
	if err != nil {
		t.Fatal(err)
	}
	return items
}

func (r *rig) run(t *testing.T, batch string, items []replay.Item, fresh bool, mod func(*replay.Options)) *replay.Report {
	t.Helper()
	o := replay.Options{Order: replay.OrderNone, Action: deadletter.Replay, Broker: r.c.Server(), BatchID: batch, Owner: ledger.NewOwner(batch),
		Concurrency: 4, Sleep: func(context.Context, time.Duration) error { return nil }}
	if mod != nil {
		mod(&o)
	}
	rep, err := replay.NewEngine(r.c, r.store, o).Run(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Accounted() != rep.Total {
		t.Fatalf("the report accounts for %d of %d addresses: %+v", rep.Accounted(), rep.Total, rep.Outcome())
	}
	return rep
}

// finished reports whether a run carried out every address but the
// undecryptable envelopes, which are never replayed.
func finished(rep *replay.Report) bool {
	c := *rep
	c.SkippedEncrypted = 0
	return c.Clean()
}

// assertExactlyOnce checks the broker's books: every original dead letter
// that could be replayed exists exactly once as a live message, and the
// DLQ holds nothing but the undecryptable ones.
func (r *rig) assertExactlyOnce(t *testing.T) {
	t.Helper()
	count := map[deadletter.Address]int{}
	for _, m := range r.b.LiveMessages() {
		a, ok := r.orig[string(m.Payload)]
		if !ok {
			t.Fatalf("live message %s has a payload no dead letter had: %s", m.TransactionID, m.Payload)
		}
		count[a]++
	}
	for _, a := range r.orig {
		want := 1
		if r.undec[a] {
			want = 0
		}
		if count[a] != want {
			t.Errorf("%s published %d times, want %d", a, count[a], want)
		}
	}
	for _, row := range r.b.DeadLetterRows() {
		if !r.undec[deadletter.Address{PartitionID: row.PartitionID, TransactionID: row.TransactionID}] {
			t.Errorf("%s/%s still dead-lettered", row.PartitionID, row.TransactionID)
		}
	}
}

// resume runs the recorded batch again until it is clean.
func (r *rig) resumeUntilClean(t *testing.T, batch string, items []replay.Item, mod func(*replay.Options)) {
	t.Helper()
	for i := 0; i < 12; i++ {
		rep := r.run(t, batch, items, false, mod)
		if finished(rep) {
			return
		}
	}
	t.Fatal("the batch never finished cleanly")
}

func TestReplayExactlyOnceUnderFaults(t *testing.T) {
	cases := []struct {
		name   string
		via    string
		line   sandbox.Line
		faults sandbox.Faults
	}{
		{"endpoint clean", replay.ViaAuto, sandbox.Queen15, sandbox.Faults{}},
		{"manual clean", replay.ViaManual, sandbox.Queen15, sandbox.Faults{}},
		{"endpoint 503s", replay.ViaAuto, sandbox.Queen15, sandbox.Faults{Fail503Every: 3}},
		{"manual 503s", replay.ViaManual, sandbox.Queen15, sandbox.Faults{Fail503Every: 3}},
		{"endpoint cut after apply", replay.ViaEndpoint, sandbox.Queen15, sandbox.Faults{CutEvery: 4}},
		{"manual cut after apply", replay.ViaManual, sandbox.Queen15, sandbox.Faults{CutEvery: 4}},
		{"endpoint row kept", replay.ViaAuto, sandbox.Queen15, sandbox.Faults{RowKeptEvery: 3}},
		{"manual everything", replay.ViaManual, sandbox.Queen15, sandbox.Faults{Fail503Every: 5, CutEvery: 3}},
		{"old server auto", replay.ViaAuto, sandbox.Queen015, sandbox.Faults{}},
		{"old server faults", replay.ViaAuto, sandbox.Queen015, sandbox.Faults{Fail503Every: 4, CutEvery: 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, 120, "")
			r.b.SetLine(c.line)
			items := r.items(t)
			r.b.SetFaults(c.faults)
			mod := func(o *replay.Options) { o.Via = c.via }
			r.run(t, "b1", items, true, mod)
			r.resumeUntilClean(t, "b1", items, mod)
			r.assertExactlyOnce(t)
			// Running the same replay again publishes nothing.
			r.b.ResetCalls()
			again := r.items(t)
			rep := r.run(t, "b2", again, true, mod)
			calls := r.b.Calls()
			if calls["POST /api/v1/push"]+calls["POST /api/v1/messages/retry"] != 0 {
				t.Fatalf("second run published: %v (report %+v)", calls, rep)
			}
		})
	}
}

// A lost answer from /retry with the row still present cannot be told
// apart from a push that never happened: it is reported unknown and left
// for a human, never pushed twice.
func TestEndpointLostAnswerWithRowKeptIsUnknown(t *testing.T) {
	r := newRig(t, 30, "")
	items := r.items(t)
	r.b.SetFaults(sandbox.Faults{CutEvery: 1, RowKeptEvery: 1})
	rep := r.run(t, "b1", items, true, func(o *replay.Options) { o.Via = replay.ViaEndpoint })
	want := len(items) - len(r.undec)
	if rep.Unknown != want || rep.Replayed != 0 {
		t.Fatalf("report %+v, want %d unknown", rep, want)
	}
	r.b.SetFaults(sandbox.Faults{})
	rep = r.run(t, "b1", items, false, func(o *replay.Options) { o.Via = replay.ViaEndpoint })
	if rep.Unknown != want || len(r.b.LiveMessages()) != want {
		t.Fatalf("a re-run must not touch unknowns: %+v, live %d", rep, len(r.b.LiveMessages()))
	}
}

func TestUndecryptableIsNeverReplayed(t *testing.T) {
	for _, old := range []bool{false, true} {
		r := newRig(t, 200, "")
		if len(r.undec) == 0 {
			t.Fatal("the fill has no undecryptable row")
		}
		if old {
			r.b.SetLine(sandbox.Queen015)
		}
		rep := r.run(t, "b", r.items(t), true, nil)
		if rep.SkippedEncrypted != len(r.undec) {
			t.Fatalf("old=%v: skipped %d, want %d", old, rep.SkippedEncrypted, len(r.undec))
		}
		r.assertExactlyOnce(t)
		for _, m := range r.b.LiveMessages() {
			if deadletter.IsEnvelope(m.Payload) {
				t.Fatalf("old=%v: an envelope was published: %s", old, m.Payload)
			}
		}
	}
}

func TestTransformAndRecoveryQueue(t *testing.T) {
	r := newRig(t, 20, "")
	var items []replay.Item
	for _, it := range r.items(t) {
		if it.Queue == "orders" {
			items = append(items, it)
		}
	}
	rep := r.run(t, "b", items, true, func(o *replay.Options) {
		o.ToQueue = "orders-recovery"
		o.Transform = func(_ context.Context, in json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(strings.Replace(string(in), "{", `{"fixed":true,`, 1)), nil
		}
	})
	if rep.Replayed != len(items) {
		t.Fatalf("report %+v", rep)
	}
	for _, m := range r.b.LiveMessages() {
		if m.Queue != "orders-recovery" || !strings.Contains(string(m.Payload), `"fixed":true`) || !deadletter.IsReplayID(m.TransactionID) {
			t.Fatalf("live message %+v", m)
		}
	}
}

func TestGenerationCap(t *testing.T) {
	b, url := testkit.Sandbox(t)
	a := deadletter.Address{PartitionID: sandbox.PartitionID("orders", "1"), TransactionID: "order:1"}
	id3 := replay.ReplayTxID(a, 3)
	b.AddDeadLetters(
		sandbox.DeadLetter{Queue: "orders", Partition: "1", TransactionID: "order:1", ConsumerGroup: "g", Error: "x", FailedAt: time.Now(), Data: json.RawMessage(`{"a":1}`)},
		sandbox.DeadLetter{Queue: "orders", Partition: "1", TransactionID: id3, ConsumerGroup: "g", Error: "x", FailedAt: time.Now(), Data: json.RawMessage(`{"a":2}`)},
	)
	c := testkit.Client(t, url)
	sel := &deadletter.Selection{All: true}
	sel.Compile()
	items, _ := testkit.Snapshot(context.Background(), c, sel, 10)
	o := replay.Options{Order: replay.OrderNone, Action: deadletter.Replay, Broker: c.Server(), BatchID: "b", Owner: "o:1:x", MaxGeneration: 3, Via: replay.ViaManual}
	rep, err := replay.NewEngine(c, testkit.OpenLedger(t, "sqlite://"+filepath.Join(t.TempDir(), "l.db")), o).Run(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Replayed != 1 || rep.SkippedGeneration != 1 || b.Depth() != 1 {
		t.Fatalf("report %+v, depth %d", rep, b.Depth())
	}
	live := b.LiveMessages()
	if len(live) != 1 || live[0].TransactionID != replay.ReplayTxID(a, 1) {
		t.Fatalf("live = %+v", live)
	}
}

func TestCanaryStopsWhenReplaysFailAgain(t *testing.T) {
	r := newRig(t, 40, "")
	items := r.items(t)
	rep := r.run(t, "b", items, true, func(o *replay.Options) {
		o.Via, o.Canary, o.Concurrency = replay.ViaManual, 3, 1
		// The canary's consumers reject what they get: the sleep is when
		// it happens.
		o.Sleep = func(context.Context, time.Duration) error {
			for _, m := range r.b.LiveMessages() {
				r.b.FailAgain(m.Queue, m.TransactionID, "billing", "still broken")
			}
			return nil
		}
	})
	if !strings.Contains(rep.Stopped, "canary") || rep.Refailed == 0 || len(r.b.LiveMessages()) > 3 || rep.NotStarted != len(items)-3 {
		t.Fatalf("report %+v, live %d", rep, len(r.b.LiveMessages()))
	}
}

// concurrencyBroker wraps a broker and records the most calls in flight.
type concurrencyBroker struct {
	replay.Broker
	in, peak atomic.Int32
}

func (c *concurrencyBroker) track() func() {
	n := c.in.Add(1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			break
		}
	}
	time.Sleep(2 * time.Millisecond)
	return func() { c.in.Add(-1) }
}

func (c *concurrencyBroker) Push(ctx context.Context, items []client.PushItem) ([]client.PushResult, error) {
	defer c.track()()
	return c.Broker.Push(ctx, items)
}

func (c *concurrencyBroker) Deleted(ctx context.Context, a deadletter.Address) (int, error) {
	defer c.track()()
	return c.Broker.Deleted(ctx, a)
}

func TestConcurrencyNeverExceeded(t *testing.T) {
	r := newRig(t, 150, "")
	cb := &concurrencyBroker{Broker: r.c}
	o := replay.Options{Order: replay.OrderNone, Action: deadletter.Replay, Broker: r.c.Server(), BatchID: "b", Owner: "o:1:x", Concurrency: 3, Via: replay.ViaManual}
	rep, err := replay.NewEngine(cb, r.store, o).Run(context.Background(), r.items(t))
	if err != nil {
		t.Fatal(err)
	}
	if p := cb.peak.Load(); p > 3 || p < 2 {
		t.Fatalf("peak in flight %d with --concurrency 3", p)
	}
	if !rep.Clean() && rep.SkippedEncrypted == 0 {
		t.Fatalf("report %+v", rep)
	}
}

// Two runs of one batch at once against one ledger: each address is
// published once. On PostgreSQL when configured, else SQLite.
func TestTwoRunnersOneBatch(t *testing.T) {
	for _, l := range testkit.Ledgers(t) {
		t.Run(l.Name, func(t *testing.T) {
			for round := 0; round < 5; round++ {
				r := newRig(t, 80, l.DSN)
				items := r.items(t)
				// The broker keeps every row after /retry, so two runners
				// that both got an address would both publish it: only the
				// claims keep this exactly once.
				r.b.SetFaults(sandbox.Faults{RowKeptEvery: 1})
				batch := fmt.Sprintf("b%d", round)
				var wg sync.WaitGroup
				for w := 0; w < 2; w++ {
					store := testkit.OpenLedger(t, l.DSN)
					wg.Add(1)
					go func() {
						defer wg.Done()
						o := replay.Options{Order: replay.OrderNone, Action: deadletter.Replay, Broker: r.c.Server(), BatchID: batch, Owner: fmt.Sprintf("otherhost:%d:w", w),
							Concurrency: 4, Via: replay.ViaAuto}
						if _, err := replay.NewEngine(r.c, store, o).Run(context.Background(), items); err != nil {
							t.Error(err)
						}
					}()
				}
				wg.Wait()
				r.assertExactlyOnce(t)
			}
		})
	}
}

// failingBroker makes every replayed message fail again at once, the way a
// consumer that is still broken would: the recovery-induced incident.
type failingBroker struct {
	replay.Broker
	sb *sandbox.Broker
}

func (f *failingBroker) Push(ctx context.Context, items []client.PushItem) ([]client.PushResult, error) {
	res, err := f.Broker.Push(ctx, items)
	if err == nil {
		for _, it := range items {
			f.sb.FailAgain(it.Queue, it.TransactionID, "billing", "still broken")
		}
	}
	return res, err
}

func TestMaxRefailuresPauses(t *testing.T) {
	r := newRig(t, 120, "")
	items := r.items(t)
	o := replay.Options{Order: replay.OrderNone, Action: deadletter.Replay, Broker: r.c.Server(), BatchID: "b", Owner: "o:1:x", Concurrency: 1,
		Via: replay.ViaManual, MaxRefailures: 5, RefailEvery: time.Nanosecond}
	rep, err := replay.NewEngine(&failingBroker{r.c, r.b}, r.store, o).Run(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Stopped, "the batch's limit of 5") || rep.StopNext != replay.RefailureLimitNext || rep.Refailed < 5 || rep.NotStarted == 0 || rep.Replayed > 10 {
		t.Fatalf("report %+v", rep)
	}
}

func TestMaxFailuresStops(t *testing.T) {
	r := newRig(t, 60, "")
	r.b.SetFaults(sandbox.Faults{Fail503Every: 1})
	rep := r.run(t, "b", r.items(t), true, func(o *replay.Options) { o.Via, o.Concurrency, o.MaxFailures = replay.ViaEndpoint, 1, 3 })
	if rep.Failed != 3 || !strings.Contains(rep.Stopped, "after 3 failure(s), the batch's limit") || rep.StopNext != replay.FailureLimitNext || rep.NotStarted == 0 {
		t.Fatalf("report %+v", rep)
	}
}

// savesSeen is a journal that counts the saves a worker waits for (an
// intent before a call, a published whose delete failed) apart from the
// final ones written behind.
type savesSeen struct {
	*ledger.Store
	waited, behind atomic.Int64
}

func (j *savesSeen) SaveMany(ctx context.Context, items []ledger.SaveItem, owner string, now time.Time) []error {
	for _, it := range items {
		if it.Release && it.Entry.State != ledger.Published {
			j.behind.Add(1)
		} else {
			j.waited.Add(1)
		}
	}
	return j.Store.SaveMany(ctx, items, owner, now)
}

// On the default path (manual) each address's intent is journaled with
// its claim, a chunk in one statement: no push waits for a journal write
// of its own, and each address's only other write is its outcome,
// written behind. A run interrupted midway gives back the intents of the
// addresses it claimed and never reached: they are pending again.
func TestManualIntentsRideWithTheClaims(t *testing.T) {
	for _, order := range []string{replay.OrderPartition, replay.OrderNone} {
		t.Run(order, func(t *testing.T) {
			r := newRig(t, 300, "")
			items, _ := testkit.Arrange(r.items(t), order, "")
			j := &savesSeen{Store: r.store}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			o := replay.Options{Order: order, Action: deadletter.Replay, Broker: r.c.Server(), BatchID: "b", Owner: ledger.NewOwner("b"),
				Concurrency: 4, Progress: func(done int) {
					if done == 120 {
						cancel()
					}
				}}
			rep, err := replay.NewEngine(r.c, j, o).Run(ctx, items)
			if err != nil || !rep.Interrupted || rep.Replayed == 0 || rep.NotStarted == 0 {
				t.Fatalf("err %v, report %+v", err, rep.Outcome())
			}
			if j.waited.Load() != 0 || j.behind.Load() == 0 {
				t.Fatalf("%d saves waited for, %d written behind: want every intent written with its claim", j.waited.Load(), j.behind.Load())
			}
			ents, err := r.store.BatchEntries(context.Background(), "b")
			if err != nil {
				t.Fatal(err)
			}
			states := map[string]int{}
			for _, e := range ents {
				states[e.State]++
				if e.State == ledger.Pending && (e.ReplayTxID != "" || e.Via != "") || e.State == ledger.Inflight || e.ClaimOwner != "" {
					t.Fatalf("after the interrupt: %+v", e)
				}
			}
			if states[ledger.Removed] != rep.Replayed {
				t.Fatalf("journal %v, report %+v", states, rep.Outcome())
			}
			// Past the undecryptable envelopes, which hold back their partitions.
			r.resumeUntilClean(t, "b", items, func(o *replay.Options) { o.Order = replay.OrderSkipGaps })
			r.assertExactlyOnce(t)
		})
	}
}
