package client

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinels the exit-code mapper and the replay engine switch on.
var (
	// ErrNoDeadLetterRow: the address has no dead-letter row (404 "No
	// dead-letter row for this address", or an older server's "Message not
	// found").
	ErrNoDeadLetterRow = errors.New("no dead-letter row at this address")
	// ErrRouteMissing: the broker has no such route (an older server
	// without /retry answers an HTML 404).
	ErrRouteMissing = errors.New("the broker has no such route")
	// ErrUnauthorized: 401, no or invalid token.
	ErrUnauthorized = errors.New("authentication refused")
	// ErrForbidden: 403, the token lacks the access level.
	ErrForbidden = errors.New("permission refused")
	// ErrUnavailable: the broker could not be reached or answered 5xx.
	ErrUnavailable = errors.New("broker unavailable")
	// ErrBadResponse: the broker answered something that is not the
	// expected JSON shape.
	ErrBadResponse = errors.New("unreadable broker response")
	// ErrUnreachable: the address cannot be put in a URL path the broker
	// reads back (a transaction id with /, a space, ?, …, or a dot
	// segment): no call can name it. Nothing was sent.
	ErrUnreachable = errors.New("address unreachable through the broker's API")
	// ErrNotSent: the call never reached the broker (the connection was
	// refused, the request was not written, or the client had given up on
	// an unresponsive broker): it is safe to try again, even for a push.
	// It comes with ErrUnavailable.
	ErrNotSent = errors.New("nothing was sent")
	// ErrRefused: the broker refused the call and changed nothing (2.x's
	// 409: a read-only queue, a quota): not worth repeating at once.
	ErrRefused = errors.New("refused by the broker")
	// ErrFull: the broker's disk is full (2.x's 507): nothing more can be
	// written until someone makes room.
	ErrFull = errors.New("the broker's storage is full")
	// ErrStandby: the broker is a standby cluster (Queen 2.1): it answers
	// reads and refuses every write with 503 "code":"standby" until it is
	// promoted. Not an election: nothing to wait out.
	ErrStandby = errors.New("the broker is a standby cluster, which refuses every write until it is promoted")
	// ErrNotApplied: the broker answered that the call changed nothing
	// (a move's 500 with dlqRowRemoved:false): safe to repeat.
	ErrNotApplied = errors.New("the broker changed nothing")
	// ErrOutcomeUnknown: the broker may or may not have applied the call
	// (a move's 500 with dlqRowRemoved:null, or a lost answer): look at
	// what it holds before anything else.
	ErrOutcomeUnknown = errors.New("outcome unknown")
)

// RetryAfter is how long the broker asked to wait before the call is
// sent again (429, or 2.x's 503 no_leader), 0 when it did not say.
func RetryAfter(err error) time.Duration {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.RetryAfter
	}
	return 0
}

// NoAnswer reports whether err is a call that got no answer from the
// broker at all (refused, timed out, cut): the broker may be down, as
// opposed to one that answered with an error.
func NoAnswer(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && errors.Is(he.Kind, ErrUnavailable) && he.Status == 0
}

// NoDeadLetterText is the body a current broker sends with a 404 for an
// address that is not dead-lettered.
const NoDeadLetterText = "No dead-letter row for this address"

// HTTPError is a failed call: the request, the status and the first bytes
// of the body. Kind is one of the sentinels above and is what errors.Is
// matches.
type HTTPError struct {
	Method string
	URL    string // without credentials; the token never travels in URLs
	Status int
	Body   string
	Kind   error
	Err    error // transport error, if any
	// NotSent: the request never reached the broker (ErrNotSent).
	NotSent bool
	// RetryAfter is what the broker's Retry-After said, if anything.
	RetryAfter time.Duration

	bodyBytes []byte // set by the list decoder, turned into Body by its caller
	// raw is the failure's body as it came (bounded, not redacted): for
	// the caller that reads a verdict from it, never for printing.
	raw []byte
}

func (e *HTTPError) Error() string {
	if errors.Is(e.Kind, ErrUnreachable) {
		return fmt.Sprintf("%s is unreachable through the broker's API: %s; nothing was sent", e.URL, e.Body)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: ", e.Method, e.URL)
	switch {
	case e.Err != nil:
		fmt.Fprintf(&b, "%v", e.Err)
	case e.Status != 0:
		fmt.Fprintf(&b, "HTTP %d", e.Status)
	}
	if e.Kind != nil && e.Err == nil {
		fmt.Fprintf(&b, " (%v)", e.Kind)
	}
	if e.Body != "" {
		fmt.Fprintf(&b, ": %s", e.Body)
	}
	switch {
	case errors.Is(e.Kind, ErrUnauthorized):
		b.WriteString("; check --token, --token-file or DLQCTL_TOKEN")
	case errors.Is(e.Kind, ErrForbidden):
		b.WriteString("; this token lacks the access level for the call (read-write is needed to delete, push or replay)")
	case errors.Is(e.Kind, ErrUnavailable):
		b.WriteString("; check --server and that the broker is up")
	case errors.Is(e.Kind, ErrFull):
		b.WriteString("; the broker can take nothing more until its disk has room")
	case errors.Is(e.Kind, ErrStandby):
		b.WriteString("; point --server at the primary cluster, or go on once this one is promoted")
	}
	return b.String()
}

func (e *HTTPError) Unwrap() []error {
	out := []error{e.Kind}
	if e.NotSent {
		out = append(out, ErrNotSent)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// snippet returns the first bytes of a body, on one line, for messages.
func snippet(b []byte) string {
	const max = 120
	if len(b) > 4*max {
		b = b[:4*max]
	}
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}
