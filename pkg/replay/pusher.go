package replay

import (
	"context"
	"errors"
	"net/http"

	"github.com/dlqctl/dlqctl/pkg/client"
)

// pusher coalesces the manual path's pushes: the workers' pushes waiting
// at one moment go out as one call with an items array, each worker
// getting its own item's result. At an unlimited rate that is one push a
// few addresses instead of one an address; at a limited one, pushes
// rarely meet and go out alone. Each item keeps its derived transaction
// id, so a call that partly landed before failing is repeated as
// duplicates.
type pusher struct {
	b     Broker
	reqs  chan pushReq
	ended chan struct{}
}

type pushReq struct {
	item client.PushItem
	done chan pushAnswer
}

type pushAnswer struct {
	res client.PushResult
	err error
}

// maxPushItems bounds one coalesced call's items array.
const maxPushItems = 64

// newPusher starts callers goroutines making the calls; close it with
// stop once nothing pushes any more.
func newPusher(ctx context.Context, b Broker, callers int) *pusher {
	p := &pusher{b: b, reqs: make(chan pushReq), ended: make(chan struct{})}
	left := make(chan struct{}, callers)
	for range callers {
		go func() {
			defer func() { left <- struct{}{} }()
			p.serve(ctx)
		}()
	}
	go func() {
		for range callers {
			<-left
		}
		close(p.ended)
	}()
	return p
}

func (p *pusher) stop() {
	close(p.reqs)
	<-p.ended
}

// push sends one item, alone or with others', and returns its result.
func (p *pusher) push(item client.PushItem) (client.PushResult, error) {
	r := pushReq{item: item, done: make(chan pushAnswer, 1)}
	p.reqs <- r
	a := <-r.done
	return a.res, a.err
}

func (p *pusher) serve(ctx context.Context) {
	for first := range p.reqs {
		batch := []pushReq{first}
	gather:
		for len(batch) < maxPushItems {
			select {
			case r, ok := <-p.reqs:
				if !ok {
					break gather
				}
				batch = append(batch, r)
			default:
				break gather
			}
		}
		p.send(ctx, batch)
	}
}

// send makes one call for batch. A call the broker rejected as a whole
// (400, 413, 422: one item may be what it objects to) is made again an
// item at a time, so that one bad item fails alone; any other error is
// every item's, and each worker's own retries take it from there.
func (p *pusher) send(ctx context.Context, batch []pushReq) {
	items := make([]client.PushItem, len(batch))
	for i, r := range batch {
		items[i] = r.item
	}
	res, err := p.b.Push(ctx, items)
	if err == nil {
		for i, r := range batch {
			r.done <- pushAnswer{res: res[i]}
		}
		return
	}
	var he *client.HTTPError
	if len(batch) > 1 && errors.As(err, &he) && (he.Status == http.StatusBadRequest || he.Status == http.StatusRequestEntityTooLarge || he.Status == http.StatusUnprocessableEntity) {
		for _, r := range batch {
			p.send(ctx, []pushReq{r})
		}
		return
	}
	for _, r := range batch {
		r.done <- pushAnswer{err: err}
	}
}
