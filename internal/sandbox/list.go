package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// wireRow is a list row as the 0.x and 1.x lines write it.
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

// wireRow2 is a list row as 2.x writes it (reads.rs dlq_json): the
// partition's decimal number, the message's id and offset, the payload
// under both names, microsecond timestamps.
type wireRow2 struct {
	ID            string          `json:"id"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	PartitionID   string          `json:"partitionId"`
	CreatedAt     string          `json:"createdAt"`
	ConsumerGroup string          `json:"consumerGroup"`
	Offset        int64           `json:"offset"`
	MessageID     string          `json:"messageId"`
	TransactionID string          `json:"transactionId"`
	Data          json.RawMessage `json:"data"`
	Payload       json.RawMessage `json:"payload"`
	ErrorMessage  string          `json:"errorMessage"`
	RetryCount    int             `json:"retryCount"`
	FailedAt      string          `json:"failedAt"`
}

const (
	tsLayout   = "2006-01-02T15:04:05.000Z"
	tsLayoutUS = "2006-01-02T15:04:05.000000Z" // 2.x
)

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
	line := b.line
	if c, ok := b.pages[cacheKey]; ok && c.version == b.version && c.line == line {
		w.Header().Set("Content-Type", "application/json")
		w.Write(c.body)
		return
	}
	lq, bad := b.listQuery(r)
	if bad != "" {
		b.badParam(w, bad)
		return
	}
	if !line.Does().Pages && (lq.offset >= 1 || lq.limit == 0) {
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "value": nil})
		return
	}
	page, total := b.pageLocked(lq)
	// The page is encoded outside the lock, a row at a time, as a broker
	// streams it (a released server's page is the whole DLQ).
	version := b.version
	items := make([]listItem, len(page))
	for i, rw := range page {
		data, enc := b.listedPayload(rw.msg)
		items[i] = listItem{rw: rw, pid: b.listedPID(rw.msg.PartitionID), data: data, enc: enc}
	}
	b.mu.Unlock()
	locked = false
	body := encodePage(w, items, lq, line, total)
	if body == nil {
		return
	}
	b.mu.Lock()
	if b.version == version {
		if b.pages == nil || len(b.pages) > 4096 {
			b.pages = map[string]cachedPage{}
		}
		b.pages[cacheKey] = cachedPage{version: version, line: line, body: bytes.Clone(body)}
	}
	b.mu.Unlock()
}

// listQuery is what a list call asks for.
type listQuery struct {
	limit, offset           int
	queue, group, partition string
	// groupSet, queueSet: consumerGroup= or queue= was given, which 2.x
	// takes even empty, as the name "" (nothing matches), where 1.x
	// drops an empty filter.
	groupSet, queueSet bool
	from, to           time.Time
}

// listQuery reads a list call's parameters; bad names one it cannot read.
func (b *Broker) listQuery(r *http.Request) (lq listQuery, bad string) {
	q := r.URL.Query()
	lq.limit = 100
	num := func(name string, def int) (int, bool) {
		v := q.Get(name)
		if v == "" {
			return def, true
		}
		n, err := strconv.Atoi(v)
		does := b.line.Does()
		switch {
		case err != nil && does.NegativeLimit > 0:
			return def, true // the lines that take a negative limit take a bad one for the default
		case n < 0 && name == "limit" && does.NegativeLimit > 0:
			return does.NegativeLimit, true // 1.6: 500; 2.x: 100
		case err != nil || n < 0:
			return 0, false
		}
		return n, true
	}
	var ok bool
	if lq.limit, ok = num("limit", 100); !ok {
		return lq, "limit"
	}
	if lq.offset, ok = num("offset", 0); !ok {
		return lq, "offset"
	}
	if most := b.line.Does().MaxPage; most > 0 {
		lq.limit = min(max(lq.limit, 1), most)
	}
	if b.line.Does().EmptyFilterIsName {
		// An empty queue= or consumerGroup= is the name "", which
		// matches nothing (1.6 takes either as no filter).
		_, lq.groupSet = q["consumerGroup"]
		_, lq.queueSet = q["queue"]
	}
	lq.queue, lq.group = q.Get("queue"), q.Get("consumerGroup")
	if b.line == Queen15 {
		// The seed contract's broker filters on these; every released
		// server ignores them.
		lq.partition = q.Get("partition")
		lq.from, _ = time.Parse(time.RFC3339Nano, q.Get("from"))
		lq.to, _ = time.Parse(time.RFC3339Nano, q.Get("to"))
	}
	return lq, ""
}

// pageLocked is the rows a list call answers, and how many rows match
// in all: on the released server every matching row (limit ignored),
// else the page at offset, from a per-filter view kept until the DLQ
// changes.
func (b *Broker) pageLocked(lq listQuery) ([]*row, int) {
	match := func(rw *row) bool {
		return (lq.queue == "" && !lq.queueSet || rw.msg.Queue == lq.queue) && (lq.group == "" && !lq.groupSet || rw.Group == lq.group) &&
			(lq.partition == "" || rw.msg.Partition == lq.partition) &&
			(lq.from.IsZero() || !rw.FailedAt.Before(lq.from)) && (lq.to.IsZero() || rw.FailedAt.Before(lq.to))
	}
	filtered := lq.queue != "" || lq.queueSet || lq.group != "" || lq.groupSet || lq.partition != "" || !lq.from.IsZero() || !lq.to.IsZero()
	all := b.rows
	switch {
	case !b.line.Does().Pages:
		var page []*row
		for _, rw := range b.rows {
			if match(rw) {
				page = append(page, rw)
			}
		}
		return page, len(page)
	case filtered:
		key := fmt.Sprint(lq.queue, "\x00", lq.group, "\x00", lq.groupSet, "\x00", lq.partition, "\x00", lq.from.UnixNano(), "\x00", lq.to.UnixNano())
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
		all = v.rows
	}
	if lq.offset >= len(all) {
		return nil, len(all)
	}
	return all[lq.offset:min(len(all), lq.offset+lq.limit)], len(all)
}

// listItem is a row of a page with its partition id and payload as the
// list shows them.
type listItem struct {
	rw   *row
	pid  string
	data json.RawMessage
	enc  bool
}

// encodePage writes a list answer in the line's shape. A page small
// enough to keep is built whole and returned (the caller keeps it); a
// larger one is written as it is encoded, and nil is returned.
func encodePage(w http.ResponseWriter, items []listItem, lq listQuery, line Line, total int) []byte {
	cacheable := len(items) <= 1000
	w.Header().Set("Content-Type", "application/json")
	var buf bytes.Buffer
	buf.WriteString(`{"messages":[`)
	for i, it := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		row, _ := json.Marshal(wireOf(it, line))
		buf.Write(row)
		// A page too large to keep is written as it is encoded; one that
		// is kept must stay whole in buf.
		if !cacheable && buf.Len() > 1<<20 {
			w.Write(buf.Bytes())
			buf.Reset()
		}
	}
	fmt.Fprintf(&buf, `],"pagination":{"limit":%d,"offset":%d}`, lq.limit, lq.offset)
	switch does := line.Does(); {
	case !does.Pages:
		// No total on the released server: its page says only what was asked.
	case does.FullTotal:
		fmt.Fprintf(&buf, `,"total":%d`, total) // every matching row
	default:
		fmt.Fprintf(&buf, `,"total":%d`, len(items)) // the page's rows
	}
	buf.WriteString("}\n")
	w.Write(buf.Bytes())
	if !cacheable {
		return nil
	}
	return buf.Bytes()
}

// wireOf is a list row in the line's shape.
func wireOf(it listItem, line Line) any {
	rw := it.rw
	if line == Queen22 {
		return wireRow2{ID: rw.id, Queue: rw.msg.Queue, Partition: rw.msg.Partition, PartitionID: it.pid, CreatedAt: rw.FailedAt.Format(tsLayoutUS),
			ConsumerGroup: rw.Group, Offset: rw.msg.offset, MessageID: rw.msg.ID, TransactionID: rw.msg.TxID, Data: it.data, Payload: it.data,
			ErrorMessage: rw.Error, RetryCount: rw.Retries, FailedAt: rw.FailedAt.Format(tsLayoutUS)}
	}
	// The move's lines list the row's own id; the seed contract and the
	// 0.x server the message's. (A real 1.0-1.5 lists row ids too, random
	// ones: this mode keeps the seed contract, which lists message ids.)
	id := rw.msg.ID
	if line.Does().Moves {
		id = rw.id
	}
	wr := wireRow{ID: id, TransactionID: rw.msg.TxID, PartitionID: it.pid, Queue: rw.msg.Queue,
		Partition: rw.msg.Partition, ConsumerGroup: rw.Group, ErrorMessage: rw.Error, RetryCount: rw.Retries,
		Data: it.data, CreatedAt: rw.FailedAt.Format(tsLayout), FailedAt: rw.FailedAt.Format(tsLayout)}
	if line == Queen015 {
		// The released server's createdAt is the message's enqueue time.
		wr.CreatedAt = rw.msg.CreatedAt.UTC().Format(tsLayout)
	}
	if it.enc && line.Does().Decrypts {
		t := true
		wr.IsEncrypted = &t
	}
	return wr
}

func (b *Broker) badParam(w http.ResponseWriter, name string) {
	if !b.line.Does().JSONErrors {
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
	if b.line == Queen015 {
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

// consumerGroups answers as the released servers do (0.x, 1.6, 2.x):
// one object per (group, queue), with the group's lag; the seed
// contract's broker names the pairs only. Groups are those declared for a queue and those that
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
		if b.line == Queen15 {
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
