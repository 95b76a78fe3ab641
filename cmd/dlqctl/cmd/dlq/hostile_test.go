package dlq_test

// A broker can be wrong, hostile or broken. Each test here stands up one
// such behaviour and asserts what dlqctl sent where, what it printed and
// how it exited, for ls, show, check, stats, replay, rm and sync.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testutil"
)

// recorder is a server that only records what reaches it.
type recorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits []string
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.hits = append(r.hits, req.Method+" "+req.URL.Path+" auth="+req.Header.Get("Authorization"))
		r.mu.Unlock()
		io.WriteString(w, `{"messages":[]}`)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.hits)
}

// hostile serves the seeded sandbox through wrap, which may answer first.
func hostile(t *testing.T, wrap func(w http.ResponseWriter, r *http.Request) bool) (*sandbox.Broker, *testutil.CLI) {
	t.Helper()
	b, _ := seeded(t)
	h := b.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !wrap(w, r) {
			h.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return b, testutil.NewCLI(t, srv.URL, root.Run)
}

func TestHostileRedirectsToAnotherOrigin(t *testing.T) {
	const token = "tok-7d1f0c52-9b8e-4aa1-b2c3-55aa66bb77cc"
	other := newRecorder(t)
	b, cli := hostile(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodGet || r.URL.Path == "/api/v1/dlq" && r.URL.Query().Get("queue") == "payments" {
			http.Redirect(w, r, other.srv.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
			return true
		}
		return false
	})
	cli.Env["DLQCTL_TOKEN"] = token
	depth := b.Depth()
	var addr string
	for _, r := range b.DeadLetterRows() {
		if r.Queue == "orders" {
			addr = r.PartitionID + "/" + r.TransactionID
			break
		}
	}
	for _, c := range []struct {
		name string
		args []string
		code int
	}{
		{"ls", []string{"dlq", "ls", "--queue", "payments"}, 3},
		{"sync", []string{"dlq", "sync", "--queue", "payments"}, 3},
		{"rm", []string{"dlq", "rm", addr, "--why", "x", "--yes"}, 1},
		{"replay manual", []string{"dlq", "replay", addr, "--via", "manual", "--why", "x", "--yes"}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := cli.Exec(c.args...)
			if code != c.code || !strings.Contains(stderr, "redirect") || !strings.Contains(stderr, other.srv.URL) {
				t.Fatalf("exit %d (want %d), and the error must name where it was sent:\n%s", code, c.code, stderr)
			}
			if strings.Contains(stderr, token) {
				t.Fatal("the token was printed")
			}
		})
	}
	if n := other.count(); n != 0 {
		t.Fatalf("%d requests reached the other origin: %v", n, other.hits)
	}
	if b.Depth() != depth || len(b.LiveMessages()) != 0 {
		t.Fatal("something was deleted or published")
	}
}

// Escapes in every string the broker sends: nothing reaches a person's
// terminal raw; the machine formats keep the data exact.
func TestHostileEscapesNeverReachTheTerminal(t *testing.T) {
	b := sandbox.New(func() time.Time { return testutil.Now })
	evil := "\x1b]0;pwned\x07\x1b[2Jboom\r\nFAKE LINE: all good\u202e"
	b.AddQueue("q\x1b[31m", false, 3, "g\x1b[8m")
	b.AddDeadLetters(sandbox.DeadLetter{Queue: "q\x1b[31m", Partition: "p\x1b[1m", TransactionID: "t-1", ConsumerGroup: "g\x1b[8m",
		Error: evil, RetryCount: 3, FailedAt: testutil.Now.Add(-time.Hour), Data: json.RawMessage(`{"note":"\u001b[2J\r\nFAKE LINE"}`)})
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	addr := sandbox.PartitionID("q\x1b[31m", "p\x1b[1m") + "/t-1"
	clean := func(name, out string) {
		t.Helper()
		if strings.ContainsAny(out, "\x1b\r\a\u202e") || regexp.MustCompile(`(?m)^FAKE LINE`).MatchString(out) {
			t.Fatalf("%s printed control characters or a forged line:\n%q", name, out)
		}
	}
	for _, args := range [][]string{
		{"dlq", "ls"}, {"dlq", "ls", "-o", "wide"}, {"dlq", "ls", "--group-by", "error"}, {"dlq", "ls", "--group-by", "cg"},
		{"dlq", "show", addr}, {"dlq", "show", "t-1"}, {"dlq", "check"}, {"dlq", "check", "--format", "github"},
		{"dlq", "stats"}, {"dlq", "sync"}, {"dlq", "replay", "--all", "--dry-run"}, {"dlq", "rm", "--all", "--dry-run"},
		{"dlq", "decide", "--all", "--action", "hold", "--until", "1h", "--why", "x\x1b[2J"}, {"decisions", "ls"},
	} {
		out, stderr, _ := cli.Exec(args...)
		clean(strings.Join(args, " "), out+stderr)
	}
	_, stderr, code := cli.Exec("dlq", "replay", "--all", "--why", "x", "--yes", "--rate", "0", "--override-hold")
	clean("replay", stderr)
	if code != 0 {
		t.Fatalf("replay: %d %s", code, stderr)
	}
	// JSON keeps the data exact.
	b.AddDeadLetters(sandbox.DeadLetter{Queue: "q\x1b[31m", Partition: "p", TransactionID: "t-2", ConsumerGroup: "g", Error: evil, FailedAt: testutil.Now, Data: json.RawMessage(`{}`)})
	out, _, _ := cli.Exec("dlq", "ls", "-o", "ndjson")
	var row struct{ ErrorMessage string }
	if err := json.Unmarshal([]byte(strings.Split(out, "\n")[0]), &row); err != nil || row.ErrorMessage != evil {
		t.Fatalf("ndjson changed the data: %q %v", row.ErrorMessage, err)
	}
}

// Transaction ids no URL path can carry: reported unreachable, exit 1,
// nothing sent for them, never counted done.
func TestHostileIDsThatAreNotPathSegments(t *testing.T) {
	b := sandbox.New(func() time.Time { return testutil.Now })
	b.AddQueue("q", false, 3, "g")
	ids := []string{"a/b", "has space", "q?x", ".", "..", "fine-1"}
	for _, id := range ids {
		b.AddDeadLetters(sandbox.DeadLetter{Queue: "q", Partition: "p", TransactionID: id, ConsumerGroup: "g", Error: "e", FailedAt: testutil.Now.Add(-time.Minute), Data: json.RawMessage(`{"id":1}`)})
	}
	var mu sync.Mutex
	var paths []string
	h := b.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.RawPath+r.URL.Path)
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	for _, verb := range []string{"rm", "replay"} {
		args := []string{"dlq", verb, "--queue", "q", "--why", "x", "--yes", "--rate", "0", "-o", "json"}
		if verb == "replay" {
			args = append(args, "--order", "none") // each address on its own; order has its own tests
		}
		out, stderr, code := cli.Exec(args...)
		var rep struct {
			Unreachable int `json:"unreachable"`
			AlreadyGone int `json:"alreadyGone"`
			Addresses   []struct{ Reason string }
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%s: %v %s", verb, err, stderr)
		}
		if code != 1 || rep.Unreachable != 5 || rep.AlreadyGone != 0 {
			t.Fatalf("%s: exit %d, %d unreachable, %d gone; want exit 1, 5 unreachable, none gone\n%s", verb, code, rep.Unreachable, rep.AlreadyGone, stderr)
		}
	}
	for _, p := range paths {
		if strings.Contains(p, "/messages/") && (strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..") || strings.Contains(p, "/a/b") || strings.Contains(p, "has space") || strings.Contains(p, "q?x")) {
			t.Fatalf("a call named an unreachable address: %s", p)
		}
	}
	if b.Depth() != 5 {
		t.Fatalf("%d rows left, want the 5 unreachable ones", b.Depth())
	}
}

func TestHostileEchoedToken(t *testing.T) {
	const token = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXRva2VuLWJvZHk.s1gn4tur3/abcdef0123456789+\"q"
	echoes := map[string]func(string) string{
		"raw": func(s string) string { return s },
		"json \\/": func(s string) string {
			q, _ := json.Marshal(s)
			return strings.ReplaceAll(string(q[1:len(q)-1]), "/", `\/`)
		},
		"percent": url.QueryEscape,
		"base64":  func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
		"tail":    func(s string) string { return s[len(s)-10:] },
	}
	for name, echo := range echoes {
		_, cli := hostile(t, func(w http.ResponseWriter, r *http.Request) bool {
			w.WriteHeader(http.StatusInternalServerError)
			// Padding puts the token across the point a snippet is cut at.
			fmt.Fprintf(w, `{"error":"%s bad header: %s"}`, strings.Repeat("x", 100), echo(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")))
			return true
		})
		cli.Env["DLQCTL_TOKEN"] = token
		for _, args := range [][]string{{"dlq", "ls"}, {"dlq", "check"}, {"dlq", "show", "p/t"}, {"dlq", "ls", "--debug"}} {
			out, stderr, code := cli.Exec(args...)
			if code != 3 {
				t.Fatalf("%s %v: exit %d", name, args, code)
			}
			for _, form := range []string{token, echo(token)} {
				for i := 0; i+8 <= len(form); i++ {
					if strings.Contains(out+stderr, form[i:i+8]) {
						t.Fatalf("%s %v printed %q of the token:\n%s", name, args, form[i:i+8], stderr)
					}
				}
			}
		}
	}
	// A token in the server's URL is refused, and not printed.
	_, cli := hostile(t, func(http.ResponseWriter, *http.Request) bool { return false })
	_, stderr, code := cli.Exec("--server", cli.Env["DLQCTL_SERVER"]+"/?token="+token, "dlq", "ls")
	if code != 2 || strings.Contains(stderr, token[:8]) {
		t.Fatalf("a token in --server: exit %d\n%s", code, stderr)
	}
}

// A broker that pages with limit but ignores offset answers every page
// with the first rows: every reader stops with a clear error, quickly.
func TestHostileBrokerIgnoringOffset(t *testing.T) {
	var requests atomic.Int64
	b, cli := hostile(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/api/v1/dlq" {
			requests.Add(1)
			q := r.URL.Query()
			q.Set("offset", "0")
			r.URL.RawQuery = q.Encode()
		}
		return false
	})
	b.Fill(1200, 3) // more than a page
	for _, args := range [][]string{{"dlq", "check"}, {"dlq", "stats"}, {"dlq", "ls", "-o", "ndjson"}, {"dlq", "sync"}, {"dlq", "show", "nope"}, {"dlq", "replay", "--all", "--dry-run"}} {
		requests.Store(0)
		start := time.Now()
		_, stderr, code := cli.Exec(args...)
		if code != 3 || !strings.Contains(stderr, "ignores offset") || requests.Load() > 60 || time.Since(start) > 20*time.Second {
			t.Fatalf("%v: exit %d after %d list requests:\n%s", args, code, requests.Load(), stderr)
		}
	}
}

// An answer that never ends, or a row too large to hold: a clear error
// naming the limit, not an unbounded read.
func TestHostileEndlessBody(t *testing.T) {
	_, cli := hostile(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/api/v1/dlq" {
			return false
		}
		io.WriteString(w, `{"messages":[{"id":"1","transactionId":"t","partitionId":"p","errorMessage":"`)
		chunk := []byte(strings.Repeat("a", 1<<16))
		for i := 0; i < 2000; i++ { // 128 MiB at most: dlqctl must stop long before
			if _, err := w.Write(chunk); err != nil {
				return true
			}
		}
		return true
	})
	// The real bound is 64 MiB; 1 MiB here keeps the race detector quick.
	cli.Tune = func(f *cmdutil.Factory) { f.MaxRow = 1 << 20 }
	for _, args := range [][]string{{"dlq", "ls"}, {"dlq", "check"}} {
		_, stderr, code := cli.Exec(args...)
		if code != 3 || !strings.Contains(stderr, "larger than 1 MiB") {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
	}
}

// The token is refused half-way through a batch (rotated, revoked): the
// batch stops, says how to resume, and exits 4.
func TestHostileUnauthorizedMidBatch(t *testing.T) {
	var mutating atomic.Int64
	b, cli := hostile(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodGet && mutating.Add(1) > 6 {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"Token has expired"}`)
			return true
		}
		return false
	})
	_, stderr, code := cli.Exec("dlq", "replay", "--queue", "orders", "--via", "manual", "--why", "x", "--yes", "--rate", "0", "--concurrency", "1")
	if code != 4 || !strings.Contains(stderr, "Resume with: dlqctl dlq replay --batch") || !strings.Contains(stderr, "refused the token") {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	if n := len(b.LiveMessages()); n == 0 || n > 6 {
		t.Fatalf("%d published before the refusal", n)
	}
}

// A broker with no /retry that hangs on it instead of answering 404: the
// default path never calls it (every message replayed, none unknown);
// --via endpoint asks it once, with an address that cannot exist, and
// stops at the timeout before anything is sent.
func TestHostileHungRetryRoute(t *testing.T) {
	b, cli := hostile(t, func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, "/retry") {
			<-r.Context().Done()
			return true
		}
		return false
	})
	b.SetLine(sandbox.Queen015)
	_, stderr, code := cli.Exec("--timeout", "1s", "dlq", "replay", "--queue", "orders", "--why", "x", "--yes", "--rate", "0")
	if code != 0 || regexp.MustCompile(`\d+ unknown`).MatchString(stderr) || !regexp.MustCompile(`: 75 replayed, 0 failed in`).MatchString(stderr) {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	depth := b.Depth()
	_, stderr, code = cli.Exec("--timeout", "1s", "dlq", "replay", "--queue", "payments", "--via", "endpoint", "--why", "x", "--yes", "--rate", "0")
	if code != 3 || !strings.Contains(stderr, "no answer within 1s") || b.Depth() != depth {
		t.Fatalf("--via endpoint: exit %d, %d rows gone:\n%s", code, depth-b.Depth(), stderr)
	}
}

// A broker whose database is down buffers pushes instead of storing them:
// the dead letter is kept (nothing deleted on a buffered push), and the
// batch stops until the broker is healthy.
func TestHostileBufferedPush(t *testing.T) {
	b, cli := hostile(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && r.URL.Path == "/api/v1/push" {
			io.WriteString(w, `[{"index":0,"status":"buffered","transaction_id":"x","queueName":"orders"}]`)
			return true
		}
		return false
	})
	depth := b.Depth()
	_, stderr, code := cli.Exec("dlq", "replay", "--queue", "orders", "--via", "manual", "--why", "x", "--yes", "--rate", "0", "--concurrency", "1")
	if code != 1 || !strings.Contains(stderr, "buffered") || !strings.Contains(stderr, "Resume with:") || b.Depth() != depth {
		t.Fatalf("exit %d, %d rows deleted:\n%s", code, depth-b.Depth(), stderr)
	}
}

// With its database away, the released server parks calls: --timeout ends
// each wait, and the error says so.
func TestHostileDatabaseDown(t *testing.T) {
	b, cli := seeded(t)
	b.SetLine(sandbox.Queen015)
	b.SetFaults(sandbox.Faults{DatabaseDown: true})
	_, stderr, code := cli.Exec("--timeout", "300ms", "dlq", "ls")
	if code != 3 || !strings.Contains(stderr, "no answer within 300ms (--timeout)") || !strings.Contains(stderr, "4 tries") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

// A broker whose list answers 200 {"success":false,...} has not said its
// DLQ is empty: check, ls, stats and a replay's dry run fail (exit 3)
// with the answer's first bytes, never "ok" or "no dead letters".
func TestHostileListThatIsNotAListing(t *testing.T) {
	b := sandbox.New(func() time.Time { return testutil.Now })
	inner := b.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/dlq" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"success": false, "message": "database unavailable"}`)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	defer srv.Close()
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	for _, args := range [][]string{{"dlq", "check"}, {"dlq", "ls"}, {"dlq", "ls", "-o", "json"}, {"dlq", "stats"}, {"dlq", "replay", "--all", "--dry-run"}} {
		out, stderr, code := cli.Exec(args...)
		if code != 3 || !strings.Contains(stderr, "database unavailable") || strings.Contains(out+stderr, "No dead letters") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, stderr)
		}
	}
}

// An interrupted read fails: exit 130, and what was printed does not
// pass for the whole answer (-o json is not a valid document of fewer
// rows). Interrupted before its first page, ls, a replay's and an rm's
// dry run do not say there is nothing.
func TestInterruptedReadsFail(t *testing.T) {
	b := sandbox.New(func() time.Time { return testutil.Now })
	b.Fill(5500, 9)
	b.SetFaults(sandbox.Faults{Latency: 60 * time.Millisecond})
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	for _, c := range []struct {
		args  []string
		after time.Duration
	}{
		{[]string{"dlq", "ls", "-o", "json"}, 200 * time.Millisecond},
		{[]string{"dlq", "ls", "-o", "ndjson"}, 200 * time.Millisecond},
		{[]string{"dlq", "ls"}, 20 * time.Millisecond},
		{[]string{"dlq", "replay", "--all", "--dry-run"}, 20 * time.Millisecond},
		{[]string{"dlq", "rm", "--all", "--dry-run"}, 20 * time.Millisecond},
		{[]string{"dlq", "ls", "--group-by", "error"}, 150 * time.Millisecond},
	} {
		cli := testutil.NewCLI(t, srv.URL, root.Run)
		ctx, cancel := context.WithCancel(context.Background())
		cli.Ctx = ctx
		time.AfterFunc(c.after, cancel)
		out, stderr, code := cli.Exec(c.args...)
		cancel()
		if code != 130 || strings.Contains(stderr, "No dead letters") || strings.Contains(stderr, "Nothing to") {
			t.Errorf("%v: exit %d\n%s", c.args, code, stderr)
		}
		if c.args[len(c.args)-1] == "json" && json.Valid([]byte(out)) {
			t.Errorf("%v: a valid JSON document of %d bytes after an interrupt", c.args, len(out))
		}
	}
}

// A broker that trickles its answer (a space a second, or a string a
// character a second) does not hold a command past --timeout's rule: an
// idle gap counts however many spaces fill it, and a row (or a whole
// answer) that does not complete within 4x --timeout ends the call.
func TestHostileTricklingBody(t *testing.T) {
	for name, trickle := range map[string]string{"spaces": " ", "a string": "x"} {
		start := map[string]string{"spaces": `{"messages":[`, "a string": `{"messages":[{"id":"`}[name]
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/api/v1/dlq" {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"queues":[]}`)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, start)
			w.(http.Flusher).Flush()
			for range 60 {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(200 * time.Millisecond):
				}
				io.WriteString(w, trickle)
				w.(http.Flusher).Flush()
			}
		}))
		cli := testutil.NewCLI(t, srv.URL, root.Run)
		for _, args := range [][]string{{"dlq", "check"}, {"dlq", "ls"}, {"dlq", "replay", "--all", "--dry-run"}, {"dlq", "sync"}} {
			t0 := time.Now()
			_, stderr, code := cli.Exec(append([]string{"--timeout", "500ms"}, args...)...)
			if code != 3 || time.Since(t0) > 5*time.Second {
				t.Errorf("%s %v: exit %d after %s\n%s", name, args, code, time.Since(t0).Round(time.Millisecond), stderr)
			}
		}
		srv.Close()
	}
}

// A 2.x list counts every matching row in total: an answer that counts
// rows it does not send is unreadable (exit 3), never an empty DLQ and a
// green gate.
func TestHostileListCountsRowsItDoesNotSend(t *testing.T) {
	b, cli := hostile(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/api/v1/dlq" {
			return false
		}
		io.WriteString(w, `{"messages":[],"pagination":{"limit":500,"offset":0},"total":50}`)
		return true
	})
	b.SetLine(sandbox.Queen22)
	for _, args := range [][]string{{"dlq", "check"}, {"dlq", "check", "--max-age", "1h"}, {"dlq", "ls"}, {"dlq", "stats"}, {"dlq", "replay", "--all", "--dry-run"}} {
		_, stderr, code := cli.Exec(args...)
		if code != 3 || !strings.Contains(stderr, "counts 50 matching rows") {
			t.Fatalf("%v: exit %d\n%s", args, code, stderr)
		}
	}
}

// A Queen 2.1 standby cluster answers reads and refuses every write with
// 503 "code":"standby" until it is promoted: a replay or discard stops at
// its first refusal (not retried as an election would be), names the
// standby and says how to resume (exit 3); nothing is written.
func TestStandbyClusterStopsTheBatch(t *testing.T) {
	b, cli := seeded(t)
	b.SetLine(sandbox.Queen22)
	b.SetFaults(sandbox.Faults{Standby: true})
	for _, args := range [][]string{
		{"dlq", "replay", "--all", "--why", "x", "--yes", "--rate", "0"},
		{"dlq", "rm", "--queue", "orders", "--why", "x", "--yes", "--rate", "0"},
	} {
		b.ResetCalls()
		start := time.Now()
		_, stderr, code := cli.Exec(args...)
		writes := mutating(b)
		if code != 3 || !strings.Contains(stderr, "standby cluster") || !strings.Contains(stderr, "--batch") || time.Since(start) > 10*time.Second || writes > 8 || b.Applied() != 0 {
			t.Fatalf("%v: exit %d after %s, %d writes tried\n%s", args, code, time.Since(start).Round(time.Millisecond), writes, stderr)
		}
	}
}

// A 1.6 broker that words its "gone" answers its own way (another
// language, a proxy's rewording): the verdict is read from result, not
// from the words. The console moves rows beside the batch; every message
// ends up in the broker once, and the run says which the console moved.
func TestGoneIsReadFromResultNotWords(t *testing.T) {
	var b *sandbox.Broker
	var h http.Handler
	b, cli := hostile(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/api/v1/dlq/") {
			return false
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code == http.StatusNotFound {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"success":false,"result":"gone","error":"Zeile weg","message":"Diese Zeile wurde schon verschoben"}`)
			return true
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
		return true
	})
	h = b.Handler()
	b.SetLine(sandbox.Queen16)
	moved := 0
	b.SetFaults(sandbox.Faults{Script: func(c sandbox.Call) sandbox.Action {
		if c.Route == "POST /api/v1/dlq/{id}/replay" && c.N == 2 {
			// One row a message: the console moving two rows of one
			// message publishes it twice by its own hand.
			seen := map[string]bool{}
			for _, r := range b.DeadLetterRows() {
				if a := r.PartitionID + "/" + r.TransactionID; r.Queue == "payments" && !seen[a] && len(seen) < 30 {
					seen[a] = true
					moved += b.ConsoleReplay(r.ID)
				}
			}
		}
		return sandbox.Serve
	}})
	_, stderr, code := cli.Exec("dlq", "replay", "--queue", "payments", "--why", "x", "--yes", "--rate", "0", "--order", "none", "--concurrency", "1")
	if code != 0 && code != 1 || !strings.Contains(stderr, "moved elsewhere") || strings.Contains(stderr, "no move route") || moved == 0 {
		t.Fatalf("exit %d, the console moved %d\n%s", code, moved, stderr)
	}
	live := map[string]int{}
	for _, m := range b.LiveMessages() {
		live[string(m.Payload)]++
		if live[string(m.Payload)] > 1 {
			t.Fatalf("%s published twice", m.Payload)
		}
	}
}
