package dlq_test

import (
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/dlq"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/iostreams"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/internal/testutil"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	testutil.Golden(t, filepath.Join("..", "..", "..", "..", "testdata", "golden", name), got, *update)
}

// seeded starts the sandbox on the fixed clock with the project's seed.
func seeded(t *testing.T) (*sandbox.Broker, *testutil.CLI) {
	b, url := testkit.Seeded(t, testutil.Now)
	return b, testutil.NewCLI(t, url, root.Run)
}

func mutating(b *sandbox.Broker) int {
	n := 0
	for k, v := range b.Calls() {
		if strings.HasPrefix(k, "POST") || strings.HasPrefix(k, "DELETE") {
			n += v
		}
	}
	return n
}

// ---- parser tests: flags into options, through runF ----

func newFactory() *cmdutil.Factory {
	io, _, _, _ := iostreams.Test()
	return cmdutil.NewFactory(io)
}

func TestReplayFlags(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
		check   func(*dlq.ReplayOptions) bool
	}{
		{[]string{"--queue", "orders", "--rate", "25", "--burst", "5", "--concurrency", "8", "--why", "fixed", "--yes"}, "",
			func(o *dlq.ReplayOptions) bool {
				return o.Selection.Queue == "orders" && o.Exec.Settings.Rate == 25 && o.Exec.Settings.Burst == 5 && o.Exec.Settings.Concurrency == 8 && o.Exec.Why == "fixed" && o.Exec.Yes
			}},
		{[]string{"p/t", "--via", "manual", "--transform", ".version = 4", "--to-queue", "rq", "--max-generation", "2"}, "",
			func(o *dlq.ReplayOptions) bool {
				return o.Args[0] == "p/t" && o.Exec.Settings.Via == "manual" && o.Exec.Settings.Transform == ".version = 4" && o.Exec.Settings.ToQueue == "rq" && o.Exec.Settings.MaxGeneration == 2
			}},
		{[]string{"--batch", "20261130T031502-9f3a", "--retry-unknown", "--canary", "5", "--canary-wait", "1m", "--max-refailures", "3"}, "",
			func(o *dlq.ReplayOptions) bool {
				return o.Exec.BatchID == "20261130T031502-9f3a" && o.RetryUnknown && o.Canary == 5 && o.CanaryWait == time.Minute && o.Exec.Settings.MaxRefailures == 3
			}},
		{[]string{"--all", "--rate", "0"}, "--rate 0 (unlimited) needs --yes", nil},
		{[]string{"--all", "--rate", "-1"}, "invalid --rate", nil},
		{[]string{"--all", "--via", "carrier-pigeon"}, "valid values are auto, move, manual, endpoint", nil},
		{[]string{"--all", "--via", "endpoint", "--transform", "."}, "cannot take a transform", nil},
		{[]string{"--all", "--transform", ".[["}, "invalid --transform", nil},
		{[]string{"--all", "--concurrency", "0"}, "invalid --concurrency", nil},
		{[]string{"--all", "--rate", "fast"}, "invalid argument", nil},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var got *dlq.ReplayOptions
			cmd := dlq.NewCmdReplay(newFactory(), func(o *dlq.ReplayOptions) error { got = o; return nil })
			cmd.SetArgs(c.args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(cmdutil.Message(err), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got == nil || !c.check(got) {
				t.Fatalf("err %v, options %+v", err, got)
			}
		})
	}
}

func TestDecideAndCheckFlags(t *testing.T) {
	bad := [][]string{
		{"decide", "--all", "--why", "x"},
		{"decide", "--all", "--action", "later", "--why", "x"},
		{"decide", "--all", "--action", "hold", "--why", "x"},
		{"decide", "--all", "--action", "replay"},
		{"decide", "--all", "--action", "replay", "--why", "x", "--until", "1h"},
		{"check", "--max-age", "soon"},
		{"check", "--format", "xml"},
		{"ls", "--group-by", "colour"},
		{"ls", "--failed-after", "yesterday"},
		{"ls", "--error", "("},
		{"ls", "not-an-address"},
		{"stats", "--since", "-3h"},
		{"replay", "--batch", "20261130T031502-9f3a", "--cg", "billing", "--yes"},
		{"rm", "--batch", "20261130T031502-9f3a", "--all", "--yes"},
	}
	for _, args := range bad {
		_, cli := seeded(t)
		_, stderr, code := cli.Exec(append([]string{"dlq"}, args...)...)
		if code != 2 || strings.Count(stderr, "\n") > 2 || !strings.HasPrefix(stderr, "error: ") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and a one-line error", args, code, stderr)
		}
	}
}

// ---- run tests against the sandbox ----

func TestLsTable(t *testing.T) {
	_, cli := seeded(t)
	out, stderr, code := cli.Exec("dlq", "ls", "--queue", "orders", "--limit", "12")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	golden(t, "ls-orders.txt", out)

	out, _, _ = cli.Exec("dlq", "ls", "--queue", "payments", "--limit", "5", "-o", "wide")
	golden(t, "ls-wide.txt", out)
}

func TestLsOnATerminal(t *testing.T) {
	_, cli := seeded(t)
	cli.TTY, cli.Width = true, 150
	cli.WriteConfig("policies:\n  - queue: orders\n    max-age: 2h\n")
	cli.Env["NO_COLOR"] = ""
	out, _, code := cli.Exec("dlq", "ls", "--queue", "orders", "--limit", "6")
	if code != 0 {
		t.Fatal(code)
	}
	golden(t, "ls-tty.txt", out)
	plain := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(out, "")
	if !strings.Contains(out, "\x1b[") || !strings.Contains(plain, "6 newest dead letters shown (--limit 6), oldest shown") {
		t.Fatalf("a terminal gets the summary line and colour:\n%s", out)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[2:] {
		if w := len([]rune(regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(l, ""))); w > 150 {
			t.Fatalf("line of %d columns on a 150-column terminal: %q", w, l)
		}
	}
	out, _, _ = cli.Exec("dlq", "ls", "--queue", "orders", "--limit", "6", "--no-color")
	if strings.Contains(out, "\x1b[") {
		t.Fatal("--no-color still coloured")
	}
}

func TestLsGroupByError(t *testing.T) {
	_, cli := seeded(t)
	out, _, code := cli.Exec("dlq", "ls", "--group-by", "error")
	if code != 0 {
		t.Fatal(code)
	}
	golden(t, "ls-group-error.txt", out)
	// A class id from the table selects exactly that class.
	class := strings.Fields(strings.Split(out, "\n")[1])[0]
	count := strings.Fields(strings.Split(out, "\n")[1])[1]
	nd, _, _ := cli.Exec("dlq", "ls", "--class", class, "-o", "ndjson")
	if n := strings.Count(nd, "\n"); fmt.Sprint(n) != count {
		t.Fatalf("--class %s listed %d rows, the group said %s", class, n, count)
	}
}

func TestLsMachineFormats(t *testing.T) {
	_, cli := seeded(t)
	nd, _, code := cli.Exec("dlq", "ls", "-o", "ndjson")
	if code != 0 {
		t.Fatal(code)
	}
	lines := strings.Split(strings.TrimSpace(nd), "\n")
	if len(lines) != 240 {
		t.Fatalf("%d ndjson lines, want 240", len(lines))
	}
	var row map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &row); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"address", "partitionId", "transactionId", "messageId", "queue", "partition", "consumerGroup", "errorMessage", "errorClass", "retryCount", "failedAt", "ageSeconds", "isEncrypted", "envelope", "data"} {
		if _, ok := row[k]; !ok {
			t.Errorf("ndjson row lacks %q", k)
		}
	}
	js, _, _ := cli.Exec("dlq", "ls", "--queue", "orders", "-o", "json")
	var arr []map[string]any
	if err := json.Unmarshal([]byte(js), &arr); err != nil || len(arr) == 0 {
		t.Fatalf("-o json is not one JSON document: %v", err)
	}
	ym, _, _ := cli.Exec("dlq", "ls", "--limit", "2", "-o", "yaml")
	if !strings.HasPrefix(ym, "- address: ") {
		t.Fatalf("yaml:\n%s", ym)
	}
	_, stderr, code := cli.Exec("dlq", "ls", "-o", "xml")
	if code != 2 || !strings.Contains(stderr, "valid formats are table, wide, json, ndjson, yaml") {
		t.Fatalf("-o xml: %d %s", code, stderr)
	}
}

func TestShow(t *testing.T) {
	b, cli := seeded(t)
	rows := b.DeadLetterRows()
	var two sandbox.Row
	groups := map[string]int{}
	for _, r := range rows {
		groups[r.PartitionID+"/"+r.TransactionID]++
	}
	for _, r := range rows {
		if groups[r.PartitionID+"/"+r.TransactionID] == 2 && r.Queue == "orders" {
			two = r
			break
		}
	}
	out, _, code := cli.Exec("dlq", "show", two.TransactionID) // a bare id, unique
	if code != 0 {
		t.Fatal(code)
	}
	golden(t, "show.txt", out)
	js, _, _ := cli.Exec("dlq", "show", two.PartitionID+"/"+two.TransactionID, "-o", "json")
	var res inspect.ShowResult
	if err := json.Unmarshal([]byte(js), &res); err != nil || len(res.Rows) != 2 || len(res.Data) == 0 {
		t.Fatalf("show -o json: %v %+v", err, res)
	}
	_, stderr, code := cli.Exec("dlq", "show", two.PartitionID+"/nope")
	if code != 5 || !strings.Contains(stderr, "no dead-letter row") {
		t.Fatalf("missing: %d %s", code, stderr)
	}
	// Undecryptable: a warning, and the envelope is flagged.
	for _, r := range rows {
		if r.Error == "decryption failed: key rotated" {
			_, stderr, _ := cli.Exec("dlq", "show", r.PartitionID+"/"+r.TransactionID)
			if !strings.Contains(stderr, "could not decrypt") {
				t.Fatalf("no warning for an undecryptable envelope: %s", stderr)
			}
			break
		}
	}
}

func TestReplayCommand(t *testing.T) {
	b, cli := seeded(t)
	// Dry run: the plan on stdout, and nothing changed. The one POST is
	// the /retry probe for an address that cannot exist, which tells the
	// plan which path this broker gets.
	out, stderr, code := cli.Exec("dlq", "replay", "--queue", "orders", "--dry-run")
	calls := b.Calls()
	if code != 0 || !strings.Contains(stderr, "Dry run: nothing was written") || b.Applied() != 0 ||
		calls["POST /api/v1/push"]+calls["DELETE /api/v1/messages"] != 0 || calls["POST /api/v1/messages/retry"] > 1 {
		t.Fatalf("dry run: exit %d, %d changes, calls %v\n%s", code, b.Applied(), calls, stderr)
	}
	golden(t, "replay-dry-run.txt", out)
	_, stderr, code = cli.Exec("dlq", "replay", "--queue", "orders", "--yes")
	if code != 2 || !strings.Contains(stderr, "--why is required") || b.Applied() != 0 {
		t.Fatalf("no --why: exit %d: %s", code, stderr)
	}
	_, stderr, code = cli.Exec("dlq", "replay", "--queue", "orders", "--why", "x")
	if code != 2 || !strings.Contains(stderr, "without --yes") || b.Applied() != 0 {
		t.Fatalf("no --yes off a terminal: exit %d: %s", code, stderr)
	}
	_, stderr, code = cli.Exec("dlq", "replay")
	if code != 2 || !strings.Contains(stderr, "--all") {
		t.Fatalf("no selection: exit %d: %s", code, stderr)
	}
	before := b.Depth()
	_, stderr, code = cli.Exec("dlq", "replay", "--queue", "orders", "--why", "inventory fixed", "--yes", "--rate", "0")
	if code != 0 || !regexp.MustCompile(`Batch \S+: \d+ replayed, 0 failed`).MatchString(stderr) {
		t.Fatalf("replay: exit %d: %s", code, stderr)
	}
	if b.Depth() >= before {
		t.Fatal("nothing left the DLQ")
	}
	// Again: nothing to do, nothing published.
	pushes := b.Calls()["POST /api/v1/messages/retry"] + b.Calls()["POST /api/v1/push"]
	_, stderr, code = cli.Exec("dlq", "replay", "--queue", "orders", "--why", "again", "--yes")
	if code != 0 || !strings.Contains(stderr, "Nothing to replay") || b.Calls()["POST /api/v1/messages/retry"]+b.Calls()["POST /api/v1/push"] != pushes {
		t.Fatalf("second run: %d %s", code, stderr)
	}
	// The audit log has it.
	out, _, _ = cli.Exec("decisions", "ls", "-o", "json")
	var batches []map[string]any
	json.Unmarshal([]byte(out), &batches)
	if len(batches) != 1 || batches[0]["why"] != "inventory fixed" || batches[0]["status"] != "done" || batches[0]["by"] != "oncall" {
		t.Fatalf("decisions ls: %s", out)
	}
}

func TestRmCommand(t *testing.T) {
	b, cli := seeded(t)
	rows := b.DeadLetterRows()
	a := rows[0].PartitionID + "/" + rows[0].TransactionID
	_, stderr, code := cli.Exec("dlq", "rm", rows[0].PartitionID+"/never-dead-lettered", "--why", "x", "--yes")
	if code != 5 || mutating(b) != 0 || !strings.Contains(stderr, "not found") {
		t.Fatalf("rm of an address not in the DLQ: exit %d, %d mutating calls: %s", code, mutating(b), stderr)
	}
	_, stderr, code = cli.Exec("dlq", "rm", a, "--why", "test order", "--yes")
	if code != 0 || !strings.Contains(stderr, "1 discarded") {
		t.Fatalf("rm: %d %s", code, stderr)
	}
	// Archived first: show still knows the payload through the ledger.
	out, _, _ := cli.Exec("decisions", "ls", "-o", "json")
	var batches []map[string]any
	json.Unmarshal([]byte(out), &batches)
	id := batches[0]["id"].(string)
	js, _, _ := cli.Exec("decisions", "show", id, "-o", "json")
	if !strings.Contains(js, `"discard"`) || !strings.Contains(js, string(rows[0].Payload[:10])) {
		t.Fatalf("decisions show: %s", js)
	}
	// The batch again: the row is already gone, and no DELETE is sent.
	dels := b.Calls()["DELETE /api/v1/messages"]
	_, stderr, code = cli.Exec("dlq", "rm", "--batch", id, "--yes")
	if code != 0 || b.Calls()["DELETE /api/v1/messages"] != dels {
		t.Fatalf("rm --batch again: %d %s", code, stderr)
	}
}

func TestDecideHoldAndCheck(t *testing.T) {
	b, cli := seeded(t)
	cli.WriteConfig(`policies:
  - queue: orders
    owner: team-billing
    max-age: 240h
    triage-slo: 1h
  - queue: "*"
    max-age: 240h
`)
	out, _, code := cli.Exec("dlq", "check", "--queue", "orders", "-o", "json")
	var res present.CheckDocument
	json.Unmarshal([]byte(out), &res)
	if code != 1 || res.OK || res.Scopes[0].UndecidedPastSLO == 0 || res.Scopes[0].Owner != "team-billing" {
		t.Fatalf("undecided past SLO must breach: exit %d %s", code, out)
	}
	// A hold on the whole queue stops the undecided alert until it ends.
	id, _, code := cli.Exec("dlq", "decide", "--queue", "orders", "--action", "hold", "--until", "2h", "--why", "looking at it", "--owner", "team-billing")
	if code != 0 || !regexp.MustCompile(`^\d{8}T\d{6}-[0-9a-f]{4}\n$`).MatchString(id) {
		t.Fatalf("decide printed %q (exit %d)", id, code)
	}
	out, _, code = cli.Exec("dlq", "check", "--queue", "orders")
	if code != 0 {
		t.Fatalf("held queue still breaches: %s", out)
	}
	ls, _, _ := cli.Exec("dlq", "ls", "--queue", "orders", "--limit", "1")
	if !strings.Contains(ls, "hold") {
		t.Fatalf("ls DECISION column: %s", ls)
	}
	// Three hours later the hold has expired: the breach is back.
	cli.Clock = testutil.Now.Add(3 * time.Hour)
	out, _, code = cli.Exec("dlq", "check", "--queue", "orders")
	if code != 1 || !strings.Contains(out, "BREACH") {
		t.Fatalf("expired hold: %d %s", code, out)
	}
	cli.Clock = time.Time{}
	// A queue with no threshold at all is held to max-age 0.
	cli.WriteConfig("")
	out, _, code = cli.Exec("dlq", "check", "--queue", "payments")
	if code != 1 || !strings.Contains(out, "0 (no policy)") {
		t.Fatalf("no policy: %d %s", code, out)
	}
	if mutating(b) != 0 {
		t.Fatal("decide and check must not write to the broker")
	}
}

func TestCheckFormats(t *testing.T) {
	_, cli := seeded(t)
	cli.WriteConfig("policies:\n  - queue: orders\n    owner: team-billing\n    max-age: 1h\n  - queue: \"*\"\n    max-age: 2400h\n")
	prom, _, code := cli.Exec("dlq", "check", "--format", "prometheus")
	if code != 1 {
		t.Fatalf("exit %d", code)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(prom))
	if err != nil {
		t.Fatalf("prometheus output does not parse: %v\n%s", err, prom)
	}
	for _, name := range []string{"dlqctl_dlq_oldest_failed_timestamp_seconds", "dlqctl_dlq_depth", "dlqctl_dlq_vanished_undecided", "dlqctl_dlq_breach"} {
		fam := fams[name]
		if fam == nil || len(fam.Metric) != 5 {
			t.Fatalf("%s: %v", name, fam)
		}
		for _, m := range fam.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["queue"] == "orders" && labels["owner"] != "team-billing" {
				t.Fatalf("labels %v", labels)
			}
			if _, ok := labels["consumer_group"]; !ok {
				t.Fatal("no consumer_group label")
			}
		}
	}
	// One vocabulary: the series the shipped alert rules read from the
	// exporter are in the textfile too (but the exporter's own pass
	// interval), so a rule works on either.
	cli.WriteConfig("policies:\n  - queue: \"*\"\n    max-age: 1h\n    triage-slo: 1h\n")
	prom, _, _ = cli.Exec("dlq", "check", "--format", "prometheus")
	rules, err := os.ReadFile("../../../../deploy/prometheus/dlqctl-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`dlqctl_[a-z_]+`).FindAllString(string(rules), -1) {
		if name != "dlqctl_pass_interval_seconds" && !strings.Contains(prom, "\n"+name+"{") && !strings.Contains(prom, "\n"+name+" ") {
			t.Errorf("the rules read %s, which the textfile lacks", name)
		}
	}
	cli.WriteConfig("policies:\n  - queue: orders\n    owner: team-billing\n    max-age: 1h\n  - queue: \"*\"\n    max-age: 2400h\n")
	gh, _, code := cli.Exec("dlq", "check", "--format", "github")
	re := regexp.MustCompile(`^::(error|warning|notice)( [a-z]+=[^:,]*(,[a-z]+=[^:,]*)*)?::[^\r\n]*$`)
	errs := 0
	for _, l := range strings.Split(strings.TrimSpace(gh), "\n") {
		if !re.MatchString(l) {
			t.Fatalf("not a workflow command: %q", l)
		}
		if strings.HasPrefix(l, "::error") {
			errs++
		}
	}
	if code != 1 || errs != 2 {
		t.Fatalf("github: exit %d, %d errors:\n%s", code, errs, gh)
	}
}

func TestSyncCatchesVanishedRows(t *testing.T) {
	b, cli := seeded(t)
	cli.WriteConfig("policies:\n  - queue: \"*\"\n    max-age: 2400h\n")
	if _, _, code := cli.Exec("dlq", "sync"); code != 0 {
		t.Fatal(code)
	}
	if _, _, code := cli.Exec("dlq", "check"); code != 0 {
		t.Fatal("breach before anything vanished")
	}
	// Retention, or someone else's delete, behind dlqctl's back.
	r := b.DeadLetterRows()[10]
	b.RemoveDeadLetters(r.PartitionID, r.TransactionID)
	cli.Clock = testutil.Now.Add(time.Minute)
	_, stderr, _ := cli.Exec("dlq", "sync")
	if !strings.Contains(stderr, "1 row left with no decision (vanished") {
		t.Fatalf("sync: %s", stderr)
	}
	out, stderr, code := cli.Exec("dlq", "check")
	if code != 1 || !strings.Contains(stderr, "vanished from the broker with no recorded decision") {
		t.Fatalf("check after a vanish: %d\n%s\n%s", code, out, stderr)
	}
}

func TestStats(t *testing.T) {
	b, cli := seeded(t)
	cli.Exec("dlq", "replay", "--queue", "orders", "--why", "x", "--yes", "--rate", "0")
	// Two replays fail again (endpoint path: broker-minted ids).
	for _, m := range b.LiveMessages()[:2] {
		b.FailAgain(m.Queue, m.TransactionID, "billing", "still broken")
	}
	out, _, code := cli.Exec("dlq", "stats", "--since", "240h", "-o", "json")
	var st inspect.Stats
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 {
		t.Fatalf("%v %d", err, code)
	}
	if len(st.Queues) != 3 || len(st.Arrivals) < 5 || st.ReplayOutcomes["replayed"] == 0 || st.ReplayOutcomes["failedAgain"] != 2 || st.DecisionP50Secs == nil {
		t.Fatalf("stats %+v", st)
	}
}

// TestStatsUndecidedOnlyWhereMeasured: with no triage SLO set, stats says
// the undecided count is not measured rather than 0 (every dead letter
// undecided, none "past" an SLO nobody set); with one queue's policy, it
// counts in that queue's scopes and says how many of them there are. A
// window with no replay says so, not "0 failed again".
func TestStatsUndecidedOnlyWhereMeasured(t *testing.T) {
	_, cli := seeded(t)
	out, _, code := cli.Exec("dlq", "stats")
	if code != 0 || !strings.Contains(out, "Undecided past SLO: not measured (no policy sets a triage-slo)") || !strings.Contains(out, "Replay outcomes: none in the window") {
		t.Fatalf("no policy: %d\n%s", code, out)
	}
	cli.WriteConfig("policies:\n  - queue: orders\n    triage-slo: 1h\n")
	out, _, _ = cli.Exec("dlq", "stats", "-o", "json")
	var st inspect.Stats
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if st.SLOScopes == 0 || st.SLOScopes >= st.Scopes || st.UndecidedPastSLO == 0 {
		t.Fatalf("orders' policy: %d of %d scopes, %d undecided", st.SLOScopes, st.Scopes, st.UndecidedPastSLO)
	}
	out, _, _ = cli.Exec("dlq", "stats")
	if want := fmt.Sprintf("Undecided past SLO: %d (in the %d of %d queue/group scopes with a triage-slo)", st.UndecidedPastSLO, st.SLOScopes, st.Scopes); !strings.Contains(out, want) {
		t.Fatalf("want %q in\n%s", want, out)
	}
}

func TestBrokerFaultsAndAuth(t *testing.T) {
	b, cli := seeded(t)
	b.SetFaults(sandbox.Faults{Token: "tok-very-secret"})
	_, stderr, code := cli.Exec("dlq", "ls")
	if code != 4 || !strings.Contains(stderr, "authentication refused") {
		t.Fatalf("no token: %d %s", code, stderr)
	}
	cli.Env["DLQCTL_TOKEN"] = "tok-very-secret"
	out, stderr, code := cli.Exec("dlq", "ls", "--limit", "1", "--debug")
	if code != 0 || strings.Contains(out+stderr, "tok-very-secret") || !strings.Contains(stderr, "Bearer [redacted]") {
		t.Fatalf("with token and --debug: %d\n%s", code, stderr)
	}
	b.SetFaults(sandbox.Faults{Token: "tok-very-secret", ReadOnlyToken: "ro-token-reader"})
	cli.Env["DLQCTL_TOKEN"] = "ro-token-reader"
	_, stderr, code = cli.Exec("dlq", "rm", "--all", "--why", "x", "--yes")
	// A refusal mid-batch is an auth failure (4), not a partial failure (1).
	if code != 4 || !strings.Contains(stderr, "permission refused") || !strings.Contains(stderr, "Stopped: the broker refused the token") || b.Depth() != 240 {
		t.Fatalf("read-only token deleting: %d %s", code, stderr)
	}

	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<html><head><title>Sign in</title></head></html>")
	}))
	defer html.Close()
	cli.Env["DLQCTL_SERVER"] = html.URL
	_, stderr, code = cli.Exec("dlq", "ls")
	if code != 3 || !strings.Contains(stderr, "<html><head><title>Sign in") || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("HTML answer: %d %q", code, stderr)
	}
	cli.Env["DLQCTL_SERVER"] = "http://127.0.0.1:1"
	_, stderr, code = cli.Exec("dlq", "ls")
	if code != 3 || !strings.Contains(stderr, "check --server") {
		t.Fatalf("unreachable: %d %s", code, stderr)
	}
	cli.Env["DLQCTL_SERVER"] = "ftp://nope"
	_, _, code = cli.Exec("dlq", "ls")
	if code != 2 {
		t.Fatalf("bad server URL: %d", code)
	}
}

func TestUsageErrors(t *testing.T) {
	_, cli := seeded(t)
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"dlq", "frobnicate"}, 2},
		{[]string{"nonsense"}, 2},
		{[]string{"dlq", "ls", "--bogus"}, 2},
		{[]string{"--timeout", "forever", "dlq", "ls"}, 2},
		{[]string{"dlq", "show"}, 2},
	} {
		_, stderr, code := cli.Exec(c.args...)
		if code != c.code || !strings.HasPrefix(stderr, "error: ") {
			t.Errorf("%v: exit %d, %q", c.args, code, stderr)
		}
	}
	cli.WriteConfig("contexts: [this is: not a map\n")
	_, stderr, code := cli.Exec("dlq", "ls")
	if code != 2 || !strings.Contains(stderr, "config") {
		t.Errorf("bad config: %d %s", code, stderr)
	}
	cli.WriteConfig("")
	cli.Env["DLQCTL_LEDGER"] = "mysql://x"
	_, stderr, code = cli.Exec("dlq", "decide", "--all", "--action", "replay", "--why", "x")
	if code != 2 || !strings.Contains(stderr, "unknown ledger scheme") {
		t.Errorf("bad ledger: %d %s", code, stderr)
	}
}

func TestShowAmbiguousBareID(t *testing.T) {
	b, cli := seeded(t)
	for _, part := range []string{"7001", "7002"} {
		b.AddDeadLetters(sandbox.DeadLetter{Queue: "orders", Partition: part, TransactionID: "order:shared", ConsumerGroup: "billing",
			Error: "x", FailedAt: testutil.Now.Add(-time.Minute), Data: []byte(`{"p":"` + part + `"}`)})
	}
	_, stderr, code := cli.Exec("dlq", "show", "order:shared")
	if code != 2 || !strings.Contains(stderr, sandbox.PartitionID("orders", "7001")+"/order:shared") || !strings.Contains(stderr, sandbox.PartitionID("orders", "7002")+"/order:shared") {
		t.Fatalf("ambiguous id: %d %s", code, stderr)
	}
	out, _, code := cli.Exec("dlq", "show", sandbox.PartitionID("orders", "7002")+"/order:shared")
	if code != 0 || !strings.Contains(out, `"p": "7002"`) {
		t.Fatalf("full address: %d %s", code, out)
	}
}

func TestFromFilePipesLsIntoReplay(t *testing.T) {
	b, cli := seeded(t)
	nd, _, _ := cli.Exec("dlq", "ls", "--queue", "payments", "--limit", "5", "-o", "ndjson")
	cli.Stdin = nd
	_, stderr, code := cli.Exec("dlq", "replay", "--from-file", "-", "--why", "piped", "--yes", "--rate", "0")
	if code != 0 || !regexp.MustCompile(`Replay plan: [1-5] messages`).MatchString(stderr) {
		t.Fatalf("%d %s", code, stderr)
	}
	if len(b.LiveMessages()) == 0 || len(b.LiveMessages()) > 5 {
		t.Fatalf("%d published", len(b.LiveMessages()))
	}
}

// A dead letter of a consumer group the broker no longer lists must not
// escape the gate.
func TestCheckCatchesUnlistedGroups(t *testing.T) {
	b, cli := seeded(t)
	cli.WriteConfig("policies:\n  - queue: \"*\"\n    max-age: 2400h\n  - queue: orders\n    max-age: 240h\n")
	if _, _, code := cli.Exec("dlq", "check", "--queue", "orders"); code != 0 {
		t.Fatal("breach before the old row")
	}
	b.AddDeadLetters(sandbox.DeadLetter{Queue: "orders", Partition: "1", TransactionID: "order:ancient", ConsumerGroup: "legacy",
		Error: "x", FailedAt: testutil.Now.Add(-300 * time.Hour), Data: []byte(`{}`)})
	out, stderr, code := cli.Exec("dlq", "check", "--queue", "orders")
	if code != 1 || !strings.Contains(out, "orders   *") || !strings.Contains(stderr, "consumer groups the broker does not list") {
		t.Fatalf("unlisted group: %d\n%s\n%s", code, out, stderr)
	}
}

// A recorded decision executed later, through a failure and a resume:
// the batch's outcome is everything it did, not its last run.
func TestRecordedBatchOutcomeAcrossResume(t *testing.T) {
	b, cli := seeded(t)
	out, _, code := cli.Exec("dlq", "decide", "--queue", "payments", "--action", "replay", "--why", "db is back")
	if code != 0 {
		t.Fatal(code)
	}
	id := strings.TrimSpace(out)
	b.SetFaults(sandbox.Faults{Fail503Every: 2})
	_, stderr, code := cli.Exec("dlq", "replay", "--batch", id, "--yes", "--rate", "0", "--via", "endpoint")
	if code != 1 || !strings.Contains(stderr, "Executing recorded batch "+id) {
		t.Fatalf("first run: %d %s", code, stderr)
	}
	b.SetFaults(sandbox.Faults{})
	// Run once, the batch keeps where its copies go: a resume that gives
	// another --to-queue is refused by that flag.
	if _, stderr, code = cli.Exec("dlq", "replay", "--batch", id, "--yes", "--rate", "0", "--to-queue", "elsewhere"); code != 2 ||
		!strings.Contains(stderr, "--to-queue: this batch publishes to each message's own queue; a resume cannot change it") {
		t.Fatalf("a resume to another queue: %d %s", code, stderr)
	}
	if _, stderr, code = cli.Exec("dlq", "replay", "--batch", id, "--yes", "--rate", "0"); code != 0 {
		t.Fatalf("resume: %d %s", code, stderr)
	}
	js, _, _ := cli.Exec("decisions", "show", id, "-o", "json")
	var res struct {
		Batch struct {
			Size    int            `json:"size"`
			Status  string         `json:"status"`
			Outcome map[string]int `json:"outcome"`
		} `json:"batch"`
	}
	if err := json.Unmarshal([]byte(js), &res); err != nil {
		t.Fatal(err)
	}
	if res.Batch.Status != "done" || res.Batch.Outcome["replayed"] != res.Batch.Size || len(res.Batch.Outcome) != 1 {
		t.Fatalf("batch after resume: %+v", res.Batch)
	}
}

func TestTLSAndTimeout(t *testing.T) {
	b := sandbox.New(func() time.Time { return testutil.Now })
	b.Load(dlqctl.SandboxSeed)
	srv := httptest.NewTLSServer(b.Handler())
	defer srv.Close()
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	_, stderr, code := cli.Exec("dlq", "ls", "--limit", "1")
	if code != 3 || !strings.Contains(stderr, "certificate") {
		t.Fatalf("unknown CA: %d %s", code, stderr)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(ca, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code = cli.Exec("--ca-file", ca, "dlq", "ls", "--limit", "1"); code != 0 {
		t.Fatalf("--ca-file: %d %s", code, stderr)
	}
	_, stderr, code = cli.Exec("--insecure-skip-tls-verify", "dlq", "ls", "--limit", "1")
	if code != 0 || !strings.Contains(stderr, "warning: --insecure-skip-tls-verify") {
		t.Fatalf("insecure: %d %s", code, stderr)
	}
	// A broker that parks requests (its database is down) is ended by --timeout.
	b.SetFaults(sandbox.Faults{Latency: 5 * time.Second})
	start := time.Now()
	_, stderr, code = cli.Exec("--ca-file", ca, "--timeout", "50ms", "dlq", "ls")
	if code != 3 || time.Since(start) > 4*time.Second {
		t.Fatalf("--timeout: exit %d after %s: %s", code, time.Since(start), stderr)
	}
}

// The plan is frozen: a dead letter that arrives during the replay is not
// added, and the end of the run says it arrived; a copy the run published
// that failed again is not counted as new.
func TestNewArrivalsAreReportedNotAdded(t *testing.T) {
	b := sandbox.New(func() time.Time { return testutil.Now })
	b.Load(dlqctl.SandboxSeed)
	before := map[string]bool{}
	for _, m := range b.LiveMessages() {
		before[m.TransactionID] = true
	}
	var late, again sync.Once
	refailed := ""
	h := b.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			late.Do(func() {
				b.AddDeadLetters(sandbox.DeadLetter{Queue: "orders", Partition: "9", TransactionID: "order:late", ConsumerGroup: "billing",
					Error: "order 1 not found", FailedAt: testutil.Now.Add(time.Second), Data: []byte(`{"late":true}`)})
			})
		}
		h.ServeHTTP(w, r)
		if r.Method == http.MethodPost {
			for _, m := range b.LiveMessages() {
				if !before[m.TransactionID] {
					again.Do(func() {
						if b.FailAgain(m.Queue, m.TransactionID, "billing", "still broken") {
							refailed = m.TransactionID
						}
					})
				}
			}
		}
	}))
	defer srv.Close()
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	_, stderr, code := cli.Exec("dlq", "replay", "--queue", "orders", "--why", "x", "--yes", "--rate", "0")
	if code != 0 || !strings.Contains(stderr, "1 new dead letter matching the selection arrived since the plan") {
		t.Fatalf("%d %s", code, stderr)
	}
	if refailed == "" {
		t.Fatal("no copy of the run failed again: the test tests nothing of its own re-failures")
	}
	rows := b.DeadLetterRows()
	if len(rows) == 0 || rows[0].TransactionID != "order:late" {
		t.Fatal("the late dead letter must stay in the DLQ")
	}
}

// On a terminal, rm asks; only a yes deletes.
func TestRmAsksOnATerminal(t *testing.T) {
	b, cli := seeded(t)
	cli.TTY = true
	r := b.DeadLetterRows()[0]
	a := r.PartitionID + "/" + r.TransactionID
	cli.Stdin = "n\n"
	_, stderr, code := cli.Exec("dlq", "rm", a, "--why", "test order")
	if code != 2 || !strings.Contains(stderr, "Discard 1 message? [y/N]") || !strings.Contains(stderr, "not confirmed") || mutating(b) != 0 {
		t.Fatalf("no: %d %q", code, stderr)
	}
	cli.Stdin = "yes\n"
	_, stderr, code = cli.Exec("dlq", "rm", a, "--why", "test order")
	if code != 0 || !strings.Contains(stderr, "1 discarded") {
		t.Fatalf("yes: %d %q", code, stderr)
	}
}

// An older server (limit ignored, offset > 0 answering null) gives check
// the same answer as a current one.
func TestCheckOnAnOlderServer(t *testing.T) {
	b, cli := seeded(t)
	cli.WriteConfig("policies:\n  - queue: \"*\"\n    max-age: 24h\n    triage-slo: 1h\n")
	run := func() present.CheckDocument {
		out, _, _ := cli.Exec("dlq", "check", "-o", "json")
		var res present.CheckDocument
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	cur := run()
	b.SetLine(sandbox.Queen015)
	old := run()
	if len(cur.Scopes) != len(old.Scopes) || cur.OK || old.OK {
		t.Fatalf("scopes %d vs %d", len(cur.Scopes), len(old.Scopes))
	}
	for i := range cur.Scopes {
		c, o := cur.Scopes[i], old.Scopes[i]
		if c.Depth != o.Depth || c.OldestAddress != o.OldestAddress || c.UndecidedPastSLO != o.UndecidedPastSLO || len(c.Breaches) != len(o.Breaches) {
			t.Errorf("%s/%s: current %+v, older %+v", c.Queue, c.ConsumerGroup, c, o)
		}
		if o.Requests > 3 {
			t.Errorf("older server: %d requests for one scope (it answers everything at once)", o.Requests)
		}
	}
}

// A batch setting is given by the flag of its name (cmdutil.GivenIn): each
// setting has that flag on dlq replay or dlq restore, so a resume knows
// every setting the command line gave.
func TestEverySettingHasItsFlag(t *testing.T) {
	f := newFactory()
	cmds := []*cobra.Command{dlq.NewCmdReplay(f, nil), dlq.NewCmdRestore(f), dlq.NewCmdRm(f)}
	for bit := 0; bit < 16; bit++ {
		g := batch.Given(1 << bit)
		if batch.GivenNamed(g.String()) != g {
			continue // no setting
		}
		found := false
		for _, c := range cmds {
			found = found || c.Flags().Lookup(g.String()) != nil
		}
		if !found {
			t.Errorf("setting %s has no --%s flag on replay, restore or rm", g, g)
		}
	}
}

// A --to-queue the broker does not have is created by the first copy
// (every Queen line makes a queue on its first push) and read by no
// consumer: the plan warns, in words and in JSON, so a misspelled
// recovery queue is seen before the DLQ empties into it. An existing one
// is not warned about.
func TestReplayToAQueueTheBrokerDoesNotHave(t *testing.T) {
	_, cli := seeded(t)
	out, stderr, code := cli.Exec("dlq", "replay", "--queue", "payments", "--to-queue", "payments-recvoery", "--dry-run")
	if code != 0 || !strings.Contains(out, "queue payments-recvoery is not on the broker: the first copy creates it, and no consumer reads it yet") {
		t.Fatalf("a new queue: exit %d\n%s%s", code, out, stderr)
	}
	out, _, _ = cli.Exec("dlq", "replay", "--queue", "payments", "--to-queue", "payments-recvoery", "--dry-run", "-o", "json")
	if !strings.Contains(out, `"newQueue": "payments-recvoery"`) && !strings.Contains(out, `"newQueue":"payments-recvoery"`) {
		t.Fatalf("the plan's JSON names no new queue:\n%s", out)
	}
	if out, _, _ := cli.Exec("dlq", "replay", "--queue", "payments", "--to-queue", "orders", "--dry-run"); !strings.Contains(out, "Replay plan") || strings.Contains(out, "not on the broker") {
		t.Fatalf("an existing queue warned about:\n%s", out)
	}
}
