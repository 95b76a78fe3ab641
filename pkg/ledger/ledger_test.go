package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

var t0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

func addr(i int) deadletter.Address {
	return deadletter.Address{PartitionID: "6f1c0000-0000-5000-8000-000000000001", TransactionID: fmt.Sprintf("order:%d", i)}
}

func items(n int) []ledger.ManifestItem {
	out := make([]ledger.ManifestItem, n)
	for i := range out {
		out[i] = ledger.ManifestItem{Address: addr(i), Queue: "orders", Partition: "p1", Groups: []string{"billing"},
			Error: fmt.Sprintf("order %d not found", i), RetryCount: 3, FailedAt: t0.Add(-time.Duration(i) * time.Minute),
			Payload: json.RawMessage(fmt.Sprintf(`{"orderId":%d}`, i))}
	}
	return out
}

func TestMigrateAndReopen(t *testing.T) {
	for _, l := range testkit.Ledgers(t) {
		t.Run(l.Name, func(t *testing.T) {
			ctx := context.Background()
			s, err := ledger.Open(ctx, l.DSN)
			if err != nil {
				t.Fatal(err)
			}
			b := &ledger.Batch{Broker: "http://b", Action: ledger.ActionHold, By: "ann", At: t0, Why: "looking", Until: t0.Add(time.Hour)}
			if err := s.CreateBatch(ctx, b, items(3)); err != nil {
				t.Fatal(err)
			}
			s.Close()
			s, err = ledger.Open(ctx, l.DSN) // re-open: no migration runs twice
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			got, err := s.Batch(ctx, b.ID[:10])
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != b.ID || got.Size != 3 || got.By != "ann" || !got.Until.Equal(t0.Add(time.Hour)) || got.Status != ledger.StatusRecorded {
				t.Fatalf("batch after re-open = %+v", got)
			}
			var v int
			if err := s.DB().QueryRow(`SELECT version FROM dlqctl_schema`).Scan(&v); err != nil || v != ledger.SchemaVersion {
				t.Fatalf("schema version %d, %v; want %d", v, err, ledger.SchemaVersion)
			}
			// A ledger written by a newer dlqctl is refused.
			if _, err := s.DB().Exec(`UPDATE dlqctl_schema SET version = 99`); err != nil {
				t.Fatal(err)
			}
			_, err = ledger.Open(ctx, l.DSN)
			if !errors.Is(err, ledger.ErrBadDSN) || !strings.Contains(err.Error(), "newer than this dlqctl") {
				t.Fatalf("newer schema: err = %v", err)
			}
		})
	}
}

func TestDecideManifestAndDecisions(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, _ string) {
		ctx := context.Background()
		hold := &ledger.Batch{Broker: "http://prod", Action: ledger.ActionHold, By: "ann", At: t0, Why: "investigating", Until: t0.Add(2 * time.Hour), Owner: "team-billing"}
		if err := s.CreateBatch(ctx, hold, items(5)); err != nil {
			t.Fatal(err)
		}
		rp := &ledger.Batch{Broker: "http://prod", Action: ledger.ActionReplay, By: "bob", At: t0.Add(time.Minute), Why: "fixed"}
		if err := s.CreateBatch(ctx, rp, items(2)); err != nil {
			t.Fatal(err)
		}
		// The same partition id on another broker is another message.
		other := &ledger.Batch{Broker: "http://staging", Action: ledger.ActionDiscard, By: "cy", At: t0.Add(2 * time.Minute), Why: "test data"}
		if err := s.CreateBatch(ctx, other, items(5)); err != nil {
			t.Fatal(err)
		}
		man, err := s.Manifest(ctx, hold.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(man) != 5 || man[4].Address != addr(4) || string(man[4].Payload) != `{"orderId":4}` || man[4].Groups[0] != "billing" || !man[4].FailedAt.Equal(t0.Add(-4*time.Minute)) {
			t.Fatalf("manifest = %+v", man)
		}
		dec, err := s.LatestDecisions(ctx, "http://prod")
		if err != nil {
			t.Fatal(err)
		}
		if len(dec) != 5 || dec[addr(0)].Action != ledger.ActionReplay || dec[addr(4)].Action != ledger.ActionHold {
			t.Fatalf("latest decisions = %+v", dec)
		}
		if !dec[addr(4)].Active(t0.Add(time.Hour)) || dec[addr(4)].Active(t0.Add(3*time.Hour)) {
			t.Fatal("a hold must be active until its until, and only then")
		}
		hist, err := s.DecisionsFor(ctx, "http://prod", addr(1))
		if err != nil || len(hist) != 2 || hist[0].Action != ledger.ActionHold || hist[1].By != "bob" {
			t.Fatalf("history = %+v, %v", hist, err)
		}
		bs, err := s.Batches(ctx, ledger.BatchFilter{Broker: "http://prod"})
		if err != nil || len(bs) != 2 || bs[0].ID != rp.ID {
			t.Fatalf("batches = %+v, %v", bs, err)
		}
		au, err := s.AuditFor(ctx, rp.ID)
		if err != nil || len(au) != 1 || au[0].Kind != "decided" {
			t.Fatalf("audit = %+v, %v", au, err)
		}
		if _, err := s.Batch(ctx, "nope"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("missing batch: %v", err)
		}
	})
}

func TestCreateBatchIsAtomic(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, _ string) {
		ctx := context.Background()
		its := items(3)
		its = append(its, its[0]) // a duplicate address violates the key mid-way
		b := &ledger.Batch{Broker: "http://b", Action: ledger.ActionReplay, By: "x", At: t0, Why: "w"}
		if err := s.CreateBatch(ctx, b, its); err == nil {
			t.Fatal("want an error for a duplicate manifest address")
		}
		bs, err := s.Batches(ctx, ledger.BatchFilter{})
		if err != nil || len(bs) != 0 {
			t.Fatalf("a failed CreateBatch left %d batches (%v)", len(bs), err)
		}
	})
}

// A manifest is read a range of positions at a time (a resume stages it
// so), the last range short; a batch written from a reader that fails
// records nothing.
func TestManifestByPosition(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, _ string) {
		ctx := context.Background()
		its := items(1200)
		for i := range its {
			its[i].Partition = fmt.Sprintf("p%d", i%7)
		}
		b := &ledger.Batch{Broker: "http://b", Action: ledger.ActionReplay, By: "x", At: t0, Why: "w"}
		if err := s.CreateBatch(ctx, b, its); err != nil {
			t.Fatal(err)
		}
		other := &ledger.Batch{Broker: "http://b", Action: ledger.ActionReplay, By: "x", At: t0, Why: "w"}
		if err := s.CreateBatch(ctx, other, items(1300)[1200:]); err != nil {
			t.Fatal(err)
		}
		for _, r := range [][2]int{{0, 4}, {1000, 1200}, {1199, 1300}} {
			got, err := s.ManifestRange(ctx, b.ID, r[0], r[1])
			if err != nil {
				t.Fatal(err)
			}
			if want := min(r[1], 1200) - r[0]; len(got) != want {
				t.Fatalf("%d items in [%d, %d), want %d", len(got), r[0], r[1], want)
			}
			for k, m := range got {
				if p := r[0] + k; m.Address != its[p].Address || m.Partition != its[p].Partition || string(m.Payload) != string(its[p].Payload) {
					t.Fatalf("position %d: %+v, want %+v", p, m, its[p])
				}
			}
		}

		// A reader that fails half-way records nothing.
		broken := errors.New("the stage cannot be read")
		n := 0
		failing := &ledger.Batch{Broker: "http://b", Action: ledger.ActionReplay, By: "x", At: t0, Why: "w"}
		err := s.CreateBatchFrom(ctx, failing, 900, func() (ledger.ManifestItem, error) {
			n++
			if n > 450 {
				return ledger.ManifestItem{}, broken
			}
			return its[n-1], nil
		})
		if !errors.Is(err, broken) {
			t.Fatalf("err = %v, want the reader's", err)
		}
		if _, err := s.Batch(ctx, failing.ID); err == nil {
			t.Fatal("a batch whose manifest could not be read was recorded")
		}
	})
}

// InBatch finds which addresses a batch's manifest holds, a chunk at a
// time, on the broker the batch belongs to.
func TestInBatch(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, _ string) {
		ctx := context.Background()
		mine := &ledger.Batch{Broker: "http://b", Action: ledger.ActionReplay, By: "x", At: t0, Why: "w"}
		if err := s.CreateBatch(ctx, mine, items(500)); err != nil {
			t.Fatal(err)
		}
		other := &ledger.Batch{Broker: "http://b", Action: ledger.ActionReplay, By: "x", At: t0, Why: "w"}
		if err := s.CreateBatch(ctx, other, items(600)[500:]); err != nil {
			t.Fatal(err)
		}
		var ask []deadletter.Address
		for i := 0; i < 1100; i += 3 {
			ask = append(ask, addr(i))
		}
		got, err := s.InBatch(ctx, "http://b", mine.ID, ask)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range ask {
			var i int
			fmt.Sscanf(a.TransactionID, "order:%d", &i)
			if got[a] != (i < 500) {
				t.Fatalf("%s: in the batch %v, want %v", a, got[a], i < 500)
			}
		}
		if got, err := s.InBatch(ctx, "http://other", mine.ID, ask); err != nil || len(got) != 0 {
			t.Fatalf("another broker's addresses: %v %v", got, err)
		}
	})
}

// A listing that gives a row twice (offset paging over a DLQ that grew
// while it was read shifts a row onto the next page) archives it once,
// in one chunk or across two: PostgreSQL refuses an upsert that touches
// a row twice in one statement.
func TestArchiveRowListedTwice(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, _ string) {
		ctx := context.Background()
		a := s.NewArchiver("http://b", t0)
		row := deadletter.Row{ID: "1", PartitionID: "p-1", TransactionID: "t-1", Queue: "orders", ConsumerGroup: "billing", ErrorMessage: "boom", FailedAt: t0}
		for i := 0; i < 1500; i++ {
			r := row
			if i != 0 && i != 5 && i != 1200 { // 0 and 5 in one statement, 1200 in the next chunk
				r.TransactionID = fmt.Sprintf("t-%d", i+2)
			}
			if err := a.Add(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := s.ArchivedRows(ctx, "http://b", ledger.ArchiveFilter{})
		if err != nil || len(got) != 1500-2 {
			t.Fatalf("archived %d rows, %v; want %d", len(got), err, 1500-2)
		}
	})
}

func TestSyncMarksVanished(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, _ string) {
		ctx := context.Background()
		rows := func(ids ...int) []deadletter.Row {
			var out []deadletter.Row
			for _, i := range ids {
				a := addr(i)
				out = append(out, deadletter.Row{ID: fmt.Sprint(i), PartitionID: a.PartitionID, TransactionID: a.TransactionID, Queue: "orders",
					Partition: "p1", ConsumerGroup: "billing", ErrorMessage: "boom", RetryCount: 3, FailedAt: t0, Data: json.RawMessage(`{}`)})
			}
			return out
		}
		sync := func(at time.Time, rs []deadletter.Row) ledger.SyncResult {
			a := s.NewArchiver("http://b", at)
			for _, r := range rs {
				if err := a.Add(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			res, err := s.MarkGone(ctx, "http://b", "", at, at)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		sync(t0, rows(0, 1, 2, 3))
		// 1 was discarded with a recorded decision; 2 and 3 left behind our back.
		if err := s.CreateBatch(ctx, &ledger.Batch{Broker: "http://b", Action: ledger.ActionDiscard, By: "x", At: t0, Why: "w"}, items(2)[1:2]); err != nil {
			t.Fatal(err)
		}
		res := sync(t0.Add(time.Minute), rows(0))
		if res.Gone != 1 || res.Vanished != 2 {
			t.Fatalf("sync = %+v, want 1 gone with a decision and 2 vanished", res)
		}
		v, err := s.ArchivedRows(ctx, "http://b", ledger.ArchiveFilter{VanishedOnly: true})
		if err != nil || len(v) != 2 || v[0].GoneAt.IsZero() || !v[0].FirstSeen.Equal(t0) {
			t.Fatalf("vanished = %+v, %v", v, err)
		}
		// A row that comes back is no longer vanished.
		sync(t0.Add(2*time.Minute), rows(0, 2))
		v, _ = s.ArchivedRows(ctx, "http://b", ledger.ArchiveFilter{VanishedOnly: true})
		if len(v) != 1 || v[0].Address != addr(3) {
			t.Fatalf("after 2 came back, vanished = %+v", v)
		}
	})
}

func enroll(t *testing.T, s *ledger.Store, n int) []deadletter.Address {
	t.Helper()
	addrs := make([]deadletter.Address, n)
	gens := make([]int, n)
	for i := range addrs {
		addrs[i], gens[i] = addr(i), 1
	}
	enrollPending(t, s, "http://b", "batch", addrs, gens)
	return addrs
}

// enrollPending gives addresses a pending, unclaimed journal entry, as a
// run that reached them and was let go would have left them.
func enrollPending(t *testing.T, s *ledger.Store, broker, batchID string, addrs []deadletter.Address, gens []int) {
	t.Helper()
	ctx := context.Background()
	const owner = "otherhost:0:enroller"
	got, err := s.Acquire(ctx, broker, batchID, "replay", addrs, ledger.PlainEnrolments(gens...), owner, t0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ents := make([]*ledger.Entry, 0, len(got))
	for _, e := range got {
		ents = append(ents, e)
	}
	if err := s.Release(ctx, broker, ents, owner); err != nil {
		t.Fatal(err)
	}
}

func TestClaims(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, _ string) {
		ctx := context.Background()
		a := enroll(t, s, 1)[0]
		// Owners on another host are presumed alive until their lease ends.
		e, err := s.Claim(ctx, "http://b", a, "otherhost:1:x", t0, time.Minute)
		if err != nil || e.State != ledger.Pending {
			t.Fatalf("claim: %+v %v", e, err)
		}
		if _, err := s.Claim(ctx, "http://b", a, "otherhost:2:y", t0.Add(30*time.Second), time.Minute); !errors.Is(err, ledger.ErrClaimed) {
			t.Fatalf("second claim within the lease: %v", err)
		}
		e.State = ledger.Published
		if err := s.Save(ctx, e, "otherhost:2:y", t0, false); !errors.Is(err, ledger.ErrLostClaim) {
			t.Fatalf("save by a non-owner: %v", err)
		}
		// After the lease, the claim is taken over.
		e2, err := s.Claim(ctx, "http://b", a, "otherhost:2:y", t0.Add(2*time.Minute), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		e2.State, e2.ReplayTxID = ledger.Published, "dlqr-1-x"
		if err := s.Save(ctx, e2, "otherhost:2:y", t0, true); err != nil {
			t.Fatal(err)
		}
		// A dead process on this host loses its claim at once.
		host, _ := os.Hostname()
		if _, err := s.Claim(ctx, "http://b", a, host+":999999999:dead", t0, time.Hour); err != nil {
			t.Fatal(err)
		}
		got, err := s.Claim(ctx, "http://b", a, ledger.NewOwner("me"), t0, time.Hour)
		if err != nil || got.State != ledger.Published || got.ReplayTxID != "dlqr-1-x" {
			t.Fatalf("takeover from a dead owner: %+v %v", got, err)
		}
	})
}

// Acquire enrolls what the journal has never seen already claimed, keeps
// the state of what it has, leaves out what another live run holds, and
// among runs acquiring the same fresh addresses at once gives each
// address to one of them.
func TestAcquire(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, dsn string) {
		ctx := context.Background()
		addrs := make([]deadletter.Address, 6)
		gens := make([]int, 6)
		for i := range addrs {
			addrs[i], gens[i] = addr(i), 1
		}
		gens[5] = 3
		// 0 was replayed by an earlier batch; 1 is held by a live run elsewhere.
		enrollPending(t, s, "http://b", "old", addrs[:2], gens[:2])
		done, err := s.Claim(ctx, "http://b", addrs[0], "otherhost:1:x", t0, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		done.State, done.Outcome = ledger.Removed, "replayed"
		if err := s.Save(ctx, done, "otherhost:1:x", t0, true); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claim(ctx, "http://b", addrs[1], "otherhost:2:y", t0, time.Hour); err != nil {
			t.Fatal(err)
		}
		me := "otherhost:3:me"
		got, err := s.Acquire(ctx, "http://b", "new", "replay", addrs, ledger.PlainEnrolments(gens...), me, t0.Add(time.Second), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if e := got[addrs[0]]; e == nil || e.State != ledger.Removed || e.BatchID != "old" {
			t.Fatalf("an address with a journal: %+v, want it as the journal has it", e)
		}
		if got[addrs[1]] != nil {
			t.Fatalf("an address another live run holds was acquired: %+v", got[addrs[1]])
		}
		for _, a := range addrs[2:] {
			if e := got[a]; e == nil || e.State != ledger.Pending || e.BatchID != "new" {
				t.Fatalf("a fresh address: %+v, want it enrolled pending for the new batch", e)
			}
		}
		if got[addrs[5]].Generation != 3 {
			t.Fatalf("generation %d, want the one given", got[addrs[5]].Generation)
		}
		// Enrolled claimed: nobody else gets them, and our saves land.
		if _, err := s.Claim(ctx, "http://b", addrs[2], "otherhost:4:z", t0.Add(2*time.Second), time.Minute); !errors.Is(err, ledger.ErrClaimed) {
			t.Fatalf("a fresh address was not claimed: %v", err)
		}
		e := got[addrs[2]]
		e.State, e.Via, e.Attempts = ledger.Inflight, "endpoint", 1
		if err := s.Save(ctx, e, me, t0, false); err != nil {
			t.Fatal(err)
		}
		// A save that changes the attribution (back in the DLQ: the next
		// generation, another batch) writes it too.
		e.State, e.Generation, e.BatchID, e.Outcome = ledger.Removed, 2, "newer", "replayed"
		if err := s.Save(ctx, e, me, t0, true); err != nil {
			t.Fatal(err)
		}
		back, err := s.Entry(ctx, "http://b", addrs[2])
		if err != nil || back.State != ledger.Removed || back.Generation != 2 || back.BatchID != "newer" || back.Via != "endpoint" || back.Attempts != 1 || back.ClaimOwner != "" {
			t.Fatalf("read back %+v %v", back, err)
		}

		// Four runs acquiring the same fresh chunk at once.
		fresh := make([]deadletter.Address, 32)
		fgens := make([]int, 32)
		for i := range fresh {
			fresh[i], fgens[i] = addr(100+i), 1
		}
		var mu sync.Mutex
		holder := map[deadletter.Address]string{}
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			st := testkit.OpenLedger(t, dsn)
			owner := fmt.Sprintf("otherhost:%d:race", 10+w)
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := st.Acquire(ctx, "http://b", "race", "replay", fresh, ledger.PlainEnrolments(fgens...), owner, time.Now(), time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for a := range got {
					if prev, ok := holder[a]; ok {
						t.Errorf("%s acquired by %s and %s", a, prev, owner)
					}
					holder[a] = owner
				}
			}()
		}
		wg.Wait()
		if len(holder) != len(fresh) {
			t.Fatalf("%d of %d addresses acquired", len(holder), len(fresh))
		}
	})
}

// A manual replay's intent can be enrolled with the claim (inflight, via
// manual, the derived id and destination): what the journal holds is
// then what the run would write before its push (Holds). Released
// unattempted, such an address is pending again; an intent this claim
// did not write (a dead run's, taken over) is kept whatever happens.
func TestAcquireWithIntent(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, dsn string) {
		ctx := context.Background()
		// 0: a run whose lease has since run out enrolled it with its
		// intent and may have pushed it; 1 and 2 are fresh.
		dead := "deadhost:1:x"
		if _, err := s.Acquire(ctx, "http://b", "old", "replay", []deadletter.Address{addr(0)},
			[]ledger.Enrolment{{Generation: 1, ReplayTxID: "dlqr-1-aaa", ReplayQueue: "orders"}}, dead, t0, time.Minute); err != nil {
			t.Fatal(err)
		}
		me := "otherhost:3:me"
		addrs := []deadletter.Address{addr(0), addr(1), addr(2)}
		enrol := []ledger.Enrolment{
			{Generation: 1, ReplayTxID: "dlqr-1-aaa", ReplayQueue: "orders"},
			{Generation: 2, ReplayTxID: "dlqr-2-bbb", ReplayQueue: "orders"},
			{Generation: 1}, // not one to push: pending
		}
		got, err := s.Acquire(ctx, "http://b", "old", "replay", addrs, enrol, me, t0.Add(2*time.Minute), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range addrs[:2] {
			e := got[a]
			if e == nil || e.State != ledger.Inflight || e.Via != "manual" || e.ReplayTxID != enrol[i].ReplayTxID || e.ReplayQueue != "orders" || !e.Holds() {
				t.Fatalf("address %d: %+v, want the intent, held by the journal", i, e)
			}
			if stored, _ := s.Entry(ctx, "http://b", a); stored == nil || stored.State != ledger.Inflight || stored.ReplayTxID != enrol[i].ReplayTxID {
				t.Fatalf("address %d as stored: %+v", i, stored)
			}
		}
		if e := got[addrs[2]]; e == nil || e.State != ledger.Pending || e.ReplayTxID != "" {
			t.Fatalf("a plain enrolment: %+v", e)
		}
		// The run would write the same intent: nothing to wait for. A
		// changed destination is not held.
		e := got[addrs[1]]
		e.Attempts++
		if !e.Holds() {
			t.Fatal("an unchanged intent with one more attempt is not held")
		}
		e.ReplayQueue = "recovery"
		if e.Holds() {
			t.Fatal("a changed destination is held")
		}
		e.ReplayQueue, e.Attempts = "orders", 0
		if err := s.Release(ctx, "http://b", []*ledger.Entry{got[addrs[0]], got[addrs[1]], got[addrs[2]]}, me); err != nil {
			t.Fatal(err)
		}
		if e, _ := s.Entry(ctx, "http://b", addrs[0]); e.State != ledger.Inflight || e.ReplayTxID != "dlqr-1-aaa" || e.ClaimOwner != "" {
			t.Fatalf("a dead run's intent after release: %+v, want it kept", e)
		}
		if e, _ := s.Entry(ctx, "http://b", addrs[1]); e.State != ledger.Pending || e.ReplayTxID != "" || e.Via != "" || e.ReplayQueue != "" || e.ClaimOwner != "" {
			t.Fatalf("an intent enrolled ahead, released unattempted: %+v, want pending", e)
		}
	})
}

// TestConcurrentClaims races many claimers for the same addresses, the
// way two operators executing one batch do: no address may be held by two
// at once, and every address is finished exactly once.
func TestConcurrentClaims(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, dsn string) {
		rounds := 20
		if testing.Short() {
			rounds = 3
		}
		for round := 0; round < rounds; round++ {
			ctx := context.Background()
			broker := fmt.Sprintf("http://round-%d", round)
			const n = 40
			addrs := make([]deadletter.Address, n)
			gens := make([]int, n)
			for i := range addrs {
				addrs[i], gens[i] = addr(i), 1
			}
			enrollPending(t, s, broker, "b", addrs, gens)
			var mu sync.Mutex
			finished := map[deadletter.Address]string{}
			var wg sync.WaitGroup
			for w := 0; w < 4; w++ {
				// Each worker has its own connection pool, as a second
				// process would.
				st := testkit.OpenLedger(t, dsn)
				owner := fmt.Sprintf("otherhost:%d:w%d", w, round)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for _, a := range addrs {
						e, err := st.Claim(ctx, broker, a, owner, time.Now(), time.Minute)
						if errors.Is(err, ledger.ErrClaimed) {
							continue
						}
						if err != nil {
							t.Error(err)
							return
						}
						if e.State == ledger.Removed {
							if err := st.Save(ctx, e, owner, time.Now(), true); err != nil {
								t.Error(err)
							}
							continue
						}
						mu.Lock()
						if prev, ok := finished[a]; ok {
							t.Errorf("round %d: %s executed by %s and %s", round, a, prev, owner)
						}
						finished[a] = owner
						mu.Unlock()
						e.State = ledger.Removed
						if err := st.Save(ctx, e, owner, time.Now(), true); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			if len(finished) != n {
				t.Fatalf("round %d: %d of %d addresses finished", round, len(finished), n)
			}
		}
	})
}

// QueuesPending names the queues of holds in force and, for an action,
// of its batches recorded and not run; never those of a hold past its
// end, a cancelled batch, a batch that ran, another action's or another
// broker's.
func TestQueuesPending(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, _ string) {
		ctx := context.Background()
		in := func(q string, n int) []ledger.ManifestItem {
			its := items(n)
			for i := range its {
				its[i].Queue = q
				its[i].Address.TransactionID = q + its[i].Address.TransactionID
			}
			return its
		}
		record := func(b *ledger.Batch, q string) *ledger.Batch {
			t.Helper()
			b.Broker, b.By, b.Why = "http://prod", "ann", "x"
			if err := s.CreateBatch(ctx, b, in(q, 2)); err != nil {
				t.Fatal(err)
			}
			return b
		}
		record(&ledger.Batch{Action: ledger.ActionHold, At: t0, Until: t0.Add(2 * time.Hour)}, "held")
		record(&ledger.Batch{Action: ledger.ActionHold, At: t0, Until: t0.Add(time.Minute)}, "hold-ended")
		cancelled := record(&ledger.Batch{Action: ledger.ActionHold, At: t0, Until: t0.Add(2 * time.Hour)}, "hold-cancelled")
		if _, err := s.CancelBatch(ctx, cancelled.ID, "bob", "wrong", t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		record(&ledger.Batch{Action: ledger.ActionReplay, At: t0}, "replay-recorded")
		ran := record(&ledger.Batch{Action: ledger.ActionReplay, At: t0}, "replay-done")
		if err := s.SetBatchStatus(ctx, ran.ID, ledger.StatusDone, t0, t0, nil); err != nil {
			t.Fatal(err)
		}
		record(&ledger.Batch{Action: ledger.ActionDiscard, At: t0}, "discard-recorded")
		other := &ledger.Batch{Broker: "http://staging", Action: ledger.ActionHold, By: "cy", Why: "x", At: t0, Until: t0.Add(2 * time.Hour)}
		if err := s.CreateBatch(ctx, other, in("staging-held", 2)); err != nil {
			t.Fatal(err)
		}
		now := t0.Add(time.Hour)
		for action, want := range map[string][]string{
			ledger.ActionReplay:  {"held", "replay-recorded"},
			ledger.ActionDiscard: {"discard-recorded", "held"},
			"":                   {"held"},
		} {
			got, err := s.QueuesPending(ctx, "http://prod", action, now)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Errorf("%q: %v, want %v", action, got, want)
			}
			for _, q := range want {
				if !got[q] {
					t.Errorf("%q: %v, want %v", action, got, want)
				}
			}
		}
	})
}
