package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/secret"
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
	// Backoff is the first retry delay, doubled each time (up to 5 s),
	// with equal jitter: each wait is between half and all of it; 0 means
	// 200ms. A Retry-After the broker sends is waited instead.
	Backoff time.Duration
	// Sleep waits between retries; tests replace it. nil waits on a timer.
	Sleep func(context.Context, time.Duration) error
	// MaxRow bounds one row of a list answer (and any other answer);
	// 0 means MaxRow (64 MiB).
	MaxRow int64
	// MaxAnswerRows bounds the rows of one list answer; 0 means
	// MaxAnswerRows.
	MaxAnswerRows int
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
	if deadletter.APIPath(o.Server) {
		bare := *u
		bare.Path, bare.RawPath, bare.RawQuery = "", "", ""
		return nil, fmt.Errorf("invalid server URL %q: drop the API path, dlqctl adds it (--server %s)", secret.URL(o.Server), secret.URL(bare.String()))
	}
	identity := o.Identity
	if identity == "" {
		if identity, err = deadletter.Identity(o.Server); err != nil {
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
		o.Sleep = Sleep
	}
	if o.MaxRow <= 0 {
		o.MaxRow = MaxRow
	}
	if o.MaxAnswerRows <= 0 {
		o.MaxAnswerRows = MaxAnswerRows
	}
	c := &Client{base: u, opts: o, shown: secret.URL(u.String()), identity: identity, redact: secret.NewRedactor(o.Token)}
	// A copy, so the redirect policy is ours whatever was injected.
	hc := *o.HTTPClient
	hc.CheckRedirect = c.checkRedirect
	c.http = &hc
	return c, nil
}

// Aside is a client of the same broker, options and connections whose
// silences are its own: calls that matter less than the caller's (trace
// events) cannot make the caller's client give the broker up.
func (c *Client) Aside() *Client {
	a := &Client{base: c.base, opts: c.opts, http: c.http, shown: c.shown, identity: c.identity, redact: c.redact}
	a.dialect.Store(c.dialect.Load())
	return a
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

// Sleep waits d, or until ctx is done (its error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
