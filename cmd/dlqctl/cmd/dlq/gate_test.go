package dlq_test

// The gate and the decision record, as a tired person uses them: nothing
// should silence check by accident, and every alarm can be settled.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testutil"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// classOf is the class id of the seed's "order <n> not found" dead letters.
const orderNotFound = "f47c6181"

// A hold recorded at one spelling of the broker's URL holds at every
// other: decisions ls, show and the plans see it.
func TestHoldFollowsTheBrokerNotItsSpelling(t *testing.T) {
	b, cli := seeded(t)
	ip := cli.Env["DLQCTL_SERVER"]
	cli.Env["DLQCTL_SERVER"] = strings.Replace(ip, "127.0.0.1", "localhost", 1)
	id, stderr, code := cli.Exec("dlq", "decide", "--class", orderNotFound, "--action", "hold", "--until", "4h", "--why", "INC-1", "--owner", "team-billing")
	if code != 0 {
		t.Fatalf("decide: %d %s", code, stderr)
	}
	id = strings.TrimSpace(id)
	cli.Env["DLQCTL_SERVER"] = ip
	if out, _, _ := cli.Exec("decisions", "ls"); !strings.Contains(out, id) {
		t.Fatalf("decisions ls at %s does not show the hold:\n%s", ip, out)
	}
	var addr string
	for _, r := range b.DeadLetterRows() {
		if strings.Contains(r.Error, "not found") && r.Queue == "orders" {
			addr = r.PartitionID + "/" + r.TransactionID
			break
		}
	}
	if out, _, _ := cli.Exec("dlq", "show", addr); !strings.Contains(out, "hold until") || !strings.Contains(out, id) {
		t.Fatalf("show does not show the hold:\n%s", out)
	}
	if _, stderr, code := cli.Exec("dlq", "replay", "--class", orderNotFound, "--why", "x", "--yes", "--rate", "0"); code != 2 || !strings.Contains(stderr, "--override-hold") {
		t.Fatalf("replay of a held class at another spelling: exit %d\n%s", code, stderr)
	}
}

// A queue or group the broker does not have is a usage error with a
// suggestion, never a green gate or an empty list; one that exists and
// holds no dead letters is fine.
func TestUnknownQueueOrGroupIsAUsageError(t *testing.T) {
	b, cli := seeded(t)
	b.AddQueue("empty", false, 3, "g")
	for _, args := range [][]string{
		{"dlq", "check", "--queue", "order"},
		{"dlq", "check", "--queue", "Orders"},
		{"dlq", "ls", "--queue", "order"},
		{"dlq", "ls", "--queue", "orders", "--cg", "biling"},
		{"dlq", "replay", "--queue", "order", "--why", "x", "--yes"},
		{"dlq", "rm", "--queue", "order", "--why", "x", "--yes"},
		{"dlq", "decide", "--queue", "order", "--action", "hold", "--until", "1h", "--why", "x"},
	} {
		_, stderr, code := cli.Exec(args...)
		if code != 2 || !strings.Contains(stderr, "did you mean") {
			t.Errorf("%v: exit %d, want 2 with a suggestion\n%s", args, code, stderr)
		}
	}
	if _, stderr, code := cli.Exec("dlq", "check", "--queue", "empty"); code != 0 {
		t.Fatalf("a queue with no dead letters: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := cli.Exec("dlq", "ls", "--queue", "empty"); code != 0 {
		t.Fatalf("ls of a queue with no dead letters: exit %d\n%s", code, stderr)
	}
}

// A queue that has dead letters but that the broker's queue list omits
// is checked all the same: every queue seen in the DLQ is a scope.
func TestQueueMissingFromTheBrokersListIsChecked(t *testing.T) {
	for _, old := range []bool{false, true} {
		b := sandbox.New(func() time.Time { return testutil.Now })
		if err := b.Load(dlqctl.SandboxSeed); err != nil {
			t.Fatal(err)
		}
		if old {
			b.SetLine(sandbox.Queen015)
		}
		for i := 0; i < 74; i++ {
			b.AddDeadLetters(sandbox.DeadLetter{Queue: "hidden", Partition: "p", TransactionID: "h" + string(rune('a'+i%26)) + string(rune('a'+i/26)),
				ConsumerGroup: "g", Error: "boom", FailedAt: testutil.Now.Add(-48 * time.Hour), Data: json.RawMessage(`{}`)})
		}
		h := b.Handler()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/v1/resources/queues" || r.URL.Path == "/api/v1/consumer-groups" {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				body := strings.ReplaceAll(rec.Body.String(), `"hidden"`, `"elsewhere"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(rec.Code)
				w.Write([]byte(body))
				return
			}
			h.ServeHTTP(w, r)
		}))
		defer srv.Close()
		cli := testutil.NewCLI(t, srv.URL, root.Run)
		cli.WriteConfig("policies:\n  - queue: \"*\"\n    max-age: 1h\n")
		out, stderr, code := cli.Exec("dlq", "check", "-o", "json")
		if code != 1 || !strings.Contains(out, `"queue":"hidden"`) && !strings.Contains(out, `"queue": "hidden"`) {
			t.Fatalf("old server %v: exit %d; the hidden queue's 74 rows must be a scope\n%s%s", old, code, out, stderr)
		}
	}
}

// A replay or discard decided and never carried out stops counting as a
// decision once the triage SLO has passed: check breaches, naming the
// batch, and ls says so.
func TestDecisionNotCarriedOutBreaches(t *testing.T) {
	_, cli := seeded(t)
	cli.WriteConfig("policies:\n  - queue: orders\n    max-age: 30d\n    triage-slo: 1h\n")
	id, _, code := cli.Exec("dlq", "decide", "--class", orderNotFound, "--action", "replay", "--why", "after the fix")
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatal(code)
	}
	cli.Clock = testutil.Now.Add(2 * time.Hour)
	_, stderr, code := cli.Exec("dlq", "check", "--queue", "orders")
	if code != 1 || !strings.Contains(stderr, "decided, not carried out: batch "+id) {
		t.Fatalf("check 2h after a replay decision never carried out: exit %d\n%s", code, stderr)
	}
	out, _, _ := cli.Exec("dlq", "ls", "--class", orderNotFound)
	if !strings.Contains(out, "not carried out") {
		t.Fatalf("ls DECISION:\n%s", out)
	}
}

// A row that vanished with no decision breaches until someone records
// one for it; then check goes green.
func TestVanishedRowIsSettledByADecision(t *testing.T) {
	b, cli := seeded(t)
	cli.WriteConfig("policies:\n  - queue: \"*\"\n    max-age: 30d\n")
	if _, _, code := cli.Exec("dlq", "sync"); code != 0 {
		t.Fatal("sync")
	}
	r := b.DeadLetterRows()[0]
	addr := r.PartitionID + "/" + r.TransactionID
	b.RemoveDeadLetters(r.PartitionID, r.TransactionID)
	cli.Clock = testutil.Now.Add(time.Minute)
	cli.Exec("dlq", "sync")
	if _, stderr, code := cli.Exec("dlq", "check"); code != 1 || !strings.Contains(stderr, "vanished") {
		t.Fatalf("check with a vanished row: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := cli.Exec("dlq", "decide", addr, "--action", "discard", "--why", "retention took it; nothing to redo"); code != 0 {
		t.Fatalf("decide on a vanished address: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := cli.Exec("dlq", "check"); code != 0 {
		t.Fatalf("check after the decision: exit %d\n%s", code, stderr)
	}
}

// A SQLite ledger deleted after it held history takes what check knew of
// vanished rows with it. The command that creates the new one warns, and
// every check after says which rows it can no longer know of.
func TestDeletedLedgerIsSaid(t *testing.T) {
	b, cli := seeded(t)
	cli.WriteConfig("policies:\n  - queue: \"*\"\n    max-age: 30d\n")
	cli.Exec("dlq", "sync")
	r := b.DeadLetterRows()[0]
	b.RemoveDeadLetters(r.PartitionID, r.TransactionID)
	cli.Clock = testutil.Now.Add(time.Minute)
	cli.Exec("dlq", "sync")
	if _, stderr, code := cli.Exec("dlq", "check"); code != 1 || !strings.Contains(stderr, "vanished") {
		t.Fatalf("check with a vanished row: exit %d\n%s", code, stderr)
	}
	path := strings.TrimPrefix(cli.Env["DLQCTL_LEDGER"], "sqlite://")
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	_, stderr, code := cli.Exec("dlq", "check")
	if !strings.Contains(stderr, "warning: the ledger "+path+" was created anew") || !strings.Contains(stderr, "are not known") {
		t.Fatalf("check on a recreated ledger does not warn: exit %d\n%s", code, stderr)
	}
	out, stderr, _ := cli.Exec("dlq", "check", "-o", "json")
	if !strings.Contains(out, "was created anew") || strings.Contains(stderr, "warning:") {
		t.Fatalf("a later check: the note is not in its notes, or the warning repeats\n%s\n%s", out, stderr)
	}
}

// A hold can be ended, with who and why recorded: plans no longer need
// --override-hold, and check counts the rows as undecided again.
func TestCancelledHoldNoLongerHolds(t *testing.T) {
	_, cli := seeded(t)
	id, _, _ := cli.Exec("dlq", "decide", "--class", orderNotFound, "--action", "hold", "--until", "4h", "--why", "INC-1")
	id = strings.TrimSpace(id)
	if _, stderr, code := cli.Exec("decisions", "cancel", id, "--why", "false alarm"); code != 0 {
		t.Fatalf("cancel: exit %d\n%s", code, stderr)
	}
	out, _, _ := cli.Exec("decisions", "show", id)
	if !strings.Contains(out, "cancelled") || !strings.Contains(out, "false alarm") {
		t.Fatalf("decisions show after cancel:\n%s", out)
	}
	if _, stderr, code := cli.Exec("dlq", "replay", "--class", orderNotFound, "--why", "fixed", "--yes", "--rate", "0", "--dry-run"); code != 0 || strings.Contains(stderr, "under hold") {
		t.Fatalf("plan after the hold was cancelled: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := cli.Exec("decisions", "cancel", id, "--why", "again"); code != 2 {
		t.Fatalf("cancelling twice: exit %d\n%s", code, stderr)
	}
}

// --skip-held acts on the rest of a selection and leaves held messages
// alone.
func TestSkipHeldActsOnTheRest(t *testing.T) {
	b, cli := seeded(t)
	cli.Exec("dlq", "decide", "--class", orderNotFound, "--action", "hold", "--until", "4h", "--why", "INC-1")
	held := map[string]bool{}
	for _, r := range b.DeadLetterRows() {
		if r.Queue == "orders" && strings.Contains(r.Error, "not found") {
			held[r.PartitionID+"/"+r.TransactionID] = true
		}
	}
	_, stderr, code := cli.Exec("dlq", "replay", "--queue", "orders", "--skip-held", "--why", "fixed", "--yes", "--rate", "0", "--order", "none")
	if code != 0 || !strings.Contains(stderr, "left out of the batch (--skip-held)") {
		t.Fatalf("replay --skip-held: exit %d\n%s", code, stderr)
	}
	left := map[string]bool{}
	for _, r := range b.DeadLetterRows() {
		if a := r.PartitionID + "/" + r.TransactionID; r.Queue == "orders" {
			if !held[a] {
				t.Fatalf("%s is under no hold and was left", a)
			}
			left[a] = true
		}
	}
	if len(left) != len(held) {
		t.Fatalf("%d of the %d held messages are left: --skip-held acted on held messages", len(left), len(held))
	}
}

// A resume's plan says what is true: the recorded order (no claim about
// message ids the manifest lacks), how many are already done, an
// estimate for the rest only, and the path this broker gets. A dry run's
// plan is its output (stdout).
func TestResumePlanIsTruthful(t *testing.T) {
	sw := &swappable{}
	sw.fresh(t)
	srv := httptest.NewServer(sw)
	t.Cleanup(srv.Close)
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	_, stderr, _ := sw.interrupted(cli, 30, "dlq", "replay", "--queue", "payments", "--why", "x", "--yes", "--rate", "50", "--concurrency", "1")
	id := regexp.MustCompile(`--batch (\S+)`).FindStringSubmatch(stderr)[1]
	out, stderr, code := cli.Exec("dlq", "replay", "--batch", id, "--dry-run", "--rate", "1")
	if code != 0 || !strings.Contains(out, "Replay plan:") {
		t.Fatalf("dry run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	for _, bad := range []string{"ordered by first failure", "not time-ordered", "auto"} {
		if strings.Contains(out, bad) {
			t.Fatalf("the plan says %q:\n%s", bad, out)
		}
	}
	m := regexp.MustCompile(`(\d+) messages are already done or gone from the DLQ`).FindStringSubmatch(out)
	est := regexp.MustCompile(`rate: 1/s, estimated (\S+)`).FindStringSubmatch(out)
	if m == nil || est == nil || !strings.Contains(out, "path: manual (push with a derived id, then delete)") || !strings.Contains(out, "in the order the batch recorded") {
		t.Fatalf("plan:\n%s", out)
	}
	done, _ := strconv.Atoi(m[1])
	if want := render.Duration(time.Duration(81-done) * time.Second); est[1] != want {
		t.Fatalf("estimate %s for %d messages left at 1/s, want %s:\n%s", est[1], 81-done, want, out)
	}
}

// ls --sort oldest gives the rows newest-first gives, in reverse, on a
// broker that pages and on one that answers in one body; with --limit,
// the oldest ones.
func TestLsSortOldest(t *testing.T) {
	for _, old := range []bool{false, true} {
		b, cli := seeded(t)
		if old {
			b.SetLine(sandbox.Queen015)
		}
		for i := 0; i < 700; i++ {
			b.AddDeadLetters(sandbox.DeadLetter{Queue: "bulk", Partition: "p", TransactionID: "b" + strconv.Itoa(i), ConsumerGroup: "g",
				Error: "e", FailedAt: testutil.Now.Add(-time.Duration(i) * time.Minute), Data: json.RawMessage(`{}`)})
		}
		newest, _, _ := cli.Exec("dlq", "ls", "-o", "ndjson")
		oldest, stderr, code := cli.Exec("dlq", "ls", "--sort", "oldest", "-o", "ndjson")
		n := strings.Split(strings.TrimSpace(newest), "\n")
		o := strings.Split(strings.TrimSpace(oldest), "\n")
		if code != 0 || len(n) != len(o) || len(n) < 900 {
			t.Fatalf("old server %v: exit %d, %d rows newest first, %d oldest first\n%s", old, code, len(n), len(o), stderr)
		}
		for i := range n {
			if n[i] != o[len(o)-1-i] {
				t.Fatalf("old server %v: row %d of newest-first is not row %d of oldest-first", old, i, len(o)-1-i)
			}
		}
		three, _, _ := cli.Exec("dlq", "ls", "--sort", "oldest", "--limit", "3", "-o", "ndjson")
		if strings.TrimSpace(three) != strings.Join(o[:3], "\n") {
			t.Fatalf("old server %v: --limit 3 --sort oldest:\n%s", old, three)
		}
	}
}

// An envelope in the first page of a list is called what it is once the
// list has answered: undecryptable on a broker whose list decrypts,
// merely shown as its envelope on the released server; and isEncrypted
// does not change with what the client has learnt so far.
func TestEnvelopesInTheFirstPage(t *testing.T) {
	for _, old := range []bool{false, true} {
		b, cli := seeded(t)
		if old {
			b.SetLine(sandbox.Queen015)
		}
		out, _, _ := cli.Exec("dlq", "ls", "--queue", "notifications", "-o", "wide")
		want := map[bool]string{false: "[undecryptable] decryption failed", true: "yes (list shows the envelope)"}[old]
		if strings.Count(out, want) < 4 {
			t.Fatalf("old server %v: want %q on the four envelopes:\n%s", old, want, out)
		}
		nd, _, _ := cli.Exec("dlq", "ls", "--queue", "notifications", "-o", "ndjson")
		for _, l := range strings.Split(strings.TrimSpace(nd), "\n") {
			if strings.Contains(l, `"envelope":true`) && !strings.Contains(l, `"isEncrypted":true`) {
				t.Fatalf("old server %v: an envelope row that is not isEncrypted: %s", old, l)
			}
		}
	}
}

// Scopes with no dead letter that no policy names are left out of check
// (and counted); --all-scopes shows them; a policy or --queue naming a
// queue keeps its scopes.
func TestEmptyScopesAreNotListed(t *testing.T) {
	b, cli := seeded(t)
	for i := 0; i < 5; i++ {
		b.AddQueue("test-"+strconv.Itoa(i), false, 3, "g")
	}
	cli.WriteConfig("policies:\n  - queue: test-0\n    max-age: 1h\n  - queue: \"*\"\n    max-age: 30d\n")
	out, stderr, _ := cli.Exec("dlq", "check")
	if strings.Contains(out, "test-1") || !strings.Contains(out, "test-0") || !strings.Contains(stderr, "4 scopes with no dead letter and no policy not shown") {
		t.Fatalf("check:\n%s%s", out, stderr)
	}
	if out, _, _ := cli.Exec("dlq", "check", "--all-scopes"); !strings.Contains(out, "test-4") {
		t.Fatalf("check --all-scopes:\n%s", out)
	}
	if out, _, _ := cli.Exec("dlq", "check", "--queue", "test-3"); !strings.Contains(out, "test-3") {
		t.Fatalf("check --queue test-3:\n%s", out)
	}
	if out, _, _ := cli.Exec("dlq", "stats"); strings.Contains(out, "test-2") {
		t.Fatalf("stats lists an empty queue:\n%s", out)
	}
}

// Arrivals count what arrived in the window, also what has left the DLQ
// since (replayed, discarded): a replayed class does not vanish from
// them. On a broker that answers in one body, stats reads the DLQ once.
func TestStatsArrivalsKeepWhatLeft(t *testing.T) {
	b, cli, requests := released(t)
	arrivals := func() map[string]int {
		out, _, code := cli.Exec("dlq", "stats", "--since", "240h", "-o", "json")
		var st inspect.Stats
		if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 {
			t.Fatalf("%v %d", err, code)
		}
		m := map[string]int{}
		for _, c := range st.Arrivals {
			m[c.Class] = c.Arrivals
		}
		return m
	}
	before := arrivals()
	if _, stderr, code := cli.Exec("dlq", "replay", "--class", orderNotFound, "--why", "fixed", "--yes", "--rate", "0"); code != 0 {
		t.Fatalf("replay: %d %s", code, stderr)
	}
	_ = b
	requests()
	after := arrivals()
	if after[orderNotFound] != before[orderNotFound] || before[orderNotFound] == 0 {
		t.Fatalf("arrivals of the replayed class: %d before, %d after", before[orderNotFound], after[orderNotFound])
	}
	lists := 0
	for _, r := range requests() {
		if strings.HasPrefix(r, "GET /api/v1/dlq") {
			lists++
		}
	}
	if lists != 1 {
		t.Fatalf("stats read the DLQ %d times on a one-body broker", lists)
	}
}

// The group's own policy breaches dlq check (exit 1) on the seed
// contract's broker, whose queue list names no groups for this queue.
func TestCheckJudgesAGroupTheQueueListOmits(t *testing.T) {
	b := sandbox.New(func() time.Time { return testutil.Now })
	b.AddQueue("orders", false, 3)
	b.AddDeadLetters(sandbox.DeadLetter{Queue: "orders", Partition: "p", TransactionID: "t", ConsumerGroup: "billing", Error: "e",
		FailedAt: testutil.Now.Add(-48 * time.Hour), Data: []byte(`1`)})
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	cli.WriteConfig("policies:\n  - queue: \"*\"\n    max-age: 1000d\n  - queue: orders\n    consumer-group: billing\n    owner: team-billing\n    max-age: 30m\n")
	out, stderr, code := cli.Exec("dlq", "check")
	if code != 1 || !strings.Contains(out, "billing") || !strings.Contains(out, "team-billing") {
		t.Fatalf("exit %d\n%s%s", code, out, stderr)
	}
}

// A shared ledger knows the broker by a context's name (broker:
// queen-prod) where operator A holds a class. Operator B, with no config
// at all, reaches the same broker by its URL: the replay is refused until
// B says which broker it is, nothing sent; said to be queen-prod, the
// hold holds.
func TestHoldOfANamedBrokerHoldsForItsURL(t *testing.T) {
	b, cli := seeded(t)
	url := cli.Env["DLQCTL_SERVER"]
	dir := t.TempDir()
	cli.Env["DLQCTL_CONFIG"] = filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(cli.Env["DLQCTL_CONFIG"], []byte("contexts:\n  prod:\n    server: "+url+"\n    broker: queen-prod\ncurrent-context: prod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	delete(cli.Env, "DLQCTL_SERVER")
	if _, stderr, code := cli.Exec("dlq", "decide", "--class", orderNotFound, "--action", "hold", "--until", "4h", "--why", "INC-9"); code != 0 {
		t.Fatalf("A's hold: exit %d\n%s", code, stderr)
	}
	// B: the same ledger, no config, the URL.
	cli.Env["DLQCTL_CONFIG"], cli.Env["DLQCTL_SERVER"] = filepath.Join(dir, "b.yaml"), url
	b.ResetCalls()
	_, stderr, code := cli.Exec("dlq", "replay", "--class", orderNotFound, "--why", "x", "--yes", "--rate", "0")
	if code != 2 || !strings.Contains(stderr, "--same-broker-as queen-prod") || mutating(b) != 0 {
		t.Fatalf("B's replay of the held class: exit %d, %d calls that change the broker\n%s", code, mutating(b), stderr)
	}
	_, stderr, code = cli.Exec("dlq", "replay", "--class", orderNotFound, "--why", "x", "--yes", "--rate", "0", "--same-broker-as", "queen-prod")
	if code != 2 || !strings.Contains(stderr, "--override-hold") || mutating(b) != 0 {
		t.Fatalf("B's replay, said to be queen-prod: exit %d\n%s", code, stderr)
	}
}
