package dlq_test

// The released Queen server (docs/broker.md) is the broker
// users run: these tests hold dlqctl to it, on the sandbox's released mode.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/internal/testutil"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// released starts a released-mode sandbox with the seed, recording every
// request's path and query.
func released(t *testing.T) (*sandbox.Broker, *testutil.CLI, func() []string) {
	t.Helper()
	b := sandbox.New(func() time.Time { return testutil.Now })
	if err := b.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	b.SetLine(sandbox.Queen015)
	var mu sync.Mutex
	var log []string
	h := b.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		log = append(log, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return b, testutil.NewCLI(t, srv.URL, root.Run), func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := log
		log = nil
		return out
	}
}

// addressesOf returns the rows per address the broker holds for a
// queue's consumer group, and every row of those addresses.
func rowsOfGroup(b *sandbox.Broker, queue, group string) (map[deadletter.Address]bool, int) {
	addrs := map[deadletter.Address]bool{}
	for _, r := range b.DeadLetterRows() {
		if r.Queue == queue && r.ConsumerGroup == group {
			addrs[deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}] = true
		}
	}
	all := 0
	for _, r := range b.DeadLetterRows() {
		if addrs[deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}] {
			all++
		}
	}
	return addrs, all
}

func TestCheckScopesPerConsumerGroupOnTheReleasedServer(t *testing.T) {
	_, cli, _ := released(t)
	cli.WriteConfig(`policies:
  - queue: orders
    owner: team-orders
    max-age: 2400h
  - queue: orders
    consumer-group: billing
    owner: team-billing
    max-age: 1h
  - queue: "*"
    max-age: 2400h
`)
	out, _, code := cli.Exec("dlq", "check", "-o", "json")
	var res present.CheckDocument
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err, out)
	}
	scopes := map[string]present.ScopeDocument{}
	for _, s := range res.Scopes {
		scopes[s.Queue+"/"+s.ConsumerGroup] = s
	}
	billing, shipping := scopes["orders/billing"], scopes["orders/shipping"]
	if len(res.Scopes) != 5 || billing.Owner != "team-billing" || shipping.Owner != "team-orders" || scopes["notifications/__QUEUE_MODE__"].Depth == 0 {
		t.Fatalf("want one scope per (queue, group) with each group's policy owner, got %+v", res.Scopes)
	}
	if code != 1 || len(billing.Breaches) == 0 || len(shipping.Breaches) != 0 {
		t.Fatalf("billing's 1h max-age breaches, shipping's 2400h holds: exit %d, %+v / %+v", code, billing.Breaches, shipping.Breaches)
	}
	// One streamed read per queue, and the bytes it cost are reported.
	if res.Requests > 3+2 || res.Bytes == 0 {
		t.Fatalf("%d requests, %d bytes: want one list read per queue (plus the queue and group lists) and the bytes counted", res.Requests, res.Bytes)
	}
}

func TestReplayOfOneGroupAccountsForEveryRowItRemoves(t *testing.T) {
	b, cli, _ := released(t)
	addrs, all := rowsOfGroup(b, "orders", "billing")
	selected := 0
	for _, r := range b.DeadLetterRows() {
		if r.Queue == "orders" && r.ConsumerGroup == "billing" {
			selected++
		}
	}
	if all == selected {
		t.Fatal("the seed must have orders messages that both groups failed")
	}
	out, stderr, code := cli.Exec("dlq", "replay", "--queue", "orders", "--cg", "billing", "--dry-run", "-o", "json")
	var plan batch.Plan
	if err := json.Unmarshal([]byte(out), &plan); err != nil || code != 0 {
		t.Fatalf("%v %d %s", err, code, stderr)
	}
	if plan.Rows != selected || plan.OtherGroups != all-selected || len(plan.AlsoRemoves) == 0 || plan.AlsoRemoves[0].ConsumerGroup != "shipping" {
		t.Fatalf("plan: %d rows + %d others (%+v), want %d + %d of group shipping", plan.Rows, plan.OtherGroups, plan.AlsoRemoves, selected, all-selected)
	}

	out, stderr, code = cli.Exec("dlq", "replay", "--queue", "orders", "--cg", "billing", "--why", "billing fixed", "--yes", "--rate", "0", "-o", "json")
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("%v %d %s", err, code, stderr)
	}
	if rep.RowsRemoved != all || rep.Replayed != len(addrs) {
		t.Fatalf("report: %d rows removed for %d replayed; want %d rows for %d messages", rep.RowsRemoved, rep.Replayed, all, len(addrs))
	}
	for _, r := range b.DeadLetterRows() {
		if addrs[deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}] {
			t.Fatalf("%s/%s (%s) is still dead-lettered", r.PartitionID, r.TransactionID, r.ConsumerGroup)
		}
	}
	// The ledger: every removed row archived, every one in the manifest.
	ld := testkit.OpenLedger(t, cli.Env["DLQCTL_LEDGER"])
	ctx := context.Background()
	archived := 0
	for a := range addrs {
		rows, err := ld.ArchivedRows(ctx, cli.Broker(), ledger.ArchiveFilter{Address: &a})
		if err != nil {
			t.Fatal(err)
		}
		archived += len(rows)
	}
	man, err := ld.Manifest(ctx, rep.BatchID)
	if err != nil {
		t.Fatal(err)
	}
	inManifest, others := 0, 0
	for _, m := range man {
		inManifest += len(m.Rows)
		for _, r := range m.Rows {
			if !r.Selected {
				others++
				if r.ConsumerGroup != "shipping" {
					t.Fatalf("unselected row of group %s", r.ConsumerGroup)
				}
			}
		}
	}
	if archived != all || inManifest != all || others != all-selected {
		t.Fatalf("archive %d rows, manifest %d rows (%d unselected); want %d and %d", archived, inManifest, others, all, all-selected)
	}
}

func TestRmOfOneGroupArchivesTheRowsItAlsoDeletes(t *testing.T) {
	b, cli, _ := released(t)
	addrs, all := rowsOfGroup(b, "orders", "shipping")
	_, stderr, code := cli.Exec("dlq", "rm", "--queue", "orders", "--cg", "shipping", "--why", "obsolete", "--yes", "--rate", "0")
	if code != 0 || !strings.Contains(stderr, "more of the same messages") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	ld := testkit.OpenLedger(t, cli.Env["DLQCTL_LEDGER"])
	n := 0
	for a := range addrs {
		rows, err := ld.ArchivedRows(context.Background(), cli.Broker(), ledger.ArchiveFilter{Address: &a})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if len(r.Payload) == 0 {
				t.Fatalf("archived row of %s without its payload", a)
			}
		}
		n += len(rows)
	}
	if n != all {
		t.Fatalf("%d rows archived, want every one the deletes removed: %d", n, all)
	}
}

// The released server's list never decrypts: an envelope there is merely
// encrypted. The plan asks the detail route and calls undecryptable only
// what it cannot decrypt (the seed's four); ls does not call any so.
func TestEnvelopesOnTheReleasedServer(t *testing.T) {
	_, cli, _ := released(t)
	out, _, _ := cli.Exec("dlq", "replay", "--queue", "notifications", "--dry-run", "-o", "json")
	var plan batch.Plan
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatal(err)
	}
	if plan.Undecryptable != 4 {
		t.Fatalf("plan: %d undecryptable, want the seed's 4 (of %d encrypted messages)", plan.Undecryptable, plan.Messages)
	}
	ls, _, _ := cli.Exec("dlq", "ls", "--queue", "notifications", "-o", "wide")
	if strings.Contains(ls, "undecryptable") || !strings.Contains(ls, "yes (list shows the envelope)") {
		t.Fatalf("ls on a released server:\n%s", ls)
	}
	// Left in the DLQ, they leave the batch not carried out (exit 1).
	_, stderr, code := cli.Exec("dlq", "replay", "--queue", "notifications", "--why", "x", "--yes", "--rate", "0", "--order", "none")
	if code != 1 || !strings.Contains(stderr, "4 skipped (undecryptable)") {
		t.Fatalf("replay: exit %d\n%s", code, stderr)
	}
}

// show and replay of one address ask the detail route, then read only the
// message's own queue (without payloads) for its rows.
func TestOneAddressReadsOnlyItsQueue(t *testing.T) {
	b, cli, requests := released(t)
	r := b.DeadLetterRows()[0]
	addr := r.PartitionID + "/" + r.TransactionID
	requests()
	if _, stderr, code := cli.Exec("dlq", "show", addr); code != 0 {
		t.Fatalf("show: %d %s", code, stderr)
	}
	for _, q := range requests() {
		if strings.HasPrefix(q, "GET /api/v1/dlq") && !strings.Contains(q, "queue="+r.Queue) {
			t.Fatalf("show read the whole DLQ: %s", q)
		}
	}
	if _, stderr, code := cli.Exec("dlq", "replay", addr, "--dry-run"); code != 0 {
		t.Fatalf("replay --dry-run: %d %s", code, stderr)
	}
	for _, q := range requests() {
		if strings.HasPrefix(q, "GET /api/v1/dlq") && !strings.Contains(q, "queue="+r.Queue) {
			t.Fatalf("replay ADDRESS read the whole DLQ: %s", q)
		}
	}
	// Not dead-lettered: the detail route says so, no list read at all.
	_, _, code := cli.Exec("dlq", "replay", sandbox.PartitionID("orders", "1009")+"/nope", "--dry-run")
	for _, q := range requests() {
		if strings.HasPrefix(q, "GET /api/v1/dlq") {
			t.Fatalf("a missing address needed the list: %s", q)
		}
	}
	if code != 5 {
		t.Fatalf("missing address: exit %d, want 5", code)
	}
}

// ls -o ndjson writes each row as encoding/json writes inspect.ToRow's
// row, byte for byte, whatever its strings hold (escapes, HTML, invalid
// UTF-8, line separators) and whatever its decision.
func TestLsNDJSONIsEncodingJSON(t *testing.T) {
	b := sandbox.New(func() time.Time { return testutil.Now })
	b.AddQueue("orders", false, 3, "billing", "billing<&>")
	texts := []string{"order 8812 not found", `field "email" invalid`, "<b>&amp;</b>", "tab\there", "line\u2028sep", "bad \xff utf8",
		"é ü 💥", "ctl \x01\x1f", `back\slash`, "plain again"}
	var dls []sandbox.DeadLetter
	for i, text := range texts {
		for _, g := range []string{"billing", "billing<&>"} {
			dls = append(dls, sandbox.DeadLetter{Queue: "orders", Partition: []string{"p1", "p\"2\""}[i%2], TransactionID: fmt.Sprintf("t-%d%s", i, g[min(len(g), 7):]),
				ConsumerGroup: g, Error: text, RetryCount: i, FailedAt: testutil.Now.Add(-time.Duration(i) * time.Minute),
				Data: json.RawMessage(`{ "html" : "<b>&amp;\u2028" ,` + "\n" + ` "n": [1, 2] }`)})
		}
	}
	b.AddDeadLetters(dls...)
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	if _, errOut, code := cli.Exec("dlq", "decide", "--queue", "orders", "--cg", "billing", "--action", "hold", "--why", "<b>look</b>", "--until", "2h"); code != 0 {
		t.Fatal(errOut)
	}
	out, errOut, code := cli.Exec("dlq", "ls", "-o", "ndjson")
	if code != 0 {
		t.Fatal(errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var rows []deadletter.Row
	for r, err := range testkit.Client(t, srv.URL).Rows(context.Background(), client.ListQuery{Limit: 7}) {
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	if len(lines) != len(rows) || len(rows) != len(dls) {
		t.Fatalf("%d lines, %d rows, %d dead letters", len(lines), len(rows), len(dls))
	}
	held := 0
	for i, r := range rows {
		var row inspect.Row
		if err := json.Unmarshal([]byte(lines[i]), &row); err != nil {
			t.Fatal(err)
		}
		var d *ledger.Decision
		if row.DecisionBatch != "" {
			held++
			d = &ledger.Decision{BatchID: row.DecisionBatch, Action: ledger.ActionHold, At: testutil.Now, Until: testutil.Now.Add(2 * time.Hour), Seen: testutil.Now}
		}
		want, _ := json.Marshal(inspect.ToRow(r, testutil.Now, d, 0))
		if lines[i] != string(want) {
			t.Fatalf("row %s:\n%s\nwant\n%s", r.Address(), lines[i], want)
		}
	}
	if held != len(texts) {
		t.Fatalf("%d rows held, want %d", held, len(texts))
	}
}

// The plan shows the destination groups' lag on a broker that reports
// it; --max-lag is recorded with the batch and kept on resume; on a
// broker with no lag it is refused, not ignored.
func TestMaxLagAndWindowFlags(t *testing.T) {
	b, cli, _ := released(t)
	b.SetLag("orders", "billing", 7*time.Minute)
	out, errOut, code := cli.Exec("dlq", "replay", "--queue", "orders", "--max-lag", "2m", "--window", "00:00-24:00 UTC", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"consumer lag of the destination:", "orders/billing  7m (Lagging", "orders/shipping  0s (Stable",
		"--max-lag 2m: publishing waits while any of them lags more", "window: publishing only 00:00-24:00 UTC"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the plan lacks %q:\n%s", want, out)
		}
	}
	// A run records the settings; the lag clears at once, so it finishes.
	b.SetLag("orders", "billing", 0)
	out, errOut, code = cli.Exec("dlq", "replay", "--queue", "orders", "--max-lag", "2m", "--why", "v4 parser", "--yes", "--rate", "0", "-o", "json")
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("%v exit %d: %s", err, code, errOut)
	}
	ld, err := ledger.Open(context.Background(), cli.Env["DLQCTL_LEDGER"])
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	bt, err := ld.Batch(context.Background(), rep.BatchID)
	if err != nil || !strings.Contains(string(bt.Settings), `"maxLag":"2m"`) {
		t.Fatalf("recorded settings %s (%v)", bt.Settings, err)
	}

	cb, curl := testkit.Sandbox(t)
	if err := cb.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	contract := testutil.NewCLI(t, curl, root.Run)
	_, errOut, code = contract.Exec("dlq", "replay", "--all", "--max-lag", "2m", "--dry-run")
	if code != 2 || !strings.Contains(errOut, "--max-lag: this broker reports no consumer-group lag") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, bad := range [][]string{{"--max-lag", "soon"}, {"--max-lag", "0"}, {"--window", "22:00"}, {"--window", "22:00-06:00 Nowhere/Land"}} {
		_, errOut, code := cli.Exec(append([]string{"dlq", "replay", "--all", "--dry-run"}, bad...)...)
		if code != 2 || strings.Count(strings.TrimSpace(errOut), "\n") > 1 {
			t.Errorf("%v: exit %d: %s", bad, code, errOut)
		}
	}
}

// decisions verify: the JSON keys scripts read, exit 1 while a copy is
// dead-lettered again, and decisions show's last verification.
func TestDecisionsVerifyCommand(t *testing.T) {
	b, cli, _ := released(t)
	out, errOut, code := cli.Exec("dlq", "replay", "--class", "3ce87dde", "--why", "fixed", "--yes", "--rate", "0", "-o", "json")
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("%v exit %d: %s", err, code, errOut)
	}
	live := b.LiveMessages()
	b.FailAgain(live[0].Queue, live[0].TransactionID, "billing", "still broken")
	out, errOut, code = cli.Exec("decisions", "verify", rep.BatchID, "-o", "json")
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 1 {
		t.Fatalf("%v exit %d: %s %s", err, code, out, errOut)
	}
	for _, k := range []string{"completed", "pending", "deadLetteredAgain", "missing"} {
		if _, ok := v[k]; !ok {
			t.Fatalf("no %q in %s", k, out)
		}
	}
	if v["deadLetteredAgain"].(float64) != 1 || v["pending"].(float64) != float64(len(live)-1) {
		t.Fatalf("counts: %s", out)
	}
	out, _, _ = cli.Exec("decisions", "show", rep.BatchID)
	if !strings.Contains(out, "Verified:") || !strings.Contains(out, "1 dead lettered again") {
		t.Fatalf("show:\n%s", out)
	}
	if _, errOut, code := cli.Exec("decisions", "verify", "nope"); code != 5 {
		t.Fatalf("an unknown batch: exit %d %s", code, errOut)
	}
}
