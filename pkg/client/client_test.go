package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

func newClient(t testing.TB, url string, mod ...func(*client.Options)) *client.Client {
	t.Helper()
	o := client.Options{Server: url, Sleep: func(context.Context, time.Duration) error { return nil }}
	for _, m := range mod {
		m(&o)
	}
	c, err := client.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func collect(t *testing.T, c *client.Client, q client.ListQuery) []deadletter.Row {
	t.Helper()
	var out []deadletter.Row
	for r, err := range c.Rows(context.Background(), q) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestRowsPagesEverythingOnceOnBothServers(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("old=%v", old), func(t *testing.T) {
			b, url := testkit.Sandbox(t)
			b.Fill(1234, 7)
			if old {
				b.SetLine(sandbox.Queen015)
			}
			c := newClient(t, url)
			rows := collect(t, c, client.ListQuery{Limit: 100})
			if len(rows) != 1234 {
				t.Fatalf("got %d rows, want 1234", len(rows))
			}
			seen := map[client.Key]bool{}
			for i, r := range rows {
				k := client.RowKey(r)
				if seen[k] {
					t.Fatalf("row %+v listed twice", k)
				}
				seen[k] = true
				if i > 0 && r.FailedAt.After(rows[i-1].FailedAt) {
					t.Fatalf("row %d is newer than row %d: not newest first", i, i-1)
				}
			}
			calls := b.Calls()["GET /api/v1/dlq"]
			if old && calls > 2 {
				t.Fatalf("old server: %d list calls, want at most 2 (one page holds everything)", calls)
			}
			// The 14th, if any, is the call sent ahead as the short 13th
			// page was read, and dropped.
			if !old && (calls < 13 || calls > 14) {
				t.Fatalf("%d list calls, want 13 for 1234 rows by 100 (and at most one sent ahead)", calls)
			}
		})
	}
}

// From the second page on, the next page is asked for while this one is
// read, so the broker prepares it meanwhile: the third page's call
// arrives before the second page's answer is complete.
func TestRowsAsksForTheNextPageWhileReadingThisOne(t *testing.T) {
	const size = 100
	third := make(chan struct{})
	var once sync.Once
	var gaveUp atomic.Bool
	row := func(i int) string {
		return fmt.Sprintf(`{"id":"%d","transactionId":"t%d","partitionId":"p","queue":"q","consumerGroup":"g","failedAt":"2026-07-30T09:41:02.517Z"}`, i, i)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		off, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		n := size
		if off >= 2*size {
			once.Do(func() { close(third) })
			n = size / 2
		}
		io.WriteString(w, `{"messages":[`)
		for i := range n {
			if i == size/2 && off == size {
				// Half of the second page is out; the rest waits for the
				// third page's call (or gives up after a while).
				w.(http.Flusher).Flush()
				select {
				case <-third:
				case <-time.After(3 * time.Second):
					gaveUp.Store(true)
				}
			}
			if i > 0 {
				io.WriteString(w, ",")
			}
			io.WriteString(w, row(off+i))
		}
		io.WriteString(w, `]}`)
	}))
	defer srv.Close()
	rows := collect(t, newClient(t, srv.URL), client.ListQuery{Limit: size})
	if len(rows) != 2*size+size/2 {
		t.Fatalf("got %d rows, want %d", len(rows), 2*size+size/2)
	}
	if gaveUp.Load() {
		t.Fatal("the third page was asked for only once the second was read")
	}
	for i, r := range rows {
		if r.TransactionID != fmt.Sprintf("t%d", i) {
			t.Fatalf("row %d is %s: pages out of order", i, r.TransactionID)
		}
	}
}

// A server that answers the same page whatever the offset must not make
// the client loop, list rows twice, or end quietly as if the DLQ stopped
// there: it is an error that says why.
func TestRowsStopsOnRepeatedPages(t *testing.T) {
	var calls atomic.Int32
	page := `{"messages":[` +
		`{"id":"1","transactionId":"a","partitionId":"p","queue":"q","consumerGroup":"g","failedAt":"2026-07-30T09:41:02.517Z"},` +
		`{"id":"2","transactionId":"b","partitionId":"p","queue":"q","consumerGroup":"g","createdAt":"2026-07-30T09:41:01.000Z"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.WriteString(w, page)
	}))
	defer srv.Close()
	var rows []deadletter.Row
	var err error
	for r, e := range newClient(t, srv.URL).Rows(context.Background(), client.ListQuery{Limit: 2}) {
		if e != nil {
			err = e
			break
		}
		rows = append(rows, r)
	}
	if n := calls.Load(); len(rows) != 2 || n < 2 || n > 3 || !errors.Is(err, client.ErrOffsetIgnored) || !strings.Contains(err.Error(), "ignores offset") {
		t.Fatalf("%d rows in %d calls, err %v; want 2 rows in 2 calls (and at most one sent ahead), then an offset error", len(rows), n, err)
	}
	if rows[1].FailedAt.IsZero() {
		t.Fatal("createdAt must stand in for a missing failedAt")
	}
}

// A failedAt that is a number (seconds? milliseconds? since when?) is
// unreadable, not year 1: read as year 1, it would be the oldest dead
// letter there is.
func TestNumericFailedAtIsUnreadable(t *testing.T) {
	for _, field := range []string{`"failedAt":1764000000`, `"failedAt":1764000000000`, `"createdAt":17.5`, `"failedAt":{"s":1}`} {
		body := `{"messages":[{"id":"1","transactionId":"a","partitionId":"p","queue":"q","consumerGroup":"g",` + field + `}]}`
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
		var err error
		var rows []deadletter.Row
		for r, e := range newClient(t, srv.URL).Rows(context.Background(), client.ListQuery{}) {
			if e != nil {
				err = e
				break
			}
			rows = append(rows, r)
		}
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), "is not a timestamp") || len(rows) != 0 {
			t.Fatalf("%s: %d rows (%v), err %v; want an error saying it is not a timestamp", field, len(rows), rows, err)
		}
	}
}

func TestMessagesNullIsAnEmptyPage(t *testing.T) {
	for _, body := range []string{`{"success":true,"value":null}`, `{"messages":null}`, `{"messages":[]}`} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
		rows := collect(t, newClient(t, srv.URL), client.ListQuery{})
		srv.Close()
		if len(rows) != 0 {
			t.Fatalf("%s: %d rows", body, len(rows))
		}
	}
}

func TestErrorsAreTyped(t *testing.T) {
	cases := []struct {
		name   string
		status int
		ctype  string
		body   string
		want   error
		says   string
	}{
		{"no dead-letter row", 404, "text/plain", "No dead-letter row for this address", client.ErrNoDeadLetterRow, ""},
		{"route missing html", 404, "", "<html><body><h1>File Not Found</h1><hr><i>uWebSockets/20 Server</i></body></html>", client.ErrRouteMissing, "File Not Found"},
		{"route missing bare", 404, "text/plain", "404 Not Found", client.ErrRouteMissing, ""},
		{"old server not found as 200", 200, "application/json", `{"error":"Message not found"}`, client.ErrNoDeadLetterRow, ""},
		{"old server failure as 200", 200, "application/json", `{"error":"relation does not exist","success":false}`, client.ErrUnavailable, "relation"},
		{"unauthorized", 401, "application/json", `{"error":"Authentication required"}`, client.ErrUnauthorized, "--token"},
		{"expired as 200", 200, "application/json", `{"error":"Token has expired"}`, client.ErrUnauthorized, ""},
		{"forbidden", 403, "application/json", `{"error":"Insufficient permissions"}`, client.ErrForbidden, "access level"},
		{"server error", 500, "text/plain", "boom", client.ErrUnavailable, ""},
		{"html 200", 200, "text/html", "<!doctype html><html>login page</html>", client.ErrBadResponse, "<!doctype html>"},
		{"truncated json", 200, "application/json", `{"id":"b2f0","transactionId":"order:8812`, client.ErrBadResponse, `{"id":"b2f0"`},
		{"wrong shape", 200, "application/json", `[1,2,3]`, client.ErrBadResponse, "[1,2,3]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if c.ctype != "" {
					w.Header().Set("Content-Type", c.ctype)
				}
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
			}))
			defer srv.Close()
			_, err := newClient(t, srv.URL).Get(context.Background(), deadletter.Address{PartitionID: "p", TransactionID: "t"})
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("message %q should say %q on one line", err, c.says)
			}
		})
	}
}

func TestIdempotentCallsRetryPushesDoNot(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.Method]++
		n := hits[r.Method]
		mu.Unlock()
		switch {
		case r.Method == http.MethodGet && n == 1:
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		case r.Method == http.MethodGet && n == 2:
			w.WriteHeader(http.StatusBadGateway)
		case r.Method == http.MethodGet:
			io.WriteString(w, `{"messages":[]}`)
		case r.Method == http.MethodDelete && n < 3:
			w.WriteHeader(http.StatusServiceUnavailable)
		case r.Method == http.MethodDelete:
			io.WriteString(w, `{"success":true}`)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	var waits []time.Duration
	c := newClient(t, srv.URL, func(o *client.Options) {
		o.Sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	})
	if _, err := c.ListPage(context.Background(), client.ListQuery{}); err != nil {
		t.Fatal(err)
	}
	if len(waits) != 2 || waits[0] != 7*time.Second {
		t.Fatalf("waits = %v, want Retry-After's 7s first", waits)
	}
	if err := c.Delete(context.Background(), deadletter.Address{PartitionID: "p", TransactionID: "t"}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Push(context.Background(), []client.PushItem{{Queue: "q", Payload: json.RawMessage(`{}`)}})
	if !errors.Is(err, client.ErrUnavailable) || hits["POST"] != 1 {
		t.Fatalf("push: err %v after %d calls; a push must never be retried blindly", err, hits["POST"])
	}
	if hits["GET"] != 3 || hits["DELETE"] != 3 {
		t.Fatalf("hits = %v", hits)
	}
}

func TestConnectionErrorsRetryThenExplain(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	var tries int
	c := newClient(t, url, func(o *client.Options) {
		o.Sleep = func(context.Context, time.Duration) error { tries++; return nil }
	})
	_, err := c.Health(context.Background())
	if !errors.Is(err, client.ErrUnavailable) || tries != 3 || !strings.Contains(err.Error(), "check --server") {
		t.Fatalf("err = %v after %d retries", err, tries)
	}
}

func TestTokenNeverPrinted(t *testing.T) {
	const token = "s3cr3t-token-value"
	b, url := testkit.Sandbox(t)
	b.SetFaults(sandbox.Faults{Token: token})
	var trace bytes.Buffer
	c := newClient(t, url, func(o *client.Options) { o.Token = token; o.Debug = &trace })
	if _, err := c.ListPage(context.Background(), client.ListQuery{}); err != nil {
		t.Fatal(err)
	}
	bad := newClient(t, url, func(o *client.Options) { o.Token = "wrong-" + token; o.Debug = &trace })
	_, err := bad.ListPage(context.Background(), client.ListQuery{})
	if !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("wrong token: %v", err)
	}
	// An echoing server must not get the token into an error either.
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
		io.WriteString(w, "bad header: "+r.Header.Get("Authorization"))
	}))
	defer echo.Close()
	_, err2 := newClient(t, echo.URL, func(o *client.Options) { o.Token = token; o.Debug = &trace }).Health(context.Background())
	all := trace.String() + err.Error() + err2.Error()
	if strings.Contains(all, token) {
		t.Fatalf("the token leaked:\n%s", all)
	}
	if !strings.Contains(trace.String(), "Authorization: Bearer [redacted]") || !strings.Contains(trace.String(), "→ GET "+url+"/api/v1/dlq") {
		t.Fatalf("trace lacks the request lines:\n%s", trace.String())
	}
}

func TestUnreachableAddressesAreRefusedLocally(t *testing.T) {
	c := newClient(t, "http://127.0.0.1:1")
	for _, tx := range []string{"has space", "a/b", "50%", "q?x", "frag#1", "ünï", ".", ".."} {
		err := c.Delete(context.Background(), deadletter.Address{PartitionID: "p", TransactionID: tx})
		if !errors.Is(err, client.ErrUnreachable) || errors.Is(err, client.ErrNoDeadLetterRow) || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("%q: %v", tx, err)
		}
	}
}

func TestFindOldestIsLogarithmic(t *testing.T) {
	b, url := testkit.Sandbox(t)
	const n = 100_000
	b.Fill(n, 3)
	c := newClient(t, url)
	rows := b.DeadLetterRows()
	want := rows[len(rows)-1]
	b.ResetCalls()
	ext, err := c.FindOldest(context.Background(), client.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	bound := 2*int(math.Ceil(math.Log2(n))) + 4
	got := b.Calls()["GET /api/v1/dlq"]
	if ext.Depth != n || ext.Oldest.TransactionID != want.TransactionID || ext.Oldest.ConsumerGroup != want.ConsumerGroup {
		t.Fatalf("found depth %d oldest %s/%s, want %d and %s/%s", ext.Depth, ext.Oldest.TransactionID, ext.Oldest.ConsumerGroup, n, want.TransactionID, want.ConsumerGroup)
	}
	if got > bound || ext.Requests != got {
		t.Fatalf("%d list requests (client counted %d), bound %d", got, ext.Requests, bound)
	}
	t.Logf("oldest of %d rows found in %d requests (bound %d)", n, got, bound)
}

// Rows arrive at the head and vanish from the middle while the probe
// runs, about a thousand changes a second (a DLQ in an incident): the
// true oldest row must still be found.
func TestFindOldestUnderConcurrentChanges(t *testing.T) {
	b, url := testkit.Sandbox(t)
	b.Fill(20_000, 5)
	rows := b.DeadLetterRows()
	want := rows[len(rows)-1]
	c := newClient(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil && i < 5000; i++ {
			b.AddDeadLetters(sandbox.DeadLetter{Queue: "orders", Partition: "new", TransactionID: fmt.Sprintf("new-%d", i),
				ConsumerGroup: "billing", Error: "late", FailedAt: time.Now(), Data: json.RawMessage(`{}`)})
			if i%3 == 0 && i/3 < len(rows)-10 {
				r := rows[i/3]
				b.RemoveDeadLetters(r.PartitionID, r.TransactionID)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	for trial := 0; trial < 20; trial++ {
		ext, err := c.FindOldest(ctx, client.ListQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if ext.Oldest == nil || ext.Oldest.TransactionID != want.TransactionID {
			t.Fatalf("trial %d: oldest = %+v, want %s", trial, ext.Oldest, want.TransactionID)
		}
	}
	cancel()
	wg.Wait()
}

// A DLQ that grows between every two list requests (a burst of failures
// while check runs): the end moves on each answer, and the oldest row is
// still found, in a bounded number of requests.
func TestFindOldestWhileTheDLQGrows(t *testing.T) {
	b := sandbox.New(nil)
	b.Fill(5_000, 3)
	rows := b.DeadLetterRows()
	want := rows[len(rows)-1]
	var n atomic.Int64
	h := b.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.URL.Path == "/api/v1/dlq" {
			for range 3 {
				i := n.Add(1)
				b.AddDeadLetters(sandbox.DeadLetter{Queue: "orders", Partition: "new", TransactionID: fmt.Sprintf("new-%d", i),
					ConsumerGroup: "billing", Error: "late", FailedAt: time.Now(), Data: json.RawMessage(`{}`)})
			}
		}
	}))
	defer srv.Close()
	ext, err := newClient(t, srv.URL).FindOldest(context.Background(), client.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if ext.Oldest == nil || ext.Oldest.TransactionID != want.TransactionID || ext.Requests > 120 {
		t.Fatalf("oldest %+v after %d requests, want %s", ext.Oldest, ext.Requests, want.TransactionID)
	}
	t.Logf("%d requests while %d rows arrived", ext.Requests, n.Load())
}

func TestFindOldestOnAnOldServer(t *testing.T) {
	b, url := testkit.Sandbox(t)
	b.Fill(500, 9)
	b.SetLine(sandbox.Queen015)
	rows := b.DeadLetterRows()
	ext, err := newClient(t, url).FindOldest(context.Background(), client.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if ext.Depth != 500 || ext.Oldest.TransactionID != rows[len(rows)-1].TransactionID || ext.Requests != 1 {
		t.Fatalf("old server: depth %d, %d requests", ext.Depth, ext.Requests)
	}
}

func TestRetryEndpointAndManualPathOnTheSandbox(t *testing.T) {
	b, url := testkit.Sandbox(t)
	b.Load([]byte(`{"queues":[{"name":"orders","retryLimit":3,"consumerGroups":["billing"]}],
		"deadLetters":[{"queue":"orders","partition":"8812","transactionId":"order:8812:v3","consumerGroup":"billing","error":"x","retryCount":3,"age":"1h","data":{"orderId":8812}}]}`))
	c := newClient(t, url)
	a := deadletter.Address{PartitionID: sandbox.PartitionID("orders", "8812"), TransactionID: "order:8812:v3"}
	res, err := c.Retry(context.Background(), a)
	if err != nil || !res.DLQRowRemoved || res.ReplayedAs.TransactionID == a.TransactionID {
		t.Fatalf("retry = %+v, %v; want a fresh transaction id", res, err)
	}
	if _, err := c.Retry(context.Background(), a); !errors.Is(err, client.ErrNoDeadLetterRow) {
		t.Fatalf("second retry: %v", err)
	}
	if err := c.Delete(context.Background(), a); !errors.Is(err, client.ErrNoDeadLetterRow) {
		t.Fatalf("delete of a replayed address: %v", err)
	}
	item := client.PushItem{Queue: "orders", Partition: "8812", Payload: json.RawMessage(`{"orderId":8812}`), TransactionID: "dlqr-1-abc"}
	r1, err := c.Push(context.Background(), []client.PushItem{item})
	if err != nil || r1[0].Status != "queued" {
		t.Fatalf("push: %+v %v", r1, err)
	}
	r2, _ := c.Push(context.Background(), []client.PushItem{item})
	if r2[0].Status != "duplicate" || r2[0].MessageID != r1[0].MessageID || len(b.LiveMessages()) != 2 {
		t.Fatalf("repeated push = %+v; live %d", r2, len(b.LiveMessages()))
	}
	b.SetLine(sandbox.Queen015)
	if _, err := c.Retry(context.Background(), a); !errors.Is(err, client.ErrRouteMissing) {
		t.Fatalf("old server retry: %v", err)
	}
}
