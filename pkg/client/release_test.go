package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Each line is told from what the broker answers, never from its
// version string: 0.x says 1.0.0 and is 0.x all the same.
func TestReleaseOfEachLine(t *testing.T) {
	for line, want := range map[sandbox.Line]client.Line{
		sandbox.Queen015: client.Line0x,
		sandbox.Queen15:  client.Line1,
		sandbox.Queen16:  client.Line16,
		sandbox.Queen22:  client.Line2,
	} {
		b := sandbox.New(nil)
		b.SetLine(line)
		srv := httptest.NewServer(b.Handler())
		c := newClient(t, srv.URL)
		rel, err := c.Release(context.Background())
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if rel.Line != want || rel.Told == "" {
			t.Errorf("%s: told %v (%s), want %v", line, rel.Line, rel.Told, want)
		}
		if rel.Moves() != (want == client.Line16 || want == client.Line2) {
			t.Errorf("%s: moves %v", line, rel.Moves())
		}
	}
	// A broker that says 1.6.0 without the route 1.6 added is not taken
	// at its word.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/health" {
			_ = json.NewEncoder(w).Encode(map[string]any{"status": "healthy", "engine": "segments-rust", "version": "1.6.0"})
			return
		}
		w.WriteHeader(404)
		_, _ = w.Write([]byte(`{"error":"Not Found","code":"no_such_route"}`))
	}))
	defer srv.Close()
	rel, err := newClient(t, srv.URL).Release(context.Background())
	if err != nil || rel.Line != client.Line1 {
		t.Fatalf("a 1.6.0 string without the route: %v %v", rel.Line, err)
	}
	// What cannot be told is unknown, and said so.
	seed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "healthy", "database": "connected", "version": "9.9"})
	}))
	defer seed.Close()
	rel, err = newClient(t, seed.URL).Release(context.Background())
	if err != nil || rel.Line != client.LineUnknown || rel.Moves() || rel.KeepsMessageOnDelete() {
		t.Fatalf("no engine, no server: %+v %v", rel, err)
	}
}

// The release is asked once a client.
func TestReleaseIsAskedOnce(t *testing.T) {
	b := sandbox.New(nil)
	b.SetLine(sandbox.Queen16)
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	c := newClient(t, srv.URL)
	for range 3 {
		if _, err := c.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.Calls()["GET /api/v1/dlq"]; n != 0 {
		t.Fatalf("%d list calls", n)
	}
}

// A 1.6 /health answering 503 (its database away) still says what the
// broker is.
func TestReleaseFromAnUnhealthyBroker(t *testing.T) {
	b := sandbox.New(nil)
	b.SetLine(sandbox.Queen16)
	b.SetFaults(sandbox.Faults{DatabaseDown: true})
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	c := newClient(t, srv.URL, func(o *client.Options) { o.Timeout = 300 * time.Millisecond })
	// The kv probe is parked like every other call: an error, said.
	if _, err := c.Release(context.Background()); err == nil {
		t.Fatal("a broker whose database is away was placed without its probe")
	}
}

// The move's verdicts and failures, as the client reports them.
func TestMoveVerdictsThroughTheClient(t *testing.T) {
	b := sandbox.New(nil)
	b.SetLine(sandbox.Queen16)
	now := time.Now()
	b.AddDeadLetters(
		sandbox.DeadLetter{Queue: "q", Partition: "p", TransactionID: "a", ConsumerGroup: "g", Error: "e", FailedAt: now, Data: json.RawMessage(`1`)},
		sandbox.DeadLetter{Queue: "q", Partition: "p", TransactionID: "b", ConsumerGroup: "g", Error: "e", FailedAt: now.Add(-time.Second), Data: json.RawMessage(`2`)},
	)
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	c := newClient(t, srv.URL)
	ctx := context.Background()
	rows := b.DeadLetterRows()
	m, err := c.Move(ctx, rows[0].ID, nil)
	if err != nil || !m.Copied() || m.ReplayedAs.TransactionID != client.CopyID(rows[0].ID) {
		t.Fatalf("move: %+v %v", m, err)
	}
	if _, err := c.Move(ctx, rows[0].ID, nil); !errors.Is(err, client.ErrNoDeadLetterRow) {
		t.Fatalf("a second move: %v", err)
	}
	script := func(a sandbox.Action, times int) {
		n := 0
		b.SetFaults(sandbox.Faults{Script: func(call sandbox.Call) sandbox.Action {
			if call.Route == "POST /api/v1/dlq/{id}/replay" && n < times {
				n++
				return a
			}
			return sandbox.Serve
		}})
	}
	// Maintenance (503) is waited out; a 500 that changed nothing is
	// tried again; a 500 with dlqRowRemoved null is unknown.
	script(sandbox.Maintenance, 2)
	if m, err := c.Move(ctx, rows[1].ID, &client.Destination{Queue: "q", Partition: "p"}); err != nil || !m.Copied() {
		t.Fatalf("after maintenance: %+v %v", m, err)
	}
	b.AddDeadLetters(sandbox.DeadLetter{Queue: "q", Partition: "p", TransactionID: "c", ConsumerGroup: "g", Error: "e", FailedAt: now, Data: json.RawMessage(`3`)})
	id := b.DeadLetterRows()[0].ID
	script(sandbox.FailNotApplied, 1)
	if m, err := c.Move(ctx, id, nil); err != nil || !m.Copied() {
		t.Fatalf("after a 500 that changed nothing: %+v %v", m, err)
	}
	b.AddDeadLetters(sandbox.DeadLetter{Queue: "q", Partition: "p", TransactionID: "d", ConsumerGroup: "g", Error: "e", FailedAt: now, Data: json.RawMessage(`4`)})
	id = b.DeadLetterRows()[0].ID
	script(sandbox.UnknownAfterApply, 1)
	if _, err := c.Move(ctx, id, nil); !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("dlqRowRemoved null: %v", err)
	}
	script(sandbox.CutAfterApply, 1)
	b.AddDeadLetters(sandbox.DeadLetter{Queue: "q", Partition: "p", TransactionID: "e", ConsumerGroup: "g", Error: "e", FailedAt: now, Data: json.RawMessage(`5`)})
	if _, err := c.Move(ctx, b.DeadLetterRows()[0].ID, nil); !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("a lost answer: %v", err)
	}
}

// A Rust broker's unknown route is a missing route, not a missing row.
func TestNoSuchRouteIsARouteMissing(t *testing.T) {
	b := sandbox.New(nil)
	b.SetLine(sandbox.Queen15)
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	if _, err := newClient(t, srv.URL).Move(context.Background(), "00000000-0000-0000-0000-000000000000", nil); !errors.Is(err, client.ErrRouteMissing) {
		t.Fatalf("the move on 1.5: %v", err)
	}
}

// A 1.x row with a null transactionId is read, under an address that
// says so and that no call names; the rest of the list is read too.
func TestRowWithoutTransactionID(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"messages":[{"id":"6a1e0000-0000-4000-8000-000000000001","transactionId":null,"partitionId":"p1","queue":"q","partition":"0",` +
			`"consumerGroup":"__timer__","errorMessage":"timer exhausted","retryCount":3,"data":null,"failedAt":"2026-07-30T09:41:02.517Z"},` +
			`{"id":"6a1e0000-0000-4000-8000-000000000002","transactionId":"t2","partitionId":"p1","queue":"q","partition":"0",` +
			`"consumerGroup":"g","errorMessage":"e","retryCount":3,"data":1,"failedAt":"2026-07-30T09:41:01.517Z"}],"total":2}`))
	}))
	defer srv.Close()
	rows := collect(t, newClient(t, srv.URL), client.ListQuery{})
	if len(rows) != 2 || rows[0].TransactionID != deadletter.NoTransactionID("6a1e0000-0000-4000-8000-000000000001") {
		t.Fatalf("rows %+v", rows)
	}
	if why := rows[0].Address().Unreachable(); !strings.Contains(why, "no transaction id") {
		t.Fatalf("unreachable %q", why)
	}
}

// 2.x clamps limit to 1000: a read that asks for more still reads every
// row, never taking the clamped page for the last one.
func TestPagesOfAtMostAThousand(t *testing.T) {
	b := sandbox.New(nil)
	b.SetLine(sandbox.Queen22)
	b.Fill(2500, 3)
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	want := b.Depth()
	if got := len(collect(t, newClient(t, srv.URL), client.ListQuery{Limit: 5000})); got != want {
		t.Fatalf("read %d of %d rows", got, want)
	}
}
