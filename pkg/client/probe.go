package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Extent is what a probe found out about one filtered DLQ without reading
// it: its depth and its oldest row.
type Extent struct {
	Depth    int
	Oldest   *Row
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
	ext := &Extent{}
	var firstKey Key
	at := func(off, limit int) ([]Row, error) {
		ext.Requests++
		q.Offset, q.Limit = off, limit
		p, err := c.ListPage(ctx, q)
		if err != nil {
			return nil, err
		}
		if off > 0 && len(p.Rows) > 0 && RowKey(p.Rows[0]) == firstKey {
			// The head's row, further on: either rows arrived at the head
			// meanwhile (the head is newer now), or offset is ignored.
			ext.Requests++
			q.Offset, q.Limit = 0, 1
			head, err := c.ListPage(ctx, q)
			if err != nil {
				return nil, err
			}
			if len(head.Rows) > 0 && RowKey(head.Rows[0]) == firstKey {
				return nil, c.offsetIgnored(off)
			}
			if len(head.Rows) > 0 {
				firstKey = RowKey(head.Rows[0])
			}
		}
		return p.Rows, nil
	}
	// The first probe streams: on a broker that ignores limit it is the
	// whole DLQ, counted as it passes, never held.
	ext.Requests++
	n := 0
	var first Row
	q.Offset, q.Limit = 0, 1
	if _, err := c.listStream(ctx, q, func(r Row) bool {
		if n == 0 {
			first = r
		}
		n++
		if ext.Oldest == nil || r.FailedAt.Before(ext.Oldest.FailedAt) {
			r := r
			ext.Oldest = &r
		}
		return true
	}); err != nil {
		return nil, err
	}
	switch {
	case n == 0:
		return ext, nil
	case n > 1:
		ext.Depth, ext.OneBody = n, true
		return ext, nil
	}
	firstKey = RowKey(first)
	// Invariant for the binary search: lo was non-empty, hi was empty.
	lo, hi := 0, 0
	forward := func(base int) error { // exponential search up from base (non-empty)
		lo = base
		for step := 1; ; step *= 2 {
			if step > 1<<40 {
				return c.offsetIgnored(base + step)
			}
			rows, err := at(base+step, 1)
			if err != nil {
				return err
			}
			if len(rows) == 0 {
				hi = base + step
				return nil
			}
			lo = base + step
		}
	}
	backward := func(top int) error { // exponential search down from top (empty)
		hi = top
		for step := 1; ; step *= 2 {
			off := max(top-step, 0)
			rows, err := at(off, 1)
			if err != nil {
				return err
			}
			if len(rows) > 0 {
				lo = off
				return nil
			}
			hi = off
			if off == 0 {
				lo = -1
				return nil
			}
		}
	}
	start := func() error {
		if upper > 1 {
			rows, err := at(upper, 1)
			if err != nil {
				return err
			}
			if len(rows) == 0 {
				lo, hi = 0, upper
				return nil
			}
			return forward(upper)
		}
		return forward(0)
	}
	if err := start(); err != nil {
		return nil, err
	}
	// The end is confirmed by one read of a window around it: a page that
	// holds it (fewer rows than asked) says, in one answer of the broker,
	// which row is last now. Rows arriving or leaving during the search
	// move the end; the window widens each round so a busy DLQ is caught.
	win := 16
	for round := 0; round < 16; round, win = round+1, min(win*2, 1024) {
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			rows, err := at(mid, 1)
			if err != nil {
				return nil, err
			}
			if len(rows) > 0 {
				lo = mid
			} else {
				hi = mid
			}
		}
		if lo < 0 {
			ext.Oldest = nil
			return ext, nil // emptied while probing
		}
		off := max(lo-win/2, 0)
		rows, err := at(off, win)
		if err != nil {
			return nil, err
		}
		switch {
		case len(rows) > 0 && len(rows) < win:
			ext.Depth, ext.Oldest = off+len(rows), &rows[len(rows)-1]
			return ext, nil
		case len(rows) == 0: // rows were removed: the end moved below the window
			err = backward(off)
		default: // rows were added: the end moved past the window
			err = forward(off + win - 1)
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, &HTTPError{Method: http.MethodGet, URL: c.shown + "/api/v1/dlq", Kind: ErrUnavailable,
		Err: errors.New("the DLQ changed faster than its end could be found; try again")}
}

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
	lo, hi := 0, ext.Depth-1
	for lo < hi {
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
	return lo, nil
}
