package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Extent is what a probe found out about one filtered DLQ without reading
// it: its depth and its oldest row.
type Extent struct {
	Depth    int
	Oldest   *deadletter.Row
	Requests int
	// OneBody: the broker answered the whole filtered DLQ to the first
	// probe (it ignores limit); the depth and oldest row come from
	// streaming through that answer, and offsets mean nothing there.
	OneBody bool
}

// FindOldest finds the oldest row (the last one, the list being newest
// first) in O(log N) list requests: limit=1 at offsets 1, 2, 4, … until an
// empty page, then a binary search between the last two offsets. The end
// found is confirmed by one read of a small window around it; if rows
// were added or removed meanwhile, the search continues from there with a
// wider window (a few times at most).
// A broker that ignores offset (the same row at offset 0 and further on)
// is an error, never an endless search.
func (c *Client) FindOldest(ctx context.Context, q ListQuery) (*Extent, error) {
	return c.FindOldestBelow(ctx, q, 0)
}

// FindOldestBelow is FindOldest given an offset the filtered DLQ probably
// ends before (a group's rows are within its queue's depth): the search
// starts there instead of galloping up, about log2(upper) requests. A
// wrong guess costs a few requests, never a wrong answer.
func (c *Client) FindOldestBelow(ctx context.Context, q ListQuery, upper int) (*Extent, error) {
	q.NoData = true
	p := &probe{c: c, ctx: ctx, q: q, ext: &Extent{}}
	n, err := p.head()
	switch {
	case err != nil:
		return nil, err
	case n == 0:
		return p.ext, nil
	case n > 1:
		p.ext.Depth, p.ext.OneBody = n, true
		return p.ext, nil
	}
	if err := p.start(upper); err != nil {
		return nil, err
	}
	return p.settle()
}

// probe is one search for the end of a filtered DLQ. Invariant for the
// binary search: offset lo was non-empty, offset hi empty.
type probe struct {
	c        *Client
	ctx      context.Context
	q        ListQuery
	ext      *Extent
	firstKey Key
	lo, hi   int
}

// head is the first probe. It streams: on a broker that ignores limit it
// is the whole DLQ, counted as it passes (and its oldest row kept),
// never held. It returns how many rows it saw.
func (p *probe) head() (int, error) {
	p.ext.Requests++
	n := 0
	q := p.q
	q.Offset, q.Limit = 0, 1
	_, err := p.c.listStream(p.ctx, q, func(r deadletter.Row) bool {
		if n == 0 {
			p.firstKey = RowKey(r)
		}
		n++
		if p.ext.Oldest == nil || r.FailedAt.Before(p.ext.Oldest.FailedAt) {
			r := r
			p.ext.Oldest = &r
		}
		return true
	})
	return n, err
}

// at reads limit rows at offset off. The head's row further on means
// rows arrived at the head meanwhile (the head is newer now), or that
// offset is ignored: the head is read again to tell.
func (p *probe) at(off, limit int) ([]deadletter.Row, error) {
	p.ext.Requests++
	p.q.Offset, p.q.Limit = off, limit
	pg, err := p.c.ListPage(p.ctx, p.q)
	if err != nil {
		return nil, err
	}
	if off > 0 && len(pg.Rows) > 0 && RowKey(pg.Rows[0]) == p.firstKey {
		p.ext.Requests++
		p.q.Offset, p.q.Limit = 0, 1
		head, err := p.c.ListPage(p.ctx, p.q)
		if err != nil {
			return nil, err
		}
		if len(head.Rows) > 0 && RowKey(head.Rows[0]) == p.firstKey {
			return nil, p.c.offsetIgnored(off)
		}
		if len(head.Rows) > 0 {
			p.firstKey = RowKey(head.Rows[0])
		}
	}
	return pg.Rows, nil
}

// forward searches exponentially up from base (non-empty).
func (p *probe) forward(base int) error {
	p.lo = base
	for step := 1; ; step *= 2 {
		if step > 1<<40 {
			return p.c.offsetIgnored(base + step)
		}
		rows, err := p.at(base+step, 1)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			p.hi = base + step
			return nil
		}
		p.lo = base + step
	}
}

// backward searches exponentially down from top (empty).
func (p *probe) backward(top int) error {
	p.hi = top
	for step := 1; ; step *= 2 {
		off := max(top-step, 0)
		rows, err := p.at(off, 1)
		if err != nil {
			return err
		}
		if len(rows) > 0 {
			p.lo = off
			return nil
		}
		p.hi = off
		if off == 0 {
			p.lo = -1
			return nil
		}
	}
}

// start brackets the end: from the guess upper when there is one, else
// galloping up from the head.
func (p *probe) start(upper int) error {
	if upper > 1 {
		rows, err := p.at(upper, 1)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			p.lo, p.hi = 0, upper
			return nil
		}
		return p.forward(upper)
	}
	return p.forward(0)
}

// settle binary-searches the bracket, then confirms the end with one
// read of a window around it: a page that holds it (fewer rows than
// asked) says, in one answer of the broker, which row is last now. Rows
// arriving or leaving during the search move the end; the window widens
// each round so a busy DLQ is caught.
func (p *probe) settle() (*Extent, error) {
	// The search stops a window short of the end, and one read of the
	// window finds it: a few requests fewer than searching to the row
	// (log2 of the window), for the rows of one page, without payloads.
	win := ProbeWindow
	for round := 0; round < 16; round, win = round+1, min(win*2, MaxPage) {
		for p.hi-p.lo >= win {
			mid := p.lo + (p.hi-p.lo)/2
			rows, err := p.at(mid, 1)
			if err != nil {
				return nil, err
			}
			if len(rows) > 0 {
				p.lo = mid
			} else {
				p.hi = mid
			}
		}
		if p.lo < 0 {
			p.ext.Oldest = nil
			return p.ext, nil // emptied while probing
		}
		off := p.lo
		if p.hi-p.lo <= 1 {
			off = max(p.lo-win/2, 0) // the end moved: look around it
		}
		rows, err := p.at(off, win)
		if err != nil {
			return nil, err
		}
		switch {
		case len(rows) > 0 && len(rows) < win:
			p.ext.Depth, p.ext.Oldest = off+len(rows), &rows[len(rows)-1]
			return p.ext, nil
		case len(rows) == 0: // rows were removed: the end moved below the window
			err = p.backward(off)
		default: // rows were added: the end moved past the window
			err = p.forward(off + win - 1)
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, &HTTPError{Method: http.MethodGet, URL: p.c.shown + "/api/v1/dlq", Kind: ErrUnavailable,
		Err: errors.New("the DLQ changed faster than its end could be found; try again")}
}

// ProbeWindow is the window a search for the end of a filtered DLQ
// reads the end from: the binary search stops once the end is bracketed
// within it.
const ProbeWindow = 256

func (c *Client) offsetIgnored(off int) error {
	return &HTTPError{Method: http.MethodGet, URL: c.shown + "/api/v1/dlq", Status: 200, Kind: ErrOffsetIgnored,
		Err: fmt.Errorf("%w: offset %d answered the row of offset 0, so the end of the DLQ cannot be found", ErrOffsetIgnored, off)}
}

// IndexOlderThan returns the offset of the first row that failed before
// cutoff (Depth when none did), by binary search over a paged DLQ whose
// extent FindOldest measured: O(log N) requests, no row read. Rows older
// than cutoff are then Depth minus that index.
func (c *Client) IndexOlderThan(ctx context.Context, q ListQuery, ext *Extent, cutoff time.Time) (int, error) {
	if ext.OneBody {
		return 0, errors.New("IndexOlderThan on a one-body extent")
	}
	if ext.Oldest == nil || !ext.Oldest.FailedAt.Before(cutoff) {
		return ext.Depth, nil
	}
	q.NoData = true
	// Binary search to within a window, then one read of the window.
	lo, hi := 0, ext.Depth-1
	for hi-lo >= ProbeWindow {
		mid := lo + (hi-lo)/2
		ext.Requests++
		q.Offset, q.Limit = mid, 1
		p, err := c.ListPage(ctx, q)
		if err != nil {
			return 0, err
		}
		if len(p.Rows) == 0 || p.Rows[0].FailedAt.Before(cutoff) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	ext.Requests++
	q.Offset, q.Limit = lo, hi-lo+1
	p, err := c.ListPage(ctx, q)
	if err != nil {
		return 0, err
	}
	for i, r := range p.Rows {
		if r.FailedAt.Before(cutoff) {
			return lo + i, nil
		}
	}
	return lo + len(p.Rows), nil
}
