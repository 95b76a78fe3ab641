package sandbox

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The move is how 1.6 and 2.x replay a dead letter (POST
// /api/v1/dlq/{id}/replay, /retry, and the console): in one step the row
// is locked, its payload pushed to the tail of the destination partition
// under the transaction id "dlq:<row id>" (the destination's dedup
// window applies), and the row deleted. A duplicate writes nothing and
// keeps the row. Only that row leaves: other groups' rows of the message
// stay.

// zeroUUID is the message id a duplicate verdict names.
const zeroUUID = "00000000-0000-0000-0000-000000000000"

// moveDest is a move's destination override; empty halves keep the
// row's own queue or partition.
type moveDest struct{ queue, partition string }

// move is POST /api/v1/dlq/{id}/replay.
func (b *Broker) move(w http.ResponseWriter, r *http.Request) {
	dest, bad := readMoveBody(r)
	b.mu.Lock()
	b.count("POST /api/v1/dlq/replay")
	if bad != "" {
		b.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "error": bad, "message": bad})
		return
	}
	id := r.PathValue("id")
	b.moveLocked(w, r, b.byRowID[id], dest, func() {
		body := map[string]any{"success": false, "result": "gone", "error": "Message not found"}
		if b.line == Queen16 {
			body["dlqId"], body["message"] = id, "No dead-letter row with this id — it was already replayed or purged"
		}
		writeJSON(w, http.StatusNotFound, body)
	})
}

// retryMoveLocked is /retry on 1.6 and 2.x: the move of one row at the
// address in place (1.6: the newest by failure; 2.x: the first in key
// order). Called with the lock held; it unlocks.
func (b *Broker) retryMoveLocked(w http.ResponseWriter, r *http.Request) {
	k := b.addressLocked(r)
	var rw *row
	if m := b.messages[k]; m != nil && len(m.rows) > 0 {
		rw = m.rows[0] // newest first
		if b.line == Queen22 {
			rw = slices.MinFunc(m.rows, func(x, y *row) int { return strings.Compare(x.id, y.id) })
		}
	}
	b.moveLocked(w, r, rw, moveDest{}, func() {
		if b.line == Queen22 {
			writeJSON(w, http.StatusNotFound, map[string]any{"success": false, "result": "gone", "error": "Message not found"})
			return
		}
		writeJSON(w, http.StatusNotFound, map[string]any{"success": false, "partitionId": r.PathValue("pid"), "transactionId": k.txid,
			"error": "Message not found", "message": "No dead-letter row for this address. Only dead-lettered messages can be replayed"})
	})
}

// moveLocked moves rw (nil: gone) and answers; called with the lock
// held, it unlocks.
func (b *Broker) moveLocked(w http.ResponseWriter, r *http.Request, rw *row, dest moveDest, gone func()) {
	locked := true
	defer func() {
		if locked {
			b.mu.Unlock()
		}
	}()
	if b.faults.Maintenance && b.line.Does().Maintenance {
		refuse(w, r, b.line, Maintenance)
		return
	}
	if !b.mutatingLocked(w) {
		return
	}
	if rw == nil {
		gone()
		return
	}
	if rw.msg.Undecryptable && !b.line.Does().MovesEnvelopes {
		// Assumed (1.6): the broker cannot decrypt the snapshot to push
		// it, and rolls back (nothing is written, the row stays). 2.x
		// pushes the envelope as the copy instead (moveRowLocked).
		writeJSON(w, http.StatusInternalServerError, map[string]any{"success": false, "error": "decrypt failed: bad auth tag",
			"dlqRowRemoved": false, "message": "The replay was rolled back; nothing changed"})
		return
	}
	body := b.moveRowLocked(rw, dest)
	after := b.afterApply(r)
	locked = false
	b.mu.Unlock()
	switch after {
	case UnknownAfterApply:
		writeUnknown(w, b.line)
		return
	case Serve:
	default:
		if loseAnswer(w, r, after) {
			return
		}
	}
	writeJSON(w, http.StatusOK, body)
}

// moveRowLocked is the move of one row: its copy pushed under
// "dlq:<row id>", the row deleted unless the push was a duplicate.
func (b *Broker) moveRowLocked(rw *row, dest moveDest) map[string]any {
	m := rw.msg
	queue, partition := m.Queue, m.Partition
	if dest.queue != "" {
		queue = dest.queue
	}
	if dest.partition != "" {
		partition = dest.partition
	}
	txid := "dlq:" + rw.id
	// A snapshot the broker cannot decrypt is pushed as it is, the
	// envelope as the copy's payload (2.x: decrypt_payload_bytes(..)
	// .unwrap_or(..)).
	copied, dup := b.pushLocked(queue, partition, txid, readPayload(m))
	result, status, msgID := "moved", "queued", copied.ID
	if dup {
		result, status, msgID = "duplicate", "duplicate", zeroUUID
	} else {
		b.removeRowLocked(rw)
		b.moves++
	}
	return map[string]any{"success": true, "result": result, "queue": queue, "partition": partition, "consumerGroup": rw.Group,
		"dlqId": rw.id, "originalTransactionId": m.TxID,
		"replayedAs": map[string]any{"index": 0, "message_id": msgID, "transaction_id": txid, "queueName": queue, "status": status,
			"offset": copied.offset},
		"dlqRowRemoved": !dup}
}

// unknownBody is 1.6's answer when the move's outcome is unknown.
func unknownBody() map[string]any {
	return map[string]any{"success": false, "error": "connection reset while reading the verdict", "dlqRowRemoved": nil,
		"message": "The replay's outcome is unknown: re-read the dead-letter list before anything else"}
}

// writeUnknown answers a move whose outcome is in doubt: 1.6's 500 with
// dlqRowRemoved null; a later 2.x raft's 503 with Retry-After for an
// in-doubt commit (outcome_unknown).
func writeUnknown(w http.ResponseWriter, line Line) {
	if line == Queen22 {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"success": false, "error": "outcome_unknown", "code": "outcome_unknown",
			"message": "the commit is in doubt: read the row and the copy before anything else"})
		return
	}
	writeJSON(w, http.StatusInternalServerError, unknownBody())
}

// readMoveBody reads a move's optional body: nothing, {}, or an object
// with string queue and partition (either may be given alone; a blank
// one is refused).
func readMoveBody(r *http.Request) (moveDest, string) {
	raw, _ := readAll(r)
	if len(bytes.TrimSpace(raw)) == 0 {
		return moveDest{}, ""
	}
	var v map[string]any
	if json.Unmarshal(raw, &v) != nil {
		return moveDest{}, `bad body: expected {} or {"queue":"...","partition":"..."}`
	}
	var d moveDest
	for _, f := range []struct {
		key string
		dst *string
	}{{"queue", &d.queue}, {"partition", &d.partition}} {
		x, ok := v[f.key]
		if !ok {
			continue
		}
		s, isStr := x.(string)
		if !isStr {
			return moveDest{}, `bad body: expected {} or {"queue":"...","partition":"..."}`
		}
		if *f.dst = strings.TrimSpace(s); *f.dst == "" {
			return moveDest{}, f.key + " override must be a non-empty name"
		}
	}
	return d, ""
}

// ConsoleReplay replays rows by id as Queen's console does: through the
// move, in place. It reports how many it moved (a row already gone, or
// a duplicate, moves nothing).
func (b *Broker) ConsoleReplay(ids ...string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, id := range ids {
		rw := b.byRowID[id]
		if rw == nil || rw.msg.Undecryptable && !b.line.Does().MovesEnvelopes {
			continue // 2.x's console moves it all the same, the envelope as the copy
		}
		if body := b.moveRowLocked(rw, moveDest{}); body["result"] == "moved" {
			n++
			b.console++
		}
	}
	return n
}

// ConsoleReplayNewest replays, as the console does, the limit newest
// rows of a queue (and group, when given); it returns the rows' ids.
func (b *Broker) ConsoleReplayNewest(queue, group string, limit int) []string {
	b.mu.Lock()
	var ids []string
	for _, rw := range b.rows {
		if len(ids) == limit {
			break
		}
		if (queue == "" || rw.msg.Queue == queue) && (group == "" || rw.Group == group) && (!rw.msg.Undecryptable || b.line.Does().MovesEnvelopes) {
			ids = append(ids, rw.id)
		}
	}
	b.mu.Unlock()
	b.ConsoleReplay(ids...)
	return ids
}

// Moves counts the rows moves removed (dlqctl's, the console's), and
// ConsoleMoves the console's alone.
func (b *Broker) Moves() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.moves
}

// ConsoleMoves counts the rows the console moved.
func (b *Broker) ConsoleMoves() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.console
}

// consoleRoute is ConsoleReplayPath: ?queue=&consumerGroup=&limit= (10
// by default) newest rows replayed as the console does.
func (b *Broker) consoleRoute(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 {
		limit = 10
	}
	ids := b.ConsoleReplayNewest(q.Get("queue"), q.Get("consumerGroup"), limit)
	writeJSON(w, http.StatusOK, map[string]any{"replayed": len(ids), "ids": ids})
}

// purge is DELETE /api/v1/dlq?queue=&consumerGroup=: every row of a
// queue (of one group, when given) in one step, rows that arrived a
// moment ago included. dlqctl never calls it; another hand may.
func (b *Broker) purge(w http.ResponseWriter, r *http.Request) {
	queue, group := r.URL.Query().Get("queue"), r.URL.Query().Get("consumerGroup")
	if queue == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "error": "queue is required", "message": "Bulk DLQ purge requires an exact queue name"})
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count("DELETE /api/v1/dlq")
	var drop []*row
	for _, rw := range b.rows {
		if rw.msg.Queue == queue && (group == "" || rw.Group == group) {
			drop = append(drop, rw)
		}
	}
	for _, rw := range drop {
		b.removeRowLocked(rw)
	}
	var cg any
	if group != "" {
		cg = group
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "deleted": len(drop), "queue": queue, "consumerGroup": cg})
}

// Trace is one trace event the broker recorded (POST /api/v1/traces).
type Trace struct {
	PartitionID   string
	TransactionID string
	ConsumerGroup string
	EventType     string
	TraceNames    []string
	Data          json.RawMessage
	At            time.Time
}

// Traces are the trace events recorded, oldest first.
func (b *Broker) Traces() []Trace {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.traces)
}

// recordTrace is POST /api/v1/traces: nothing checks that the message
// exists.
func (b *Broker) recordTrace(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TransactionID string          `json:"transactionId"`
		PartitionID   string          `json:"partitionId"`
		ConsumerGroup string          `json:"consumerGroup"`
		EventType     string          `json:"eventType"`
		TraceNames    json.RawMessage `json:"traceNames"`
		Data          json.RawMessage `json:"data"`
	}
	// 2.x takes a trace without a partition id (a decimal one, or a
	// UUID, when given); 1.x needs both.
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.TransactionID == "" || req.PartitionID == "" && b.Line() != Queen22 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "transactionId and partitionId are required"})
		return
	}
	if len(req.Data) == 0 || string(req.Data) == "null" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "data is required"})
		return
	}
	var names []string
	if json.Unmarshal(req.TraceNames, &names) != nil {
		var one string
		if json.Unmarshal(req.TraceNames, &one) == nil && one != "" {
			names = []string{one}
		}
		if b.Line() == Queen22 && len(req.TraceNames) > 0 {
			// 2.x takes traceNames as an array only.
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "traceNames must be an array of strings"})
			return
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.line == Queen22 && req.PartitionID != "" && !b.knownPartitionLocked(req.PartitionID) {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "Partition not found"})
		return
	}
	b.count("POST /api/v1/traces")
	if !b.mutatingLocked(w) {
		return
	}
	t := Trace{PartitionID: req.PartitionID, TransactionID: req.TransactionID, ConsumerGroup: req.ConsumerGroup, EventType: req.EventType,
		TraceNames: names, Data: req.Data, At: b.now().UTC()}
	if t.ConsumerGroup == "" && b.line != Queen22 {
		t.ConsumerGroup = "__QUEUE_MODE__"
	}
	if t.EventType == "" {
		t.EventType = map[bool]string{true: "event", false: "info"}[b.line == Queen22]
	}
	b.traces = append(b.traces, t)
	writeJSON(w, http.StatusCreated, map[string]any{"success": true, "traceId": b.nextIDLocked()})
}

// tracesOf is GET /api/v1/traces/{pid}/{txid}: 1.x oldest first as
// {traces}; 2.x newest first as {traces, events, total, pagination},
// every key in both cases.
func (b *Broker) tracesOf(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []map[string]any{}
	for i, t := range b.traces {
		if b.internalPID(t.PartitionID) == b.internalPID(r.PathValue("pid")) && t.TransactionID == r.PathValue("txid") {
			ev := map[string]any{"id": i + 1, "event_type": t.EventType, "data": t.Data, "consumer_group": t.ConsumerGroup,
				"worker_id": "seg-rust", "created_at": t.At.Format(tsLayout), "trace_names": t.TraceNames}
			if b.line == Queen22 {
				ev["eventType"], ev["consumerGroup"], ev["workerId"], ev["createdAt"], ev["traceNames"] = t.EventType, t.ConsumerGroup, "raft", t.At.Format(tsLayout), t.TraceNames
			}
			out = append(out, ev)
		}
	}
	if b.line != Queen22 {
		writeJSON(w, http.StatusOK, map[string]any{"traces": out})
		return
	}
	slices.Reverse(out)
	writeJSON(w, http.StatusOK, map[string]any{"traces": out, "events": out, "total": len(out), "pagination": map[string]any{"limit": 200, "offset": 0}})
}

// knownPartitionLocked reports whether a partition id (2.x's decimal
// number, or a UUID) names a partition the broker has.
func (b *Broker) knownPartitionLocked(pid string) bool {
	id := b.internalPID(pid)
	for _, p := range b.parts {
		if p == id {
			return true
		}
	}
	return false
}

// kvNamespaces is 1.6's GET /api/v1/resources/kv/namespaces: its
// presence is how a client tells 1.6 from 1.5 without trusting the
// version string.
func (b *Broker) kvNamespaces(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"namespaces": []string{}})
}
