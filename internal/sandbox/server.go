package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Handler returns the broker's HTTP API, in the shapes of its line.
func (b *Broker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", b.health)
	mux.HandleFunc("GET /api/v1/dlq", b.list)
	mux.HandleFunc("DELETE /api/v1/dlq", b.purge)
	mux.HandleFunc("POST /api/v1/dlq/{id}/replay", b.move)
	mux.HandleFunc("GET /api/v1/resources/queues", b.queuesRoute)
	mux.HandleFunc("GET /api/v1/resources/kv/namespaces", b.kvNamespaces)
	mux.HandleFunc("GET /metrics/prometheus", b.metrics)
	mux.HandleFunc("POST /api/v1/push", b.push)
	mux.HandleFunc("GET /api/v1/messages", b.browse)
	mux.HandleFunc("GET /api/v1/messages/{pid}/{txid}", b.get)
	mux.HandleFunc("DELETE /api/v1/messages/{pid}/{txid}", b.del)
	mux.HandleFunc("POST /api/v1/messages/{pid}/{txid}/retry", b.retry)
	mux.HandleFunc("GET /api/v1/consumer-groups", b.consumerGroups)
	mux.HandleFunc("POST /api/v1/traces", b.recordTrace)
	mux.HandleFunc("GET /api/v1/traces/{pid}/{txid}", b.tracesOf)
	mux.HandleFunc("POST /api/v1/configure", b.configure)
	mux.HandleFunc("GET /api/v1/pop/queue/{queue}/partition/{partition}", b.pop)
	mux.HandleFunc("POST /api/v1/ack", b.ack)
	mux.HandleFunc("POST /api/v1/ack/batch", b.ackBatch)
	mux.HandleFunc("POST "+ConsoleReplayPath, b.consoleRoute)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		f, line := b.faults, b.line
		b.mu.Unlock()
		_, pattern := mux.Handler(r)
		if writes(r.Method, pattern) {
			defer b.inflight.enter()()
		}
		if d := f.Latency + f.RouteLatency[pattern]; d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		if r.URL.Path != "/health" && !b.authorised(w, r, f) {
			return
		}
		if !serves(line, r) {
			noRoute(line, w)
			return
		}
		if f.Standby && r.Method != http.MethodGet && r.URL.Path != "/api/v1/configure" {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"success": false, "code": "standby",
				"error": "this cluster is a standby: it takes writes once promoted (POST /api/v1/system/link/promote)"})
			return
		}
		if f.Script != nil {
			switch a := b.script(f, pattern, r.URL.Path); a {
			case Refuse:
				writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "Service Unavailable"})
				return
			case Silence:
				park(r)
				return
			case CutAfterApply, HangAfterApply, UnknownAfterApply:
				r = r.WithContext(context.WithValue(r.Context(), afterApplyKey{}, a))
			case Maintenance, FailNotApplied, UnknownNotApplied, NoLeader, Refuse409, DiskFull:
				if refuse(w, r, line, a) {
					return
				}
			}
		}
		if f.DatabaseDown && r.URL.Path != "/health" && r.URL.Path != "/api/v1/push" {
			// The released server parks a call while its database is away.
			park(r)
			return
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			noRoute(line, w)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// ConsoleReplayPath is the sandbox's own route for replaying rows as
// Queen 1.6's console does (POST, with queue, consumerGroup and limit):
// for rehearsing what dlqctl does when someone else replays meanwhile.
const ConsoleReplayPath = "/_sandbox/console/replay"

// serves reports whether the line has the route a request names: 0.x
// has no replay route at all, the move is 1.6's, the kv namespaces
// route is 1.6's (its tell, for a client), traces and the bulk purge
// are 1.x's, the console is the move's.
func serves(l Line, r *http.Request) bool {
	p, does := r.URL.Path, l.Does()
	switch {
	case strings.HasSuffix(p, "/retry"):
		return does.Retry
	case p == "/api/v1/traces", strings.HasPrefix(p, "/api/v1/traces/"):
		return does.Traces
	case strings.HasPrefix(p, "/api/v1/dlq/") && strings.HasSuffix(p, "/replay"), p == "/api/v1/resources/kv/namespaces", p == ConsoleReplayPath:
		return does.Moves
	case p == "/api/v1/dlq" && r.Method == http.MethodDelete:
		return does.KeepsMessageOnDelete // the bulk purge came with the rows kept apart (1.4.2)
	}
	return true
}

// refuse answers a call with a scripted refusal, where the line has it
// and the route can meet it; it reports whether it answered.
func refuse(w http.ResponseWriter, r *http.Request, line Line, a Action) bool {
	move := strings.HasSuffix(r.URL.Path, "/replay") || strings.HasSuffix(r.URL.Path, "/retry") && line.Does().Moves
	push := r.URL.Path == "/api/v1/push"
	switch {
	case a == Maintenance && move:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"success": false, "result": "maintenance", "error": "push maintenance is on",
			"dlqRowRemoved": false, "message": "Push maintenance is on: the replay was refused, nothing was touched"})
	case a == FailNotApplied && move:
		writeJSON(w, http.StatusInternalServerError, map[string]any{"success": false, "error": "replay failed: could not serialize access",
			"dlqRowRemoved": false, "message": "The replay was rolled back; nothing changed"})
	case a == UnknownNotApplied && move:
		writeUnknown(w, line)
	case a == NoLeader && (move || push):
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"success": false, "error": "no_leader", "message": "no leader is known; retry"})
	case a == Refuse409 && (move || push):
		writeJSON(w, http.StatusConflict, map[string]any{"success": false, "error": "queue is read-only", "reason": "read_only", "dlqRowRemoved": false})
	case a == DiskFull && push:
		writeJSON(w, http.StatusInsufficientStorage, map[string]any{"success": false, "error": "disk full", "reason": "disk_full"})
	default:
		return false
	}
	return true
}

// script counts a call and asks the fault script what to do with it.
func (b *Broker) script(f Faults, pattern, path string) Action {
	b.mu.Lock()
	if b.scriptN == nil {
		b.scriptN = map[string]int{}
	}
	b.scriptN[pattern]++
	b.callN++
	c := Call{Route: pattern, Path: path, N: b.scriptN[pattern], All: b.callN}
	b.mu.Unlock()
	return f.Script(c)
}

type afterApplyKey struct{}

// heldAnswer loses the answer a handler writes under the broker's lock
// (the call is applied by then): it unlocks, then cuts or parks.
type heldAnswer struct {
	http.ResponseWriter
	r      *http.Request
	action Action
	unlock func()
	done   bool
}

func (h *heldAnswer) WriteHeader(int) { h.lose() }

func (h *heldAnswer) Write(p []byte) (int, error) {
	h.lose()
	return len(p), nil
}

func (h *heldAnswer) lose() {
	if h.done {
		return
	}
	h.done = true
	h.unlock()
	loseAnswer(h.ResponseWriter, h.r, h.action)
}

// afterApply is what becomes of a call's answer once the call is
// applied: lost to a cut connection, parked, or sent (Serve).
func (b *Broker) afterApply(r *http.Request) Action {
	if a, ok := r.Context().Value(afterApplyKey{}).(Action); ok {
		return a
	}
	if b.cutLocked() {
		return CutAfterApply
	}
	return Serve
}

// loseAnswer carries out afterApply's verdict; it reports whether the
// answer is not to be written.
func loseAnswer(w http.ResponseWriter, r *http.Request, a Action) bool {
	switch a {
	case CutAfterApply:
		cut(w)
		return true
	case HangAfterApply:
		park(r)
		return true
	}
	return false
}

// park holds a call unanswered until the client gives up. The body is
// read to its end first: only then does the server notice the client
// closing the connection.
func park(r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	<-r.Context().Done()
}

func notFoundHTML(w http.ResponseWriter) {
	w.Header()["Content-Type"] = nil
	w.WriteHeader(http.StatusNotFound)
	io.WriteString(w, "<html><body><h1>File Not Found</h1><hr><i>uWebSockets/20 Server</i></body></html>")
}

func (b *Broker) authorised(w http.ResponseWriter, r *http.Request, f Faults) bool {
	if f.Token == "" && f.ReadOnlyToken == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case ok && f.Token != "" && got == f.Token:
		return true
	case ok && f.ReadOnlyToken != "" && got == f.ReadOnlyToken:
		if r.Method == http.MethodGet {
			return true
		}
		writeJSON(w, http.StatusForbidden, map[string]any{"error": "Insufficient permissions"})
		return false
	}
	writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "Authentication required"})
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (b *Broker) count(route string) {
	b.routes[route]++
}

// mutating applies the 503 fault; it reports whether the call may go on.
func (b *Broker) mutatingLocked(w http.ResponseWriter) bool {
	b.mutN++
	if n := b.faults.Fail503Every; n > 0 && b.mutN%n == 0 {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "Service Unavailable"})
		return false
	}
	return true
}

// cutLocked reports whether this push or retry's answer is to be lost.
func (b *Broker) cutLocked() bool {
	b.cutN++
	n := b.faults.CutEvery
	return n > 0 && b.cutN%n == 0
}

func cut(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func (b *Broker) health(w http.ResponseWriter, _ *http.Request) {
	b.mu.Lock()
	down, standby, line, instance := b.faults.DatabaseDown, b.faults.Standby, b.line, b.instance
	b.mu.Unlock()
	status := http.StatusOK
	if down {
		status = http.StatusServiceUnavailable
	}
	body := healthBody(line, down)
	if raft, ok := body["raft"].(map[string]any); ok && standby {
		raft["link"] = map[string]any{"role": "standby", "primary": "queen-primary:6632"}
	}
	if instance != "" {
		body["dlqctlSandbox"] = instance
	}
	writeJSON(w, status, body)
}

func (b *Broker) metrics(w http.ResponseWriter, _ *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	by := map[string]int{}
	for _, r := range b.rows {
		by[r.msg.Queue]++
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	if b.line == Queen015 {
		// The released server counts dead-lettering, not depth.
		fmt.Fprintf(w, "# TYPE queen_cluster_dlq_total counter\nqueen_cluster_dlq_total{scope=\"cluster\"} %d\n", len(b.rows))
		return
	}
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	fmt.Fprintf(w, "# TYPE queen_dlq_depth gauge\nqueen_dlq_depth{scope=\"cluster\"} %d\n", len(b.rows))
	fmt.Fprintln(w, "# TYPE queen_dlq_depth_by_queue gauge")
	for q, n := range by {
		if b.line == Queen22 {
			// 2.x labels the tenant too (the raft leader exports it).
			fmt.Fprintf(w, "queen_dlq_depth_by_queue{tenant=\"00000000-0000-0000-0000-000000000001\",queue=\"%s\"} %d\n", esc.Replace(q), n)
			continue
		}
		fmt.Fprintf(w, "queen_dlq_depth_by_queue{queue=\"%s\"} %d\n", esc.Replace(q), n)
	}
}

// readAll reads a request's body, up to 1 MiB.
func readAll(r *http.Request) ([]byte, error) { return io.ReadAll(io.LimitReader(r.Body, 1<<20)) }

// writes reports whether a call changes dead letters or publishes: what
// the writes in flight count (a push, a delete, a move, a retry).
func writes(method, pattern string) bool {
	switch pattern {
	case "POST /api/v1/push", "DELETE /api/v1/messages/{pid}/{txid}", "POST /api/v1/dlq/{id}/replay", "POST /api/v1/messages/{pid}/{txid}/retry":
		return true
	}
	return false
}

// inflight measures the writes in flight over time: their mean, weighted
// by how long each number held, and the most at once.
type inflight struct {
	mu    sync.Mutex
	n     int
	peak  int
	since time.Time     // the start of the measure
	at    time.Time     // when n last changed
	area  time.Duration // ∫ n dt since the start
}

func (f *inflight) enter() (leave func()) {
	f.step(+1)
	return func() { f.step(-1) }
}

func (f *inflight) step(d int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if f.since.IsZero() {
		f.since, f.at = now, now
	}
	f.area += time.Duration(f.n) * now.Sub(f.at)
	f.n += d
	f.at = now
	f.peak = max(f.peak, f.n)
}

// WritesInFlight are the writes in flight since the broker was made or
// its calls were reset (ResetCalls): their time-weighted mean, from the
// first write to the last, and the most at once.
func (b *Broker) WritesInFlight() (mean float64, peak int) {
	f := &b.inflight
	f.mu.Lock()
	defer f.mu.Unlock()
	span := f.at.Sub(f.since)
	if span <= 0 {
		return 0, f.peak
	}
	return float64(f.area) / float64(span), f.peak
}
