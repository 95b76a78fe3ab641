package sandbox

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/dlqctl/dlqctl/pkg/client"
)

// Line is the Queen release line the sandbox speaks: the client's own,
// whose table (client.Does) says what each does to dead letters. The
// sandbox reads that table for every behaviour it decides by; what is
// left here are the lines' own words and shapes on the wire.
type Line = client.Line

// The lines in the field, by the names tests and --server-version use.
const (
	// Queen015 is the C++ 0.x line (tags up to v0.15.4).
	Queen015 = client.Line0x
	// Queen15 is the Rust line before 1.6, as the seed contract describes
	// it.
	Queen15 = client.Line1
	// Queen16 replays by the broker's move.
	Queen16 = client.Line16
	// Queen22 is the 2.x (raft) line.
	Queen22 = client.Line2
)

// Lines are the lines the sandbox speaks, oldest first.
var Lines = client.Lines()

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
	var names []string
	for _, l := range Lines {
		names = append(names, l.Does().Flag)
	}
	return 0, fmt.Errorf("invalid server version %q: valid values are %s", s, strings.Join(names, ", "))
}

// healthBody is GET /health as the line answers it.
func healthBody(l Line, down bool) map[string]any {
	does := l.Does()
	status, db := "healthy", "connected"
	if down {
		status, db = "unhealthy", "disconnected"
	}
	switch {
	case does.Engine == "":
		return map[string]any{"status": status, "database": db, "server": "C++ Queen Server (libqueen)", "worker_id": "sandbox-0",
			"version": does.Version, "shared_state": map[string]any{"enabled": false}, "queen": map[string]any{"pool": "ok"}}
	case does.Raft:
		body := map[string]any{"status": status, "engine": does.Engine, "version": does.Version,
			"raft": map[string]any{"role": "leader", "term": 1, "voters": 1, "clusterVersion": 2}}
		if down {
			body["status"] = "settling"
		}
		return body
	}
	return map[string]any{"status": status, "database": db, "engine": does.Engine, "version": does.Version}
}

// noRoute answers a path the line has no route for.
func noRoute(l Line, w http.ResponseWriter) {
	if !l.Does().JSONErrors {
		notFoundHTML(w)
		return
	}
	writeJSON(w, http.StatusNotFound, map[string]any{"error": "Not Found", "code": "no_such_route"})
}
