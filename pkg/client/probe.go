package client

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Extent is what a probe found out about one filtered DLQ without reading
// it: its depth and its oldest row.
type Extent struct {
	Depth    int
	Oldest   *Row
	Requests int
	// All holds every row when the broker ignored limit (an older server
	// answers the whole DLQ in one page); callers then work from it.
	All []Row
}

// FindOldest finds the oldest row (the last one, the list being newest
// first) in O(log N) list requests: limit=1 at offsets 1, 2, 4, … until an
// empty page, then a binary search between the last two offsets. The
// found row is re-checked with one limit=2 request; if rows were added or
// removed meanwhile, the search continues from there (a few times at most).
func (c *Client) FindOldest(ctx context.Context, q ListQuery) (*Extent, error) {
	ext := &Extent{}
	at := func(off, limit int) ([]Row, error) {
		ext.Requests++
		q.Offset, q.Limit = off, limit
		p, err := c.ListPage(ctx, q)
		return p.Rows, err
	}
	first, err := at(0, 1)
	if err != nil {
		return nil, err
	}
	switch {
	case len(first) == 0:
		return ext, nil
	case len(first) > 1:
		// The broker ignores limit: this page is the whole DLQ.
		ext.All = first
		ext.Depth = len(first)
		oldest := first[0]
		for _, r := range first {
			if r.FailedAt.Before(oldest.FailedAt) {
				oldest = r
			}
		}
		ext.Oldest = &oldest
		return ext, nil
	}
	// Invariant for the binary search: lo was non-empty, hi was empty.
	lo, hi := 0, 0
	forward := func(base int) error { // exponential search up from base (non-empty)
		lo = base
		for step := 1; ; step *= 2 {
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
	if err := forward(0); err != nil {
		return nil, err
	}
	for round := 0; round < 16; round++ {
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
			return ext, nil // emptied while probing
		}
		// Re-check: exactly one row at lo means lo is the end, now.
		rows, err := at(lo, 2)
		if err != nil {
			return nil, err
		}
		switch len(rows) {
		case 1:
			ext.Depth, ext.Oldest = lo+1, &rows[0]
			return ext, nil
		case 0: // rows were removed: the end moved below lo
			err = backward(lo)
		default: // rows were added: the end moved past lo+1
			err = forward(lo + 1)
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, &HTTPError{Method: http.MethodGet, URL: c.shown + "/api/v1/dlq", Kind: ErrUnavailable,
		Err: errors.New("the DLQ changed faster than its end could be found; try again")}
}

// RowsOlderThan returns the rows that failed before cutoff, given an
// extent from FindOldest: a binary search finds where they start, then
// they are read page by page to the end. The cost is O(log N) plus the
// pages of the rows returned.
func (c *Client) RowsOlderThan(ctx context.Context, q ListQuery, ext *Extent, cutoff time.Time) ([]Row, int, error) {
	if ext.All != nil {
		var out []Row
		for _, r := range ext.All {
			if r.FailedAt.Before(cutoff) {
				out = append(out, r)
			}
		}
		return out, 0, nil
	}
	if ext.Oldest == nil || !ext.Oldest.FailedAt.Before(cutoff) {
		return nil, 0, nil
	}
	requests := 0
	// First index whose row failed before cutoff, in [0, Depth-1].
	lo, hi := 0, ext.Depth-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		requests++
		q.Offset, q.Limit = mid, 1
		p, err := c.ListPage(ctx, q)
		if err != nil {
			return nil, requests, err
		}
		if len(p.Rows) == 0 || p.Rows[0].FailedAt.Before(cutoff) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	var out []Row
	const size = 500
	for off := lo; ; off += size {
		requests++
		q.Offset, q.Limit = off, size
		p, err := c.ListPage(ctx, q)
		if err != nil {
			return nil, requests, err
		}
		for _, r := range p.Rows {
			if r.FailedAt.Before(cutoff) {
				out = append(out, r)
			}
		}
		if len(p.Rows) < size {
			break
		}
	}
	return out, requests, nil
}
