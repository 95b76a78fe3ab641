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
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlqctl/dlqctl/pkg/secret"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Options configure a Client.
type Options struct {
	Server     string       // base URL, e.g. http://localhost:6632
	Token      string       // bearer token; never printed
	HTTPClient *http.Client // injected so tests control the transport
	// Timeout bounds the wait for the broker to start answering a call,
	// and then the wait between two reads of its answer: a large DLQ
	// streams for as long as it keeps arriving. 0 means 30s.
	Timeout time.Duration
	// Debug, when set, receives an HTTP trace with the token redacted.
	Debug io.Writer
	// Attempts bounds tries of an idempotent call (GET, DELETE); 0 means 4.
	Attempts int
	// Backoff is the first retry delay, doubled each time with full
	// jitter; 0 means 200ms.
	Backoff time.Duration
	// Sleep waits between retries; tests replace it. nil waits on a timer.
	Sleep func(context.Context, time.Duration) error
	// MaxRow bounds one row of a list answer (and any other answer);
	// 0 means MaxRow (64 MiB).
	MaxRow int64
	// Identity names the broker in the ledger; "" means Identity(Server).
	// A context that names its broker (broker: prod) sets it, so several
	// URLs of one broker share its history.
	Identity string
}

// MaxRow is the most dlqctl holds of one answer that is not a list (a
// message's detail, a push result) and of one row of a list, which is
// streamed a row at a time.
const MaxRow = 64 << 20

func mib(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Client talks to one Queen broker.
type Client struct {
	base     *url.URL
	opts     Options
	http     *http.Client
	shown    string // base URL with credentials removed, for messages
	identity string // the ledger's name for the broker
	redact   secret.Redactor

	// dialect is what the list route has shown of the broker: 0 unknown,
	// dialectContract (pages, sends total, decrypts), dialectReleased
	// (one body, no total, never decrypts).
	dialect atomic.Int32
	// quietSince is when the broker last stopped answering (Unix ns; 0
	// while it answers): past Attempts × Timeout of silence the client
	// sends nothing more (see unresponsive).
	quietSince atomic.Int64

	// release is the broker's line, told once (Release).
	releaseMu sync.Mutex
	release   *Release
}

const (
	dialectContract = 1
	dialectReleased = 2
)

// New validates the server URL and returns a client.
func New(o Options) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(o.Server, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return nil, fmt.Errorf("invalid server URL %q: want http(s)://host:port", secret.URL(o.Server))
	}
	if u.RawQuery != "" || u.Fragment != "" {
		// dlqctl sends its own queries; a token in one would be printed
		// with every URL.
		return nil, fmt.Errorf("invalid server URL %q: drop the query: dlqctl adds its own (a token goes in --token-file or DLQCTL_TOKEN)", secret.URL(o.Server))
	}
	if APIPath(o.Server) {
		bare := *u
		bare.Path, bare.RawPath, bare.RawQuery = "", "", ""
		return nil, fmt.Errorf("invalid server URL %q: drop the API path, dlqctl adds it (--server %s)", secret.URL(o.Server), secret.URL(bare.String()))
	}
	identity := o.Identity
	if identity == "" {
		if identity, err = Identity(o.Server); err != nil {
			return nil, err
		}
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.HTTPClient == nil {
		if o.HTTPClient, err = NewHTTPClient(TLSOptions{Timeout: o.Timeout}); err != nil {
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
	if o.MaxRow <= 0 {
		o.MaxRow = MaxRow
	}
	c := &Client{base: u, opts: o, shown: secret.URL(u.String()), identity: identity, redact: secret.NewRedactor(o.Token)}
	// A copy, so the redirect policy is ours whatever was injected.
	hc := *o.HTTPClient
	hc.CheckRedirect = c.checkRedirect
	c.http = &hc
	return c, nil
}

// Server returns the broker URL without credentials, for messages.
func (c *Client) Server() string { return c.shown }

// Redact removes the client's token (and any long enough piece of it)
// from s: for texts that come from the broker's data, such as a dead
// letter's error message, on their way to an output the token must
// never reach.
func (c *Client) Redact(s string) string { return c.redact.Redact(s) }

// Broker is the broker's identity: the key the ledger files everything
// under (see Identity).
func (c *Client) Broker() string { return c.identity }

// FileUnder makes identity the ledger's name for the broker: a person
// said it is the broker the ledger knows by that name. Call it before
// the client is used.
func (c *Client) FileUnder(identity string) { c.identity = identity }

// ListDecrypts reports whether the broker's list route decrypts payloads
// (the seed contract's, which also pages) rather than showing encryption
// envelopes (the released server's): known after the first list call.
func (c *Client) ListDecrypts() bool { return c.dialect.Load() == dialectContract }

// OneBody reports whether the broker has been seen answering the whole
// DLQ in one body, whatever the limit (the released server).
func (c *Client) OneBody() bool { return c.dialect.Load() == dialectReleased }

// TLSOptions configure transport security.
type TLSOptions struct {
	CAFile             string
	InsecureSkipVerify bool
	// Timeout bounds dialling and the wait for response headers.
	Timeout time.Duration
}

// NewHTTPClient builds the *http.Client for TLSOptions. It sets no overall
// timeout: a whole-DLQ body may stream for longer than any one wait, and
// the client bounds the time between reads instead.
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
	if o.Timeout > 0 {
		tr.DialContext = (&net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second}).DialContext
		tr.TLSHandshakeTimeout = o.Timeout
		tr.ResponseHeaderTimeout = o.Timeout
	}
	// Replays run up to --concurrency calls at once; keep that many
	// connections alive instead of dialling one per call.
	tr.MaxIdleConnsPerHost = 256
	return &http.Client{Transport: tr}, nil
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

// Meter counts the requests and bytes of the calls made with a context
// carrying it (WithMeter), so a command can say what it cost.
type Meter struct {
	requests atomic.Int64
	bytes    atomic.Int64
	last     atomic.Pointer[string]
}

// Last is the latest call sent, "GET http://host/api/v1/…" (redacted),
// or "" before the first: what a pass that overran was waiting on.
func (m *Meter) Last() string {
	if p := m.last.Load(); p != nil {
		return *p
	}
	return ""
}

// Requests is the number of HTTP requests sent.
func (m *Meter) Requests() int { return int(m.requests.Load()) }

// Bytes is the number of body bytes read.
func (m *Meter) Bytes() int64 { return m.bytes.Load() }

type meterKey struct{}

// WithMeter returns a context whose calls are counted by m (and by any
// meter ctx already carries).
func WithMeter(ctx context.Context, m *Meter) context.Context {
	ms, _ := ctx.Value(meterKey{}).([]*Meter)
	return context.WithValue(ctx, meterKey{}, append(append([]*Meter(nil), ms...), m))
}

func meters(ctx context.Context) []*Meter {
	ms, _ := ctx.Value(meterKey{}).([]*Meter)
	return ms
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
		Data   json.RawMessage `json:"data"`
		Groups json.RawMessage `json:"consumerGroups"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, c.badBody(http.MethodGet, path, body, err)
	}
	if len(m.Message.Payload) == 0 || string(m.Message.Payload) == "null" {
		m.Message.Payload = m.Data
	}
	var names []string
	var consumers []struct {
		Name     string `json:"name"`
		Consumed bool   `json:"consumed"`
	}
	switch {
	case json.Unmarshal(m.Groups, &names) == nil:
		m.Message.FailedGroups = names
	case json.Unmarshal(m.Groups, &consumers) == nil:
		for _, g := range consumers {
			if !g.Consumed && g.Name != "" {
				m.Message.PendingGroups = append(m.Message.PendingGroups, g.Name)
			}
		}
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
			return &HTTPError{Method: http.MethodDelete, URL: c.shown + path, Status: 200, Body: c.snippet(body), Kind: ErrNoDeadLetterRow}
		}
		return &HTTPError{Method: http.MethodDelete, URL: c.shown + path, Status: 200, Body: c.snippet(body), Kind: ErrUnavailable}
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
		return &r, &HTTPError{Method: http.MethodPost, URL: c.shown + path, Status: 200, Body: c.snippet(body), Kind: ErrUnavailable}
	}
	return &r, nil
}

// ProbeAddress is an address no broker holds: asking /retry for it tells
// whether the route exists without touching anything.
var ProbeAddress = Address{PartitionID: "00000000-0000-0000-0000-000000000000", TransactionID: "dlqctl-route-probe"}

// HasRetryRoute asks whether the broker has the /retry endpoint, with a
// call for an address that cannot exist: a broker with the route answers
// "no dead-letter row"; one without answers a bare 404. Anything else
// (no answer, an error) is reported as false with the error, so a caller
// in doubt takes the manual path.
func (c *Client) HasRetryRoute(ctx context.Context) (bool, error) {
	_, err := c.Retry(ctx, ProbeAddress)
	switch {
	case errors.Is(err, ErrNoDeadLetterRow):
		return true, nil
	case errors.Is(err, ErrRouteMissing):
		return false, nil
	case err == nil:
		return true, nil
	}
	return false, err
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

// ConsumerGroups lists the broker's (group, queue) pairs from
// /api/v1/consumer-groups: the released server's bare array, or an object
// wrapping it. A broker without the route has none to tell (nil, nil).
func (c *Client) ConsumerGroups(ctx context.Context) ([]ConsumerGroup, error) {
	const path = "/api/v1/consumer-groups"
	body, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if errors.Is(err, ErrRouteMissing) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var list []consumerGroupWire
	if err := json.Unmarshal(body, &list); err != nil {
		var w struct {
			ConsumerGroups []consumerGroupWire `json:"consumerGroups"`
			Groups         []consumerGroupWire `json:"groups"`
		}
		if err := json.Unmarshal(body, &w); err != nil {
			return nil, c.badBody(http.MethodGet, path, body, err)
		}
		list = append(w.ConsumerGroups, w.Groups...)
	}
	out := make([]ConsumerGroup, 0, len(list))
	for _, g := range list {
		q := g.QueueName
		if q == "" {
			q = g.Queue
		}
		if q == "" && len(g.Topics) > 0 {
			q = g.Topics[0]
		}
		if g.Name != "" && q != "" {
			cg := ConsumerGroup{Name: g.Name, Queue: q}
			if g.MaxTimeLag.ok {
				cg.Lag = &Lag{MaxTime: time.Duration(g.MaxTimeLag.v * float64(time.Second)), State: g.State}
				if g.TotalLag.ok {
					n := int(g.TotalLag.v)
					cg.Lag.Messages = &n
				}
			}
			out = append(out, cg)
		}
	}
	return out, nil
}

type consumerGroupWire struct {
	Name      string   `json:"name"`
	QueueName string   `json:"queueName"`
	Queue     string   `json:"queue"`
	Topics    []string `json:"topics"`
	// The lag, where the broker reports it (seconds, messages, state).
	MaxTimeLag looseNumber `json:"maxTimeLag"`
	TotalLag   looseNumber `json:"totalLag"`
	State      string      `json:"state"`
}

// looseNumber is a JSON number that may arrive as a string (a database's
// numeric, quoted) or null; anything else reads as absent rather than
// failing the whole answer.
type looseNumber struct {
	v  float64
	ok bool
}

func (n *looseNumber) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
		n.v, n.ok = f, true
	}
	return nil
}

func messagePath(a Address, suffix string) (string, error) {
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

func (c *Client) backoff(try int, last error) time.Duration {
	if ra := RetryAfter(last); ra > 0 {
		return min(ra, 30*time.Second)
	}
	ceil := c.opts.Backoff << (try - 1)
	ceil = min(ceil, 5*time.Second)
	return ceil/2 + rand.N(ceil/2+1)
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
)

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
	req, err := http.NewRequestWithContext(tctx, method, target, rd)
	if err != nil {
		cancel(nil)
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
		if ctx.Err() != nil {
			return nil, ctx.Err(), false
		}
		var rerr *errRedirect
		if errors.As(err, &rerr) {
			return nil, &HTTPError{Method: method, URL: shown, Kind: ErrBadResponse, Err: errors.New(rerr.Error())}, false
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
		return nil, &HTTPError{Method: method, URL: shown, Kind: ErrUnavailable, Err: errors.New(msg), NotSent: !wrote.Load()}, true
	}
	timer.Stop()
	c.quietSince.Store(0)
	c.trace("← %s %s", hr.Status, time.Since(start).Round(time.Millisecond))
	ir := &idleReader{r: hr.Body, timer: timer, d: c.opts.Timeout, meters: meters(ctx)}
	// The whole answer (a list's: each row) must arrive within what a
	// call may wait in all, however it trickles.
	slow := time.AfterFunc(c.unresponsive(), func() { cancel(errSlow) })
	r := &response{body: ir, raw: hr.Body, stop: func() { timer.Stop(); slow.Stop(); cancel(nil) }, shown: shown, method: method, c: c, ctx: ctx,
		cause: func() error { return context.Cause(cctx) }, hold: func() { slow.Stop() }, progress: func() { slow.Reset(c.unresponsive()) }}
	if hr.StatusCode >= 200 && hr.StatusCode < 300 {
		return r, nil, false
	}
	// A failure: its body is read (bounded) for the message.
	defer r.close()
	body, _ := io.ReadAll(io.LimitReader(ir, 64<<10))
	fail := func(kind error) *HTTPError {
		return &HTTPError{Method: method, URL: shown, Status: hr.StatusCode, Body: c.snippet(body), Kind: kind, raw: body,
			RetryAfter: parseRetryAfter(hr.Header.Get("Retry-After"))}
	}
	switch s := hr.StatusCode; {
	case s == http.StatusUnauthorized:
		return nil, fail(ErrUnauthorized), false
	case s == http.StatusForbidden:
		return nil, fail(ErrForbidden), false
	case s == http.StatusNotFound:
		if !noSuchRoute(body) && (bytes.Contains(body, []byte(NoDeadLetterText)) || jsonErrorIsNotFound(body)) {
			return nil, fail(ErrNoDeadLetterRow), false
		}
		return nil, fail(ErrRouteMissing), false
	case s == http.StatusConflict:
		return nil, fail(ErrRefused), false
	case s == http.StatusInsufficientStorage:
		return nil, fail(ErrFull), false
	case s == http.StatusTooManyRequests:
		return nil, fail(ErrUnavailable), true
	case s == http.StatusBadGateway || s == http.StatusServiceUnavailable || s == http.StatusGatewayTimeout:
		return nil, fail(ErrUnavailable), true
	case s >= 500:
		return nil, fail(ErrUnavailable), false
	case s >= 300 && s < 400:
		he := fail(ErrBadResponse)
		if loc := hr.Header.Get("Location"); loc != "" {
			he.Err = fmt.Errorf("%w: the broker redirected to %s, which dlqctl does not follow", ErrBadResponse, secret.URL(loc))
		}
		return nil, he, false
	}
	return nil, fail(ErrBadResponse), false
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

// noSuchRoute reports the Rust broker's answer for a path it has no
// route for: 404 {"error":"Not Found","code":"no_such_route"}.
func noSuchRoute(body []byte) bool {
	var e struct {
		Code string `json:"code"`
	}
	return json.Unmarshal(bytes.TrimSpace(body), &e) == nil && e.Code == "no_such_route"
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

// DLQDepths reads the broker's per-queue dead-letter depth from its
// Prometheus metrics (queen_dlq_depth_by_queue{queue}), which a contract
// server exports: a depth without paging. The released server has no such
// metric: the map is then empty, and so it is on any error (a probe does
// without it).
func (c *Client) DLQDepths(ctx context.Context) map[string]int {
	out := map[string]int{}
	resp, err := c.send(ctx, http.MethodGet, "/metrics/prometheus", nil, nil)
	if err != nil {
		return out
	}
	defer resp.close()
	body, err := io.ReadAll(io.LimitReader(resp.body, 16<<20))
	if err != nil {
		return out
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return out
	}
	if f := fams["queen_dlq_depth_by_queue"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "queue" {
					continue
				}
				switch {
				case m.GetGauge() != nil:
					out[l.GetValue()] = int(m.GetGauge().GetValue())
				case m.GetUntyped() != nil:
					out[l.GetValue()] = int(m.GetUntyped().GetValue())
				}
			}
		}
	}
	return out
}
