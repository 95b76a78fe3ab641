package batch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// The stage reads its addresses back in the order replay.Arrange puts
// the same items in, each with its rows as the list gave them: random
// streams over a few queues and partitions, UUIDv7 ids in most
// partitions and other ids (or upper-case ones, or equal ones) in some,
// equal and missing failure times, an address's rows far apart, with and
// without --to-queue, ordered or not.
func TestStageArrangesAsArrange(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	for trial := range 16 {
		// The list: each address's rows, shuffled together.
		var stream []deadletter.Row
		n := 1 + rng.IntN(300)
		for i := range n {
			q, p := fmt.Sprintf("q%d", rng.IntN(3)), fmt.Sprintf("%d", rng.IntN(10))
			id := fmt.Sprintf("01a2%04x-%04x-7000-8000-%012x", rng.IntN(1<<16), rng.IntN(1<<16), rng.IntN(1<<8))
			switch {
			case p == "7" || p == "3" && rng.IntN(4) == 0:
				id = fmt.Sprintf("msg-%d", rng.IntN(50))
			case rng.IntN(5) == 0:
				id = strings.ToUpper(id)
			}
			for g := range 1 + rng.IntN(3) {
				at := base.Add(time.Duration(rng.IntN(40)) * time.Second)
				if rng.IntN(40) == 0 {
					at = time.Time{}
				}
				stream = append(stream, deadletter.Row{ID: id, PartitionID: "p-" + q + "-" + p, TransactionID: fmt.Sprintf("t%d", i), Queue: q, Partition: p,
					ConsumerGroup: fmt.Sprintf("g%d", g), ErrorMessage: "boom", RetryCount: g, FailedAt: at, Data: []byte(fmt.Sprintf(`{"i":%d}`, i))})
			}
		}
		rng.Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })
		for _, to := range []string{"", "recovery"} {
			for _, mode := range []string{replay.OrderPartition, replay.OrderNone} {
				// What the snapshot holds: addresses in first-seen order.
				var items []replay.Item
				idx := map[deadletter.Address]int{}
				st, err := openStage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				w, err := st.write(ctx, "rows")
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range stream {
					a := r.Address()
					i, ok := idx[a]
					if !ok {
						i = len(items)
						idx[a] = i
						items = append(items, replay.Item{Address: a, Queue: r.Queue, Partition: r.Partition})
					}
					if err := w.add(ctx, i+1, r, r.Data, false, true); err != nil {
						t.Fatal(err)
					}
					items[i].Rows = append(items[i].Rows, r)
				}
				if err := w.end(ctx, nil); err != nil {
					t.Fatal(err)
				}
				if err := st.arrange(ctx, replay.Ordered(mode), to); err != nil {
					t.Fatal(err)
				}
				want, _ := testkit.Arrange(items, mode, to)
				k := 0
				for it, err := range st.inOrder(ctx) {
					if err != nil {
						t.Fatal(err)
					}
					if k >= len(want) {
						t.Fatalf("trial %d: the stage gave more than %d items", trial, len(want))
					}
					w := want[k]
					for j := range w.Rows {
						w.Rows[j].Data = w.Rows[0].Data // a message's rows carry its payload
					}
					if !reflect.DeepEqual(it, w) {
						t.Fatalf("trial %d (%s, to %q): place %d is\n%+v\nArrange put\n%+v", trial, mode, to, k, it, w)
					}
					k++
				}
				if k != len(want) {
					t.Fatalf("trial %d: the stage gave %d of %d items", trial, k, len(want))
				}
				st.close()
			}
		}
	}
}

// A TMPDIR that fills up while the snapshot is staged is named in the
// error, with what to do about it.
func TestFullTmpdirIsNamed(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	ctx := context.Background()
	st, err := openStage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	w, err := st.write(ctx, "rows")
	if err != nil {
		t.Fatal(err)
	}
	// A disk that is full after a few pages: SQLite says the same of both.
	if _, err := w.tx.ExecContext(ctx, `PRAGMA max_page_count = 8`); err != nil {
		t.Fatal(err)
	}
	payload := []byte(`"` + strings.Repeat("x", 4000) + `"`)
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range 100 {
		r := deadletter.Row{ID: "m", PartitionID: "p", TransactionID: fmt.Sprint(i), Queue: "q", Partition: "0", ConsumerGroup: "g", FailedAt: at, Data: payload}
		if err = w.add(ctx, i+1, r, r.Data, false, true); err != nil {
			break
		}
	}
	_ = w.end(ctx, err)
	if err == nil || !strings.Contains(err.Error(), "in TMPDIR, "+os.Getenv("TMPDIR")) || !strings.Contains(err.Error(), "set TMPDIR") {
		t.Fatalf("err = %v, want TMPDIR named", err)
	}
}

// A stage file a killed process left in the temporary directory (it is
// unlinked once open, so one that stays was left) is removed by the next
// stage once it is an hour old; a newer one may be another process's
// in its first moment, and stays.
func TestStageSweepsWhatKilledRunsLeft(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	stale, fresh := filepath.Join(dir, "dlqctl-stage-1.db"), filepath.Join(dir, "dlqctl-stage-2.db")
	for _, f := range []string{stale, fresh} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	st, err := openStage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("the stale stage file is still there: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("a stage file of the last hour was removed: %v", err)
	}
}

// Another process's sweep of a shared TMPDIR (another user's dlqctl, or
// one whose clock is ahead) never takes a stage in use: its file is
// unlinked once open, and the stage reads and writes on.
func TestAnotherSweepLeavesAStageInUse(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	ctx := context.Background()
	st, err := openStage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if left, _ := filepath.Glob(filepath.Join(dir, stagePattern)); len(left) != 0 {
		t.Fatalf("a stage in use is a file another sweep can see: %v", left)
	}
	sweepStages(time.Now().Add(24 * time.Hour)) // takes whatever it can see
	if err := st.exec(ctx, "testing", `INSERT INTO items (item, pid, tid, queue, part, mid, v7, checked) VALUES (1, 'p', 't', 'q', '0', 'm', 0, 0)`); err != nil {
		t.Fatalf("the stage after another sweep: %v", err)
	}
	var n int
	if err := st.db.QueryRowContext(ctx, `SELECT count(*) FROM items`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the stage after another sweep holds %d items: %v", n, err)
	}
}

// A row's body reads back as it was written: empty and long fields,
// bytes of every value, negative and large retry counts, a payload and
// none; a body cut anywhere is refused, never read as a shorter row.
func TestRowBodyReadsBackAsWritten(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	field := func() string {
		b := make([]byte, rng.IntN(3)*rng.IntN(300))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return string(b)
	}
	for range 500 {
		r := deadletter.Row{ID: field(), Queue: field(), Partition: field(), ErrorMessage: field(), RetryCount: rng.IntN(1<<20) - 1<<19}
		var payload []byte
		if rng.IntN(2) == 0 {
			payload = []byte(`{"x":"` + strings.Repeat("y", rng.IntN(200)) + `"}`)
		}
		v7 := rng.IntN(2) == 0
		raw := rowBody(r, payload, v7)
		got, err := readBody(raw)
		want := body{id: r.ID, queue: r.Queue, part: r.Partition, err: r.ErrorMessage, retries: r.RetryCount, v7: v7, payload: payload}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("read back %+v, %v; wrote %+v", got, err, want)
		}
		for cut := range len(raw) - len(payload) {
			if _, err := readBody(raw[:cut]); err == nil {
				t.Fatalf("a body cut at %d of %d bytes was read", cut, len(raw))
			}
		}
	}
}

// Widening to the DLQ's rows now adds each row of a staged address the
// stage does not have once, as first listed, after the selected ones: a
// row listed twice is not doubled, and the selected row is not taken
// again.
func TestTakeNowAddsEachOtherRowOnce(t *testing.T) {
	ctx := context.Background()
	st, err := openStage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	row := func(g string, s int, err string) deadletter.Row {
		return deadletter.Row{ID: "m", PartitionID: "p", TransactionID: "t", Queue: "q", Partition: "0", ConsumerGroup: g, ErrorMessage: err, FailedAt: at.Add(time.Duration(s) * time.Second)}
	}
	w, err := st.write(ctx, "rows")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.add(ctx, 1, row("g0", 0, "selected"), nil, false, true); err != nil {
		t.Fatal(err)
	}
	if err := w.end(ctx, nil); err != nil {
		t.Fatal(err)
	}
	w, err = st.write(ctx, "now")
	if err != nil {
		t.Fatal(err)
	}
	other := deadletter.Row{ID: "o", PartitionID: "p", TransactionID: "other", Queue: "q", Partition: "0", ConsumerGroup: "g1", FailedAt: at}
	for _, r := range []deadletter.Row{row("g2", 2, "first g2"), row("g0", 0, "selected, listed"), other, row("g1", 1, "first g1"), row("g2", 2, "g2 again"), row("g1", 1, "g1 again"), row("g1", 3, "g1 later")} {
		if err := w.add(ctx, 0, r, nil, false, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.end(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.exec(ctx, "testing", `CREATE INDEX now_addr ON now (pid, tid, grp, failed)`); err != nil {
		t.Fatal(err)
	}
	if err := st.takeNow(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := st.between(ctx, 1, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("between: %v, %v", got, err)
	}
	var rows, others []string
	for _, r := range got[0].it.Rows {
		rows = append(rows, r.ErrorMessage)
	}
	for _, r := range got[0].it.Others {
		others = append(others, r.ErrorMessage)
	}
	if want := []string{"selected"}; !reflect.DeepEqual(rows, want) {
		t.Errorf("selected rows %q, want %q", rows, want)
	}
	if want := []string{"first g2", "first g1", "g1 later"}; !reflect.DeepEqual(others, want) {
		t.Errorf("other rows %q, want %q", others, want)
	}
}
