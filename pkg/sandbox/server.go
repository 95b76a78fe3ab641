package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
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
	mux.HandleFunc("GET /api/v1/consumer-groups", b.consumerGroups)
	mux.HandleFunc("POST /api/v1/configure", b.configure)
	mux.HandleFunc("GET /api/v1/pop/queue/{queue}/partition/{partition}", b.pop)
	mux.HandleFunc("POST /api/v1/ack", b.ack)
	mux.HandleFunc("POST /api/v1/ack/batch", b.ackBatch)
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
		if f.Script != nil {
			_, pattern := mux.Handler(r)
			switch b.script(f, pattern) {
			case Refuse:
				writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "Service Unavailable"})
				return
			case Silence:
				park(r)
				return
			case CutAfterApply:
				r = r.WithContext(context.WithValue(r.Context(), afterApplyKey{}, CutAfterApply))
			case HangAfterApply:
				r = r.WithContext(context.WithValue(r.Context(), afterApplyKey{}, HangAfterApply))
			}
		}
		if f.DatabaseDown && r.URL.Path != "/health" && r.URL.Path != "/api/v1/push" {
			// The released server parks a call while its database is away.
			park(r)
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

// script counts a call and asks the fault script what to do with it.
func (b *Broker) script(f Faults, pattern string) Action {
	b.mu.Lock()
	if b.scriptN == nil {
		b.scriptN = map[string]int{}
	}
	b.scriptN[pattern]++
	b.callN++
	c := Call{Route: pattern, N: b.scriptN[pattern], All: b.callN}
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
	down := b.faults.DatabaseDown
	b.mu.Unlock()
	if down {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unhealthy", "database": "disconnected", "version": "sandbox"})
		return
	}
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
	b.mu.Lock()
	locked := true
	defer func() {
		if locked {
			b.mu.Unlock()
		}
	}()
	b.count("GET /api/v1/dlq")
	// A page asked for again before anything changed is the same bytes:
	// kept, so benchmarks measure dlqctl rather than this test double.
	cacheKey := r.URL.RawQuery
	if c, ok := b.pages[cacheKey]; ok && c.version == b.version && c.old == b.faults.OldServer {
		w.Header().Set("Content-Type", "application/json")
		w.Write(c.body)
		return
	}
	old := b.faults.OldServer
	lq, bad := b.listQuery(r)
	if bad != "" {
		b.badParam(w, bad)
		return
	}
	if old && (lq.offset >= 1 || lq.limit == 0) {
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "value": nil})
		return
	}
	page := b.pageLocked(lq, old)
	// The page is encoded outside the lock, a row at a time, as a broker
	// streams it (a released server's page is the whole DLQ).
	version := b.version
	items := make([]listItem, len(page))
	for i, rw := range page {
		data, enc := b.listedPayload(rw.msg)
		items[i] = listItem{rw, data, enc}
	}
	b.mu.Unlock()
	locked = false
	body := encodePage(w, items, lq, old)
	if body == nil {
		return
	}
	b.mu.Lock()
	if b.version == version {
		if b.pages == nil || len(b.pages) > 4096 {
			b.pages = map[string]cachedPage{}
		}
		b.pages[cacheKey] = cachedPage{version: version, old: old, body: bytes.Clone(body)}
	}
	b.mu.Unlock()
}

// listQuery is what a list call asks for.
type listQuery struct {
	limit, offset           int
	queue, group, partition string
	from, to                time.Time
}

// listQuery reads a list call's parameters; bad names one it cannot read.
func (b *Broker) listQuery(r *http.Request) (lq listQuery, bad string) {
	q := r.URL.Query()
	lq.limit = 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return lq, "limit"
		}
		lq.limit = n
	}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return lq, "offset"
		}
		lq.offset = n
	}
	lq.queue, lq.group = q.Get("queue"), q.Get("consumerGroup")
	if !b.faults.OldServer {
		// The released server ignores these.
		lq.partition = q.Get("partition")
		lq.from, _ = time.Parse(time.RFC3339Nano, q.Get("from"))
		lq.to, _ = time.Parse(time.RFC3339Nano, q.Get("to"))
	}
	return lq, ""
}

// pageLocked is the rows a list call answers: on the released server
// every matching row (limit ignored), else the page at offset, from a
// per-filter view kept until the DLQ changes.
func (b *Broker) pageLocked(lq listQuery, old bool) []*row {
	match := func(rw *row) bool {
		return (lq.queue == "" || rw.msg.Queue == lq.queue) && (lq.group == "" || rw.Group == lq.group) &&
			(lq.partition == "" || rw.msg.Partition == lq.partition) &&
			(lq.from.IsZero() || !rw.FailedAt.Before(lq.from)) && (lq.to.IsZero() || rw.FailedAt.Before(lq.to))
	}
	filtered := lq.queue != "" || lq.group != "" || lq.partition != "" || !lq.from.IsZero() || !lq.to.IsZero()
	var page []*row
	switch {
	case old:
		for _, rw := range b.rows {
			if match(rw) {
				page = append(page, rw)
			}
		}
	case !filtered:
		if lq.offset < len(b.rows) {
			page = b.rows[lq.offset:min(len(b.rows), lq.offset+lq.limit)]
		}
	default:
		key := fmt.Sprint(lq.queue, "\x00", lq.group, "\x00", lq.partition, "\x00", lq.from.UnixNano(), "\x00", lq.to.UnixNano())
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
		if lq.offset < len(v.rows) {
			page = v.rows[lq.offset:min(len(v.rows), lq.offset+lq.limit)]
		}
	}
	return page
}

// listItem is a row of a page with its payload as the list shows it.
type listItem struct {
	rw   *row
	data json.RawMessage
	enc  bool
}

// encodePage writes a list answer. A page small enough to keep is built
// whole and returned (the caller keeps it); a larger one is written as
// it is encoded, and nil is returned.
func encodePage(w http.ResponseWriter, items []listItem, lq listQuery, old bool) []byte {
	cacheable := len(items) <= 1000
	w.Header().Set("Content-Type", "application/json")
	var buf bytes.Buffer
	buf.WriteString(`{"messages":[`)
	for i, it := range items {
		rw := it.rw
		wr := wireRow{ID: rw.msg.ID, TransactionID: rw.msg.TxID, PartitionID: rw.msg.PartitionID, Queue: rw.msg.Queue,
			Partition: rw.msg.Partition, ConsumerGroup: rw.Group, ErrorMessage: rw.Error, RetryCount: rw.Retries,
			Data: it.data, CreatedAt: rw.FailedAt.Format(tsLayout), FailedAt: rw.FailedAt.Format(tsLayout)}
		if old {
			// The released server's createdAt is the message's enqueue time.
			wr.CreatedAt = rw.msg.CreatedAt.UTC().Format(tsLayout)
		}
		if it.enc && !old {
			t := true
			wr.IsEncrypted = &t
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		line, _ := json.Marshal(wr)
		buf.Write(line)
		// A page too large to keep is written as it is encoded; one that
		// is kept must stay whole in buf.
		if !cacheable && buf.Len() > 1<<20 {
			w.Write(buf.Bytes())
			buf.Reset()
		}
	}
	// No total on the released server: its page says only what was asked.
	fmt.Fprintf(&buf, `],"pagination":{"limit":%d,"offset":%d}`, lq.limit, lq.offset)
	if !old {
		fmt.Fprintf(&buf, `,"total":%d`, len(items))
	}
	buf.WriteString("}\n")
	w.Write(buf.Bytes())
	if !cacheable {
		return nil
	}
	return buf.Bytes()
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
	names := make([]string, 0, len(b.queues))
	for n := range b.queues {
		names = append(names, n)
	}
	sort.Strings(names)
	if b.faults.OldServer {
		// The released server's shape: no groups, no options.
		type counts struct {
			Total      int `json:"total"`
			Pending    int `json:"pending"`
			Processing int `json:"processing"`
		}
		type q struct {
			ID         string `json:"id"`
			Name       string `json:"name"`
			Namespace  string `json:"namespace"`
			Task       string `json:"task"`
			CreatedAt  string `json:"createdAt"`
			Partitions int    `json:"partitions"`
			Messages   counts `json:"messages"`
		}
		out := []q{}
		for _, n := range names {
			c := b.queues[n]
			parts := 0
			for k := range b.parts {
				if strings.HasPrefix(k, n+"\x00") {
					parts++
				}
			}
			live := 0
			for _, m := range b.live {
				if m.Queue == n {
					live++
				}
			}
			out = append(out, q{ID: PartitionID(n, "\x00queue"), Name: n, CreatedAt: c.CreatedAt.Format(tsLayout), Partitions: parts,
				Messages: counts{Total: live, Pending: live}})
		}
		writeJSON(w, http.StatusOK, map[string]any{"queues": out})
		return
	}
	type q struct {
		Name              string   `json:"name"`
		RetryLimit        int      `json:"retryLimit"`
		DeadLetterQueue   bool     `json:"deadLetterQueue"`
		EncryptionEnabled bool     `json:"encryptionEnabled"`
		ConsumerGroups    []string `json:"consumerGroups"`
	}
	out := []q{}
	for _, n := range names {
		c := b.queues[n]
		out = append(out, q{Name: c.Name, RetryLimit: c.RetryLimit, DeadLetterQueue: true, EncryptionEnabled: c.Encrypted, ConsumerGroups: c.Groups})
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": out})
}

// consumerGroups answers as the released server does: one object per
// (group, queue). Groups are those declared for a queue and those that
// popped from it.
func (b *Broker) consumerGroups(w http.ResponseWriter, _ *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count("GET /api/v1/consumer-groups")
	type cg struct {
		Name                  string   `json:"name"`
		QueueName             string   `json:"queueName"`
		Topics                []string `json:"topics"`
		Members               int      `json:"members"`
		PartitionsWithLag     int      `json:"partitionsWithLag"`
		TotalLag              *int     `json:"totalLag"`
		MaxTimeLag            int      `json:"maxTimeLag"`
		State                 string   `json:"state"`
		SubscriptionMode      *string  `json:"subscriptionMode"`
		SubscriptionTimestamp *string  `json:"subscriptionTimestamp"`
		SubscriptionCreatedAt *string  `json:"subscriptionCreatedAt"`
	}
	seen := map[[2]string]bool{}
	var pairs [][2]string
	add := func(q, g string) {
		if k := [2]string{g, q}; !seen[k] {
			seen[k] = true
			pairs = append(pairs, k)
		}
	}
	for _, c := range b.queues {
		for _, g := range c.Groups {
			add(c.Name, g)
		}
	}
	for k := range b.popped {
		add(k[0], k[1])
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i][0]+"\x00"+pairs[i][1] < pairs[j][0]+"\x00"+pairs[j][1] })
	out := []any{}
	for _, p := range pairs {
		c := cg{Name: p[0], QueueName: p[1], Topics: []string{p[1]}, Members: 1, State: "Stable"}
		if !b.faults.OldServer {
			// The contract's broker reports no lag.
			out = append(out, map[string]any{"name": c.Name, "queueName": c.QueueName, "topics": c.Topics, "members": c.Members})
			continue
		}
		lag := b.lags[[2]string{p[1], p[0]}]
		c.MaxTimeLag = int(lag / time.Second)
		if lag > 300*time.Second {
			c.State = "Lagging"
		}
		if lag > 0 {
			c.PartitionsWithLag = 1
		}
		if p[0] != "__QUEUE_MODE__" {
			n := 0
			if lag > 0 {
				n = 1
			}
			c.TotalLag = &n
		}
		out = append(out, c)
	}
	writeJSON(w, http.StatusOK, out)
}

// configure declares a queue (POST /api/v1/configure).
func (b *Broker) configure(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Queue   string `json:"queue"`
		Options struct {
			RetryLimit        *int `json:"retryLimit"`
			EncryptionEnabled bool `json:"encryptionEnabled"`
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
		c = &queueConf{Name: req.Queue, RetryLimit: 3, CreatedAt: b.now().UTC()}
		b.queues[req.Queue] = c
	}
	if req.Options.RetryLimit != nil {
		c.RetryLimit = *req.Options.RetryLimit
	}
	c.Encrypted = req.Options.EncryptionEnabled
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
		b.addRowLocked(&row{msg: m, Group: req.ConsumerGroup, Error: req.Error, FailedAt: b.now().UTC().Truncate(time.Millisecond), seq: b.seq})
		b.version++
	}
	return map[string]any{"index": i, "success": true, "dlq": dlq, "error": nil, "transactionId": req.TransactionID,
		"queueName": m.Queue, "partitionName": m.Partition}
}

// sortAfterAcks puts rows dead-lettered by acks in their place: newest first.
func (b *Broker) sortAfterAcks() {
	sort.SliceStable(b.rows, func(i, j int) bool { return newer(b.rows[i], b.rows[j]) })
}

func (b *Broker) metrics(w http.ResponseWriter, _ *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	by := map[string]int{}
	for _, r := range b.rows {
		by[r.msg.Queue]++
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	if b.faults.OldServer {
		// The released server counts dead-lettering, not depth.
		fmt.Fprintf(w, "# TYPE queen_cluster_dlq_total counter\nqueen_cluster_dlq_total{scope=\"cluster\"} %d\n", len(b.rows))
		return
	}
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	fmt.Fprintf(w, "# TYPE queen_dlq_depth gauge\nqueen_dlq_depth{scope=\"cluster\"} %d\n", len(b.rows))
	fmt.Fprintln(w, "# TYPE queen_dlq_depth_by_queue gauge")
	for q, n := range by {
		fmt.Fprintf(w, "queen_dlq_depth_by_queue{queue=\"%s\"} %d\n", esc.Replace(q), n)
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
	if b.faults.DatabaseDown {
		// Kept in the broker's local file to write later: not stored.
		out := make([]map[string]any, 0, len(req.Items))
		for i, it := range req.Items {
			out = append(out, map[string]any{"index": i, "status": "buffered", "transaction_id": it.TransactionID, "queueName": it.Queue})
		}
		b.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
		return
	}
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
		if dup {
			// As the released server: a duplicate names the message it
			// already holds, and nothing else.
			out = append(out, map[string]any{"index": i, "message_id": m.ID, "queueName": m.Queue, "status": status, "transaction_id": m.TxID})
			continue
		}
		out = append(out, map[string]any{"index": i, "message_id": m.ID, "partition_id": m.PartitionID,
			"queueName": m.Queue, "status": status, "transaction_id": m.TxID, "trace_id": nil})
	}
	after := b.afterApply(r)
	b.mu.Unlock()
	if loseAnswer(w, r, after) {
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
	if m.Completed {
		status = "completed"
	}
	var errText string
	retries := 0
	for _, rw := range m.rows {
		status = "dead_letter"
		groups = append(groups, rw.Group)
		if errText == "" {
			errText, retries = rw.Error, rw.Retries
		}
	}
	var cgs any = groups
	if b.faults.OldServer {
		// The released server lists the partition's consumers here, not
		// the groups that dead-lettered the message.
		objs := []map[string]any{}
		for _, g := range b.queues[m.Queue].Groups {
			objs = append(objs, map[string]any{"name": g, "consumed": m.Completed, "leaseExpiresAt": nil})
		}
		cgs = objs
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
	k := msgKey{r.PathValue("pid"), r.PathValue("txid")}
	if b.faults.OldServer {
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
