package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/secret"
	"github.com/dustin/go-humanize"
)

func messagePath(a deadletter.Address, suffix string) (string, error) {
	if why := a.Unreachable(); why != "" {
		return "", &HTTPError{Method: "-", URL: a.String(), Kind: ErrUnreachable, Body: why}
	}
	return "/api/v1/messages/" + a.PartitionID + "/" + a.TransactionID + suffix, nil
}

func (c *Client) badBody(method, path string, body []byte, err error) error {
	return &HTTPError{Method: method, URL: c.shown + path, Status: 200, Body: c.snippet(body), Kind: ErrBadResponse, Err: fmt.Errorf("%w: %v", ErrBadResponse, err)}
}

// snippet is the first bytes of a body for a message, with the token
// redacted before anything is cut, so no piece of it can survive the cut.
func (c *Client) snippet(body []byte) string {
	if len(body) > 4096 {
		body = body[:4096]
	}
	return snippet([]byte(c.redact.Redact(string(body))))
}

// do sends one call and returns its whole (bounded) body.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, payload []byte) ([]byte, error) {
	resp, err := c.send(ctx, method, path, q, payload)
	if err != nil {
		return nil, err
	}
	defer resp.close()
	body, err := io.ReadAll(io.LimitReader(resp.body, c.opts.MaxRow+1))
	if err != nil {
		return nil, resp.readErr(err)
	}
	if int64(len(body)) > c.opts.MaxRow {
		return nil, &HTTPError{Method: method, URL: resp.shown, Status: 200, Kind: ErrBadResponse,
			Err: fmt.Errorf("%w: the answer is larger than %s, the most dlqctl reads of it", ErrBadResponse, mib(c.opts.MaxRow))}
	}
	c.trace("← %dB", len(body))
	// Older servers answer 200 for failures, with an "error" key.
	if kind, ok := bodyError(body); ok {
		return nil, &HTTPError{Method: method, URL: resp.shown, Status: 200, Body: c.snippet(body), Kind: kind}
	}
	if len(bytes.TrimSpace(body)) == 0 && method == http.MethodGet {
		return nil, &HTTPError{Method: method, URL: resp.shown, Status: 200, Body: "(empty body)", Kind: ErrBadResponse}
	}
	return body, nil
}

// response is a successful answer whose body is still to be read.
type response struct {
	body   io.Reader // counted, bounded in time between reads
	raw    io.ReadCloser
	stop   func()
	shown  string
	method string
	c      *Client
	ctx    context.Context
	cause  func() error // why the call's own context ended, if it did
	// read and elapsed: the bytes of the answer so far, and the broker's
	// time it took.
	read    func() int64
	elapsed func() time.Duration
	// hold stops the clock while a row is handed on (a reader that
	// blocks, a pager waiting for a person, is not the broker being
	// slow); progress starts it again: the next row has as long as the
	// first had.
	hold, progress func()
}

func (r *response) close() {
	r.raw.Close()
	r.stop()
}

// readErr describes a failure to read the body.
func (r *response) readErr(err error) error {
	if r.ctx.Err() != nil {
		return r.ctx.Err()
	}
	switch r.cause() {
	case errIdle:
		err = fmt.Errorf("the answer stopped arriving for %s (--timeout)", r.c.opts.Timeout)
		r.c.noAnswerSince(time.Now().Add(-r.c.opts.Timeout))
	case errSlow:
		err = fmt.Errorf("the answer trickled: a row of it (or the whole of it) did not arrive within %s (%d× --timeout)", r.c.unresponsive(), r.c.opts.Attempts)
	case errEndless:
		err = fmt.Errorf("the answer trickled: %s in %s, slower than %s/s, the least an answer still arriving after %s (%d× --timeout) must keep up",
			humanize.IBytes(uint64(r.read())), r.elapsed().Round(100*time.Millisecond), humanize.IBytes(answerFloor), r.c.unresponsive(), r.c.opts.Attempts)
	}
	return &HTTPError{Method: r.method, URL: r.shown, Status: 200, Kind: ErrUnavailable, Err: fmt.Errorf("reading the answer: %s", r.c.redact.Redact(err.Error()))}
}

// send sends one call, retrying idempotent methods on connection errors,
// 429 and 502/503/504, and returns the open answer of a 2xx.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, payload []byte) (*response, error) {
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
		resp, err, retry := c.once(ctx, method, u.String(), shown, payload)
		if err == nil {
			return resp, nil
		}
		last = err
		if !retry || ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if attempts > 1 {
		var he *HTTPError
		if errors.As(last, &he) && errors.Is(he.Kind, ErrUnavailable) && he.Status == 0 {
			he.Err = fmt.Errorf("%v (%d tries)", he.Err, attempts)
		}
	}
	return nil, last
}

// backoff is the wait before try (1 for the first retry): what the
// broker's Retry-After asked, up to 30 s, else the client's Backoff
// doubled each try up to 5 s, with jitter. It is never negative and
// never panics, whatever the try count, Backoff or Retry-After.
func (c *Client) backoff(try int, last error) time.Duration {
	if ra := RetryAfter(last); ra > 0 {
		return min(ra, maxRetryAfter)
	}
	ceil := backoffCeiling(c.opts.Backoff, try)
	return ceil/2 + rand.N(ceil/2+1)
}

// maxRetryAfter and maxBackoff bound a retry's wait.
const (
	maxRetryAfter = 30 * time.Second
	maxBackoff    = 5 * time.Second
)

// backoffCeiling is base doubled try-1 times, up to maxBackoff (and at
// least a millisecond): doubled by a loop that stops at the bound, not by
// a shift, which overflows into a negative wait past the 35th try.
func backoffCeiling(base time.Duration, try int) time.Duration {
	d := min(max(base, time.Millisecond), maxBackoff)
	for i := 1; i < try && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// errRedirect is what checkRedirect refuses with; once turns it into an
// HTTPError naming both URLs.
type errRedirect struct{ from, to, why string }

func (e *errRedirect) Error() string {
	return fmt.Sprintf("the broker redirected to %s; %s", e.to, e.why)
}

// checkRedirect follows a redirect only for a read, and only to the
// broker's own origin (scheme, host and port): the token goes nowhere
// else, and a call that changes data is never sent twice.
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	first := via[0]
	to := secret.URL(req.URL.String())
	if m := first.Method; m != http.MethodGet && m != http.MethodHead {
		return &errRedirect{to: to, why: "dlqctl never follows a redirect of a call that changes data (" + m + "): nothing was sent there"}
	}
	if !sameOrigin(req.URL, c.base) {
		return &errRedirect{to: to, why: "that is another origin than " + c.shown + ", and dlqctl sends the token to no other"}
	}
	if len(via) >= 5 {
		return &errRedirect{to: to, why: "too many redirects"}
	}
	return nil
}

func sameOrigin(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if u.Scheme == "https" {
			return "443"
		}
		return "80"
	}
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

var (
	errIdle = errors.New("idle")
	// errSlow: a row of a list answer (or a whole other answer) took
	// longer than unresponsive() to arrive.
	errSlow = errors.New("slow")
	// errEndless: a list answer that went on past what a call may take
	// in all (unresponsive()) at less than answerFloor: a trickle of rows
	// without end. One that keeps up is bounded by its rows
	// (Options.MaxAnswerRows), not by its time: a deep DLQ in one body
	// over a slow link is an honest answer.
	errEndless = errors.New("endless")
)

// answerFloor is the pace, in bytes a second of the broker's time, that
// a list answer must keep up once it has gone on for unresponsive():
// about 130 rows a second, far below any broker that is answering (the
// 0.x server sends 3M rows at 10 MB/s), far above one that trickles.
const answerFloor = 64 << 10

// idleReader fails a read that waits longer than the timeout for
// something other than whitespace (a broker trickling spaces is idle),
// and counts what it reads.
type idleReader struct {
	r      io.Reader
	timer  *time.Timer
	d      time.Duration
	meters []*Meter
	n      int64
	armed  bool // the idle timer runs
}

func (r *idleReader) Read(p []byte) (int, error) {
	if !r.armed {
		r.timer.Reset(r.d)
		r.armed = true
	}
	n, err := r.r.Read(p)
	if progress(p[:n]) || err != nil {
		r.timer.Stop()
		r.armed = false
	}
	r.n += int64(n)
	for _, m := range r.meters {
		m.bytes.Add(int64(n))
	}
	return n, err
}

// progress reports bytes that are more than JSON's whitespace.
func progress(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\n' && c != '\r' && c != '\t' {
			return true
		}
	}
	return false
}

// unresponsive is the wait after which the client gives up on a broker
// that does not answer: about what one idempotent call may take with all
// its tries, so --timeout bounds a whole command's waiting, not only
// each call's.
func (c *Client) unresponsive() time.Duration {
	return time.Duration(c.opts.Attempts) * c.opts.Timeout
}

// gaveUp returns the error of a call not sent because the broker has
// been silent for longer than unresponsive, or nil.
func (c *Client) gaveUp(method, shown string) error {
	since := c.quietSince.Load()
	if since == 0 {
		return nil
	}
	quiet := time.Since(time.Unix(0, since))
	if quiet < c.unresponsive() {
		return nil
	}
	return &HTTPError{Method: method, URL: shown, Kind: ErrUnavailable, NotSent: true,
		Err: fmt.Errorf("not sent: the broker has not answered for %s (%d× --timeout %s)", quiet.Round(100*time.Millisecond), c.opts.Attempts, c.opts.Timeout)}
}

// noAnswerSince records that the broker stopped answering at t (the
// first such moment is kept until it answers again).
func (c *Client) noAnswerSince(t time.Time) { c.quietSince.CompareAndSwap(0, t.UnixNano()) }

// ResetUnresponsive forgets that the broker stopped answering: a
// long-running caller (the exporter) tries it again on its next pass.
func (c *Client) ResetUnresponsive() { c.quietSince.Store(0) }

func (c *Client) once(ctx context.Context, method, target, shown string, payload []byte) (resp *response, err error, retry bool) {
	if err := c.gaveUp(method, shown); err != nil {
		c.trace("→ %s %s: %v", method, shown, err)
		return nil, err, false
	}
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	// Whether the request was written: a call that failed before it was
	// never reached the broker, and is safe to send again.
	var wrote atomic.Bool
	tctx := httptrace.WithClientTrace(cctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) }})
	req, err := c.request(tctx, method, target, rd, payload != nil)
	if err != nil {
		cancel(nil)
		return nil, err, false
	}
	c.trace("→ %s %s", method, shown)
	if c.opts.Token != "" {
		c.trace("  Authorization: Bearer [redacted]")
	}
	call := method + " " + shown
	for _, m := range meters(ctx) {
		m.requests.Add(1)
		m.last.Store(&call)
	}
	// The timeout covers the wait for headers here, and each wait for
	// more of the body afterwards (idleReader).
	timer := time.AfterFunc(c.opts.Timeout, func() { cancel(errIdle) })
	start := time.Now()
	hr, err := c.http.Do(req)
	if err != nil {
		timer.Stop()
		cancel(nil)
		err, retry := c.noAnswer(ctx, cctx, method, shown, err, start, !wrote.Load())
		return nil, err, retry
	}
	timer.Stop()
	c.quietSince.Store(0)
	c.trace("← %s %s", hr.Status, time.Since(start).Round(time.Millisecond))
	ir := &idleReader{r: hr.Body, timer: timer, d: c.opts.Timeout, meters: meters(ctx)}
	// The whole answer (a list's: each row) must arrive within what a
	// call may wait in all, however it trickles. A list answer as a
	// whole may go on for as long as it keeps coming: past what a call
	// may wait, at answerFloor at least (its rows are bounded by
	// MaxAnswerRows). What counts is the broker's time and the reader's
	// work on the rows, not a reader that holds a row for longer (a pager
	// waiting for a person).
	slow := time.AfterFunc(c.unresponsive(), func() { cancel(errSlow) })
	var used time.Duration
	since, held := time.Now(), time.Time{}
	r := &response{body: ir, raw: hr.Body, stop: func() { timer.Stop(); slow.Stop(); cancel(nil) }, shown: shown, method: method, c: c, ctx: ctx,
		cause:   func() error { return context.Cause(cctx) },
		read:    func() int64 { return ir.n },
		elapsed: func() time.Duration { return used },
		hold: func() {
			slow.Stop()
			held = time.Now()
			if used += held.Sub(since); used > c.unresponsive()+time.Duration(float64(ir.n)/answerFloor*float64(time.Second)) {
				cancel(errEndless)
			}
		},
		progress: func() {
			now := time.Now()
			if h := now.Sub(held); h < time.Second {
				used += h
			}
			since = now
			slow.Reset(c.unresponsive())
		}}
	if hr.StatusCode >= 200 && hr.StatusCode < 300 {
		return r, nil, false
	}
	// A failure: its body is read (bounded) for the message.
	defer r.close()
	body, _ := io.ReadAll(io.LimitReader(ir, 64<<10))
	he, retry := c.statusError(method, shown, hr, body)
	return nil, he, retry
}

// request is a call's request, with its headers.
func (c *Client) request(ctx context.Context, method, target string, body io.Reader, isJSON bool) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if isJSON {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	return req, nil
}

// noAnswer is the error of a call that got no answer (err from the
// transport; cctx the call's own context), and whether to try again.
func (c *Client) noAnswer(ctx, cctx context.Context, method, shown string, err error, start time.Time, notSent bool) (error, bool) {
	if ctx.Err() != nil {
		return ctx.Err(), false
	}
	var rerr *errRedirect
	if errors.As(err, &rerr) {
		return &HTTPError{Method: method, URL: shown, Kind: ErrBadResponse, Err: errors.New(rerr.Error())}, false
	}
	msg := c.redact.Redact(unwrapURLError(err))
	var ne net.Error
	if context.Cause(cctx) == errIdle || errors.As(err, &ne) && ne.Timeout() {
		// Our own timer or the transport's header timeout, whichever
		// fired first: the same wait, said one way.
		msg = fmt.Sprintf("no answer within %s (--timeout)", c.opts.Timeout)
	}
	c.trace("← error after %s: %s", time.Since(start).Round(time.Millisecond), msg)
	c.noAnswerSince(start)
	return &HTTPError{Method: method, URL: shown, Kind: ErrUnavailable, Err: errors.New(msg), NotSent: notSent}, true
}

// statusError is the error of an answer that is not a success (body:
// its first 64 KiB), and whether to try again.
func (c *Client) statusError(method, shown string, hr *http.Response, body []byte) (*HTTPError, bool) {
	fail := func(kind error) *HTTPError {
		return &HTTPError{Method: method, URL: shown, Status: hr.StatusCode, Body: c.snippet(body), Kind: kind, raw: body,
			RetryAfter: parseRetryAfter(hr.Header.Get("Retry-After"))}
	}
	switch s := hr.StatusCode; {
	case s == http.StatusUnauthorized:
		return fail(ErrUnauthorized), false
	case s == http.StatusForbidden:
		return fail(ErrForbidden), false
	case s == http.StatusNotFound:
		return fail(notFoundKind(body)), false
	case s == http.StatusConflict:
		return fail(ErrRefused), false
	case s == http.StatusInsufficientStorage:
		return fail(ErrFull), false
	case s == http.StatusServiceUnavailable && bodyCode(body) == "standby":
		// A standby refuses every write until it is promoted: no retry.
		return fail(ErrStandby), false
	case s == http.StatusTooManyRequests:
		return fail(ErrUnavailable), true
	case s == http.StatusBadGateway || s == http.StatusServiceUnavailable || s == http.StatusGatewayTimeout:
		return fail(ErrUnavailable), true
	case s >= 500:
		return fail(ErrUnavailable), false
	case s >= 300 && s < 400:
		he := fail(ErrBadResponse)
		if loc := hr.Header.Get("Location"); loc != "" {
			he.Err = fmt.Errorf("%w: the broker redirected to %s, which dlqctl does not follow", ErrBadResponse, secret.URL(loc))
		}
		return he, false
	}
	return fail(ErrBadResponse), false
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
	return errorKind(*e.Error), true
}

// errorKind classifies an older server's error text.
func errorKind(text string) error {
	msg := strings.ToLower(text)
	switch {
	case strings.Contains(msg, "not found") || strings.Contains(msg, strings.ToLower(NoDeadLetterText)):
		return ErrNoDeadLetterRow
	case strings.Contains(msg, "authentication") || strings.Contains(msg, "token"):
		return ErrUnauthorized
	case strings.Contains(msg, "permission"):
		return ErrForbidden
	}
	return ErrUnavailable
}

// notFoundKind reads a 404 by what the broker says, not by its words: a
// verdict (1.6's and 2.x's move answer result:"gone"), or Queen's own
// refusal (success:false, or an error the route wrote), is the row gone;
// code:"no_such_route", or an answer that is not Queen's JSON (the C++
// server's HTML, a proxy's page, another JSON shape), is a missing route.
// Only an older server's plain text is read for its words.
func notFoundKind(body []byte) error {
	var v struct {
		Result  *string         `json:"result"`
		Success *bool           `json:"success"`
		Error   json.RawMessage `json:"error"`
		Code    string          `json:"code"`
	}
	switch b := bytes.TrimSpace(body); {
	case json.Unmarshal(b, &v) == nil && len(b) > 0 && b[0] == '{':
		switch {
		case v.Code == "no_such_route":
			return ErrRouteMissing
		case v.Result != nil && *v.Result == "gone", v.Success != nil && !*v.Success, len(v.Error) > 0:
			return ErrNoDeadLetterRow
		}
		return ErrRouteMissing
	case bytes.Contains(b, []byte(NoDeadLetterText)):
		return ErrNoDeadLetterRow
	}
	return ErrRouteMissing
}

// bodyCode is an error body's "code" ("" when it has none).
func bodyCode(body []byte) string {
	var e struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(bytes.TrimSpace(body), &e) != nil {
		return ""
	}
	return e.Code
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
