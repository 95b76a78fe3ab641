package sandbox

import (
	"cmp"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
)

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
	line := b.line
	// 1.6 and 2.x answer 201; the others 200.
	created := http.StatusOK
	if line.Does().Moves {
		created = http.StatusCreated
	}
	if b.faults.DatabaseDown || b.faults.Maintenance && line.Does().Maintenance {
		b.mu.Unlock()
		if line == Queen22 {
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"success": false, "error": "no_leader"})
			return
		}
		// Kept in the broker's local file to write later: not stored.
		out := make([]map[string]any, 0, len(req.Items))
		for i, it := range req.Items {
			out = append(out, map[string]any{"index": i, "status": "buffered", "transaction_id": it.TransactionID, "queueName": it.Queue})
		}
		writeJSON(w, created, out)
		return
	}
	if !b.mutatingLocked(w) {
		b.mu.Unlock()
		return
	}
	out := make([]map[string]any, 0, len(req.Items))
	for i, it := range req.Items {
		if it.Queue == "" {
			out = append(out, map[string]any{"index": i, "status": map[bool]string{true: "error", false: "failed"}[line == Queen22], "error": "queue required"})
			continue
		}
		m, dup := b.pushLocked(it.Queue, it.Partition, it.TransactionID, it.Payload)
		status := "queued"
		if dup {
			status = "duplicate"
		}
		switch {
		case line.Does().Moves:
			// 1.6 and 2.x: no partition in the answer (2.x adds the offset).
			res := map[string]any{"index": i, "message_id": m.ID, "transaction_id": m.TxID, "queueName": m.Queue, "status": status}
			if line == Queen22 {
				res["offset"] = m.offset
			}
			out = append(out, res)
		case dup:
			// As the released server: a duplicate names the message it
			// already holds, and nothing else.
			out = append(out, map[string]any{"index": i, "message_id": m.ID, "queueName": m.Queue, "status": status, "transaction_id": m.TxID})
		default:
			out = append(out, map[string]any{"index": i, "message_id": m.ID, "partition_id": m.PartitionID,
				"queueName": m.Queue, "status": status, "transaction_id": m.TxID, "trace_id": nil})
		}
	}
	after := b.afterApply(r)
	b.mu.Unlock()
	if loseAnswer(w, r, after) {
		return
	}
	writeJSON(w, created, out)
}

// browse lists the messages of a queue's partition, as Queen 1.x's
// GET /api/v1/messages does (QUEEN-1X-CONTRACT.md 5.2): newest first,
// `limit` of them (200 unless said), `total` the page's length. The
// sandbox keeps no time window: every message it holds is listed.
func (b *Broker) browse(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count("GET /api/v1/messages")
	q := r.URL.Query()
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 {
		limit = 200
	}
	var ms []*message
	for _, m := range b.messages {
		if (q.Get("queue") == "" || m.Queue == q.Get("queue")) && (q.Get("partition") == "" || m.Partition == q.Get("partition")) {
			ms = append(ms, m)
		}
	}
	slices.SortFunc(ms, func(x, y *message) int { return cmp.Compare(y.seq, x.seq) })
	out := []map[string]any{}
	for _, m := range ms[:min(limit, len(ms))] {
		out = append(out, map[string]any{"id": m.ID, "transactionId": m.TxID, "partitionId": b.listedPID(m.PartitionID),
			"queue": m.Queue, "partition": m.Partition, "status": b.statusLocked(m), "createdAt": m.CreatedAt.Format(tsLayout)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": out, "total": len(out)})
}

// address is the message a path's partition and transaction id name.
func (b *Broker) addressLocked(r *http.Request) msgKey {
	return msgKey{b.internalPID(r.PathValue("pid")), r.PathValue("txid")}
}

func (b *Broker) get(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count("GET /api/v1/messages")
	m := b.messages[b.addressLocked(r)]
	if m == nil {
		b.notFoundLocked(w, "Message not found")
		return
	}
	status := b.statusLocked(m)
	var errText string
	retries := 0
	for _, rw := range m.rows {
		if errText == "" {
			errText, retries = rw.Error, rw.Retries
		}
	}
	// Every line lists the partition's consumers here, each with whether
	// it consumed the message (0.x: 010_messages.sql at v0.15.4; 1.6:
	// QUEEN-1X-CONTRACT.md). 1.0-1.5's detail route is assumed to be
	// 1.6's: the move is what 1.6 added (docs/broker.md).
	cgs := []map[string]any{}
	for _, g := range b.queues[m.Queue].Groups {
		o := map[string]any{"name": g, "consumed": m.consumedBy(g), "leaseExpiresAt": nil}
		if b.line.Does().Moves {
			o["group"] = g
		}
		cgs = append(cgs, o)
	}
	q := b.queues[m.Queue]
	var errField, retryField any = errText, retries
	if status != "dead_letter" {
		errField, retryField = nil, nil
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": m.ID, "transactionId": m.TxID, "partitionId": m.PartitionID,
		"queue": m.Queue, "partition": m.Partition, "queuePath": m.Queue + "/" + m.Partition, "namespace": "", "task": "",
		"status": status, "payload": readPayload(m), "isEncrypted": m.Encrypted && !m.Undecryptable, "traceId": nil, "producerSub": nil,
		"consumerGroups": cgs, "retryCount": retryField, "errorMessage": errField, "createdAt": m.CreatedAt.Format(tsLayout),
		"leaseExpiresAt": nil, "queueConfig": map[string]any{"leaseTime": 300, "retryLimit": q.RetryLimit, "retryDelay": 1000, "ttl": 3600, "priority": 0},
		"mode": map[string]any{"hasQueueMode": slices.Contains(q.Groups, "__QUEUE_MODE__"), "busGroupsCount": len(q.Groups), "consumedByGroups": 0, "type": "bus"}})
}

// notFoundLocked answers a message route for an address with nothing
// there: 0.x with a 200 and oldText, the seed contract with its 404 text,
// 1.6 and 2.x with a JSON 404.
func (b *Broker) notFoundLocked(w http.ResponseWriter, oldText string) {
	switch b.line {
	case Queen015:
		writeJSON(w, http.StatusOK, map[string]any{"error": oldText})
		return
	case Queen16, Queen22:
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "Message not found"})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusNotFound)
	io.WriteString(w, "No dead-letter row for this address")
}

func (b *Broker) del(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	locked := true
	defer func() {
		if locked {
			b.mu.Unlock()
		}
	}()
	b.count("DELETE /api/v1/messages")
	if !b.mutatingLocked(w) {
		return
	}
	// A scripted cut or hang applies the delete, then loses its answer.
	if a, ok := r.Context().Value(afterApplyKey{}).(Action); ok {
		w = &heldAnswer{ResponseWriter: w, r: r, action: a, unlock: func() { locked = false; b.mu.Unlock() }}
	}
	k := b.addressLocked(r)
	shown := r.PathValue("pid")
	switch b.line {
	case Queen015:
		m := b.messages[k]
		if m == nil {
			writeJSON(w, http.StatusOK, map[string]any{"success": false, "message": "Message not found", "partitionId": k.pid, "transactionId": k.txid})
			return
		}
		// The released server deletes the message itself, live or not,
		// and every group's dead-letter row with it; its id is free again.
		if b.removeRowsLocked(k) == 0 {
			b.applied++ // a live message deleted
		}
		delete(b.messages, k)
		for i, lm := range b.live {
			if lm == m {
				b.live = append(b.live[:i], b.live[i+1:]...)
				break
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "message": "Message deleted successfully", "partitionId": k.pid, "transactionId": k.txid})
	case Queen16:
		// Every group's rows at the address; never the message.
		if b.removeRowsLocked(k) == 0 {
			writeJSON(w, http.StatusNotFound, map[string]any{"success": false, "partitionId": shown, "transactionId": k.txid, "error": "Message not found",
				"message": "No dead-letter row for this address. Live messages live in immutable segments and cannot be deleted"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "partitionId": shown, "transactionId": k.txid, "message": "Message deleted successfully"})
	case Queen22:
		n := b.removeRowsLocked(k)
		if n == 0 {
			writeJSON(w, http.StatusNotFound, map[string]any{"success": false, "partitionId": shown, "transactionId": k.txid, "error": "Message not found"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "partitionId": shown, "transactionId": k.txid, "deleted": n})
	default:
		if b.removeRowsLocked(k) == 0 {
			b.notFoundLocked(w, "")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"success": true})
	}
}

// retry is /retry: on 1.6 and 2.x the move of one row at the address
// (retryMove); before 1.6 a push under a fresh transaction id, then a
// delete of every group's rows.
func (b *Broker) retry(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.count("POST /api/v1/messages/retry")
	if b.line.Does().Moves {
		b.retryMoveLocked(w, r)
		return
	}
	if !b.mutatingLocked(w) {
		b.mu.Unlock()
		return
	}
	k := b.addressLocked(r)
	m := b.messages[k]
	if m == nil || len(m.rows) == 0 {
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
	after := b.afterApply(r)
	b.mu.Unlock()
	if loseAnswer(w, r, after) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "queue": m.Queue, "partition": m.Partition,
		"replayedAs":    map[string]any{"index": 0, "message_id": nm.ID, "transaction_id": nm.TxID, "queueName": nm.Queue, "status": "queued"},
		"dlqRowRemoved": removed})
}
