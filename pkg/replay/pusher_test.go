package replay

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// pushOnly is a broker that only takes pushes: it holds each call until
// release says, and rejects a whole call (400) that carries a poison item,
// as a broker does with one payload it cannot store.
type pushOnly struct {
	mu      sync.Mutex
	calls   [][]client.PushItem
	release chan struct{}
}

func (p *pushOnly) Push(_ context.Context, items []client.PushItem) ([]client.PushResult, error) {
	<-p.release
	out := make([]client.PushResult, len(items))
	for i, it := range items {
		if it.TransactionID == "poison" {
			return nil, &client.HTTPError{Method: http.MethodPost, Status: http.StatusBadRequest, Body: "payload too large", Kind: client.ErrUnavailable}
		}
		out[i] = client.PushResult{Index: i, TransactionID: it.TransactionID, Status: "queued"}
	}
	p.mu.Lock()
	p.calls = append(p.calls, items) // the calls it took
	p.mu.Unlock()
	return out, nil
}

func (p *pushOnly) Rows(context.Context, client.ListQuery) iter.Seq2[deadletter.Row, error] {
	return nil
}
func (p *pushOnly) Get(context.Context, deadletter.Address) (*client.Message, error) { return nil, nil }
func (p *pushOnly) Retry(context.Context, deadletter.Address) (*client.RetryResult, error) {
	return nil, nil
}
func (p *pushOnly) Move(context.Context, string, *client.Destination) (*client.Moved, error) {
	return nil, nil
}
func (p *pushOnly) Deleted(context.Context, deadletter.Address) (int, error) { return -1, nil }

type pushAnswerFor struct {
	txid string
	res  client.PushResult
	err  error
}

// pushAtOnce pushes n items from n goroutines that meet at the pusher
// while its first call is held, the item at poison (if any) one the
// broker rejects the whole call for.
func pushAtOnce(t *testing.T, n, poison int) (*pushOnly, map[string]pushAnswerFor) {
	t.Helper()
	b := &pushOnly{release: make(chan struct{})}
	p := newPusher(context.Background(), b, 1)
	answers := make(chan pushAnswerFor, n)
	var started sync.WaitGroup
	started.Add(n)
	for i := range n {
		txid := fmt.Sprintf("t%d", i)
		if i == poison {
			txid = "poison"
		}
		go func() {
			started.Done()
			res, err := p.push(client.PushItem{Queue: "orders", Partition: "1", TransactionID: txid})
			answers <- pushAnswerFor{txid, res, err}
		}()
	}
	started.Wait()
	time.Sleep(20 * time.Millisecond) // for them to reach the queue; not asserted on
	close(b.release)
	got := map[string]pushAnswerFor{}
	for range n {
		a := <-answers
		got[a.txid] = a
	}
	p.stop()
	for txid, a := range got {
		switch {
		case txid == "poison":
			var he *client.HTTPError
			if !errors.As(a.err, &he) || he.Status != http.StatusBadRequest {
				t.Errorf("the rejected item got %v, want its 400", a.err)
			}
		case a.err != nil || a.res.TransactionID != txid || a.res.Status != "queued":
			t.Errorf("%s: got %+v, %v: want its own result", txid, a.res, a.err)
		}
	}
	return b, got
}

// Pushes waiting at one moment go out as one call, each caller getting
// its own item's result.
func TestPusherCoalesces(t *testing.T) {
	const n = 20
	b, _ := pushAtOnce(t, n, -1)
	items := 0
	for _, c := range b.calls {
		items += len(c)
	}
	if len(b.calls) > n/2 || items != n {
		t.Fatalf("%d calls took %d items for %d pushes: want a few calls, every item once", len(b.calls), items, n)
	}
}

// A call the broker rejects as a whole is made again an item at a time:
// only the item it objects to fails.
func TestPusherIsolatesARejectedItem(t *testing.T) {
	const n = 20
	b, _ := pushAtOnce(t, n, 7)
	items := 0
	for _, c := range b.calls {
		items += len(c)
	}
	if items != n-1 {
		t.Fatalf("the broker took %d items, want the %d good ones once each", items, n-1)
	}
}
