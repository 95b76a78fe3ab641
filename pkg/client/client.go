package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Options configure a Client.
type Options struct {
	Server     string       // base URL, e.g. http://localhost:6632
	Token      string       // bearer token; never printed
	HTTPClient *http.Client // injected so tests control the transport
	// Debug, when set, receives an HTTP trace with the token redacted.
	Debug io.Writer
	// Attempts bounds tries of an idempotent call (GET, DELETE); 0 means 4.
	Attempts int
	// Backoff is the first retry delay, doubled each time with full
	// jitter; 0 means 200ms.
	Backoff time.Duration
	// Sleep waits between retries; tests replace it. nil waits on a timer.
	Sleep func(context.Context, time.Duration) error
}

// Client talks to one Queen broker.
type Client struct {
	base  *url.URL
	opts  Options
	http  *http.Client
	shown string // base URL with credentials removed, for messages
}

// New validates the server URL and returns a client.
func New(o Options) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(o.Server, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("invalid server URL %q: want http(s)://host:port", redactURL(o.Server))
	}
	if o.HTTPClient == nil {
		var err error
		if o.HTTPClient, err = NewHTTPClient(TLSOptions{Timeout: 30 * time.Second}); err != nil {
			return nil, err
		}
	}
	if o.Attempts <= 0 {
		o.Attempts = 4
	}
	if o.Backoff <= 0 {
		o.Backoff = 200 * time.Millisecond
	}
	if o.Sleep == nil {
		o.Sleep = sleepCtx
	}
	return &Client{base: u, opts: o, http: o.HTTPClient, shown: u.Redacted()}, nil
}

// Server returns the broker URL without credentials: the key the ledger
// files everything under.
func (c *Client) Server() string { return c.shown }

// TLSOptions configure transport security.
type TLSOptions struct {
	CAFile             string
	InsecureSkipVerify bool
	Timeout            time.Duration
}

// NewHTTPClient builds the *http.Client for TLSOptions.
func NewHTTPClient(o TLSOptions) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.InsecureSkipVerify} //nolint:gosec // opt-in, warned about by the caller
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading --ca-file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s holds no PEM certificate", o.CAFile)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	// Replays run up to --concurrency calls at once; keep that many
	// connections alive instead of dialling one per call.
	tr.MaxIdleConnsPerHost = 256
	return &http.Client{Transport: tr, Timeout: o.Timeout}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ListQuery selects dead-letter rows. Only Queue and ConsumerGroup are
// filters every server honours; Partition is sent for servers that accept
// it, and callers filter again on the client.
type ListQuery struct {
	Queue         string
	ConsumerGroup string
	Partition     string
	Limit         int
	Offset        int
}

// Page is one answer of the list route.
type Page struct {
	Rows []Row
	// Total is the broker's "total" (rows in this page), when it sent one.
	Total *int
}

type pageWire struct {
	Messages *[]rowWire `json:"messages"`
	Total    *int       `json:"total"`
}

// ListPage fetches one page. A body without messages (an older server's
// `{"success":true,"value":null}`) is an empty page.
func (c *Client) ListPage(ctx context.Context, q ListQuery) (Page, error) {
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
	body, err := c.do(ctx, http.MethodGet, "/api/v1/dlq", v, nil)
	if err != nil {
		return Page{}, err
	}
	p, err := decodePage(body)
	if err != nil {
		return Page{}, c.badBody(http.MethodGet, "/api/v1/dlq", body, err)
	}
	return p, nil
}

// decodePage reads a list answer; no messages key (or null) is an empty page.
func decodePage(body []byte) (Page, error) {
	var w pageWire
	if err := json.Unmarshal(body, &w); err != nil {
		return Page{}, err
	}
	p := Page{Total: w.Total}
	if w.Messages != nil {
		p.Rows = make([]Row, len(*w.Messages))
		for i := range *w.Messages {
			if err := (*w.Messages)[i].to(&p.Rows[i]); err != nil {
				return Page{}, fmt.Errorf("row %d: %w", i, err)
			}
		}
	}
	return p, nil
}

// RowKey identifies a row (not an address): one message can have a row per
// consumer group and per failure.
func RowKey(r Row) string {
	return r.PartitionID + "\x00" + r.TransactionID + "\x00" + r.ConsumerGroup + "\x00" + r.FailedAt.Format(time.RFC3339Nano)
}

// Rows pages through the DLQ, newest failure first. Memory is bounded by
// two pages. It survives servers that ignore limit and offset: rows already
// seen on the previous page are dropped, and paging stops on a short page,
// an empty page, a page larger than asked for (the server ignored limit, so
// that page was everything) or a page with nothing new.
func (c *Client) Rows(ctx context.Context, q ListQuery) iter.Seq2[Row, error] {
	return func(yield func(Row, error) bool) {
		size := q.Limit
		if size <= 0 {
			size = 500
		}
		prev := map[string]struct{}{}
		offset := 0
		for {
			p, err := c.ListPage(ctx, ListQuery{Queue: q.Queue, ConsumerGroup: q.ConsumerGroup, Partition: q.Partition, Limit: size, Offset: offset})
			if err != nil {
				yield(Row{}, err)
				return
			}
			cur := make(map[string]struct{}, len(p.Rows))
			fresh := 0
			for _, r := range p.Rows {
				k := RowKey(r)
				if _, seen := prev[k]; seen {
					continue
				}
				if _, dup := cur[k]; dup {
					continue
				}
				cur[k] = struct{}{}
				fresh++
				if !yield(r, nil) {
					return
				}
			}
			if len(p.Rows) < size || len(p.Rows) > size || fresh == 0 {
				return
			}
			prev = cur
			offset += len(p.Rows)
		}
	}
}

// Get fetches one message's detail. The payload comes from `payload` (or
// `data` on servers that name it so).
func (c *Client) Get(ctx context.Context, a Address) (*Message, error) {
	path, err := messagePath(a, "")
	if err != nil {
		return nil, err
	}
	body, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, err
	}
	var m struct {
		Message
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, c.badBody(http.MethodGet, path, body, err)
	}
	if len(m.Message.Payload) == 0 || string(m.Message.Payload) == "null" {
		m.Message.Payload = m.Data
	}
	return &m.Message, nil
}

// Delete removes the dead-letter row(s) at an address. ErrNoDeadLetterRow
// means there was none (already gone). On older servers DELETE removes the
// message itself, live or not: callers confirm the address is dead-lettered
// first.
func (c *Client) Delete(ctx context.Context, a Address) error {
	path, err := messagePath(a, "")
	if err != nil {
		return err
	}
	body, err := c.do(ctx, http.MethodDelete, path, nil, nil)
	if err != nil {
		return err
	}
	var r struct {
		Success *bool  `json:"success"`
		Message string `json:"message"`
	}
	if len(bytes.TrimSpace(body)) > 0 && json.Unmarshal(body, &r) == nil && r.Success != nil && !*r.Success {
		if strings.Contains(strings.ToLower(r.Message), "not found") {
			return &HTTPError{Method: http.MethodDelete, URL: c.shown + path, Status: 200, Body: snippet(body), Kind: ErrNoDeadLetterRow}
		}
		return &HTTPError{Method: http.MethodDelete, URL: c.shown + path, Status: 200, Body: snippet(body), Kind: ErrUnavailable}
	}
	return nil
}

// Push publishes items; never retried, since a lost answer cannot tell
// whether the broker wrote them. Each result is in item order.
func (c *Client) Push(ctx context.Context, items []PushItem) ([]PushResult, error) {
	payload, err := json.Marshal(map[string]any{"items": items})
	if err != nil {
		return nil, err
	}
	body, err := c.do(ctx, http.MethodPost, "/api/v1/push", nil, payload)
	if err != nil {
		return nil, err
	}
	var res []PushResult
	if err := json.Unmarshal(body, &res); err != nil {
		// Some servers wrap the array.
		var w struct {
			Results *[]PushResult `json:"results"`
		}
		if json.Unmarshal(body, &w) != nil || w.Results == nil {
			return nil, c.badBody(http.MethodPost, "/api/v1/push", body, err)
		}
		res = *w.Results
	}
	if len(res) != len(items) {
		return nil, c.badBody(http.MethodPost, "/api/v1/push", body, fmt.Errorf("%d results for %d items", len(res), len(items)))
	}
	return res, nil
}

// Retry calls the replay endpoint. ErrRouteMissing means the broker has no
// /retry route (fall back to the manual path); ErrNoDeadLetterRow means the
// address is not dead-lettered.
func (c *Client) Retry(ctx context.Context, a Address) (*RetryResult, error) {
	path, err := messagePath(a, "/retry")
	if err != nil {
		return nil, err
	}
	body, err := c.do(ctx, http.MethodPost, path, nil, nil)
	if err != nil {
		return nil, err
	}
	var r RetryResult
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, c.badBody(http.MethodPost, path, body, err)
	}
	if !r.Success {
		return &r, &HTTPError{Method: http.MethodPost, URL: c.shown + path, Status: 200, Body: snippet(body), Kind: ErrUnavailable}
	}
	return &r, nil
}

// Health calls GET /health.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	body, err := c.do(ctx, http.MethodGet, "/health", nil, nil)
	if err != nil {
		return nil, err
	}
	var h Health
	if err := json.Unmarshal(body, &h); err != nil {
		return nil, c.badBody(http.MethodGet, "/health", body, err)
	}
	return &h, nil
}

// Queues lists the broker's queues. Both a bare array and {"queues": [...]}
// are accepted.
func (c *Client) Queues(ctx context.Context) ([]Queue, error) {
	body, err := c.do(ctx, http.MethodGet, "/api/v1/resources/queues", nil, nil)
	if err != nil {
		return nil, err
	}
	var qs []Queue
	if err := json.Unmarshal(body, &qs); err == nil {
		return qs, nil
	}
	var w struct {
		Queues []Queue `json:"queues"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, c.badBody(http.MethodGet, "/api/v1/resources/queues", body, err)
	}
	return w.Queues, nil
}

func messagePath(a Address, suffix string) (string, error) {
	if !a.PathSafe() {
		return "", &HTTPError{Method: "-", URL: a.String(), Kind: ErrNoDeadLetterRow,
			Body: "the transaction id has characters the broker cannot take in a path (space, /, %, ?, # or non-ASCII); the address is unreachable through the API"}
	}
	return "/api/v1/messages/" + a.PartitionID + "/" + a.TransactionID + suffix, nil
}

func (c *Client) badBody(method, path string, body []byte, err error) error {
	return &HTTPError{Method: method, URL: c.shown + path, Status: 200, Body: c.redact(snippet(body)), Kind: ErrBadResponse, Err: fmt.Errorf("%w: %v", ErrBadResponse, err)}
}

// do sends one call, retrying idempotent methods on connection errors,
// 429 and 502/503/504. It returns the body of a successful answer.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, payload []byte) ([]byte, error) {
	idempotent := method == http.MethodGet || method == http.MethodDelete
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawPath = ""
	if q != nil {
		u.RawQuery = q.Encode()
	}
	shown := c.shown + path
	if u.RawQuery != "" {
		shown += "?" + u.RawQuery
	}
	attempts := 1
	if idempotent {
		attempts = c.opts.Attempts
	}
	var last error
	for try := 0; try < attempts; try++ {
		if try > 0 {
			wait := c.backoff(try, last)
			c.trace("… retry %d/%d in %s", try, attempts-1, wait.Round(time.Millisecond))
			if err := c.opts.Sleep(ctx, wait); err != nil {
				return nil, err
			}
		}
		body, err, retry := c.once(ctx, method, u.String(), shown, payload)
		if err == nil {
			return body, nil
		}
		last = err
		if !retry || ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, last
}

type retryAfterError struct {
	*HTTPError
	after time.Duration
}

func (e retryAfterError) Unwrap() error { return e.HTTPError }

func (c *Client) backoff(try int, last error) time.Duration {
	var ra retryAfterError
	if errors.As(last, &ra) && ra.after > 0 {
		return min(ra.after, 30*time.Second)
	}
	ceil := c.opts.Backoff << (try - 1)
	ceil = min(ceil, 5*time.Second)
	return ceil/2 + rand.N(ceil/2+1)
}

func (c *Client) once(ctx context.Context, method, target, shown string, payload []byte) (body []byte, err error, retry bool) {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err, false
	}
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	c.trace("→ %s %s", method, shown)
	if c.opts.Token != "" {
		c.trace("  Authorization: Bearer [redacted]")
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err(), false
		}
		c.trace("← error after %s: %s", time.Since(start).Round(time.Millisecond), c.redact(err.Error()))
		return nil, &HTTPError{Method: method, URL: shown, Kind: ErrUnavailable, Err: errors.New(c.redact(unwrapURLError(err)))}, true
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err(), false
		}
		return nil, &HTTPError{Method: method, URL: shown, Status: resp.StatusCode, Kind: ErrUnavailable, Err: fmt.Errorf("reading the answer: %s", c.redact(err.Error()))}, true
	}
	c.trace("← %s %dB %s", resp.Status, len(body), time.Since(start).Round(time.Millisecond))
	// Built only for failures: a page of rows is large, and a snippet of
	// it is only wanted in an error.
	fail := func(kind error) *HTTPError {
		return &HTTPError{Method: method, URL: shown, Status: resp.StatusCode, Body: c.redact(snippet(body)), Kind: kind}
	}
	switch s := resp.StatusCode; {
	case s == http.StatusUnauthorized:
		return nil, fail(ErrUnauthorized), false
	case s == http.StatusForbidden:
		return nil, fail(ErrForbidden), false
	case s == http.StatusNotFound:
		if bytes.Contains(body, []byte(NoDeadLetterText)) || jsonErrorIsNotFound(body) {
			return nil, fail(ErrNoDeadLetterRow), false
		}
		return nil, fail(ErrRouteMissing), false
	case s == http.StatusTooManyRequests:
		return nil, retryAfterError{fail(ErrUnavailable), parseRetryAfter(resp.Header.Get("Retry-After"))}, true
	case s == http.StatusBadGateway || s == http.StatusServiceUnavailable || s == http.StatusGatewayTimeout:
		return nil, fail(ErrUnavailable), true
	case s >= 500:
		return nil, fail(ErrUnavailable), false
	case s >= 400:
		return nil, fail(ErrBadResponse), false
	case s >= 300:
		return nil, fail(ErrBadResponse), false
	}
	// Older servers answer 200 for failures, with an "error" key.
	if kind, ok := bodyError(body); ok {
		return nil, fail(kind), false
	}
	if len(bytes.TrimSpace(body)) == 0 && method == http.MethodGet {
		herr := fail(ErrBadResponse)
		herr.Body = "(empty body)"
		return nil, herr, false
	}
	return body, nil, false
}

// bodyError finds an {"error": "..."} (or success:false with error) in a
// 200 answer, as older servers send for every failure.
func bodyError(body []byte) (error, bool) {
	b := bytes.TrimSpace(body)
	if len(b) == 0 || b[0] != '{' {
		return nil, false
	}
	var e struct {
		Error *string `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil || e.Error == nil {
		return nil, false
	}
	msg := strings.ToLower(*e.Error)
	switch {
	case strings.Contains(msg, "not found") || strings.Contains(msg, strings.ToLower(NoDeadLetterText)):
		return ErrNoDeadLetterRow, true
	case strings.Contains(msg, "authentication") || strings.Contains(msg, "token"):
		return ErrUnauthorized, true
	case strings.Contains(msg, "permission"):
		return ErrForbidden, true
	}
	return ErrUnavailable, true
}

func jsonErrorIsNotFound(body []byte) bool {
	k, ok := bodyError(body)
	return ok && errors.Is(k, ErrNoDeadLetterRow)
}

func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t)
	}
	return 0
}

func unwrapURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

func (c *Client) trace(format string, a ...any) {
	if c.opts.Debug == nil {
		return
	}
	fmt.Fprintf(c.opts.Debug, "[http] "+format+"\n", a...)
}

// redact removes the token from any text that may reach the user.
func (c *Client) redact(s string) string {
	if c.opts.Token == "" {
		return s
	}
	return strings.ReplaceAll(s, c.opts.Token, "[redacted]")
}

func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparseable)"
}
