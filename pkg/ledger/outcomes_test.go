package ledger_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// outcomeRun is one run of a batch: it starts, writes journal entries at
// moments after its start, and ends (or dies, leaving the batch running).
type outcomeRun struct {
	batch      string
	start, end time.Time
	died       bool
}

// OutcomeCounts over a window says what a pass over the broker's whole
// journal says of the entries written since the window's start (runs
// that ended before it, ran across it, resumed in it, died in it, another
// broker's), while reading only the batches active in the window.
func TestOutcomeCountsAreTheWindowsRuns(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, _ string) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(21, 22))
		base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
		const a, other = "http://a:6632", "http://b:6632"
		type written struct {
			at             time.Time
			state, outcome string
			txid, broker   string
		}
		last := map[string]written{} // broker + address -> the entry's last write
		states := []struct{ state, outcome string }{{ledger.Removed, "replayed"}, {ledger.Removed, "duplicate"}, {ledger.Removed, "gone"},
			{ledger.Removed, "discarded"}, {ledger.Failed, ""}, {ledger.Unknown, ""}, {ledger.Skipped, "undecryptable"}}
		var runs []outcomeRun
		for b := 0; b < 24; b++ {
			broker := a
			if b%7 == 3 {
				broker = other
			}
			id := fmt.Sprintf("b-%02d", b)
			at := base.Add(time.Duration(b) * 20 * time.Hour)
			var addrs []deadletter.Address
			for i := range 12 {
				addrs = append(addrs, deadletter.Address{PartitionID: "p", TransactionID: fmt.Sprintf("t%d-%d", b, i)})
			}
			var manifest []ledger.ManifestItem
			for _, x := range addrs {
				manifest = append(manifest, ledger.ManifestItem{Address: x, Queue: "q", FailedAt: at.Add(-time.Hour)})
			}
			if err := s.CreateBatch(ctx, &ledger.Batch{ID: id, Broker: broker, Action: ledger.ActionReplay, By: "x", At: at, Why: "w", Status: ledger.StatusRecorded}, manifest); err != nil {
				t.Fatal(err)
			}
			// One to three runs a batch, each over some of its addresses;
			// the last may die before it ends.
			start := at.Add(time.Minute)
			for r := 0; r < 1+rng.IntN(3); r++ {
				run := outcomeRun{batch: id, start: start, end: start.Add(time.Duration(1+rng.IntN(30)) * time.Hour), died: rng.IntN(5) == 0}
				if err := s.SetBatchStatus(ctx, id, ledger.StatusRunning, run.start, run.start, nil); err != nil {
					t.Fatal(err)
				}
				owner := fmt.Sprintf("o-%s-%d", id, r)
				for _, x := range addrs {
					if rng.IntN(3) == 0 {
						continue
					}
					when := run.start.Add(time.Duration(rng.Int64N(int64(run.end.Sub(run.start)))))
					got, err := s.Acquire(ctx, broker, id, ledger.ActionReplay, []deadletter.Address{x}, ledger.PlainEnrolments(1), owner, when, time.Hour)
					if err != nil {
						t.Fatal(err)
					}
					e := got[x]
					if e == nil {
						t.Fatalf("%s not acquired", x)
					}
					st := states[rng.IntN(len(states))]
					e.State, e.Outcome, e.BatchID = st.state, st.outcome, id
					if st.outcome == "replayed" {
						e.ReplayTxID = "dlqr-" + x.TransactionID
					}
					if errs := s.SaveMany(ctx, []ledger.SaveItem{{Entry: e, Release: true}}, owner, when); errs[0] != nil {
						t.Fatal(errs[0])
					}
					last[broker+" "+x.String()] = written{when.UTC().Truncate(time.Millisecond), st.state, st.outcome, e.ReplayTxID, broker}
				}
				if run.died {
					break
				}
				if err := s.SetBatchStatus(ctx, id, ledger.StatusDone, run.start, run.end, nil); err != nil {
					t.Fatal(err)
				}
				runs = append(runs, run)
				start = run.end.Add(time.Duration(rng.IntN(48)) * time.Hour)
			}
		}
		for _, since := range []time.Time{base.Add(-time.Hour), base.Add(5 * 24 * time.Hour), base.Add(11*24*time.Hour + 7*time.Hour), base.Add(19 * 24 * time.Hour), base.Add(40 * 24 * time.Hour)} {
			want, wantTx := map[string]int{}, []string{}
			for _, w := range last {
				if w.broker != a || w.at.Before(since) {
					continue
				}
				key := w.outcome
				if key == "" || w.state == ledger.Failed || w.state == ledger.Unknown {
					key = w.state
				}
				want[key]++
				if w.txid != "" {
					wantTx = append(wantTx, w.txid)
				}
			}
			got, gotTx, err := s.OutcomeCounts(ctx, a, since)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(gotTx)
			slices.Sort(wantTx)
			if !maps.Equal(got, want) || !slices.Equal(gotTx, wantTx) {
				t.Fatalf("since %s: %v (%d replayed as), want %v (%d)", since, got, len(gotTx), want, len(wantTx))
			}
		}
	})
}

// A ledger of the last schema, its batches run by an older dlqctl that
// did not date their activity: the migration dates each batch by the
// journal entries its runs wrote, so the window's outcomes are the same
// as before it.
func TestMigrationDatesBatchActivity(t *testing.T) {
	for _, l := range testkit.Ledgers(t) {
		t.Run(l.Name, func(t *testing.T) {
			ctx := context.Background()
			old, err := ledger.OpenAtSchema(ctx, l.DSN, 7)
			if err != nil {
				t.Fatal(err)
			}
			exec := rawExec(t, old, l.DSN)
			const broker = "http://localhost:6632"
			// b-0 first ran in October and was resumed yesterday; b-1 ran in
			// October only; b-2 was recorded and never ran.
			for i, executed := range []any{"2026-10-01T00:00:00.000Z", "2026-10-02T00:00:00.000Z", nil} {
				exec(`INSERT INTO batches (id, broker, action, by_name, at, why, size, executed_at, status) VALUES (?, ?, 'replay', 'x', '2026-10-01T00:00:00.000Z', 'w', 1, ?, 'done')`,
					fmt.Sprintf("b-%d", i), broker, executed)
			}
			for i, j := range []struct{ batch, at, outcome string }{
				{"b-0", "2026-10-01T01:00:00.000Z", "replayed"}, {"b-0", "2026-11-30T01:00:00.000Z", "replayed"},
				{"b-1", "2026-10-02T01:00:00.000Z", "discarded"},
			} {
				exec(`INSERT INTO journal (broker, partition_id, transaction_id, state, batch_id, action, generation, replay_txid, via, outcome, attempts, last_error, updated_at)
					VALUES (?, 'p', ?, 'removed', ?, 'replay', 1, '', 'manual', ?, 1, '', ?)`, broker, fmt.Sprintf("t%d", i), j.batch, j.outcome, j.at)
			}
			old.Close()
			s, err := ledger.Open(ctx, l.DSN)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for since, want := range map[string]map[string]int{
				"2026-11-29T00:00:00.000Z": {"replayed": 1},
				"2026-09-01T00:00:00.000Z": {"replayed": 2, "discarded": 1},
				"2026-12-01T00:00:00.000Z": {},
			} {
				at, _ := time.Parse(time.RFC3339, since)
				got, _, err := s.OutcomeCounts(ctx, broker, at)
				if err != nil || !maps.Equal(got, want) {
					t.Fatalf("since %s: %v (%v), want %v", since, got, err, want)
				}
			}
		})
	}
}

// An address one batch replayed last month and a run of another batch
// today only found done (the entry keeps the first batch's id, its
// update dated today) is last month's replay, not today's.
func TestOutcomeCountsLeaveFoundDoneToItsBatch(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, s *ledger.Store, _ string) {
		ctx := context.Background()
		const broker = "http://a:6632"
		month, today := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		x := deadletter.Address{PartitionID: "p", TransactionID: "t"}
		run := func(id string, at time.Time, state, outcome string) {
			if err := s.CreateBatch(ctx, &ledger.Batch{ID: id, Broker: broker, Action: ledger.ActionReplay, By: "x", At: at, Why: "w"},
				[]ledger.ManifestItem{{Address: x, Queue: "q", FailedAt: at.Add(-time.Hour)}}); err != nil {
				t.Fatal(err)
			}
			if err := s.SetBatchStatus(ctx, id, ledger.StatusRunning, at, at, nil); err != nil {
				t.Fatal(err)
			}
			got, err := s.Acquire(ctx, broker, id, ledger.ActionReplay, []deadletter.Address{x}, ledger.PlainEnrolments(1), "o-"+id, at, time.Hour)
			if err != nil || got[x] == nil {
				t.Fatalf("acquire: %v %v", got, err)
			}
			e := got[x]
			e.State, e.Outcome = state, outcome // the batch id stays the entry's
			if errs := s.SaveMany(ctx, []ledger.SaveItem{{Entry: e, Release: true}}, "o-"+id, at.Add(time.Minute)); errs[0] != nil {
				t.Fatal(errs[0])
			}
			if err := s.SetBatchStatus(ctx, id, ledger.StatusDone, at, at.Add(time.Hour), nil); err != nil {
				t.Fatal(err)
			}
		}
		run("b-month", month, ledger.Removed, "replayed")
		run("b-today", today, ledger.Removed, "replayed")
		for since, want := range map[time.Time]map[string]int{today.Add(-time.Hour): {}, month.Add(-time.Hour): {"replayed": 1}} {
			got, _, err := s.OutcomeCounts(ctx, broker, since)
			if err != nil || !maps.Equal(got, want) {
				t.Fatalf("since %s: %v (%v), want %v", since, got, err, want)
			}
		}
	})
}
