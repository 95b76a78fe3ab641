package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Line is the Queen release line a broker runs, told from what the
// broker answers: /health's engine and server keys, then a route only
// 1.6 has. Never from the version string alone: every C++ 0.x server
// says "1.0.0".
type Line int

// The lines in the field (see docs/broker.md).
const (
	// LineUnknown: the broker did not say enough. dlqctl treats it as the
	// most careful line it knows: no move, no /retry unless told, a
	// delete confirmed against the DLQ first, pages of at most 1000.
	LineUnknown Line = iota
	// Line0x is the C++ 0.x server (tags up to v0.15.4).
	Line0x
	// Line1 is the Rust line before 1.6 (1.0 to 1.5).
	Line1
	// Line16 is Rust 1.6: dead letters are replayed by the broker's move.
	Line16
	// Line2 is the 2.x (raft) line: the move, decimal partition ids.
	Line2
)

func (l Line) String() string { return l.Does().Name }

// Release is the Queen release a broker runs, as far as dlqctl can tell.
type Release struct {
	Line Line `json:"-"`
	// LineName is Line as text, for machine output.
	LineName string `json:"line"`
	// Version is what /health says (0.x always says 1.0.0).
	Version string `json:"version,omitempty"`
	Engine  string `json:"engine,omitempty"`
	// Told says how the line was told, for people.
	Told string `json:"told"`
}

// Moves reports whether the broker replays a dead letter by its own
// move (POST /api/v1/dlq/{id}/replay): one call, atomic, deduplicated by
// the broker under the copy id "dlq:<row id>".
func (s Release) Moves() bool { return s.Line.Does().Moves }

// Traces reports whether the broker keeps trace events (POST
// /api/v1/traces): the Rust lines, 1.x and 2.x.
func (s Release) Traces() bool { return s.Line.Does().Traces }

// KeepsMessageOnDelete reports whether DELETE of an address removes its
// dead-letter rows only (1.x, 2.x), never a live message. On 0.x, and on
// a broker dlqctl cannot place, a delete may remove the message itself.
func (s Release) KeepsMessageOnDelete() bool { return s.Line.Does().KeepsMessageOnDelete }

// MaxPage is the largest page dlqctl asks for: 2.x clamps limit to 1000
// (a larger ask would read as a short, final page), and a broker it
// cannot place is held to the same.
const MaxPage = 1000

// Name is the broker as people are told it: "Queen 1.6 (1.6.0)".
func (s Release) Name() string {
	switch {
	case s.Line == LineUnknown:
		if s.Version != "" {
			return "an unknown Queen (/health says version " + s.Version + ")"
		}
		return "an unknown Queen"
	case s.Line == Line0x:
		return "Queen 0.x (the C++ server)"
	case s.Version != "":
		return "Queen " + s.Line.String() + " (" + s.Version + ")"
	}
	return "Queen " + s.Line.String()
}

// CopyID is the transaction id the move gives a dead-letter row's copy,
// and the one dlqctl pushes under itself on a broker that moves: the
// broker's own dedup identity for the row.
func CopyID(rowID string) string { return "dlq:" + rowID }

// Release tells which line the broker runs, once a client: the answer
// is kept for the client's life (a session), as every capability
// decision reads from it.
func (c *Client) Release(ctx context.Context) (Release, error) {
	c.releaseMu.Lock()
	defer c.releaseMu.Unlock()
	if c.release != nil {
		return *c.release, nil
	}
	s, err := c.detect(ctx)
	if err != nil {
		return Release{}, err
	}
	s.LineName = s.Line.String()
	c.release = &s
	return s, nil
}

// SetRelease tells the client which line the broker runs without asking
// it (tests, and callers that know).
func (c *Client) SetRelease(s Release) {
	c.releaseMu.Lock()
	defer c.releaseMu.Unlock()
	s.LineName = s.Line.String()
	c.release = &s
}

// detect reads /health (a 503's body says as much as a 200's) and, for
// the Rust 1.x engine, asks whether the route 1.6 added exists.
func (c *Client) detect(ctx context.Context) (Release, error) {
	body, err := c.health(ctx)
	if err != nil {
		return Release{}, err
	}
	var h map[string]any
	if json.Unmarshal(body, &h) != nil {
		return Release{Told: "/health answered something that is not a JSON object"}, nil
	}
	str := func(k string) string {
		switch v := h[k].(type) {
		case string:
			return v
		case float64:
			return fmt.Sprint(v)
		}
		return ""
	}
	s := Release{Version: str("version"), Engine: str("engine")}
	_, hasServer := h["server"]
	switch {
	case s.Engine == "" && hasServer:
		s.Line = Line0x
		s.Told = "/health names a server and no engine, as the C++ 0.x server does (its version always says 1.0.0)"
	case s.Engine == Line2.Does().Engine:
		s.Line = Line2
		s.Told = "/health names the raft engine"
	case s.Engine == Line1.Does().Engine:
		has, err := c.hasRoute(ctx, "/api/v1/resources/kv/namespaces")
		switch {
		case err != nil:
			return Release{}, err
		case has:
			s.Line = Line16
			s.Told = "/health names the segments-rust engine, and the broker has 1.6's kv namespaces route"
		default:
			s.Line = Line1
			s.Told = "/health names the segments-rust engine, and the broker has no kv namespaces route (added in 1.6)"
		}
	case s.Engine != "":
		s.Told = fmt.Sprintf("/health names an engine dlqctl does not know (%q)", s.Engine)
	default:
		s.Told = "/health names neither an engine nor a server"
	}
	return s, nil
}

// health is GET /health's body, a 503's included (a broker whose
// database is away still says what it is).
func (c *Client) health(ctx context.Context) ([]byte, error) {
	resp, err := c.send(ctx, http.MethodGet, "/health", nil, nil)
	var he *HTTPError
	switch {
	case errors.As(err, &he) && he.Status == http.StatusServiceUnavailable && len(he.raw) > 0:
		return he.raw, nil
	case err != nil:
		return nil, err
	}
	defer resp.close()
	body, err := io.ReadAll(io.LimitReader(resp.body, 1<<20))
	if err != nil {
		return nil, resp.readErr(err)
	}
	return body, nil
}

// hasRoute asks whether a read-only route exists: an answer of any kind
// but "no such route" says it does.
func (c *Client) hasRoute(ctx context.Context, path string) (bool, error) {
	_, err := c.do(ctx, http.MethodGet, path, nil, nil)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrRouteMissing):
		return false, nil
	case errors.Is(err, ErrUnauthorized), errors.Is(err, ErrForbidden), NoAnswer(err):
		return false, err
	}
	// The route answered, if with an error of its own.
	return true, nil
}

// ReplayWords says how a broker's dead letters are replayed, for the plan.
func (s Release) ReplayWords() string {
	switch {
	case s.Moves():
		return "replay by the broker's move"
	case s.Line == LineUnknown:
		return "treated as the most careful line dlqctl knows: replay by push and delete"
	}
	return "replay by push and delete"
}

// DeleteWords says what a discard's delete does on the broker.
func (s Release) DeleteWords() string {
	switch {
	case s.KeepsMessageOnDelete():
		return "a delete removes every group's rows of a message, never the message"
	case s.Line == Line0x:
		return "a delete removes the message itself with every group's rows, so only addresses just seen in the DLQ are deleted"
	}
	return "treated as the most careful line dlqctl knows: only addresses just seen in the DLQ are deleted"
}

// Describe is the broker's line and what dlqctl does on it, in one line:
// "Queen 1.6 (1.6.0) — replay by the broker's move".
func (s Release) Describe() string { return s.Name() + " — " + s.ReplayWords() }
