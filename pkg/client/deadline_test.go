package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// A refused connection sent nothing (ErrNotSent: safe to send again,
// even a push); a call the broker received and never answered may have
// been applied (not ErrNotSent).
func TestNotSentIsToldFromNoAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	c := newClient(t, closed)
	_, err = c.Push(context.Background(), []client.PushItem{{Queue: "q", TransactionID: "t"}})
	if !errors.Is(err, client.ErrNotSent) || !client.NoAnswer(err) {
		t.Fatalf("refused: %v, want ErrNotSent", err)
	}
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	defer silent.Close()
	c = newClient(t, silent.URL, func(o *client.Options) { o.Timeout = 100 * time.Millisecond })
	_, err = c.Push(context.Background(), []client.PushItem{{Queue: "q", TransactionID: "t"}})
	if errors.Is(err, client.ErrNotSent) || !client.NoAnswer(err) {
		t.Fatalf("no answer: %v, want a call that may have been applied", err)
	}
	// An answer, even an error, is an answer.
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	defer busy.Close()
	_, err = newClient(t, busy.URL).Push(context.Background(), []client.PushItem{{Queue: "q", TransactionID: "t"}})
	if client.NoAnswer(err) || errors.Is(err, client.ErrNotSent) {
		t.Fatalf("503: %v, want an answer", err)
	}
}

// A broker that stops answering is given up on once it has been silent
// for Attempts × Timeout: later calls are not sent at all, so a command
// with many calls ends in about that time, not one timeout per call.
func TestSilentBrokerIsGivenUpOn(t *testing.T) {
	var calls atomic.Int64
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	defer silent.Close()
	c, err := client.New(client.Options{Server: silent.URL, Timeout: 100 * time.Millisecond, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a := deadletter.Address{PartitionID: "p", TransactionID: "t"}
	for i := 0; i < 20; i++ {
		_, err = c.Get(context.Background(), a)
	}
	if !errors.Is(err, client.ErrNotSent) {
		t.Fatalf("the 20th call: %v, want not sent", err)
	}
	// The first call's 4 tries (the fourth starts before 4 × 100ms have
	// passed), and perhaps one more: not 80.
	if n := calls.Load(); n > 6 {
		t.Fatalf("%d requests reached a silent broker", n)
	}
	c.ResetUnresponsive()
	before := calls.Load()
	c.Get(context.Background(), a)
	if calls.Load() == before {
		t.Fatal("after ResetUnresponsive the client must try again")
	}
}
