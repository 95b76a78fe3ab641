package sandbox

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"
)

// configure declares a queue (POST /api/v1/configure).
func (b *Broker) configure(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Queue   string `json:"queue"`
		Options struct {
			RetryLimit         *int `json:"retryLimit"`
			EncryptionEnabled  bool `json:"encryptionEnabled"`
			DedupWindowSeconds *int `json:"dedupWindowSeconds"`
		} `json:"options"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Queue == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "queue is required"})
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count("POST /api/v1/configure")
	c := b.queues[req.Queue]
	if c == nil {
		c = &queueConf{Name: req.Queue, RetryLimit: 3, CreatedAt: b.now().UTC(), DedupWindow: defaultDedupWindow}
		b.queues[req.Queue] = c
	}
	if req.Options.RetryLimit != nil {
		c.RetryLimit = *req.Options.RetryLimit
	}
	c.Encrypted = req.Options.EncryptionEnabled
	if n := req.Options.DedupWindowSeconds; n != nil && *n >= 0 {
		c.DedupWindow = time.Duration(*n) * time.Second
	}
	writeJSON(w, http.StatusOK, map[string]any{"configured": true, "queue": req.Queue, "namespace": "", "task": ""})
}

// pop hands a consumer group the next live messages of one partition
// (GET /api/v1/pop/queue/{queue}/partition/{partition}); the group's
// position moves past them, each under a lease its ack names.
func (b *Broker) pop(w http.ResponseWriter, r *http.Request) {
	q, part := r.PathValue("queue"), r.PathValue("partition")
	group := r.URL.Query().Get("consumerGroup")
	if group == "" {
		group = "__QUEUE_MODE__"
	}
	batch, _ := strconv.Atoi(r.URL.Query().Get("batch"))
	if batch <= 0 {
		batch = 1
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count("GET /api/v1/pop")
	if b.cursors == nil {
		b.cursors, b.leases, b.popped = map[string]int{}, map[string]*message{}, map[[2]string]bool{}
	}
	key := q + "\x00" + group + "\x00" + part
	b.popped[[2]string{q, group}] = true
	b.leaseN++
	lease := fmt.Sprintf("lease-%d", b.leaseN)
	type msg struct {
		ID            string          `json:"id"`
		TransactionID string          `json:"transactionId"`
		PartitionID   string          `json:"partitionId"`
		Partition     string          `json:"partition"`
		ConsumerGroup string          `json:"consumerGroup"`
		Data          json.RawMessage `json:"data"`
		LeaseID       string          `json:"leaseId"`
		CreatedAt     string          `json:"createdAt"`
	}
	out := []msg{}
	i := b.cursors[key]
	for ; i < len(b.live) && len(out) < batch; i++ {
		m := b.live[i]
		if m.Queue != q || m.Partition != part {
			continue
		}
		b.leases[lease+"\x00"+m.PartitionID+"\x00"+m.TxID] = m
		out = append(out, msg{ID: m.ID, TransactionID: m.TxID, PartitionID: m.PartitionID, Partition: m.Partition, ConsumerGroup: group,
			Data: m.Payload, LeaseID: lease, CreatedAt: m.CreatedAt.Format(tsLayout)})
	}
	b.cursors[key] = i
	writeJSON(w, http.StatusOK, map[string]any{"messages": out, "leaseId": lease, "consumerGroup": group, "queue": q, "partition": part, "success": true})
}

type ackReq struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	LeaseID       string `json:"leaseId"`
	Status        string `json:"status"`
	ConsumerGroup string `json:"consumerGroup"`
	Error         string `json:"error"`
}

// ack settles a popped message (POST /api/v1/ack); status "dlq" (or
// "failed") dead-letters it for the group with the error given.
func (b *Broker) ack(w http.ResponseWriter, r *http.Request) {
	var req ackReq
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.TransactionID == "" || req.PartitionID == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "transactionId and partitionId are required"})
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count("POST /api/v1/ack")
	writeJSON(w, http.StatusOK, []map[string]any{b.ackLocked(0, req)})
	b.sortAfterAcks()
}

// ackBatch settles several popped messages of one consumer group
// (POST /api/v1/ack/batch).
func (b *Broker) ackBatch(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Acks          []ackReq `json:"acknowledgments"`
		ConsumerGroup string   `json:"consumerGroup"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Acks == nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "acknowledgments array is required"})
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count("POST /api/v1/ack/batch")
	out := make([]map[string]any, 0, len(req.Acks))
	for i, a := range req.Acks {
		if a.ConsumerGroup == "" {
			a.ConsumerGroup = req.ConsumerGroup
		}
		out = append(out, b.ackLocked(i, a))
	}
	b.sortAfterAcks()
	writeJSON(w, http.StatusOK, out)
}

func (b *Broker) ackLocked(i int, req ackReq) map[string]any {
	if req.ConsumerGroup == "" {
		req.ConsumerGroup = "__QUEUE_MODE__"
	}
	key := req.LeaseID + "\x00" + req.PartitionID + "\x00" + req.TransactionID
	m := b.leases[key]
	if m == nil {
		return map[string]any{"index": i, "success": false, "error": "lease not found", "transactionId": req.TransactionID}
	}
	delete(b.leases, key)
	dlq := req.Status == "dlq" || req.Status == "failed"
	if dlq {
		b.seq++
		b.addRowLocked(&row{msg: m, Group: req.ConsumerGroup, Error: req.Error, FailedAt: b.now().UTC().Truncate(stored), seq: b.seq})
		b.version++
	}
	return map[string]any{"index": i, "success": true, "dlq": dlq, "error": nil, "transactionId": req.TransactionID,
		"queueName": m.Queue, "partitionName": m.Partition}
}

// sortAfterAcks puts rows dead-lettered by acks in their place: newest first.
func (b *Broker) sortAfterAcks() {
	sort.SliceStable(b.rows, func(i, j int) bool { return newer(b.rows[i], b.rows[j]) })
}
