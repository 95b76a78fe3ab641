package sandbox

import (
	"fmt"
	"net/http"
	"strings"
)

// Line is the Queen release line the sandbox speaks. Each is kept true
// to what that line of the broker does to dead letters (docs/broker.md;
// the 1.6 and 2.x contract is read from the broker's public source, since
// the Rust server cannot be built here).
type Line string

// The lines in the field.
const (
	// Queen015 is the C++ 0.x line (tags up to v0.15.4): /health says
	// "1.0.0" whatever it is, lists come in one body and never decrypt,
	// errors come as HTTP 200, there is no /retry, DELETE removes the
	// message itself, dedup lasts as long as the message does.
	Queen015 Line = "0.15"
	// Queen15 is the Rust line before 1.6, as the seed contract describes
	// it: paged lists that decrypt, /retry publishing under a fresh id and
	// deleting every group's rows.
	Queen15 Line = "1.5"
	// Queen16 replays by the broker's move: POST /api/v1/dlq/{id}/replay
	// (and /retry, for the newest row at an address) publishes the row's
	// copy under "dlq:<row id>" and deletes that row alone, in one step.
	// DELETE removes every group's rows and never the message; a push is
	// deduplicated within the queue's dedupWindowSeconds only.
	Queen16 Line = "1.6"
	// Queen22 is the 2.x (raft) line: the move as 1.6, a list whose
	// partitionId is a decimal number and whose total counts everything,
	// pages of at most 1000, 409 refusals, 503 with Retry-After.
	Queen22 Line = "2.2"
)

// Lines are the lines the sandbox speaks, oldest first.
var Lines = []Line{Queen015, Queen15, Queen16, Queen22}

// ParseLine reads a --server-version: 0.15 (or 0.x), 1.5, 1.6, 2.2 (or 2.x).
func ParseLine(s string) (Line, error) {
	switch strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "v") {
	case "0.15", "0.x", "0":
		return Queen015, nil
	case "1.5", "1.0", "1.x":
		return Queen15, nil
	case "1.6":
		return Queen16, nil
	case "2.2", "2.x", "2", "2.0", "2.1":
		return Queen22, nil
	}
	return "", fmt.Errorf("invalid server version %q: valid values are 0.15, 1.5, 1.6, 2.2", s)
}

// version is what /health says the broker is.
func (l Line) version() string {
	switch l {
	case Queen015:
		return "1.0.0" // hard-coded by every 0.x server
	case Queen16:
		return "1.6.0"
	case Queen22:
		return "2.2.0"
	}
	return "1.5.3"
}

// moves reports whether the line replays by the move.
func (l Line) moves() bool { return l == Queen16 || l == Queen22 }

// rust reports a Rust line (1.x, 2.x): JSON 404s, row ids in the list,
// DELETE that keeps the message.
func (l Line) rust() bool { return l != Queen015 }

// windowed reports whether pushes are deduplicated only within the
// queue's window (1.6 and 2.x), rather than for as long as the message
// is held (0.x, and the seed contract of 1.5).
func (l Line) windowed() bool { return l.moves() }

// healthBody is GET /health as the line answers it.
func (l Line) healthBody(down bool) map[string]any {
	status, db := "healthy", "connected"
	if down {
		status, db = "unhealthy", "disconnected"
	}
	switch l {
	case Queen015:
		return map[string]any{"status": status, "database": db, "server": "C++ Queen Server (libqueen)", "worker_id": "sandbox-0",
			"version": l.version(), "shared_state": map[string]any{"enabled": false}, "queen": map[string]any{"pool": "ok"}}
	case Queen22:
		body := map[string]any{"status": status, "engine": "raft", "version": l.version(),
			"raft": map[string]any{"role": "leader", "term": 1, "voters": 1, "clusterVersion": 2}}
		if down {
			body["status"] = "settling"
		}
		return body
	}
	return map[string]any{"status": status, "database": db, "engine": "segments-rust", "version": l.version()}
}

// noRoute answers a path the line has no route for.
func (l Line) noRoute(w http.ResponseWriter) {
	if l == Queen015 {
		notFoundHTML(w)
		return
	}
	writeJSON(w, http.StatusNotFound, map[string]any{"error": "Not Found", "code": "no_such_route"})
}
