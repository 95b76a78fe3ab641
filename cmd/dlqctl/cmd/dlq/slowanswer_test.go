package dlq_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testutil"
)

// throttled writes what h answers at about rate bytes a second, in small
// pieces, as a broker far away does.
func throttled(h http.Handler, rate int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&slowWriter{ResponseWriter: w, rate: rate, start: time.Now()}, r)
	})
}

type slowWriter struct {
	http.ResponseWriter
	rate  int
	sent  int
	start time.Time
}

func (s *slowWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), 8<<10)
		m, err := s.ResponseWriter.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		s.ResponseWriter.(http.Flusher).Flush()
		s.sent += m
		p = p[k:]
		if due := s.start.Add(time.Duration(s.sent) * time.Second / time.Duration(s.rate)); time.Until(due) > 0 {
			time.Sleep(time.Until(due))
		}
	}
	return n, nil
}

// A one-body (0.x) broker sending a deep DLQ at an honest pace, slower
// than the whole answer can arrive within 4 × --timeout: it is read, all
// of it, because it keeps arriving; --timeout bounds silence, not an
// answer's length.
func TestHonestSlowAnswerIsRead(t *testing.T) {
	b := sandbox.New(func() time.Time { return testutil.Now })
	b.SetLine(sandbox.Queen015)
	b.Fill(12000, 7)
	srv := httptest.NewServer(throttled(b.Handler(), 1<<20)) // 1 MiB/s: about 6 s for its 6 MB
	t.Cleanup(srv.Close)
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	start := time.Now()
	out, stderr, code := cli.Exec("--timeout", "1s", "dlq", "ls", "-o", "ndjson")
	took := time.Since(start)
	if code != 0 || strings.Count(out, "\n") != b.Depth() {
		t.Fatalf("ls of an answer arriving for %s (4 × --timeout is 4s): exit %d, %d of %d rows\n%s", took.Round(100*time.Millisecond), code, strings.Count(out, "\n"), b.Depth(), lastLines(stderr, 5))
	}
	if took < 4*time.Second {
		t.Fatalf("the answer took %s: the throttle did not make it slower than 4 × --timeout", took)
	}
	if _, stderr, code := cli.Exec("--timeout", "1s", "dlq", "check", "--max-age", "1000d"); code != 0 {
		t.Fatalf("check: exit %d\n%s", code, lastLines(stderr, 5))
	}
}

// Valid rows that trickle (each within --timeout of the last, so never
// silent) end the read once the answer has gone on past 4 × --timeout at
// less than the least pace an answer keeps: exit 3, soon.
func TestTricklingRowsEnd(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/api/v1/dlq" {
			fmt.Fprint(w, `{"queues":[]}`)
			return
		}
		fmt.Fprint(w, `{"messages":[`)
		for i := 0; r.Context().Err() == nil && i < 1000; i++ {
			if i > 0 {
				fmt.Fprint(w, ",")
			}
			fmt.Fprintf(w, `{"id":"m-%d","transactionId":"t-%d","partitionId":"p","queue":"orders","partition":"0","consumerGroup":"billing","errorMessage":"boom","retryCount":3,"data":{"n":%d},"failedAt":"2026-11-30T02:00:00.000Z"}`, i, i, i)
			w.(http.Flusher).Flush()
			time.Sleep(150 * time.Millisecond)
		}
		fmt.Fprint(w, `]}`)
	}))
	t.Cleanup(srv.Close)
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	for _, args := range [][]string{{"dlq", "check"}, {"dlq", "ls", "-o", "ndjson"}, {"dlq", "replay", "--all", "--dry-run"}} {
		start := time.Now()
		_, stderr, code := cli.Exec(append([]string{"--timeout", "500ms"}, args...)...)
		if code != 3 || !strings.Contains(stderr, "the answer trickled") || time.Since(start) > 10*time.Second {
			t.Errorf("%v: exit %d after %s\n%s", args, code, time.Since(start).Round(100*time.Millisecond), lastLines(stderr, 3))
		}
	}
}

// An answer of valid rows that goes on without end, fast, ends at the
// row cap (lowered here: the real one, 10 million, is
// TestEndlessListOfValidRows's) with exit 3, whoever reads it.
func TestEndlessAnswerEndsAtTheRowCap(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/api/v1/dlq" {
			fmt.Fprint(w, `{"queues":[]}`)
			return
		}
		fmt.Fprint(w, `{"messages":[`)
		for i := 0; r.Context().Err() == nil; i++ {
			if i > 0 {
				fmt.Fprint(w, ",")
			}
			fmt.Fprintf(w, `{"id":"m-%d","transactionId":"t-%d","partitionId":"p","queue":"orders","partition":"0","consumerGroup":"billing","errorMessage":"boom","retryCount":3,"data":{"n":%d},"failedAt":"2026-11-30T02:00:00.000Z"}`, i, i, i)
		}
	}))
	t.Cleanup(srv.Close)
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	cli.Tune = func(f *cmdutil.Factory) { f.MaxAnswerRows = 20000 }
	for _, args := range [][]string{{"dlq", "check"}, {"dlq", "ls", "-o", "ndjson"}, {"dlq", "replay", "--all", "--dry-run"}, {"dlq", "sync"}} {
		_, stderr, code := cli.Exec(append([]string{"--timeout", "1s"}, args...)...)
		if code != 3 || !strings.Contains(stderr, "goes on past 20000 rows") {
			t.Errorf("%v: exit %d\n%s", args, code, lastLines(stderr, 3))
		}
	}
}
