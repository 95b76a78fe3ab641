package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/stream"
)

// ListQuery selects dead-letter rows. Only Queue and ConsumerGroup are
// filters every server honours; Partition is sent for servers that accept
// it, and callers filter again on the client.
type ListQuery struct {
	Queue         string
	ConsumerGroup string
	Partition     string
	Limit         int
	Offset        int
	// NoData skips each row's payload while decoding: for callers that
	// only count, date or address rows.
	NoData bool
}

// Page is one answer of the list route.
type Page struct {
	Rows []deadletter.Row
	// Total is the broker's "total" (rows in this page), when it sent one.
	Total *int
}

// ListPage fetches one page. A body without messages (an older server's
// `{"success":true,"value":null}`) is an empty page.
func (c *Client) ListPage(ctx context.Context, q ListQuery) (Page, error) {
	var p Page
	info, err := c.listStream(ctx, q, func(r deadletter.Row) bool {
		p.Rows = append(p.Rows, r)
		return true
	})
	p.Total = info.total
	return p, err
}

// ListEach sends one list call and hands each row to visit as it is
// decoded, without holding the page (visit returning false stops the
// read). It returns how many rows it handed over.
func (c *Client) ListEach(ctx context.Context, q ListQuery, visit func(deadletter.Row) bool) (int, error) {
	n := 0
	_, err := c.listStream(ctx, q, func(r deadletter.Row) bool {
		n++
		return visit(r)
	})
	return n, err
}

// Key identifies a row (not an address): one message can have a row per
// consumer group and per failure. It is comparable and costs no
// allocation to make.
type Key struct {
	PartitionID, TransactionID, ConsumerGroup string
	FailedAt                                  int64 // Unix nanoseconds
}

// RowKey returns the row's Key.
func RowKey(r deadletter.Row) Key {
	return Key{r.PartitionID, r.TransactionID, r.ConsumerGroup, r.FailedAt.UnixNano()}
}

// ErrOffsetIgnored: a full page came back with only rows already read, so
// the broker does not apply offset and nothing past the first page can be
// read.
var ErrOffsetIgnored = errors.New("the broker ignores offset")

// Rows pages through the DLQ, newest failure first, decoding each answer
// as it streams in: memory is bounded by one page's row keys, never by a
// body, so a broker that sends the whole DLQ in one answer (ignoring
// limit) streams in flat memory. Rows already seen on the previous page
// are dropped; paging stops on a short page, an empty page, or a page
// larger than asked for (the broker ignored limit, so that page was
// everything). A full page of rows already read means the broker ignores
// offset: that is an error, not a silent end, since the DLQ goes on.
//
// Each page is read and decoded by a goroutine of its own, a few chunks
// of rows ahead of the caller; from the second page on, the next page's
// call is sent and decoded while this one's rows are used, so the
// broker's work, decoding and the caller's use of the rows overlap. At
// most one call is wasted: the one sent as the last page (a short one)
// is read, or as the caller stops.
func (c *Client) Rows(ctx context.Context, q ListQuery) iter.Seq2[deadletter.Row, error] {
	return stream.Ahead(ctx, 4, func(ctx context.Context, emit func([]deadletter.Row) ([]deadletter.Row, bool)) error {
		return c.pages(ctx, q, emit)
	})
}

// chunkRows is how many rows a page's reader hands over at a time, and
// pageAhead how many chunks it decodes ahead of the caller.
const (
	chunkRows = 64
	pageAhead = 4
)

// pageRead is one list call whose rows a goroutine decodes ahead.
type pageRead struct {
	chunks chan []deadletter.Row // closed once the answer is read, err then set
	err    error
	cancel context.CancelFunc
}

// readPage sends the list call q and decodes its answer in a goroutine,
// filling chunks taken from free (or new ones).
func (c *Client) readPage(ctx context.Context, q ListQuery, free chan []deadletter.Row) *pageRead {
	ctx, cancel := context.WithCancel(ctx)
	p := &pageRead{chunks: make(chan []deadletter.Row, pageAhead), cancel: cancel}
	take := func() []deadletter.Row {
		select {
		case b := <-free:
			return b
		default:
			return make([]deadletter.Row, 0, chunkRows)
		}
	}
	go func() {
		defer close(p.chunks)
		buf := take()
		send := func() bool {
			select {
			case p.chunks <- buf:
				buf = take()
				return true
			case <-ctx.Done():
				return false
			}
		}
		_, p.err = c.listStream(ctx, q, func(r deadletter.Row) bool {
			buf = append(buf, r)
			return len(buf) < chunkRows || send()
		})
		if len(buf) > 0 {
			send()
		}
	}()
	return p
}

// abandon stops a page's reader whose rows are not wanted (nil: none).
func (p *pageRead) abandon() {
	if p == nil {
		return
	}
	p.cancel()
	for range p.chunks {
	}
}

// pages reads the DLQ page after page, emitting each page's fresh rows in
// chunks, until a short, empty or oversized page, an error, or emit says
// to stop.
func (c *Client) pages(ctx context.Context, q ListQuery, emit func([]deadletter.Row) ([]deadletter.Row, bool)) error {
	size := pageSize(q.Limit)
	// Two sets of keys, this page's and the last one's, reused page after
	// page.
	prev, cur := map[Key]struct{}{}, make(map[Key]struct{}, min(size, 1024))
	// Chunks the caller is done with, for the readers to fill again.
	free := make(chan []deadletter.Row, 2*pageAhead+8)
	at := func(offset int) ListQuery {
		pq := q
		pq.Limit, pq.Offset = size, offset
		return pq
	}
	offset := q.Offset
	var this, next *pageRead
	defer func() {
		this.abandon()
		next.abandon()
	}()
	this = c.readPage(ctx, at(offset), free)
	for page := 0; ; page++ {
		if page > 0 {
			// More than a page deep, the DLQ likely goes on: the next page
			// is asked for now (and dropped if this one is its last).
			next = c.readPage(ctx, at(offset+size), free)
		}
		n, fresh := 0, 0
		for chunk := range this.chunks {
			kept := chunk[:0]
			for _, r := range chunk {
				n++
				k := RowKey(r)
				if _, seen := prev[k]; seen {
					continue
				}
				// Keys are kept only as far as a page should go: a larger
				// page is the broker's whole answer and ends the paging.
				if n <= size {
					cur[k] = struct{}{}
				}
				fresh++
				kept = append(kept, r)
			}
			clear(chunk[len(kept):])
			if len(kept) == 0 {
				putChunk(free, kept)
				continue
			}
			back, ok := emit(kept)
			if !ok {
				return nil
			}
			putChunk(free, back)
		}
		err := this.err
		this = nil
		switch {
		case err != nil:
			return err
		case n != size:
			return nil
		case fresh == 0:
			return &HTTPError{Method: http.MethodGet, URL: c.shown + "/api/v1/dlq", Status: 200, Kind: ErrOffsetIgnored,
				Err: fmt.Errorf("%w: offset %d answered only rows already read at offset %d, so the DLQ cannot be read past its first %d rows", ErrOffsetIgnored, offset, offset-size, offset)}
		}
		prev, cur = cur, prev
		clear(cur)
		offset += n
		if next == nil {
			next = c.readPage(ctx, at(offset), free)
		}
		this, next = next, nil
	}
}

// pageSize is the page a paging read asks for: 500 unless told, never
// more than MaxPage (2.x clamps limit to 1000, and a larger ask would
// read as a short page, the last).
func pageSize(limit int) int {
	if limit <= 0 {
		return 500
	}
	return min(limit, MaxPage)
}

// putChunk gives an emptied chunk back for the page readers to fill.
func putChunk(free chan []deadletter.Row, b []deadletter.Row) {
	if cap(b) == 0 {
		return
	}
	select {
	case free <- b[:0]:
	default:
	}
}

// pageInfo is what a list answer said besides its rows.
type pageInfo struct {
	total       *int
	hadMessages bool
	// What tells an answer that is a listing from one that is not (see
	// notAListing): messages null, success true or false, value null or
	// something else.
	messagesNull, succeeded, failed, valueNull, value bool
	// stopped: the caller stopped the read before the answer's end.
	stopped bool
}

func listValues(q ListQuery) url.Values {
	v := url.Values{}
	if q.Queue != "" {
		v.Set("queue", q.Queue)
	}
	if q.ConsumerGroup != "" {
		v.Set("consumerGroup", q.ConsumerGroup)
	}
	if q.Partition != "" {
		v.Set("partition", q.Partition)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	v.Set("offset", strconv.Itoa(q.Offset))
	return v
}

// listStream sends one list call and hands each row to visit as it is
// decoded; visit returning false stops reading (the answer is closed).
func (c *Client) listStream(ctx context.Context, q ListQuery, visit func(deadletter.Row) bool) (pageInfo, error) {
	const path = "/api/v1/dlq"
	resp, err := c.send(ctx, http.MethodGet, path, listValues(q), nil)
	if err != nil {
		return pageInfo{}, err
	}
	defer resp.close()
	pr := &prefixReader{r: resp.body}
	lr := &limitReader{r: pr, max: c.opts.MaxRow}
	over, seen := false, 0
	info, n, err := decodeList(lr, q.NoData, func(r deadletter.Row) bool {
		if seen++; seen > c.opts.MaxAnswerRows {
			over = true
			return false
		}
		resp.hold()
		defer resp.progress()
		return visit(r)
	})
	if over {
		err = errTooManyRows
	}
	c.trace("← %d rows, %dB", n, lr.read)
	if err != nil {
		var he *HTTPError
		switch {
		case errors.As(err, &he):
			he.Method, he.URL, he.Status = http.MethodGet, resp.shown, 200
			he.Body = c.snippet(he.bodyBytes)
			return info, he
		case errors.Is(err, errValueTooLarge):
			return info, &HTTPError{Method: http.MethodGet, URL: resp.shown, Status: 200, Kind: ErrBadResponse,
				Err: fmt.Errorf("%w: a row of the answer is larger than %s, the most dlqctl reads of one", ErrBadResponse, mib(c.opts.MaxRow))}
		case errors.Is(err, errTooManyRows):
			return info, &HTTPError{Method: http.MethodGet, URL: resp.shown, Status: 200, Kind: ErrBadResponse,
				Err: fmt.Errorf("%w: the answer goes on past %d rows, the most dlqctl reads of one answer (a DLQ that deep needs a broker that pages)", ErrBadResponse, c.opts.MaxAnswerRows)}
		case resp.ctx.Err() != nil || resp.cause() != nil || isReadError(err):
			return info, resp.readErr(err)
		}
		return info, c.badBody(http.MethodGet, path+"?"+listValues(q).Encode(), pr.prefix.Bytes(), err)
	}
	if info.hadMessages {
		if info.total != nil {
			c.dialect.Store(dialectContract)
		} else {
			c.dialect.CompareAndSwap(0, dialectReleased)
		}
	}
	if t := info.total; t != nil && !info.stopped && q.Limit > 0 && n < q.Limit && *t > q.Offset+n {
		// A short page is the listing's end: a total past it (2.x counts
		// every matching row; 1.x the page's) is rows the broker counts
		// and did not send. Taken as the end, a gate would pass them.
		return info, &HTTPError{Method: http.MethodGet, URL: resp.shown, Status: 200, Kind: ErrBadResponse,
			Err: fmt.Errorf("%w: the broker counts %d matching rows (total) but its answer ends at row %d (offset %d, %d rows of the %d asked for): it does not send what it counts", ErrBadResponse, *t, q.Offset+n, q.Offset, n, q.Limit)}
	}
	return info, nil
}

// readError marks a failure of the transport under the decoder, as
// opposed to a body that is not JSON.
type readError struct{ err error }

func (e readError) Error() string { return e.err.Error() }
func (e readError) Unwrap() error { return e.err }

func isReadError(err error) bool {
	var re readError
	return errors.As(err, &re)
}

// prefixReader keeps the first bytes read, for an error's snippet.
type prefixReader struct {
	r      io.Reader
	prefix bytes.Buffer
}

func (p *prefixReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if room := 512 - p.prefix.Len(); room > 0 {
		p.prefix.Write(b[:min(n, room)])
	}
	if err != nil && err != io.EOF {
		err = readError{err}
	}
	return n, err
}

var errValueTooLarge = errors.New("value too large")

// MaxAnswerRows is the most rows dlqctl reads of one list answer: a
// broker that sends its whole DLQ in one body (0.x) sends 10 million
// rows as about 4.6 GB; one whose answer goes on past it is taken for an
// answer without end (one that trickles is stopped sooner: errEndless).
const MaxAnswerRows = 10_000_000

// errTooManyRows: an answer past MaxAnswerRows.
var errTooManyRows = errors.New("too many rows")

// RowsOldestFirst is Rows in the other order: the oldest failure first.
// The first page is read as Rows reads it: when it holds everything (a
// short page, or a broker that answers in one body, ignoring limit) its
// rows are given in reverse. Otherwise the DLQ's end is found in
// O(log N) requests and the pages are read from there back to the head,
// each reversed, so memory stays a page or two (a row that arrives
// meanwhile shifts the pages: rows seen on the page before are dropped,
// as Rows does). Only a one-body broker makes it hold the whole DLQ.
func (c *Client) RowsOldestFirst(ctx context.Context, q ListQuery) iter.Seq2[deadletter.Row, error] {
	return func(yield func(deadletter.Row, error) bool) {
		size := pageSize(q.Limit)
		q.Limit, q.Offset = size, 0
		first, err := c.ListPage(ctx, q)
		if err != nil {
			yield(deadletter.Row{}, err)
			return
		}
		backward := func(rows []deadletter.Row, prev map[Key]struct{}) (map[Key]struct{}, bool) {
			cur := make(map[Key]struct{}, len(rows))
			for i := len(rows) - 1; i >= 0; i-- {
				k := RowKey(rows[i])
				cur[k] = struct{}{}
				if _, seen := prev[k]; seen {
					continue
				}
				if !yield(rows[i], nil) {
					return nil, false
				}
			}
			return cur, true
		}
		if len(first.Rows) != size {
			backward(first.Rows, nil)
			return
		}
		ext, err := c.FindOldestBelow(ctx, q, 2*size)
		if err != nil {
			yield(deadletter.Row{}, err)
			return
		}
		prev := map[Key]struct{}{}
		for end := ext.Depth; end > size; end -= size {
			pq := q
			pq.Offset = max(size, end-size)
			pq.Limit = end - pq.Offset
			p, err := c.ListPage(ctx, pq)
			if err != nil {
				yield(deadletter.Row{}, err)
				return
			}
			var ok bool
			if prev, ok = backward(p.Rows, prev); !ok {
				return
			}
		}
		backward(first.Rows, prev)
	}
}

// QueryFor is the broker-side part of a selection (what every server
// filters on), in pages of pageSize; everything else is filtered on the
// client.
func QueryFor(sel *deadletter.Selection, pageSize int) ListQuery {
	return ListQuery{Queue: sel.Queue, ConsumerGroup: sel.ConsumerGroup, Partition: sel.Partition, Limit: pageSize}
}
