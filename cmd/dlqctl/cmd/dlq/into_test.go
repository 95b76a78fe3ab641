package dlq_test

// A replay into another broker (--to-context, --to-server): between
// brokers of different Queen lines, each with its own token, judged by
// what each broker holds and by which token reached which broker.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testutil"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// tokened is a sandbox that refuses a call without its token, and
// records every Authorization header it was sent.
type tokened struct {
	b     *sandbox.Broker
	url   string
	mu    sync.Mutex
	heard map[string]int
}

func onLineWithToken(t *testing.T, line sandbox.Line, token string) *tokened {
	t.Helper()
	b := sandbox.New(func() time.Time { return testutil.Now })
	b.SetLine(line)
	if err := b.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	tb := &tokened{b: b, heard: map[string]int{}}
	h := b.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		tb.mu.Lock()
		tb.heard[got]++
		tb.mu.Unlock()
		if got != "Bearer "+token && r.URL.Path != "/health" {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	tb.url = srv.URL
	return tb
}

// tokens are the Authorization headers the broker heard, but none.
func (tb *tokened) tokens() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var out []string
	for k := range tb.heard {
		if k != "" {
			out = append(out, k)
		}
	}
	return out
}

// Each selected message is live once in the destination with its
// payload, queue and partition, and gone from the source; a rerun
// publishes nothing; --keep copies and deletes nothing; each broker hears
// its own token and no other.
func TestReplayIntoAnotherBroker(t *testing.T) {
	for _, pair := range [][2]sandbox.Line{{sandbox.Queen015, sandbox.Queen22}, {sandbox.Queen16, sandbox.Queen16}, {sandbox.Queen22, sandbox.Queen015}} {
		t.Run(pair[0].String()+"→"+pair[1].String(), func(t *testing.T) {
			src := onLineWithToken(t, pair[0], "source-secret")
			dst := onLineWithToken(t, pair[1], "destination-secret")
			cli := testutil.NewCLI(t, src.url, root.Run)
			cli.Env["DLQCTL_TOKEN"] = "source-secret"
			dir := t.TempDir()
			tokenFile := filepath.Join(dir, "dst.token")
			if err := os.WriteFile(tokenFile, []byte("destination-secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cli.WriteConfig(fmt.Sprintf("contexts:\n  staging:\n    server: %s\n    token-file: %s\n    ledger: sqlite://%s\n", dst.url, tokenFile, filepath.Join(dir, "staging.db")))

			want := map[string]sandbox.Row{}
			for _, r := range src.b.DeadLetterRows() {
				if r.Queue == "orders" {
					want[compact(r.Payload)] = r
				}
			}
			before := len(dst.b.LiveMessages())
			out, stderr, code := cli.Exec("dlq", "replay", "--queue", "orders", "--to-context", "staging", "--why", "migrate", "--dry-run")
			if code != 0 || !strings.Contains(out, "Import plan: ") || !strings.Contains(out, "source: replay of --queue orders from another broker") || mutating(dst.b) != 0 || mutating(src.b) != 0 {
				t.Fatalf("dry run: exit %d, writes %d/%d\n%s%s", code, mutating(src.b), mutating(dst.b), out, stderr)
			}
			_, stderr, code = cli.Exec("dlq", "replay", "--queue", "orders", "--to-context", "staging", "--why", "migrate", "--yes", "--rate", "0")
			if code != 0 || !strings.Contains(stderr, " imported") || !strings.Contains(stderr, " discarded") {
				t.Fatalf("replay into staging: exit %d\n%s", code, stderr)
			}
			live := map[string]int{}
			for _, m := range dst.b.LiveMessages()[before:] {
				live[compact(m.Payload)]++
				r, ok := want[compact(m.Payload)]
				switch {
				case !ok:
					t.Errorf("%s published, which was no dead letter of orders", m.Payload)
				case m.Queue != r.Queue || m.Partition != r.Partition || !strings.HasPrefix(m.TransactionID, "dlqi-"):
					t.Errorf("%s/%s replayed as %s in %s/%s", r.PartitionID, r.TransactionID, m.TransactionID, m.Queue, m.Partition)
				}
			}
			for p, r := range want {
				if live[p] != 1 {
					t.Errorf("%s/%s is live %d times in the destination", r.PartitionID, r.TransactionID, live[p])
				}
			}
			for _, r := range src.b.DeadLetterRows() {
				if r.Queue == "orders" {
					t.Errorf("%s/%s is still dead-lettered in the source", r.PartitionID, r.TransactionID)
				}
			}
			for _, r := range want {
				out, _, _ := cli.Exec("dlq", "show", r.PartitionID+"/"+r.TransactionID)
				if !strings.Contains(out, "replayed into http://") || !strings.Contains(out, ", then discarded here by batch ") {
					t.Fatalf("show of a message replayed into another broker does not say so:\n%s", out)
				}
				break
			}
			n := mutating(dst.b)
			_, stderr, code = cli.Exec("dlq", "replay", "--queue", "orders", "--to-context", "staging", "--why", "again", "--yes", "--rate", "0")
			if code != 0 || !strings.Contains(stderr, "Nothing to replay") || mutating(dst.b) != n {
				t.Fatalf("a rerun: exit %d, %d writes\n%s", code, mutating(dst.b)-n, stderr)
			}

			// --keep: a copy in the destination, the dead letters left.
			kept := len(src.b.DeadLetterRows())
			_, stderr, code = cli.Exec("dlq", "replay", "--queue", "payments", "--to-context", "staging", "--keep", "--why", "reproduce", "--yes", "--rate", "0")
			if code != 0 || !strings.Contains(stderr, " imported") || strings.Contains(stderr, "discarded") || len(src.b.DeadLetterRows()) != kept {
				t.Fatalf("--keep: exit %d, %d rows left of %d\n%s", code, len(src.b.DeadLetterRows()), kept, stderr)
			}

			if got := src.tokens(); len(got) != 1 || got[0] != "Bearer source-secret" {
				t.Errorf("the source heard %q", got)
			}
			if got := dst.tokens(); len(got) != 1 || got[0] != "Bearer destination-secret" {
				t.Errorf("the destination heard %q", got)
			}
		})
	}
}

// --to-server with --to-token-file; refused with a sentence, nothing
// published: the destination is the source however spelled, a queue the
// destination lacks, a held message; flags that do not go with it.
func TestReplayIntoIsRefused(t *testing.T) {
	src := onLineWithToken(t, sandbox.Queen15, "source-secret")
	dst := onLineWithToken(t, sandbox.Queen22, "destination-secret")
	cli := testutil.NewCLI(t, src.url, root.Run)
	cli.Env["DLQCTL_TOKEN"] = "source-secret"
	tokenFile := filepath.Join(t.TempDir(), "d.token")
	if err := os.WriteFile(tokenFile, []byte("destination-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	same := strings.Replace(src.url, "127.0.0.1", "localhost", 1)
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--to-server", same}, 2, "the destination is this broker"},
		{[]string{"--to-server", dst.url, "--to-token-file", tokenFile, "--to-queue", "no-such-queue"}, 2, "has no queue no-such-queue"},
		{[]string{"--to-server", dst.url, "--to-context", "x"}, 2, "give one"},
		{[]string{"--to-server", dst.url, "--via", "move"}, 2, "--via is not for a replay into another broker"},
		{[]string{"--to-token-file", tokenFile}, 2, "--to-token-file goes with --to-server"},
		{[]string{"--keep"}, 2, "--keep and --to-partition are for a replay into another broker"},
		{[]string{"--to-context", "nowhere"}, 2, `no context "nowhere"`},
	} {
		_, stderr, code := cli.Exec(append([]string{"dlq", "replay", "--queue", "orders", "--why", "x", "--yes", "--rate", "0"}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.says) || strings.Count(stderr, "error:") != 1 {
			t.Errorf("%v: exit %d, want %d and one line saying %q:\n%s", c.args, code, c.code, c.says, stderr)
		}
	}
	// A hold of the source holds here too.
	if _, stderr, code := cli.Exec("dlq", "decide", "--class", "f47c6181", "--action", "hold", "--until", "4h", "--why", "INC-1"); code != 0 {
		t.Fatalf("hold: exit %d\n%s", code, stderr)
	}
	_, stderr, code := cli.Exec("dlq", "replay", "--class", "f47c6181", "--to-server", dst.url, "--to-token-file", tokenFile, "--why", "x", "--yes", "--rate", "0")
	if code != 2 || !strings.Contains(stderr, "under an active hold") {
		t.Errorf("a held class: exit %d\n%s", code, stderr)
	}
	if n := mutating(dst.b) + mutating(src.b); n != 0 {
		t.Fatalf("%d writes after refusals", n)
	}
	// --skip-held leaves the held messages here, and replays the rest.
	heldRows := map[string]bool{}
	for _, r := range src.b.DeadLetterRows() {
		if deadletter.ClassID(r.Error) == "f47c6181" {
			heldRows[r.PartitionID+"/"+r.TransactionID] = true
		}
	}
	_, stderr, code = cli.Exec("dlq", "replay", "--queue", "orders", "--to-server", dst.url, "--to-token-file", tokenFile, "--skip-held", "--why", "x", "--yes", "--rate", "0")
	if code != 0 || !strings.Contains(stderr, "under an active hold left out (--skip-held)") {
		t.Fatalf("--skip-held: exit %d\n%s", code, stderr)
	}
	left := 0
	for _, r := range src.b.DeadLetterRows() {
		if r.Queue == "orders" {
			left++ // the held messages' rows, of any class
		}
	}
	if left == 0 || len(dst.b.LiveMessages()) == 0 {
		t.Fatalf("--skip-held: %d rows of orders left here, %d live there", left, len(dst.b.LiveMessages()))
	}
	for a := range heldRows {
		p, tx, _ := strings.Cut(a, "/")
		found := false
		for _, r := range src.b.DeadLetterRows() {
			if r.PartitionID == p && r.TransactionID == tx {
				found = true
			}
		}
		if !found {
			t.Errorf("held %s left the source with --skip-held", a)
		}
	}
	// A destination that is a 2.1 standby refuses the first write: the
	// run stops there, saying so, and deletes nothing here.
	dst.b.SetFaults(sandbox.Faults{Standby: true})
	rows, live, srcWrites := len(src.b.DeadLetterRows()), len(dst.b.LiveMessages()), mutating(src.b)
	_, stderr, code = cli.Exec("dlq", "replay", "--queue", "payments", "--to-server", dst.url, "--to-token-file", tokenFile, "--why", "x", "--yes", "--rate", "0")
	if code == 0 || !strings.Contains(stderr, "standby") || len(src.b.DeadLetterRows()) != rows || len(dst.b.LiveMessages()) != live || mutating(src.b) != srcWrites {
		t.Errorf("into a standby: exit %d, %d of %d rows left, %d live (was %d)\n%s", code, len(src.b.DeadLetterRows()), rows, len(dst.b.LiveMessages()), live, stderr)
	}
	t.Logf("into a standby: exit %d\n%s", code, stderr)
	if got := dst.tokens(); len(got) > 1 || len(got) == 1 && got[0] != "Bearer destination-secret" {
		t.Errorf("the destination heard %q", got)
	}
}
