package inspect_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

var now = testkit.Now

func seeded(t *testing.T) (*sandbox.Broker, *client.Client, *ledger.Store) {
	b, url := testkit.Seeded(t, now)
	return b, testkit.Client(t, url), testkit.OpenLedger(t, "sqlite://"+t.TempDir()+"/l.db")
}

// Select keeps the rows a selection matches, stopping at --limit; the
// grouper counts them into failure classes and messages.
func TestSelectAndGroup(t *testing.T) {
	b, cl, _ := seeded(t)
	sel := &deadletter.Selection{Queue: "orders"}
	if err := sel.Compile(); err != nil {
		t.Fatal(err)
	}
	gr := inspect.NewGrouper("error")
	n, limited := 0, false
	for r, err := range inspect.Select(context.Background(), cl.Rows(context.Background(), client.QueryFor(sel, inspect.PageSize)), sel, &limited) {
		if err != nil {
			t.Fatal(err)
		}
		gr.Add(r)
		n++
	}
	want := 0
	for _, r := range b.DeadLetterRows() {
		if r.Queue == "orders" {
			want++
		}
	}
	rows := 0
	for _, g := range gr.Groups() {
		rows += g.Count
		if g.Messages > g.Count || g.Class != deadletter.ClassID(g.Pattern) && g.Pattern == "" {
			t.Fatalf("group %+v", g)
		}
	}
	if n != want || rows != want || limited {
		t.Fatalf("%d rows selected, %d grouped, of %d", n, rows, want)
	}
	sel.Limit = 5
	n = 0
	for range inspect.Select(context.Background(), cl.Rows(context.Background(), client.QueryFor(sel, inspect.PageSize)), sel, &limited) {
		n++
	}
	if n != 5 || !limited {
		t.Fatalf("--limit 5: %d rows, limited %v", n, limited)
	}
}

// Lookup answers for one address from the broker (its rows, payload) and
// the ledger; FindBareID finds a transaction id's address, and says when
// there is none.
func TestLookupAndBareIDs(t *testing.T) {
	b, cl, ld := seeded(t)
	r := b.DeadLetterRows()[0]
	a := deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}
	res, err := inspect.Lookup(context.Background(), cl, ld, a, now)
	if err != nil || !res.InDLQ || len(res.Rows) == 0 || len(res.Data) == 0 || res.Queue != r.Queue {
		t.Fatalf("lookup: %+v %v", res, err)
	}
	got, err := inspect.FindBareID(context.Background(), cl, ld, r.TransactionID)
	if err != nil || got != a {
		t.Fatalf("bare id: %v %v", got, err)
	}
	if _, err := inspect.FindBareID(context.Background(), cl, ld, "no-such-id"); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("an unknown id: %v", err)
	}
	if _, err := inspect.Lookup(context.Background(), cl, ld, deadletter.Address{PartitionID: r.PartitionID, TransactionID: "never"}, now); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("an unknown address: %v", err)
	}
}

// Sync mirrors the DLQ into the archive and marks what left it with no
// decision as vanished.
func TestSyncMarksVanished(t *testing.T) {
	b, cl, ld := seeded(t)
	ctx := context.Background()
	clock := now
	tick := func() time.Time { return clock }
	res, err := inspect.Sync(ctx, cl, ld, "", tick)
	if err != nil || res.Seen != b.Depth() || res.Vanished != 0 {
		t.Fatalf("first sync: %+v %v", res, err)
	}
	r := b.DeadLetterRows()[0]
	n := b.RemoveDeadLetters(r.PartitionID, r.TransactionID)
	clock = clock.Add(time.Minute)
	res, err = inspect.Sync(ctx, cl, ld, "", tick)
	if err != nil || res.Vanished != n {
		t.Fatalf("second sync: %+v %v, want %d vanished", res, err, n)
	}
	rows, err := ld.ArchivedRows(ctx, cl.Broker(), ledger.ArchiveFilter{VanishedOnly: true})
	if err != nil || len(rows) != n || rows[0].Address.TransactionID != r.TransactionID {
		t.Fatalf("archive: %d vanished rows (%v)", len(rows), err)
	}
}

// Stats count arrivals by class in the window, also those that left the
// DLQ since (from the archive).
func TestStatsCountWhatLeft(t *testing.T) {
	b, cl, ld := seeded(t)
	ctx := context.Background()
	in := inspect.StatsInput{Now: now, Window: 240 * time.Hour, WindowText: "10d"}
	before, err := inspect.ComputeStats(ctx, cl, ld, in)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, c := range before.Arrivals {
		total += c.Arrivals
	}
	if total != b.Depth() {
		t.Fatalf("%d arrivals of %d rows", total, b.Depth())
	}
	if _, err := inspect.Sync(ctx, cl, ld, "", func() time.Time { return now }); err != nil {
		t.Fatal(err)
	}
	r := b.DeadLetterRows()[0]
	b.RemoveDeadLetters(r.PartitionID, r.TransactionID)
	if _, err := inspect.Sync(ctx, cl, ld, "", func() time.Time { return now.Add(time.Minute) }); err != nil {
		t.Fatal(err)
	}
	after, err := inspect.ComputeStats(ctx, cl, ld, in)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range after.Arrivals {
		n += c.Arrivals
	}
	if n != total {
		t.Fatalf("arrivals after a row left: %d, want %d", n, total)
	}
}

// --where sees a row exactly as ls -o ndjson writes it: the same fields
// with the same values, the decision included.
func TestWhereSeesTheNDJSONRow(t *testing.T) {
	_, cl, ld := seeded(t)
	ctx := context.Background()
	var rows []deadletter.Row
	for r, err := range cl.Rows(ctx, client.ListQuery{Limit: 100}) {
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	d := ledger.Decision{BatchID: "b-1", Action: ledger.ActionHold, By: "ann", At: now.Add(-time.Hour), Until: now.Add(time.Hour)}
	dec := map[deadletter.Address]ledger.Decision{rows[0].Address(): d}
	sel := &deadletter.Selection{Where: "true"}
	if err := sel.Compile(); err != nil {
		t.Fatal(err)
	}
	if _, err := inspect.PrepareWhere(ctx, cl, sel, inspect.KnownDecisions(dec).Lookup(), nil, now); err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		var dp *ledger.Decision
		if r.Address() == rows[0].Address() {
			dp = &d
		}
		var fromJSON map[string]any
		listed, _ := json.Marshal(inspect.ToRow(r, now, dp, 0))
		if err := json.Unmarshal(listed, &fromJSON); err != nil {
			t.Fatal(err)
		}
		b1, _ := json.Marshal(fromJSON)
		v := map[string]any{}
		sel.WhereInput(r, v)
		b2, _ := json.Marshal(v)
		if string(b1) != string(b2) {
			t.Fatalf("row %d:\nndjson %s\nwhere  %s", i, b1, b2)
		}
	}
	_ = ld
}

// Decisions looked up as rows stream are the ledger's latest for those
// rows; a ledger that fails mid-read leaves the rows flowing without.
func TestDecisionsThrough(t *testing.T) {
	_, cl, ld := seeded(t)
	ctx := context.Background()
	var items []ledger.ManifestItem
	seen := map[deadletter.Address]bool{}
	for r, err := range cl.Rows(ctx, client.ListQuery{Queue: "orders", Limit: 500}) {
		if err != nil {
			t.Fatal(err)
		}
		if !seen[r.Address()] {
			seen[r.Address()] = true
			items = append(items, ledger.ManifestItem{Address: r.Address(), Queue: r.Queue, FailedAt: r.FailedAt})
		}
	}
	b := &ledger.Batch{Broker: cl.Broker(), Action: ledger.ActionHold, By: "ann", At: now, Why: "w", Until: now.Add(time.Hour)}
	if err := ld.CreateBatch(ctx, b, items); err != nil {
		t.Fatal(err)
	}
	// A replay decided since on some of the held addresses: the hold is
	// no longer theirs.
	replayed := &ledger.Batch{Broker: cl.Broker(), Action: ledger.ActionReplay, By: "bob", At: now.Add(time.Minute), Why: "fixed"}
	if err := ld.CreateBatch(ctx, replayed, items[:len(items)/3]); err != nil {
		t.Fatal(err)
	}
	all, _ := ld.LatestDecisions(ctx, cl.Broker())
	// Read looking every row up, and with the holds in force read after
	// the first lookup: the same decisions, and then only the rows no
	// hold names are looked up one by one.
	// A reader of every row reads them at the first held queue's row,
	// however many lookups holdsAfter would wait for.
	var looked []int
	for _, c := range []struct {
		after int
		all   bool
	}{{1 << 30, false}, {1, false}, {1 << 30, true}} {
		after := c.after
		restore := inspect.ReadHoldsAfter(after)
		dc := inspect.NewDecisions(ld, cl.Broker(), now)
		if c.all {
			dc.ReadsAll()
		}
		n := 0
		for r, err := range dc.Through(ctx, cl.Rows(ctx, client.ListQuery{Limit: 500})) {
			if err != nil {
				t.Fatal(err)
			}
			n++
			got, ok := dc.Get(r.Address())
			want, wok := all[r.Address()]
			if ok != wok || got != want {
				t.Fatalf("holds read after %d: %s: %v %v, want %v %v", after, r.Address(), got, ok, want, wok)
			}
		}
		restore()
		if n == 0 || dc.Err() != nil {
			t.Fatalf("%d rows, %v", n, dc.Err())
		}
		looked = append(looked, dc.Looked())
	}
	if looked[0] < len(items) || looked[1] > looked[0]/2 || looked[2] > looked[0]/2 {
		t.Fatalf("%d addresses looked up one by one, %d with the holds read after one, %d read whole (%d held)", looked[0], looked[1], looked[2], len(items))
	}
	// A reader of every row of a queue no hold covers does not read them.
	dc := inspect.NewDecisions(ld, cl.Broker(), now)
	dc.ReadsAll()
	for _, err := range dc.Through(ctx, cl.Rows(ctx, client.ListQuery{Queue: "payments", Limit: 500})) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if dc.HoldsRead() {
		t.Fatal("the holds in force were read for a queue no hold covers")
	}
	ld.Close()
	dc = inspect.NewDecisions(ld, cl.Broker(), now)
	n := 0
	for _, err := range dc.Through(ctx, cl.Rows(ctx, client.ListQuery{Limit: 500})) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 || dc.Err() == nil {
		t.Fatalf("closed ledger: %d rows, err %v", n, dc.Err())
	}
}

// A tally counts rows as ls's first line says them: the oldest row, the
// failure classes, and as undecided a row with no decision, one failed
// after its decision, one past an expired hold, and one whose replay was
// never carried out within the triage SLO.
func TestTallyCountsAsLsSaysIt(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	row := func(id string, ago time.Duration, msg string) deadletter.Row {
		return deadletter.Row{PartitionID: "p", TransactionID: id, Queue: "orders", ErrorMessage: msg, FailedAt: now.Add(-ago)}
	}
	hold := ledger.Decision{Action: ledger.ActionHold, At: now.Add(-time.Hour), Until: now.Add(time.Hour), Seen: now.Add(-2 * time.Hour)}
	expired := hold
	expired.Until = now.Add(-time.Minute)
	replay := ledger.Decision{Action: ledger.ActionReplay, At: now.Add(-5 * time.Hour), Status: ledger.StatusRecorded, Seen: now.Add(-6 * time.Hour)}
	var tl inspect.Tally
	for _, c := range []struct {
		r   deadletter.Row
		d   ledger.Decision
		ok  bool
		slo time.Duration
	}{
		{row("a", 3*time.Hour, "timeout after 30s"), hold, true, 0},                       // held
		{row("b", time.Hour, "timeout after 5s"), hold, true, 0},                          // failed after the hold saw it
		{row("c", 3*time.Hour, "unknown payload version 5"), expired, true, 0},            // the hold expired
		{row("d", 7*time.Hour, "unknown payload version 7"), replay, true, 4 * time.Hour}, // not carried out
		{row("e", 7*time.Hour, "unknown payload version 7"), replay, true, 0},             // no SLO: decided
		{row("f", 10*time.Hour, "connection refused"), ledger.Decision{}, false, 0},       // no decision
	} {
		tl.Add(c.r, c.d, c.ok, now, c.slo)
	}
	if tl.Rows != 6 || tl.Undecided != 4 || tl.Classes() != 3 || tl.Oldest.TransactionID != "f" {
		t.Fatalf("tally: %d rows, %d undecided, %d classes, oldest %s; want 6, 4, 3, f", tl.Rows, tl.Undecided, tl.Classes(), tl.Oldest.TransactionID)
	}
}
