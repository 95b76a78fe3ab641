package sandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Handler returns the broker's HTTP API.
func (b *Broker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", b.health)
	mux.HandleFunc("GET /api/v1/dlq", b.list)
	mux.HandleFunc("GET /api/v1/resources/queues", b.queuesRoute)
	mux.HandleFunc("GET /metrics/prometheus", b.metrics)
	mux.HandleFunc("POST /api/v1/push", b.push)
	mux.HandleFunc("GET /api/v1/messages/{pid}/{txid}", b.get)
	mux.HandleFunc("DELETE /api/v1/messages/{pid}/{txid}", b.del)
	mux.HandleFunc("POST /api/v1/messages/{pid}/{txid}/retry", b.retry)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		f := b.faults
		b.mu.Unlock()
		if f.Latency > 0 {
			select {
			case <-time.After(f.Latency):
			case <-r.Context().Done():
				return
			}
		}
		if r.URL.Path != "/health" && !b.authorised(w, r, f) {
			return
		}
		if f.OldServer && strings.HasSuffix(r.URL.Path, "/retry") {
			notFoundHTML(w)
			return
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			if f.OldServer {
				notFoundHTML(w)
			} else {
				http.Error(w, "404 page not found", http.StatusNotFound)
			}
			return
		}
		mux.ServeHTTP(w, r)
	})
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
	writeJSON(w, http.StatusOK, map[string]any{"status": "healthy", "database": "connected", "version": "sandbox"})
}

type wireRow struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	ConsumerGroup string          `json:"consumerGroup"`
	ErrorMessage  string          `json:"errorMessage"`
	RetryCount    int             `json:"retryCount"`
	Data          json.RawMessage `json:"data"`
	IsEncrypted   *bool           `json:"isEncrypted,omitempty"`
	ProducerSub   *string         `json:"producerSub"`
	CreatedAt     string          `json:"createdAt"`
	FailedAt      string          `json:"failedAt"`
}

const tsLayout = "2006-01-02T15:04:05.000Z"

func (b *Broker) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count("GET /api/v1/dlq")
	old := b.faults.OldServer
	limit, offset := 100, 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			b.badParam(w, "limit")
			return
		}
		limit = n
	}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			b.badParam(w, "offset")
			return
		}
		offset = n
	}
	if old && (offset >= 1 || limit == 0) {
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "value": nil})
		return
	}
	queue, group := q.Get("queue"), q.Get("consumerGroup")
	var partition string
	var from, to time.Time
	if !old {
		partition = q.Get("partition")
		from, _ = time.Parse(time.RFC3339Nano, q.Get("from"))
		to, _ = time.Parse(time.RFC3339Nano, q.Get("to"))
	}
	match := func(rw *row) bool {
		return (queue == "" || rw.msg.Queue == queue) && (group == "" || rw.Group == group) &&
			(partition == "" || rw.msg.Partition == partition) &&
			(from.IsZero() || !rw.FailedAt.Before(from)) && (to.IsZero() || rw.FailedAt.Before(to))
	}
	filtered := queue != "" || group != "" || partition != "" || !from.IsZero() || !to.IsZero()
	var page []*row
	switch {
	case old:
		for _, rw := range b.rows {
			if match(rw) {
				page = append(page, rw)
			}
		}
	case !filtered:
		if offset < len(b.rows) {
			page = b.rows[offset:min(len(b.rows), offset+limit)]
		}
	default:
		key := fmt.Sprint(queue, "\x00", group, "\x00", partition, "\x00", from.UnixNano(), "\x00", to.UnixNano())
		v, ok := b.views[key]
		if !ok || v.version != b.version {
			v = view{version: b.version}
			for _, rw := range b.rows {
				if match(rw) {
					v.rows = append(v.rows, rw)
				}
			}
			if b.views == nil {
				b.views = map[string]view{}
			}
			b.views[key] = v
		}
		if offset < len(v.rows) {
			page = v.rows[offset:min(len(v.rows), offset+limit)]
		}
	}
	msgs := make([]wireRow, 0, len(page))
	for _, rw := range page {
		data, enc := b.listedPayload(rw.msg)
		wr := wireRow{ID: rw.msg.ID, TransactionID: rw.msg.TxID, PartitionID: rw.msg.PartitionID, Queue: rw.msg.Queue,
			Partition: rw.msg.Partition, ConsumerGroup: rw.Group, ErrorMessage: rw.Error, RetryCount: rw.Retries,
			Data: data, CreatedAt: rw.FailedAt.Format(tsLayout), FailedAt: rw.FailedAt.Format(tsLayout)}
		if enc && !old {
			t := true
			wr.IsEncrypted = &t
		}
		msgs = append(msgs, wr)
	}
	if old {
		writeJSON(w, http.StatusOK, map[string]any{"messages": msgs})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": msgs,
		"pagination": map[string]int{"limit": limit, "offset": offset}, "total": len(msgs)})
}

func (b *Broker) badParam(w http.ResponseWriter, name string) {
	if b.faults.OldServer {
		writeJSON(w, http.StatusOK, map[string]any{"error": "invalid input syntax for " + name})
		return
	}
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid " + name})
}

func (b *Broker) queuesRoute(w http.ResponseWriter, _ *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count("GET /api/v1/resources/queues")
	type q struct {
		Name              string   `json:"name"`
		RetryLimit        int      `json:"retryLimit"`
		DeadLetterQueue   bool     `json:"deadLetterQueue"`
		EncryptionEnabled bool     `json:"encryptionEnabled"`
		ConsumerGroups    []string `json:"consumerGroups"`
	}
	out := []q{}
	for _, c := range b.queues {
		out = append(out, q{Name: c.Name, RetryLimit: c.RetryLimit, DeadLetterQueue: true, EncryptionEnabled: c.Encrypted, ConsumerGroups: c.Groups})
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": out})
}

func (b *Broker) metrics(w http.ResponseWriter, _ *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	by := map[string]int{}
	for _, r := range b.rows {
		by[r.msg.Queue]++
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "queen_dlq_depth{scope=\"cluster\"} %d\n", len(b.rows))
	for q, n := range by {
		fmt.Fprintf(w, "queen_dlq_depth_by_queue{queue=%q} %d\n", q, n)
	}
}

type pushItem struct {
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	Payload       json.RawMessage `json:"payload"`
	TransactionID string          `json:"transactionId"`
}

func (b *Broker) push(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Items []pushItem `json:"items"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Items) == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "items required"})
		return
	}
	b.mu.Lock()
	b.count("POST /api/v1/push")
	if !b.mutatingLocked(w) {
		b.mu.Unlock()
		return
	}
	out := make([]map[string]any, 0, len(req.Items))
	for i, it := range req.Items {
		if it.Queue == "" {
			out = append(out, map[string]any{"index": i, "status": "failed", "error": "queue required"})
			continue
		}
		m, dup := b.pushLocked(it.Queue, it.Partition, it.TransactionID, it.Payload)
		status := "queued"
		if dup {
			status = "duplicate"
		}
		out = append(out, map[string]any{"index": i, "message_id": m.ID, "partition_id": m.PartitionID,
			"queueName": m.Queue, "status": status, "transaction_id": m.TxID, "trace_id": nil})
	}
	lose := b.cutLocked()
	b.mu.Unlock()
	if lose {
		cut(w)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (b *Broker) get(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count("GET /api/v1/messages")
	m := b.messages[msgKey{r.PathValue("pid"), r.PathValue("txid")}]
	if m == nil {
		b.notFoundLocked(w, "Message not found")
		return
	}
	status, groups := "pending", []string{}
	var errText string
	retries := 0
	for _, rw := range b.rows {
		if rw.msg == m {
			status = "dead_letter"
			groups = append(groups, rw.Group)
			if errText == "" {
				errText, retries = rw.Error, rw.Retries
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": m.ID, "transactionId": m.TxID, "partitionId": m.PartitionID,
		"queue": m.Queue, "partition": m.Partition, "status": status, "payload": readPayload(m),
		"isEncrypted": m.Encrypted && !m.Undecryptable, "consumerGroups": groups, "retryCount": retries,
		"errorMessage": errText, "createdAt": m.CreatedAt.Format(tsLayout)})
}

func (b *Broker) notFoundLocked(w http.ResponseWriter, oldText string) {
	if b.faults.OldServer {
		writeJSON(w, http.StatusOK, map[string]any{"error": oldText})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusNotFound)
	io.WriteString(w, "No dead-letter row for this address")
}

func (b *Broker) del(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count("DELETE /api/v1/messages")
	if !b.mutatingLocked(w) {
		return
	}
	k := msgKey{r.PathValue("pid"), r.PathValue("txid")}
	if b.faults.OldServer {
		m := b.messages[k]
		if m == nil {
			writeJSON(w, http.StatusOK, map[string]any{"success": false, "message": "Message not found"})
			return
		}
		// The released server deletes the message itself, live or not,
		// and every group's dead-letter row with it; its id is free again.
		b.removeRowsLocked(k)
		delete(b.messages, k)
		for i, lm := range b.live {
			if lm == m {
				b.live = append(b.live[:i], b.live[i+1:]...)
				break
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "message": "Message deleted successfully"})
		return
	}
	if b.removeRowsLocked(k) == 0 {
		b.notFoundLocked(w, "")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true})
}

func (b *Broker) retry(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.count("POST /api/v1/messages/retry")
	if !b.mutatingLocked(w) {
		b.mu.Unlock()
		return
	}
	k := msgKey{r.PathValue("pid"), r.PathValue("txid")}
	m := b.messages[k]
	has := false
	for _, rw := range b.rows {
		if rw.msg == m {
			has = true
			break
		}
	}
	if m == nil || !has {
		b.notFoundLocked(w, "")
		b.mu.Unlock()
		return
	}
	// A fresh transaction id: reusing the original would be a duplicate.
	nm, _ := b.pushLocked(m.Queue, m.Partition, "", readPayload(m))
	b.retryN++
	removed := true
	if n := b.faults.RowKeptEvery; n > 0 && b.retryN%n == 0 {
		removed = false
	} else {
		b.removeRowsLocked(k)
	}
	lose := b.cutLocked()
	b.mu.Unlock()
	if lose {
		cut(w)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "queue": m.Queue, "partition": m.Partition,
		"replayedAs":    map[string]any{"index": 0, "message_id": nm.ID, "transaction_id": nm.TxID, "queueName": nm.Queue, "status": "queued"},
		"dlqRowRemoved": removed})
}
