package dlq_test

// The on-call path as a new user walks it: replay, interruption, resume,
// holds, and "what happened to this message?" afterwards.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/internal/testutil"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// swappable serves whichever broker is current at one URL (a sandbox
// restart keeps the address the ledger files everything under), and
// calls onPublish on every push or retry.
type swappable struct {
	cur       atomic.Pointer[sandbox.Broker]
	onPublish atomic.Pointer[func()]
}

func (s *swappable) fresh(t *testing.T) *sandbox.Broker {
	b := sandbox.New(func() time.Time { return testutil.Now })
	if err := b.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	s.cur.Store(b)
	return b
}

func (s *swappable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && (r.URL.Path == "/api/v1/push" || strings.HasSuffix(r.URL.Path, "/retry")) {
		if f := s.onPublish.Load(); f != nil {
			(*f)()
		}
	}
	s.cur.Load().Handler().ServeHTTP(w, r)
}

// interrupted runs a command line and cancels it (as SIGINT does) when
// the broker has seen n publishes.
func (s *swappable) interrupted(cli *testutil.CLI, n int64, args ...string) (string, string, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var published atomic.Int64
	stop := func() {
		if published.Add(1) == n {
			cancel()
		}
	}
	s.onPublish.Store(&stop)
	defer s.onPublish.Store(nil)
	cli.Ctx = ctx
	defer func() { cli.Ctx = nil }()
	return cli.Exec(args...)
}

func payments(b *sandbox.Broker) int {
	n := 0
	for _, r := range b.DeadLetterRows() {
		if r.Queue == "payments" {
			n++
		}
	}
	return n
}

// The reproduction: a queue replayed in full; the broker restarts and the
// same addresses are dead-lettered again; a second replay is interrupted;
// its printed resume command must replay the rest, not call them done.
func TestResumeReplaysAddressesBackInTheDLQ(t *testing.T) {
	sw := &swappable{}
	sw.fresh(t)
	srv := httptest.NewServer(sw)
	t.Cleanup(srv.Close)
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	if _, stderr, code := cli.Exec("dlq", "replay", "--queue", "payments", "--why", "first", "--yes", "--rate", "0"); code != 0 {
		t.Fatalf("first replay: %d %s", code, stderr)
	}
	b := sw.fresh(t) // the same addresses, back
	want := payments(b)
	_, stderr, code := sw.interrupted(cli, 20, "dlq", "replay", "--queue", "payments", "--why", "second", "--yes", "--rate", "50", "--concurrency", "1")
	resume := regexp.MustCompile(`Resume with: (dlqctl dlq replay --batch \S+ --yes)`).FindStringSubmatch(stderr)
	if code != 130 || resume == nil || payments(b) == 0 {
		t.Fatalf("interrupted replay: exit %d, %d rows left:\n%s", code, payments(b), stderr)
	}
	left := payments(b)
	out, stderr, code := cli.Exec(append(strings.Fields(resume[1])[1:], "-o", "json")...)
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("resume: %v exit %d\n%s", err, code, stderr)
	}
	if payments(b) != 0 || rep.Replayed == 0 || rep.AlreadyDone+rep.Replayed+rep.Duplicate < want-left {
		t.Fatalf("resume left %d of %d rows dead-lettered (report %+v)", payments(b), left, rep)
	}
	// The ledger no longer calls them decided by the first batch: ls and
	// check see the truth.
	if out, _, _ := cli.Exec("dlq", "ls", "--queue", "payments"); strings.TrimSpace(out) != "" {
		t.Fatalf("rows left:\n%s", out)
	}
}

// A message the same batch already replayed, back in the DLQ (another
// group failed the original later): reported, exit 1, not replayed twice.
func TestDeadLetteredAgainAfterThisBatch(t *testing.T) {
	b, cli := seeded(t)
	out, _, code := cli.Exec("dlq", "replay", "--queue", "payments", "--why", "x", "--yes", "--rate", "0", "-o", "json")
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatal(err, code)
	}
	// The same address fails again under its original id.
	ld := testkit.OpenLedger(t, cli.Env["DLQCTL_LEDGER"])
	man, _ := ld.Manifest(t.Context(), rep.BatchID)
	m := man[0]
	b.AddDeadLetters(sandbox.DeadLetter{Queue: m.Queue, Partition: m.Partition, TransactionID: m.Address.TransactionID, ConsumerGroup: "fraud",
		Error: "fraud check failed", FailedAt: m.FailedAt.Add(time.Second), Data: m.Payload})
	live := len(b.LiveMessages())
	_, stderr, code := cli.Exec("dlq", "replay", "--batch", rep.BatchID, "--yes", "--rate", "0")
	if code != 1 || !strings.Contains(stderr, "1 dead-lettered again") || !strings.Contains(stderr, "replay it as generation 2") || len(b.LiveMessages()) != live {
		t.Fatalf("exit %d, %d published:\n%s", code, len(b.LiveMessages())-live, stderr)
	}
	// ls does not call the new failure decided.
	ls, _, _ := cli.Exec("dlq", "ls", "--queue", "payments")
	if !strings.Contains(ls, "back after replay") {
		t.Fatalf("ls:\n%s", ls)
	}
	_, _, code = cli.Exec("dlq", "check", "--queue", "payments", "--triage-slo", "1s", "-o", "json")
	if code != 1 {
		t.Fatal("check must count the message back in the DLQ as undecided")
	}
}

// A resume keeps the rate, path and the rest it was run with; flags given
// again win; addresses already done cost no rate tokens.
func TestResumeKeepsTheRunSettings(t *testing.T) {
	sw := &swappable{}
	b := sw.fresh(t)
	srv := httptest.NewServer(sw)
	t.Cleanup(srv.Close)
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	_, stderr, _ := sw.interrupted(cli, 10, "dlq", "replay", "--queue", "payments", "--why", "x", "--yes", "--rate", "40", "--concurrency", "2", "--via", "manual")
	id := regexp.MustCompile(`--batch (\S+)`).FindStringSubmatch(stderr)[1]
	if _, stderr, code := cli.Exec("dlq", "replay", "--batch", id, "--yes"); code != 0 {
		t.Fatalf("resume: %d %s", code, stderr)
	}
	ld := testkit.OpenLedger(t, cli.Env["DLQCTL_LEDGER"])
	au, _ := ld.AuditFor(t.Context(), id)
	var starts []string
	for _, a := range au {
		if a.Kind == "execution-started" {
			starts = append(starts, a.Detail)
		}
	}
	if len(starts) != 2 || !strings.Contains(starts[1], "at 40/s") || !strings.Contains(starts[1], "manual") {
		t.Fatalf("the resume did not run with the recorded settings: %q", starts)
	}
	if b.Calls()["POST /api/v1/messages/retry"] != 0 {
		t.Fatal("the resume took the /retry path; the batch was recorded --via manual")
	}
	// Everything is done now: at 0.2/s, 81 addresses would take 400 s if
	// each cost a token. They cost none.
	start := time.Now()
	if _, stderr, code := cli.Exec("dlq", "replay", "--batch", id, "--yes", "--rate", "0.2"); code != 0 {
		t.Fatalf("re-run: %d %s", code, stderr)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatalf("a batch with nothing left to do waited on the rate limiter (%s)", time.Since(start))
	}
}

// A hold is in every plan that touches its messages, needs an override,
// and shows as resolved once its messages have all left the DLQ.
func TestHoldsAreSeenByReplayAndRmAndResolve(t *testing.T) {
	_, cli := seeded(t)
	out, _, _ := cli.Exec("dlq", "ls", "--queue", "orders", "--group-by", "error", "-o", "json")
	var groups []struct{ Class string }
	json.Unmarshal([]byte(out), &groups)
	class := groups[0].Class
	id, _, code := cli.Exec("dlq", "decide", "--class", class, "--action", "hold", "--until", "4h", "--why", "INC-4211")
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatal(code)
	}
	for _, verb := range []string{"replay", "rm"} {
		_, stderr, code := cli.Exec("dlq", verb, "--class", class, "--why", "x", "--yes", "--rate", "0")
		if code != 2 || !strings.Contains(stderr, "under hold "+id) || !strings.Contains(stderr, "--override-hold") {
			t.Fatalf("%s under a hold: exit %d\n%s", verb, code, stderr)
		}
	}
	if _, stderr, code := cli.Exec("dlq", "replay", "--class", class, "--why", "fixed", "--yes", "--rate", "0", "--override-hold"); code != 0 {
		t.Fatalf("override: %d %s", code, stderr)
	}
	ld := testkit.OpenLedger(t, cli.Env["DLQCTL_LEDGER"])
	b, err := ld.Batch(t.Context(), id)
	if err != nil || b.Status != ledger.StatusResolved {
		t.Fatalf("the hold is %q, want resolved (%v)", b.Status, err)
	}
}

// "What happened to this message?" after a replay or a discard: show
// answers from the ledger, and from the broker where the copy is now.
func TestShowAfterReplayAndDiscard(t *testing.T) {
	b, cli := seeded(t)
	var replayed, discarded string
	for _, r := range b.DeadLetterRows() {
		a := r.PartitionID + "/" + r.TransactionID
		switch {
		case r.Queue == "orders" && replayed == "":
			replayed = a
		case r.Queue == "payments" && discarded == "":
			discarded = a
		}
	}
	if _, stderr, code := cli.Exec("dlq", "replay", replayed, "--via", "manual", "--why", "fixed", "--yes"); code != 0 {
		t.Fatal(code, stderr)
	}
	if _, stderr, code := cli.Exec("dlq", "rm", discarded, "--why", "test data", "--yes"); code != 0 {
		t.Fatal(code, stderr)
	}
	out, stderr, code := cli.Exec("dlq", "show", replayed)
	if code != 0 || !strings.Contains(out, "replayed, dead letter removed") || !regexp.MustCompile(`replayed as transaction id dlqr-1-\S+ \(partition \S+\) via manual; now pending in queue orders`).MatchString(out) {
		t.Fatalf("show of a replayed message: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code = cli.Exec("dlq", "show", discarded)
	if code != 0 || !strings.Contains(out, "discarded (archived, then deleted)") || !strings.Contains(out, "Archived failures (") || !strings.Contains(out, "test data") {
		t.Fatalf("show of a discarded message: exit %d\n%s%s", code, out, stderr)
	}
	js, _, _ := cli.Exec("dlq", "show", discarded, "-o", "json")
	var res struct {
		InDLQ    bool              `json:"inDlq"`
		Archived []json.RawMessage `json:"archived"`
		Data     json.RawMessage   `json:"data"`
	}
	if err := json.Unmarshal([]byte(js), &res); err != nil || res.InDLQ || len(res.Archived) == 0 || len(res.Data) == 0 {
		t.Fatalf("show -o json of a discarded message: %v %s", err, js)
	}
	if _, _, code := cli.Exec("dlq", "show", sandbox.PartitionID("orders", "nowhere")+"/never-seen"); code != 5 {
		t.Fatalf("an address nobody knows: exit %d, want 5", code)
	}
}
