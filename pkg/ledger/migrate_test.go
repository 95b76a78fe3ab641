package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

func TestBadLedgers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.db")
	os.WriteFile(corrupt, []byte(strings.Repeat("not a database at all ", 200)), 0o600)
	foreign := filepath.Join(dir, "foreign.db")
	if s, err := ledger.Open(ctx, "sqlite://"+foreign); err == nil {
		s.DB().Exec(`DROP TABLE dlqctl_schema`)
		s.DB().Exec(`DROP TABLE batch_items`)
		s.Close()
	}
	for _, c := range []struct {
		name, dsn string
		want      error
		says      string
	}{
		{"unknown scheme", "mysql://x", ledger.ErrBadDSN, "unknown ledger scheme"},
		{"empty sqlite path", "sqlite://", ledger.ErrBadDSN, "names no absolute path"},
		{"relative sqlite path", "sqlite://ledger.db", ledger.ErrBadDSN, "names no absolute path"},
		{"sqlite without slashes", "sqlite:rel.db", ledger.ErrBadDSN, "not an absolute path"},
		{"file URI", "file:x.db", ledger.ErrBadDSN, "not an absolute path"},
		{"relative bare path", "ledger.db", ledger.ErrBadDSN, "not an absolute path"},
		{"blank", " ", ledger.ErrBadDSN, "empty"},
		{"libpq keywords", "host=db user=dlq password=hunter2 dbname=dlq", ledger.ErrBadDSN, "libpq keyword DSN"},
		{"corrupt sqlite", "sqlite://" + corrupt, ledger.ErrBadDSN, "not a SQLite database"},
		{"not a ledger", "sqlite://" + foreign, ledger.ErrBadDSN, "not a dlqctl ledger"},
		{"unopenable sqlite", "sqlite://" + corrupt + "/ledger.db", ledger.ErrUnavailable, "not a directory"},
		{"unreachable postgres", "postgres://dlqctl:hunter2@127.0.0.1:1/db?connect_timeout=2", ledger.ErrUnavailable, "connection refused"},
		{"password in the query", "postgres://dlqctl@127.0.0.1:1/db?password=hunter2&connect_timeout=2", ledger.ErrUnavailable, "connection refused"},
		{"malformed postgres", "postgres://dlqctl:hunter2@[::1/db", ledger.ErrBadDSN, "cannot read the PostgreSQL DSN"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Nothing may appear in the working directory: a typo must
			// not create a ledger wherever the command happens to run.
			t.Chdir(t.TempDir())
			_, err := ledger.Open(ctx, c.dsn)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("err = %v, want %v saying %q", err, c.want, c.says)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error leaks the password or spans lines: %q", err)
			}
			if left, _ := os.ReadDir("."); len(left) > 0 {
				t.Fatalf("%q created %s in the working directory", c.dsn, left[0].Name())
			}
		})
	}
	t.Run("read-only postgres", func(t *testing.T) {
		dsn := testkit.PostgresDSN(t)
		s := testkit.OpenLedger(t, dsn) // migrated by the owner
		s.DB().Exec(`DROP ROLE IF EXISTS dlqctl_ro`)
		if _, err := s.DB().Exec(`CREATE ROLE dlqctl_ro LOGIN PASSWORD 'ro-secret'`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.DB().Exec(`DROP OWNED BY dlqctl_ro`); s.DB().Exec(`DROP ROLE dlqctl_ro`) })
		var schema string
		s.DB().QueryRow(`SELECT current_schema()`).Scan(&schema)
		for _, q := range []string{`GRANT USAGE ON SCHEMA ` + schema + ` TO dlqctl_ro`, `GRANT SELECT ON ALL TABLES IN SCHEMA ` + schema + ` TO dlqctl_ro`} {
			if _, err := s.DB().Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		ro := strings.Replace(dsn, "postgres://postgres@", "postgres://dlqctl_ro:ro-secret@", 1)
		st, err := ledger.Open(ctx, ro)
		if err == nil {
			// Reading works; the first write is refused, clearly.
			err = st.CreateBatch(ctx, &ledger.Batch{Broker: "http://b", Action: ledger.ActionHold, By: "x", At: t0, Why: "w", Until: t0}, items(1))
			st.Close()
		}
		if !errors.Is(err, ledger.ErrBadDSN) || !strings.Contains(err.Error(), "not permitted") || strings.Contains(err.Error(), "ro-secret") {
			t.Fatalf("read-only ledger: %v", err)
		}
	})
}

// A ledger written by an older dlqctl files history under the URL as it
// was typed. Opened now, it is one broker's history however the URL was
// spelled: batches, journal, archive and audit under the broker's
// identity; of an address journaled under two spellings the entry that
// says more was done is kept.
func TestMigrationUnifiesBrokerSpellings(t *testing.T) {
	for _, l := range testkit.Ledgers(t) {
		t.Run(l.Name, func(t *testing.T) { migrateSpellings(t, l.DSN) })
	}
}

func migrateSpellings(t *testing.T, dsn string) {
	ctx := context.Background()
	old, err := ledger.OpenAtSchema(ctx, dsn, 2)
	if err != nil {
		t.Fatal(err)
	}
	ip, name := "http://127.0.0.1:6632", "http://LOCALHOST:6632/"
	exec := rawExec(t, old, dsn)
	// Two holds, one under each spelling, as the schema of version 2 has
	// them; addr(0) was replayed under one spelling and is pending under
	// the other.
	for _, b := range []struct {
		broker, id string
		n          int
	}{{ip, "b-ip", 2}, {name, "b-name", 3}} {
		exec(`INSERT INTO batches (id, broker, action, by_name, at, why, until_at, size) VALUES (?, ?, 'hold', 'x', '2026-11-30T03:00:00.000Z', 'w', '2026-11-30T04:00:00.000Z', ?)`, b.id, b.broker, b.n)
		for i := 0; i < b.n; i++ {
			a := addr(i + 10*len(b.id))
			exec(`INSERT INTO batch_items (batch_id, seq, broker, partition_id, transaction_id, queue, partition_name, groups, error, retry_count, failed_at)
				VALUES (?, ?, ?, ?, ?, 'orders', 'p1', '["billing"]', 'e', 3, '2026-11-30T02:00:00.000Z')`, b.id, i, b.broker, a.PartitionID, a.TransactionID)
		}
	}
	a := addr(0)
	exec(`INSERT INTO journal (broker, partition_id, transaction_id, state, batch_id, action, updated_at) VALUES (?, ?, ?, 'removed', 'b-ip', 'replay', '2026-11-30T02:00:00.000Z')`, ip, a.PartitionID, a.TransactionID)
	exec(`INSERT INTO journal (broker, partition_id, transaction_id, state, batch_id, action, updated_at) VALUES (?, ?, ?, 'pending', 'b-name', 'replay', '2026-11-30T02:30:00.000Z')`, name, a.PartitionID, a.TransactionID)
	for _, b := range []string{ip, name} {
		exec(`INSERT INTO archive (broker, partition_id, transaction_id, consumer_group, failed_at, queue, partition_name, error, retry_count, first_seen, last_seen)
			VALUES (?, ?, ?, 'billing', '2026-11-30T01:00:00.000Z', 'orders', 'p1', 'e', 3, '2026-11-30T01:00:00.000Z', '2026-11-30T01:00:00.000Z')`, b, a.PartitionID, a.TransactionID)
	}
	old.Close()

	s, err := ledger.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id, _ := deadletter.Identity(ip)
	if id != "http://localhost:6632" {
		t.Fatalf("identity %q", id)
	}
	bs, err := s.Batches(ctx, ledger.BatchFilter{Broker: id})
	if err != nil || len(bs) != 2 {
		t.Fatalf("batches under %s: %d (%v)", id, len(bs), err)
	}
	dec, err := s.LatestDecisions(ctx, id)
	if err != nil || len(dec) != 5 {
		t.Fatalf("decisions: %d (%v)", len(dec), err)
	}
	e, err := s.Entry(ctx, id, a)
	if err != nil || e == nil || e.State != ledger.Removed {
		t.Fatalf("journal of %s: %+v (%v): the removed entry must win", a, e, err)
	}
	rows, err := s.ArchivedRows(ctx, id, ledger.ArchiveFilter{Address: &a})
	if err != nil || len(rows) != 1 {
		t.Fatalf("archive: %d rows (%v)", len(rows), err)
	}
	for _, b := range []string{ip, name} {
		if has, _ := s.HasHistory(ctx, b); has {
			t.Fatalf("history left under %s", b)
		}
	}
}

// A ledger written before batch_queues existed (schema 6) learns, on
// first open, which queues its batches cover: DecidedQueues answers for
// the old batches as for new ones, and LatestDecisionsFor as
// LatestDecisions.
func TestMigrationRecordsBatchQueues(t *testing.T) {
	for _, l := range testkit.Ledgers(t) {
		t.Run(l.Name, func(t *testing.T) {
			ctx := context.Background()
			old, err := ledger.OpenAtSchema(ctx, l.DSN, 6)
			if err != nil {
				t.Fatal(err)
			}
			const broker = "http://localhost:6632"
			hold := &ledger.Batch{Broker: broker, Action: ledger.ActionHold, By: "ann", At: testkit.Now, Why: "w", Until: testkit.Now.Add(time.Hour)}
			replayB := &ledger.Batch{Broker: broker, Action: ledger.ActionReplay, By: "bob", At: testkit.Now.Add(time.Second), Why: "w"}
			gone := &ledger.Batch{Broker: broker, Action: ledger.ActionHold, By: "cy", At: testkit.Now, Why: "w", Until: testkit.Now.Add(-time.Hour)}
			// The old schema has no batch_queues: write the batches as an
			// older dlqctl did, by hand.
			exec := rawExec(t, old, l.DSN)
			for i, b := range []struct {
				b     *ledger.Batch
				queue string
				until string
			}{{hold, "orders", "2026-11-30T04:00:00.000Z"}, {replayB, "payments", ""}, {gone, "audit", "2026-11-30T02:00:00.000Z"}} {
				b.b.ID = fmt.Sprintf("b-%d", i)
				var until any
				if b.until != "" {
					until = b.until
				}
				exec(`INSERT INTO batches (id, broker, action, by_name, at, why, until_at, size) VALUES (?, ?, ?, 'x', '2026-11-30T03:00:00.000Z', 'w', ?, 1)`, b.b.ID, broker, b.b.Action, until)
				a := addr(i)
				exec(`INSERT INTO batch_items (batch_id, seq, broker, partition_id, transaction_id, queue, partition_name, groups, error, retry_count, failed_at)
					VALUES (?, 0, ?, ?, ?, ?, 'p1', '["billing"]', 'e', 3, '2026-11-30T02:00:00.000Z')`, b.b.ID, broker, a.PartitionID, a.TransactionID, b.queue)
			}
			old.Close()
			s, err := ledger.Open(ctx, l.DSN)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			holds, decided, err := s.DecidedQueues(ctx, broker, testkit.Now)
			if err != nil {
				t.Fatal(err)
			}
			if !holds["orders"] || holds["payments"] || !decided["payments"] || decided["audit"] || holds["audit"] {
				t.Fatalf("holds %v decided %v", holds, decided)
			}
			// A reader looks up rows of every queue a decision covers, a
			// hold past its end included (ls shows it as ended).
			with, err := s.QueuesWithDecisions(ctx, broker)
			if err != nil || len(with) != 3 || !with["orders"] || !with["payments"] || !with["audit"] {
				t.Fatalf("queues with decisions: %v %v", with, err)
			}
			all, _ := s.LatestDecisions(ctx, broker)
			some, err := s.LatestDecisionsFor(ctx, broker, []deadletter.Address{addr(0), addr(1), addr(7)})
			if err != nil || len(some) != 2 || some[addr(0)] != all[addr(0)] || some[addr(1)] != all[addr(1)] {
				t.Fatalf("for: %v (%v); all %v", some, err, all)
			}
		})
	}
}

// rawExec runs a statement written with ? placeholders on an old
// schema's database, as an older dlqctl wrote its rows (PostgreSQL gets
// $1, $2, …).
func rawExec(t *testing.T, old *ledger.Store, dsn string) func(q string, args ...any) {
	return func(q string, args ...any) {
		t.Helper()
		if strings.HasPrefix(dsn, "postgres") {
			for i := 1; strings.Contains(q, "?"); i++ {
				q = strings.Replace(q, "?", fmt.Sprintf("$%d", i), 1)
			}
		}
		if _, err := old.DB().Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
}

// The copies the /retry endpoint published are found by their address
// (the original's partition, the id the broker minted) with the
// generation they are: one more than the replay's. A manual replay's
// copy is not one (its derived id says its generation), nor is another
// broker's.
func TestCopyGenerations(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, dsn string) {
		ctx := context.Background()
		const me = "otherhost:1:me"
		if got, err := s.CopyGenerations(ctx, "http://b", []deadletter.Address{addr(0)}); err != nil || len(got) != 0 {
			t.Fatalf("no endpoint replay yet: %v %v", got, err)
		}
		addrs := []deadletter.Address{addr(0), addr(1), addr(2)}
		got, err := s.Acquire(ctx, "http://b", "b1", "replay", addrs, ledger.PlainEnrolments(1, 2, 1), me, t0, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for i, via := range []string{"endpoint", "endpoint", "manual"} {
			e := got[addrs[i]]
			e.State, e.Via, e.Outcome, e.ReplayTxID = ledger.Removed, via, "replayed", fmt.Sprintf("0199-copy-%d", i)
			if err := s.Save(ctx, e, me, t0, true); err != nil {
				t.Fatal(err)
			}
		}
		other, err := s.Acquire(ctx, "http://other", "b2", "replay", []deadletter.Address{addr(3)}, ledger.PlainEnrolments(1), me, t0, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		e := other[addr(3)]
		e.State, e.Via, e.ReplayTxID = ledger.Removed, "endpoint", "0199-copy-3"
		if err := s.Save(ctx, e, me, t0, true); err != nil {
			t.Fatal(err)
		}
		copyOf := func(a deadletter.Address, i int) deadletter.Address {
			return deadletter.Address{PartitionID: a.PartitionID, TransactionID: fmt.Sprintf("0199-copy-%d", i)}
		}
		asked := []deadletter.Address{copyOf(addrs[0], 0), copyOf(addrs[1], 1), copyOf(addrs[2], 2), copyOf(addr(3), 3),
			{PartitionID: "6f1c0000-0000-5000-8000-000000000002", TransactionID: "0199-copy-1"}} // a minted id, in another partition
		gens, err := s.CopyGenerations(ctx, "http://b", asked)
		if err != nil {
			t.Fatal(err)
		}
		want := map[deadletter.Address]int{copyOf(addrs[0], 0): 2, copyOf(addrs[1], 1): 3}
		if len(gens) != len(want) || gens[copyOf(addrs[0], 0)] != 2 || gens[copyOf(addrs[1], 1)] != 3 {
			t.Fatalf("copy generations %v, want %v", gens, want)
		}
	})
}

// A ledger opened under a context that is cancelled (Ctrl-C while it
// opens) says so: the command exits as interrupted, not as if its
// ledger flag named no ledger.
func TestOpenInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := ledger.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "l.db"))
	if !errors.Is(err, context.Canceled) || errors.Is(err, ledger.ErrBadDSN) {
		t.Fatalf("opened under a cancelled context: %v", err)
	}
}

// A ledger that kept times to the millisecond (before schema 22) keeps
// its holds over the rows of a broker that sends microseconds, and its
// archive's rows stay one row each when seen again: none vanishes.
func TestMigrationWidensTimes(t *testing.T) {
	for _, l := range testkit.Ledgers(t) {
		t.Run(l.Name, func(t *testing.T) {
			ctx := context.Background()
			old, err := ledger.OpenAtSchema(ctx, l.DSN, 21)
			if err != nil {
				t.Fatal(err)
			}
			const broker = "http://localhost:6632"
			exec := rawExec(t, old, l.DSN)
			a := addr(1)
			exec(`INSERT INTO batches (id, broker, action, by_name, at, why, until_at, size) VALUES ('h', ?, 'hold', 'x', '2026-11-30T03:00:00.000Z', 'w', '2026-11-30T05:00:00.000Z', 1)`, broker)
			exec(`INSERT INTO batch_items (batch_id, seq, broker, partition_id, transaction_id, queue, partition_name, groups, error, retry_count, failed_at)
				VALUES ('h', 0, ?, ?, ?, 'orders', 'p1', '["billing"]', 'e', 3, '2026-11-30T02:00:00.073Z')`, broker, a.PartitionID, a.TransactionID)
			exec(`INSERT INTO current_decisions (broker, partition_id, transaction_id, batch_id, at, queue, failed_at)
				VALUES (?, ?, ?, 'h', '2026-11-30T03:00:00.000Z', 'orders', '2026-11-30T02:00:00.073Z')`, broker, a.PartitionID, a.TransactionID)
			exec(`INSERT INTO archive (broker, partition_id, transaction_id, consumer_group, failed_at, queue, partition_name, error, retry_count, first_seen, last_seen)
				VALUES (?, ?, ?, 'billing', '2026-11-30T02:00:00.073Z', 'orders', 'p1', 'e', 3, '2026-11-30T02:30:00.000Z', '2026-11-30T02:30:00.000Z')`, broker, a.PartitionID, a.TransactionID)
			old.Close()
			s, err := ledger.Open(ctx, l.DSN)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			failed := time.Date(2026, 11, 30, 2, 0, 0, 73957000, time.UTC) // as 2.x lists it
			now := testkit.Now.Add(time.Minute)
			dec, err := s.LatestDecisionsFor(ctx, broker, []deadletter.Address{a})
			if err != nil {
				t.Fatal(err)
			}
			if d, ok := dec[a]; !ok || !d.Holds(failed, now) || !d.Until.Equal(testkit.Now.Add(2*time.Hour)) {
				t.Fatalf("the hold recorded at milliseconds: %+v (holds %v)", d, d.Holds(failed, now))
			}
			if d := dec[a]; d.Holds(failed.Add(time.Millisecond), now) {
				t.Fatal("a failure a millisecond after the one the hold saw is held")
			}
			ar := s.NewArchiver(broker, now)
			if err := ar.Add(ctx, deadletter.Row{PartitionID: a.PartitionID, TransactionID: a.TransactionID, Queue: "orders", Partition: "p1",
				ConsumerGroup: "billing", ErrorMessage: "e", RetryCount: 3, FailedAt: failed}); err != nil {
				t.Fatal(err)
			}
			if err := ar.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			res, err := s.MarkGone(ctx, broker, "", now, now)
			if err != nil || res.Vanished != 0 || res.Gone != 0 {
				t.Fatalf("sync after the migration: %+v %v", res, err)
			}
			rows, err := s.ArchivedRows(ctx, broker, ledger.ArchiveFilter{})
			if err != nil || len(rows) != 1 || !rows[0].FailedAt.Equal(failed) || !rows[0].FirstSeen.Equal(testkit.Now.Add(-30*time.Minute)) {
				t.Fatalf("archive: %+v %v", rows, err)
			}
		})
	}
}
