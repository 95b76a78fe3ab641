package client

import (
	"context"
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
	lo, hi := 0, 1 // lo is known non-empty, hi is the next probe
	gallop := true
	for round := 0; round < 4; round++ {
		if gallop {
			for {
				rows, err := at(hi, 1)
				if err != nil {
					return nil, err
				}
				if len(rows) == 0 {
					break
				}
				lo, hi = hi, hi*2
			}
		}
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
		rows, err := at(lo, 2)
		if err != nil {
			return nil, err
		}
		switch len(rows) {
		case 1:
			ext.Depth, ext.Oldest = lo+1, &rows[0]
			return ext, nil
		case 0:
			// Rows were removed: the end is before lo.
			if lo == 0 {
				return ext, nil
			}
			lo, hi, gallop = 0, lo, false
		default:
			// Rows were added: the end is past lo+1.
			lo, hi, gallop = lo+1, (lo+1)*2, true
		}
	}
	// Still racing after several rounds: report what the last look saw.
	rows, err := at(lo, 1)
	if err != nil {
		return nil, err
	}
	if len(rows) == 1 {
		ext.Depth, ext.Oldest = lo+1, &rows[0]
	}
	return ext, nil
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
