package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Destination is where a move publishes a row's copy. Both halves are
// sent: Queen's proxy refuses half a destination.
type Destination struct {
	Queue     string `json:"queue"`
	Partition string `json:"partition"`
}

// Moved is the broker's verdict on a move it carried out (HTTP 200).
type Moved struct {
	// Result is "moved" (the copy written, the row removed) or
	// "duplicate" (a frame with the copy's id was already there: nothing
	// written, the row kept).
	Result        string `json:"result"`
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	ConsumerGroup string `json:"consumerGroup"`
	DLQID         string `json:"dlqId"`
	ReplayedAs    struct {
		MessageID     string `json:"message_id"`
		TransactionID string `json:"transaction_id"`
		QueueName     string `json:"queueName"`
		Status        string `json:"status"`
		Offset        *int64 `json:"offset"`
	} `json:"replayedAs"`
	DLQRowRemoved *bool `json:"dlqRowRemoved"`
}

// Copied reports a verdict that wrote the copy and removed the row.
func (m *Moved) Copied() bool { return m.Result == "moved" }

// Duplicate reports a verdict that found the copy already there.
func (m *Moved) Duplicate() bool { return m.Result == "duplicate" }

// moveError is a move that failed: errors.Is matches its kind (one of
// ErrNotApplied, ErrOutcomeUnknown, ErrRefused, …) and the HTTPError.
type moveError struct {
	kind error
	err  error
}

func (e *moveError) Error() string {
	switch {
	case errors.Is(e.kind, ErrOutcomeUnknown):
		return "outcome unknown: " + e.err.Error()
	case errors.Is(e.kind, ErrNotApplied):
		return "nothing changed: " + e.err.Error()
	}
	return e.err.Error()
}

func (e *moveError) Unwrap() []error { return []error{e.kind, e.err} }

// Move replays one dead-letter row by the broker's move (Queen 1.6 and
// 2.x, POST /api/v1/dlq/{id}/replay): the copy is published under
// CopyID(rowID) and the row removed, in one step. to (nil: the row's own
// queue and partition) redirects the copy.
//
// A 200 is a verdict (Moved). Otherwise: ErrNoDeadLetterRow when the row
// is gone (moved or purged by another hand); ErrOutcomeUnknown when the
// broker said it cannot tell (dlqRowRemoved: null) or the answer was
// lost; ErrNotApplied when the broker said nothing changed, after a few
// tries; ErrRefused for a 2.x refusal. A 503 (1.6's push maintenance,
// 2.x without a leader) changed nothing and is waited out (its
// Retry-After, else backoff), as long as a call may wait under the
// client's timeout rule.
func (c *Client) Move(ctx context.Context, rowID string, to *Destination) (*Moved, error) {
	if !deadletter.SafeSegment(rowID) || rowID == "" {
		return nil, &HTTPError{Method: "-", URL: rowID, Kind: ErrUnreachable, Body: "a dead-letter row id with characters a URL path cannot take"}
	}
	return c.moveCall(ctx, "/api/v1/dlq/"+rowID+"/replay", to)
}

// MoveAt is the address route of the move (POST
// /api/v1/messages/{p}/{t}/retry on 1.6 and 2.x): one row at the
// address, in place (1.6 the newest by failure, 2.x the first by key).
func (c *Client) MoveAt(ctx context.Context, a deadletter.Address) (*Moved, error) {
	path, err := messagePath(a, "/retry")
	if err != nil {
		return nil, err
	}
	return c.moveCall(ctx, path, nil)
}

func (c *Client) moveCall(ctx context.Context, path string, to *Destination) (*Moved, error) {
	var payload []byte
	if to != nil {
		payload, _ = json.Marshal(to)
	}
	start := time.Now()
	for try := 0; ; try++ {
		body, err := c.do(ctx, http.MethodPost, path, nil, payload)
		if err == nil {
			var m Moved
			if err := json.Unmarshal(body, &m); err != nil || (m.Result != "moved" && m.Result != "duplicate") {
				if err == nil {
					err = fmt.Errorf("no verdict (result %q)", m.Result)
				}
				// A 200 that says nothing readable: the move may have happened.
				return nil, &moveError{ErrOutcomeUnknown, c.badBody(http.MethodPost, path, body, err)}
			}
			return &m, nil
		}
		var he *HTTPError
		if !errors.As(err, &he) {
			return nil, err // the context ended
		}
		retry := false
		switch {
		case errors.Is(err, ErrStandby):
			return nil, err // nothing touched, and nothing will be until promoted
		case he.Status == 0 && he.NotSent:
			return nil, err // never reached the broker: safe to send again
		case he.Status == 0:
			return nil, &moveError{ErrOutcomeUnknown, err}
		case he.Status == http.StatusServiceUnavailable && c.inDoubt(he.raw):
			// A later 2.x raft answers an in-doubt commit with 503: the
			// move may have happened.
			return nil, &moveError{ErrOutcomeUnknown, err}
		case he.Status == http.StatusServiceUnavailable:
			// Nothing touched: maintenance (1.6), no leader (2.x).
			retry = time.Since(start) < c.unresponsive()
		case he.Status >= 500 && he.Status != http.StatusInsufficientStorage:
			switch removed := rowRemoved(he.raw); {
			case removed == "null":
				return nil, &moveError{ErrOutcomeUnknown, err}
			case try+1 >= c.opts.Attempts:
				return nil, &moveError{ErrNotApplied, err}
			default:
				// false, or no key at all (a failed lookup): rolled back.
				retry = true
			}
		}
		if !retry {
			return nil, err
		}
		wait := c.backoff(try+1, err)
		c.trace("… move again in %s (%s)", wait.Round(time.Millisecond), he.Body)
		if serr := c.opts.Sleep(ctx, wait); serr != nil {
			return nil, serr
		}
	}
}

// inDoubt reports whether a 503 to a move may have changed something: an
// in-doubt commit (outcome_unknown), or, from a 2.x broker, any 503 that
// does not say nothing was touched (no_leader); 1.6's maintenance and a
// broker of another line touched nothing.
func (c *Client) inDoubt(body []byte) bool {
	var v struct {
		Result string `json:"result"`
		Code   string `json:"code"`
		Error  any    `json:"error"`
	}
	_ = json.Unmarshal(bytes.TrimSpace(body), &v)
	said, _ := v.Error.(string)
	switch {
	case v.Code == "outcome_unknown" || said == "outcome_unknown" || v.Result == "outcome_unknown":
		return true
	case v.Result == "maintenance" || v.Code == "no_leader" || said == "no_leader":
		return false
	}
	c.releaseMu.Lock()
	defer c.releaseMu.Unlock()
	return c.release != nil && c.release.Line.Does().Raft
}

// rowRemoved is a failed move's dlqRowRemoved as it was written: "true",
// "false", "null", or "" when the body has no such key.
func rowRemoved(body []byte) string {
	var v map[string]json.RawMessage
	if json.Unmarshal(bytes.TrimSpace(body), &v) != nil {
		return ""
	}
	return string(bytes.TrimSpace(v["dlqRowRemoved"]))
}
