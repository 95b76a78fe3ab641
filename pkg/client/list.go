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
	"time"

	"github.com/go-json-experiment/json/jsontext"
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
	Rows []Row
	// Total is the broker's "total" (rows in this page), when it sent one.
	Total *int
}

// ListPage fetches one page. A body without messages (an older server's
// `{"success":true,"value":null}`) is an empty page.
func (c *Client) ListPage(ctx context.Context, q ListQuery) (Page, error) {
	var p Page
	info, err := c.listStream(ctx, q, func(r Row) bool {
		p.Rows = append(p.Rows, r)
		return true
	})
	p.Total = info.total
	return p, err
}

// ListEach sends one list call and hands each row to visit as it is
// decoded, without holding the page (visit returning false stops the
// read). It returns how many rows it handed over.
func (c *Client) ListEach(ctx context.Context, q ListQuery, visit func(Row) bool) (int, error) {
	n := 0
	_, err := c.listStream(ctx, q, func(r Row) bool {
		n++
		return visit(r)
	})
	return n, err
}

// RowKey identifies a row (not an address): one message can have a row per
// consumer group and per failure.
func RowKey(r Row) string {
	return r.PartitionID + "\x00" + r.TransactionID + "\x00" + r.ConsumerGroup + "\x00" + r.FailedAt.Format(time.RFC3339Nano)
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
func (c *Client) Rows(ctx context.Context, q ListQuery) iter.Seq2[Row, error] {
	return func(yield func(Row, error) bool) {
		size := q.Limit
		if size <= 0 {
			size = 500
		}
		prev := map[string]struct{}{}
		offset := q.Offset
		for {
			cur := make(map[string]struct{}, min(size, 1024))
			n, fresh, stopped := 0, 0, false
			pq := q
			pq.Limit, pq.Offset = size, offset
			_, err := c.listStream(ctx, pq, func(r Row) bool {
				n++
				k := RowKey(r)
				if _, seen := prev[k]; seen {
					return true
				}
				// Keys are kept only as far as a page should go: a larger
				// page is the broker's whole answer and ends the paging.
				if n <= size {
					cur[k] = struct{}{}
				}
				fresh++
				if !yield(r, nil) {
					stopped = true
					return false
				}
				return true
			})
			switch {
			case stopped:
				return
			case err != nil:
				yield(Row{}, err)
				return
			case n != size:
				return
			case fresh == 0:
				yield(Row{}, &HTTPError{Method: http.MethodGet, URL: c.shown + "/api/v1/dlq", Status: 200, Kind: ErrOffsetIgnored,
					Err: fmt.Errorf("%w: offset %d answered only rows already read at offset %d, so the DLQ cannot be read past its first %d rows", ErrOffsetIgnored, offset, offset-size, offset)})
				return
			}
			prev = cur
			offset += n
		}
	}
}

// pageInfo is what a list answer said besides its rows.
type pageInfo struct {
	total       *int
	hadMessages bool
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
func (c *Client) listStream(ctx context.Context, q ListQuery, visit func(Row) bool) (pageInfo, error) {
	const path = "/api/v1/dlq"
	resp, err := c.send(ctx, http.MethodGet, path, listValues(q), nil)
	if err != nil {
		return pageInfo{}, err
	}
	defer resp.close()
	pr := &prefixReader{r: resp.body}
	lr := &valueLimiter{r: pr, max: c.opts.MaxRow}
	info, n, err := decodeList(lr, q.NoData, visit)
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

// valueLimiter fails once more than max bytes (and some read-ahead) have
// been read since mark: one row, or one top-level value, cannot make
// dlqctl hold an unbounded body.
type valueLimiter struct {
	r    io.Reader
	read int64
	mark int64
	max  int64
}

func (l *valueLimiter) Read(b []byte) (int, error) {
	if l.read-l.mark > l.max+64<<10 {
		return 0, errValueTooLarge
	}
	n, err := l.r.Read(b)
	l.read += int64(n)
	return n, err
}

// decodePage decodes a whole list answer held in memory (tests, fuzzing).
func decodePage(body []byte) (Page, error) {
	var p Page
	info, _, err := decodeList(&valueLimiter{r: bytes.NewReader(body), max: MaxRow}, false, func(r Row) bool {
		p.Rows = append(p.Rows, r)
		return true
	})
	p.Total = info.total
	return p, err
}

// decodeList reads a list answer token by token: {"messages":[row…],
// "total":n, …}. An answer with no messages key (or messages: null) is an
// empty page; one with an "error" key is the broker's refusal.
func decodeList(lr *valueLimiter, noData bool, visit func(Row) bool) (pageInfo, int, error) {
	var info pageInfo
	dec := jsontext.NewDecoder(lr, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if k := dec.PeekKind(); k != '{' {
		_, err := dec.ReadToken()
		if err == nil {
			err = fmt.Errorf("the answer is a JSON %s, not an object", kindName(k))
		}
		return info, 0, err
	}
	if _, err := dec.ReadToken(); err != nil {
		return info, 0, err
	}
	n := 0
	for dec.PeekKind() != '}' {
		lr.mark = lr.read
		name, err := dec.ReadValue()
		if err != nil {
			return info, n, err
		}
		key := string(unquoteName(name)) // a copy: the bytes are the decoder's
		switch key {
		case "messages":
			if dec.PeekKind() == 'n' {
				if _, err := dec.ReadToken(); err != nil {
					return info, n, err
				}
				continue
			}
			if _, err := expect(dec, '['); err != nil {
				return info, n, err
			}
			info.hadMessages = true
			for dec.PeekKind() != ']' {
				lr.mark = lr.read
				var r Row
				if err := decodeRow(dec, &r, noData); err != nil {
					return info, n, fmt.Errorf("row %d: %w", n, err)
				}
				n++
				if !visit(r) {
					return info, n, nil
				}
			}
			if _, err := dec.ReadToken(); err != nil {
				return info, n, err
			}
		case "total":
			v, err := dec.ReadValue()
			if err != nil {
				return info, n, err
			}
			if t, err := strconv.Atoi(string(v)); err == nil {
				info.total = &t
			}
		case "error":
			v, err := dec.ReadValue()
			if err != nil {
				return info, n, err
			}
			text := string(v)
			if v.Kind() == '"' {
				text = string(unquote(v))
			}
			return info, n, &HTTPError{Kind: errorKind(text), bodyBytes: []byte(`{"error":` + string(v) + `}`)}
		default:
			if err := dec.SkipValue(); err != nil {
				return info, n, err
			}
		}
	}
	_, err := dec.ReadToken()
	return info, n, err
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '[':
		return "array"
	case '"':
		return "string"
	case '0':
		return "number"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "value"
}

func expect(dec *jsontext.Decoder, k jsontext.Kind) (jsontext.Token, error) {
	if got := dec.PeekKind(); got != k {
		_, err := dec.ReadToken()
		if err == nil {
			err = fmt.Errorf("want a JSON %s, got a %s", kindName(k), kindName(got))
		}
		return jsontext.Token{}, err
	}
	return dec.ReadToken()
}

// decodeRow decodes one row object, tolerating the field variations of
// real servers: failedAt may be missing (createdAt is its alias on the
// seed contract), data and errorMessage may be null, ids may be numbers.
func decodeRow(dec *jsontext.Decoder, r *Row, noData bool) error {
	if _, err := expect(dec, '{'); err != nil {
		return err
	}
	var created time.Time
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil {
			return err
		}
		// The name's bytes are the decoder's until the next read: take
		// what it says now.
		field := rowFields[string(unquoteName(name))]
		if field == fData {
			if noData {
				err = dec.SkipValue()
			} else {
				var v jsontext.Value
				if v, err = dec.ReadValue(); err == nil && v.Kind() != 'n' {
					r.Data = bytes.Clone(v)
				}
			}
			if err != nil {
				return err
			}
			continue
		}
		if field == fOther {
			if err := dec.SkipValue(); err != nil {
				return err
			}
			continue
		}
		v, err := dec.ReadValue()
		if err != nil {
			return err
		}
		switch field {
		case fID:
			r.ID = scalar(v)
		case fTransactionID:
			r.TransactionID = scalar(v)
		case fPartitionID:
			r.PartitionID = scalar(v)
		case fQueue:
			r.Queue = scalar(v)
		case fPartition:
			r.Partition = scalar(v)
		case fConsumerGroup:
			r.ConsumerGroup = scalar(v)
		case fErrorMessage:
			r.ErrorMessage = scalar(v)
		case fRetryCount:
			if v.Kind() == '0' {
				n, err := strconv.Atoi(string(v))
				if err != nil {
					return fmt.Errorf("retryCount %s: %v", v, err)
				}
				r.RetryCount = n
			}
		case fIsEncrypted:
			r.IsEncrypted = v.Kind() == 't'
		case fFailedAt:
			if v.Kind() == '"' {
				t, err := parseTimestamp(unquote(v))
				if err != nil {
					return fmt.Errorf("failedAt: %v", err)
				}
				r.FailedAt = t
			}
		case fCreatedAt:
			if v.Kind() == '"' {
				t, err := parseTimestamp(unquote(v))
				if err != nil {
					return fmt.Errorf("createdAt: %v", err)
				}
				created = t
			}
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	if r.FailedAt.IsZero() {
		r.FailedAt = created
	}
	if r.PartitionID == "" || r.TransactionID == "" {
		return fmt.Errorf("dead-letter row without partitionId or transactionId")
	}
	return nil
}

type rowField int

const (
	fOther rowField = iota
	fID
	fTransactionID
	fPartitionID
	fQueue
	fPartition
	fConsumerGroup
	fErrorMessage
	fRetryCount
	fData
	fIsEncrypted
	fFailedAt
	fCreatedAt
)

var rowFields = map[string]rowField{"id": fID, "transactionId": fTransactionID, "partitionId": fPartitionID, "queue": fQueue,
	"partition": fPartition, "consumerGroup": fConsumerGroup, "errorMessage": fErrorMessage, "retryCount": fRetryCount,
	"data": fData, "isEncrypted": fIsEncrypted, "failedAt": fFailedAt, "createdAt": fCreatedAt}

// unquoteName returns a name's text; names without escapes (all of the
// broker's) are returned without copying.
func unquoteName(v jsontext.Value) []byte {
	if len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1]
	}
	return unquote(v)
}

func unquote(v jsontext.Value) []byte {
	if len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1]
	}
	b, err := jsontext.AppendUnquote(nil, v)
	if err != nil {
		return v
	}
	return b
}

// scalar is a string value's text, a number's digits, or "" for null and
// anything else.
func scalar(v jsontext.Value) string {
	switch v.Kind() {
	case '"':
		return string(unquote(v))
	case '0':
		return string(v)
	}
	return ""
}

// parseTimestamp reads the broker's timestamps: millisecond UTC
// (2026-07-30T09:41:02.517Z) on a fast path, any RFC 3339 otherwise.
func parseTimestamp(b []byte) (time.Time, error) {
	if len(b) == 24 && b[4] == '-' && b[7] == '-' && b[10] == 'T' && b[13] == ':' && b[16] == ':' && b[19] == '.' && b[23] == 'Z' {
		num := func(i, j int) (int, bool) {
			n := 0
			for _, c := range b[i:j] {
				if c < '0' || c > '9' {
					return 0, false
				}
				n = n*10 + int(c-'0')
			}
			return n, true
		}
		y, ok1 := num(0, 4)
		mo, ok2 := num(5, 7)
		d, ok3 := num(8, 10)
		h, ok4 := num(11, 13)
		mi, ok5 := num(14, 16)
		s, ok6 := num(17, 19)
		ms, ok7 := num(20, 23)
		if ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && mo >= 1 && mo <= 12 && d >= 1 && d <= 31 && h < 24 && mi < 60 && s < 60 {
			if t := time.Date(y, time.Month(mo), d, h, mi, s, ms*int(time.Millisecond), time.UTC); t.Day() == d {
				return t, nil
			}
		}
	}
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}
