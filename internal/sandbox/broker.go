// Package sandbox is a Queen-compatible broker held in memory: the
// dead-letter routes of docs/broker.md with their semantics (newest-first
// offset paging, dedup by partition and transaction id, the 404 texts),
// in each release line's shapes (Line: the C++ 0.x server, the Rust 1.x
// line before and after 1.6's move, 2.x), with fault injection for tests,
// the 1.6 console's replay, and books that tests assert on.
package sandbox

import (
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Faults make the sandbox misbehave the way real deployments do. Counters
// are per broker and count from the moment the faults are set.
type Faults struct {
	// Fail503Every answers every Nth mutating call (POST, DELETE) with 503
	// without applying it.
	Fail503Every int
	// CutEvery applies every Nth push or retry, then cuts the connection
	// without an answer.
	CutEvery int
	// RowKeptEvery makes every Nth successful retry answer
	// dlqRowRemoved:false and keep the dead-letter row.
	RowKeptEvery int
	// Latency is added to every call; RouteLatency to the calls of a
	// route, by its pattern ("POST /api/v1/push": 6ms,
	// "DELETE /api/v1/messages/{pid}/{txid}": 1ms): a broker that costs
	// what a real one does.
	Latency      time.Duration
	RouteLatency map[string]time.Duration
	// Token, when set, is the bearer token every call but /health needs.
	Token string
	// ReadOnlyToken may list and get, and gets 403 on anything else.
	ReadOnlyToken string
	// Maintenance is 1.6's push maintenance: moves answer 503 (nothing
	// touched) and pushes are answered buffered.
	Maintenance bool
	// DatabaseDown behaves as a broker whose database is unreachable:
	// /health answers 503, pushes are answered "buffered" (kept in a local
	// file, not stored), and every other call is parked until the client
	// gives up.
	DatabaseDown bool
	// Standby behaves as a Queen 2.1 standby cluster: reads are answered,
	// every write is refused with 503 and "code":"standby" until the
	// cluster is promoted, and /health's raft block says it is linked.
	Standby bool
	// Script, when set, picks a fault for each call by its route and its
	// number (a test's exact sequence: the probe meets a 503, the third
	// push is cut, everything goes silent after the tenth). It is asked
	// before the faults above, which still apply to calls it answers.
	Script func(Call) Action
}

// Call is one request as Faults.Script sees it.
type Call struct {
	// Route is "METHOD pattern" as the broker routes it, e.g.
	// "POST /api/v1/push", "POST /api/v1/messages/{pid}/{txid}/retry".
	Route string
	// Path is the request's path, e.g. "/api/v1/messages/p/t".
	Path string
	// N counts the calls of this route since the faults were set, from 1.
	N int
	// All counts every call since the faults were set, from 1.
	All int
}

// Action is what Faults.Script does to one call.
type Action int

// The actions.
const (
	// Serve answers the call as the other faults say.
	Serve Action = iota
	// Refuse answers 503 without applying the call.
	Refuse
	// CutAfterApply applies a push, retry or delete, then cuts the
	// connection without an answer.
	CutAfterApply
	// Silence parks the call, unapplied, until the client gives up.
	Silence
	// HangAfterApply applies a push, retry or delete, then parks the
	// answer until the client gives up (or is killed).
	HangAfterApply
	// Maintenance answers a move or a push as 1.6 does while push
	// maintenance is on: 503, nothing touched.
	Maintenance
	// FailNotApplied answers a move 500 with dlqRowRemoved:false: the
	// database refused it and nothing changed.
	FailNotApplied
	// UnknownAfterApply applies a move, then answers 500 with
	// dlqRowRemoved:null (1.6's unknown outcome).
	UnknownAfterApply
	// UnknownNotApplied answers a move 500 with dlqRowRemoved:null
	// without applying it.
	UnknownNotApplied
	// NoLeader answers 503 no_leader with Retry-After: 1, as 2.x does
	// while its cluster elects a leader; nothing touched.
	NoLeader
	// Refuse409 refuses a move or push as 2.x does (409, nothing touched).
	Refuse409
	// DiskFull answers a push 507, as 2.x does when its disk is full.
	DiskFull
)

// Broker is the in-memory broker. Its zero value is not usable; call New.
type Broker struct {
	mu       sync.Mutex
	now      func() time.Time
	line     Line
	faults   Faults
	queues   map[string]*queueConf
	parts    map[string]string // queue\x00partition -> partition id
	messages map[msgKey]*message
	rows     []*row // newest failure first
	live     []*message
	routes   map[string]int
	seq      int64
	rowSeq   int64 // row ids' own counter (message ids stay as they were)
	// cursors are consumer groups' positions in b.live, per queue, group
	// and partition (pop and ack, for seeding through the API).
	cursors map[string]int
	leases  map[string]*message // lease id, partition id, transaction id -> message
	leaseN  int
	popped  map[[2]string]bool // (queue, group) pairs that popped
	mutN    int                // mutating calls since faults were set
	cutN    int                // pushes and retries since faults were set
	retryN  int                // successful retries since faults were set
	scriptN map[string]int     // calls per route since faults were set (Script)
	callN   int                // calls since faults were set (Script)
	applied int                // changes a client made: messages published, rows deleted
	// lags are consumer groups' lags a test set, by (queue, group): what
	// the released server's consumer-groups route reports.
	lags map[[2]string]time.Duration
	// byRowID finds a row by its id (the move's key).
	byRowID map[string]*row
	// lastPush is when each (partition, transaction id) was last pushed:
	// 1.6 and 2.x deduplicate within the queue's window from there.
	lastPush map[msgKey]time.Time
	// decimal and byDecimal are 2.x's partition numbers, the list's
	// partitionId there (the detail route still says the UUID).
	decimal   map[string]string
	byDecimal map[string]string
	// moves counts the rows the move published and removed, console
	// counts those the console moved (ConsoleReplay), traces the trace
	// events recorded.
	moves, console int
	traces         []Trace
	// offsets are the next offset of each partition.
	offsets map[string]int64

	// version counts changes to rows; views caches filtered row lists
	// per filter until the next change, so paging a filtered DLQ costs
	// O(limit) per page, as a real broker's index makes it.
	version int
	views   map[string]view
	pages   map[string]cachedPage // list answers by query, until the next change
	// instance is what /health says the sandbox is (SetInstance).
	instance string
	// inflight measures the writes in flight (WritesInFlight).
	inflight inflight
}

type view struct {
	version int
	rows    []*row
}

type cachedPage struct {
	version int
	line    Line
	body    []byte
}

type queueConf struct {
	Name       string
	Encrypted  bool
	RetryLimit int
	Groups     []string
	CreatedAt  time.Time
	// DedupWindow is how long a pushed transaction id is remembered, on
	// lines that remember it only so long (1.6, 2.x): 0 turns dedup off.
	DedupWindow time.Duration
}

// defaultDedupWindow is a queue's dedupWindowSeconds unless configured.
const defaultDedupWindow = time.Hour

type msgKey struct{ pid, txid string }

type message struct {
	ID            string
	TxID          string
	PartitionID   string
	Queue         string
	Partition     string
	Payload       json.RawMessage
	Encrypted     bool
	Undecryptable bool
	Live          bool
	// Completed: every consumer group has consumed it (Complete);
	// consumed, the groups that have (Consume).
	Completed bool
	consumed  map[string]bool
	CreatedAt time.Time
	seq       int64
	offset    int64  // its place in its partition (2.x lists it)
	rows      []*row // its dead-letter rows, newest first
}

// stored is the precision a broker keeps a failure time at: every line
// keeps it in a database at microseconds (PostgreSQL; 2.x's own store),
// and 2.x lists all six digits while the older lines list milliseconds
// (wireOf). A client that compares what it stored of one line against
// what another list sends meets both.
const stored = time.Microsecond

type row struct {
	id       string // the row's own id: what 1.x and 2.x list as id
	msg      *message
	Group    string
	Error    string
	Retries  int
	FailedAt time.Time
	seq      int64
}

// New returns an empty broker using now as its clock (time.Now if nil).
func New(now func() time.Time) *Broker {
	if now == nil {
		now = time.Now
	}
	return &Broker{now: now, line: Queen15, queues: map[string]*queueConf{}, parts: map[string]string{},
		messages: map[msgKey]*message{}, routes: map[string]int{}, byRowID: map[string]*row{}}
}

// SetInstance gives the broker an instance id that /health says (as
// dlqctlSandbox): the context dlqctl sandbox writes names it, and a
// command under that context talks to this sandbox alone.
func (b *Broker) SetInstance(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.instance = id
}

// SetLine makes the broker speak a release line (Queen15, the seed
// contract, by default). Set it before the broker is filled: 2.x numbers
// its partitions as they are first listed.
func (b *Broker) SetLine(l Line) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.line = l
	b.pages = nil
}

// Line is the release line the broker speaks.
func (b *Broker) Line() Line {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.line
}

// SetFaults replaces the fault settings and restarts their counters.
func (b *Broker) SetFaults(f Faults) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults = f
	b.mutN, b.cutN, b.retryN = 0, 0, 0
	b.scriptN, b.callN = map[string]int{}, 0
}

// PartitionID is the deterministic UUID-shaped id the sandbox gives a
// queue's partition.
func PartitionID(queue, partition string) string {
	h := sha1.Sum([]byte("queen-sandbox\x00" + queue + "\x00" + partition))
	s := hex.EncodeToString(h[:16])
	return s[0:8] + "-" + s[8:12] + "-5" + s[13:16] + "-8" + s[17:20] + "-" + s[20:32]
}

func (b *Broker) partitionLocked(queue, partition string) string {
	k := queue + "\x00" + partition
	if id, ok := b.parts[k]; ok {
		return id
	}
	id := PartitionID(queue, partition)
	b.parts[k] = id
	if _, ok := b.queues[queue]; !ok {
		b.queues[queue] = &queueConf{Name: queue, RetryLimit: 3, CreatedAt: b.now().UTC(), DedupWindow: defaultDedupWindow}
	}
	return id
}

// listedPID is a partition id as the list shows it: 2.x's decimal
// partition number, the UUID elsewhere.
func (b *Broker) listedPID(pid string) string {
	if !b.line.Does().DecimalPartitions {
		return pid
	}
	if d, ok := b.decimal[pid]; ok {
		return d
	}
	if b.decimal == nil {
		b.decimal, b.byDecimal = map[string]string{}, map[string]string{}
	}
	d := fmt.Sprint(len(b.decimal) + 1)
	b.decimal[pid], b.byDecimal[d] = d, pid
	return d
}

// internalPID is the partition a path's partition id names: 2.x takes
// its decimal number or the UUID.
func (b *Broker) internalPID(pid string) string {
	if p, ok := b.byDecimal[pid]; ok && b.line.Does().DecimalPartitions {
		return p
	}
	return pid
}

// rowIDLocked mints a row id as 1.x's gen_random_uuid does: a UUIDv4,
// here derived from a counter so a run is repeatable.
func (b *Broker) rowIDLocked() string {
	b.rowSeq++
	h := sha1.Sum(fmt.Appendf(nil, "dlq-row-%d", b.rowSeq))
	s := hex.EncodeToString(h[:16])
	return s[0:8] + "-" + s[8:12] + "-4" + s[13:16] + "-a" + s[17:20] + "-" + s[20:32]
}

// messageIDLocked mints a message id as the broker does: a UUIDv7 whose
// first 48 bits are the enqueue time in milliseconds, then a counter, so
// ids sort in enqueue order.
func (b *Broker) messageIDLocked(t time.Time) string {
	b.seq++
	ms := uint64(max(t.UnixMilli(), 0))
	n := uint64(b.seq)
	return fmt.Sprintf("%08x-%04x-7%03x-%04x-%012x", ms>>16, ms&0xffff, (n>>62)&0xfff, 0x8000|(n>>48)&0x3fff, n&0xffffffffffff)
}

func (b *Broker) nextIDLocked() string {
	b.seq++
	h := sha1.Sum(fmt.Appendf(nil, "msg-%d-%d", b.seq, b.now().UnixNano()))
	s := hex.EncodeToString(h[:16])
	return "0199" + s[4:8] + "-" + s[8:12] + "-7" + s[13:16] + "-8" + s[17:20] + "-" + s[20:32]
}

// DeadLetter describes one dead-letter row to add.
type DeadLetter struct {
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	TransactionID string          `json:"transactionId"`
	ConsumerGroup string          `json:"consumerGroup"`
	Error         string          `json:"error"`
	RetryCount    int             `json:"retryCount"`
	FailedAt      time.Time       `json:"failedAt"`
	Data          json.RawMessage `json:"data"`
	Undecryptable bool            `json:"undecryptable,omitempty"`
	// EnqueuedAt is when the message was pushed (its id's time); zero
	// means its first failure.
	EnqueuedAt time.Time `json:"enqueuedAt,omitzero"`
}

// AddQueue declares a queue (encryption, retry limit, consumer groups).
func (b *Broker) AddQueue(name string, encrypted bool, retryLimit int, groups ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queues[name] = &queueConf{Name: name, Encrypted: encrypted, RetryLimit: retryLimit, Groups: groups, CreatedAt: b.now().UTC(), DedupWindow: defaultDedupWindow}
}

// DeleteQueue deletes a queue, as an operator does: its partitions, its
// messages and their dead-letter rows go with it. AddQueue makes it anew.
func (b *Broker) DeleteQueue(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.queues, name)
	for k, m := range b.messages {
		if m.Queue == name {
			b.removeRowsLocked(k)
			delete(b.messages, k)
		}
	}
	b.live = slices.DeleteFunc(b.live, func(m *message) bool { return m.Queue == name })
	for k, pid := range b.parts {
		if strings.HasPrefix(k, name+"\x00") {
			delete(b.parts, k)
			for mk := range b.lastPush {
				if mk.pid == pid {
					delete(b.lastPush, mk)
				}
			}
		}
	}
	b.version++
}

// SetDedupWindow sets a queue's dedupWindowSeconds (1.6, 2.x): 0 turns
// dedup off.
func (b *Broker) SetDedupWindow(queue string, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.partitionLocked(queue, "Default")
	b.queues[queue].DedupWindow = d
}

// AddDeadLetters adds rows, as if consumers had dead-lettered the
// messages. Rows naming the same queue, partition and transaction id share
// one message.
func (b *Broker) AddDeadLetters(dls ...DeadLetter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range dls {
		pid := b.partitionLocked(d.Queue, d.Partition)
		k := msgKey{pid, d.TransactionID}
		m := b.messages[k]
		if m == nil {
			b.seq++
			q := b.queues[d.Queue]
			enq := d.EnqueuedAt
			if enq.IsZero() {
				enq = d.FailedAt
			}
			m = &message{ID: b.messageIDLocked(enq), TxID: d.TransactionID, PartitionID: pid, Queue: d.Queue,
				Partition: d.Partition, Payload: d.Data, Encrypted: q.Encrypted || d.Undecryptable,
				Undecryptable: d.Undecryptable, CreatedAt: enq, seq: b.seq}
			m.offset = b.nextOffsetLocked(pid)
			b.messages[k] = m
			b.pushedLocked(k, enq)
		}
		b.seq++
		b.addRowLocked(&row{msg: m, Group: d.ConsumerGroup, Error: d.Error, Retries: d.RetryCount, FailedAt: d.FailedAt.UTC().Truncate(stored), seq: b.seq})
	}
	sort.SliceStable(b.rows, func(i, j int) bool { return newer(b.rows[i], b.rows[j]) })
	b.version++
}

func newer(a, b *row) bool {
	if !a.FailedAt.Equal(b.FailedAt) {
		return a.FailedAt.After(b.FailedAt)
	}
	return a.seq > b.seq
}

// RemoveDeadLetters deletes every row at an address behind the client's
// back (retention, another operator). It reports how many it removed.
func (b *Broker) RemoveDeadLetters(partitionID, txid string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.removeRowsLocked(msgKey{partitionID, txid})
}

// addRowLocked appends a row to the DLQ and to its message's rows; the
// caller sorts b.rows.
func (b *Broker) addRowLocked(r *row) {
	if r.id == "" {
		r.id = b.rowIDLocked()
	}
	b.byRowID[r.id] = r
	b.rows = append(b.rows, r)
	r.msg.rows = append(r.msg.rows, r)
	sort.SliceStable(r.msg.rows, func(i, j int) bool { return newer(r.msg.rows[i], r.msg.rows[j]) })
}

// removeRowsLocked deletes a message's rows, each found by binary search
// (b.rows is ordered), so a replay of N rows is not N scans of the DLQ.
func (b *Broker) removeRowsLocked(k msgKey) int {
	m := b.messages[k]
	if m == nil || len(m.rows) == 0 {
		return 0
	}
	b.applied++
	n := len(m.rows)
	for _, r := range m.rows {
		b.unlistLocked(r)
	}
	m.rows = nil
	b.version++
	return n
}

// unlistLocked takes a row out of the DLQ's order (found by binary
// search) and the row index; its message's rows are the caller's.
func (b *Broker) unlistLocked(r *row) {
	i := sort.Search(len(b.rows), func(i int) bool { return !newer(b.rows[i], r) })
	for i < len(b.rows) && b.rows[i] != r {
		i++
	}
	if i < len(b.rows) {
		b.rows = slices.Delete(b.rows, i, i+1)
	}
	delete(b.byRowID, r.id)
}

// removeRowLocked deletes one row, as a move does: the message's other
// groups' rows stay.
func (b *Broker) removeRowLocked(r *row) {
	b.unlistLocked(r)
	r.msg.rows = slices.DeleteFunc(r.msg.rows, func(x *row) bool { return x == r })
	b.version++
}

// FailAgain dead-letters a live message again (its replay failed), as a
// consumer acking it with status dlq would.
func (b *Broker) FailAgain(queue, txid, group, errText string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.live {
		if m.Queue == queue && m.TxID == txid {
			b.seq++
			r := &row{msg: m, Group: group, Error: errText, Retries: 3, FailedAt: b.now().UTC().Truncate(stored), seq: b.seq}
			b.addRowLocked(r)
			sort.SliceStable(b.rows, func(i, j int) bool { return newer(b.rows[i], b.rows[j]) })
			b.version++
			return true
		}
	}
	return false
}

// Row is a dead-letter row in the books.
type Row struct {
	// ID is the row's own id (the move's key on 1.6 and 2.x).
	ID            string
	PartitionID   string
	TransactionID string
	Queue         string
	Partition     string
	ConsumerGroup string
	Error         string
	FailedAt      time.Time
	Payload       json.RawMessage
}

// Live is a message published through push or /retry.
type Live struct {
	PartitionID   string
	TransactionID string
	MessageID     string
	Queue         string
	Partition     string
	Payload       json.RawMessage
}

// SetLag sets what the consumer-groups route reports as a group's lag on
// a queue (maxTimeLag; state Lagging past 300 s), as the released server
// reports it. The contract's broker reports no lag at all.
func (b *Broker) SetLag(queue, group string, lag time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lags == nil {
		b.lags = map[[2]string]time.Duration{}
	}
	b.lags[[2]string{queue, group}] = lag
}

// Complete marks a live message consumed by every group: its status is
// then "completed". It reports whether the message exists.
func (b *Broker) Complete(partitionID, txid string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.messages[msgKey{b.internalPID(partitionID), txid}]
	if m == nil {
		return false
	}
	m.Completed = true
	return true
}

// Consume marks a live message consumed by the groups named (the queue's
// consumer groups; __QUEUE_MODE__ for queue mode), as their consumers
// acknowledging it would.
func (b *Broker) Consume(partitionID, txid string, groups ...string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.messages[msgKey{b.internalPID(partitionID), txid}]
	if m == nil {
		return false
	}
	if m.consumed == nil {
		m.consumed = map[string]bool{}
	}
	for _, g := range groups {
		m.consumed[g] = true
	}
	return true
}

// consumedBy reports whether a group consumed a message.
func (m *message) consumedBy(g string) bool { return m.Completed || m.consumed[g] }

// statusLocked is a message's status as the line computes it: dead_letter
// while any group holds a row; completed once its groups consumed it, by
// the line's rule; else pending. The 0.x server (010_messages.sql at
// v0.15.4) calls a message of a queue with queue mode completed once
// queue mode consumed it, whatever its other groups did; 1.6 and 2.x once
// every named group has (queue mode when there is no named group).
func (b *Broker) statusLocked(m *message) string {
	if len(m.rows) > 0 {
		return "dead_letter"
	}
	if m.Completed {
		return "completed"
	}
	groups := b.queues[m.Queue].Groups
	var named []string
	queueMode := false
	for _, g := range groups {
		if g == queueModeGroup {
			queueMode = true
		} else {
			named = append(named, g)
		}
	}
	all := func(gs []string) bool {
		for _, g := range gs {
			if !m.consumedBy(g) {
				return false
			}
		}
		return len(gs) > 0
	}
	switch {
	case b.line.Does().CompletedByQueueMode && queueMode && m.consumedBy(queueModeGroup):
		return "completed"
	case len(named) > 0 && all(named) && (!b.line.Does().CompletedByQueueMode || !queueMode):
		return "completed"
	case len(named) == 0 && queueMode && m.consumedBy(queueModeGroup):
		return "completed"
	}
	return "pending"
}

// queueModeGroup is how Queen names queue mode's consumers.
const queueModeGroup = "__QUEUE_MODE__"

func envelope(payload json.RawMessage) json.RawMessage {
	h := sha1.Sum(payload)
	env := map[string]string{
		"encrypted": base64.StdEncoding.EncodeToString(append(h[:], payload...)),
		"iv":        base64.StdEncoding.EncodeToString(h[:12]),
		"authTag":   base64.StdEncoding.EncodeToString(h[4:20]),
	}
	out, _ := json.Marshal(env)
	return out
}

// listedPayload is what the list route shows for a message's data.
func (b *Broker) listedPayload(m *message) (json.RawMessage, bool) {
	switch {
	case m.Undecryptable:
		return envelope(m.Payload), false
	case m.Encrypted && !b.line.Does().Decrypts:
		return envelope(m.Payload), false
	case m.Encrypted:
		return m.Payload, true
	}
	return m.Payload, false
}

// readPayload is the decrypted payload a GET or a /retry uses. An
// undecryptable message yields its envelope, "exactly as stored".
func readPayload(m *message) json.RawMessage {
	if m.Undecryptable {
		return envelope(m.Payload)
	}
	return m.Payload
}

// push publishes one item; it returns the message and whether it was a
// duplicate of one already held in that partition. The 0.x server and
// the seed contract hold a transaction id for as long as the message is
// held; 1.6 and 2.x for the queue's dedup window only (0: not at all).
func (b *Broker) pushLocked(queue, partition, txid string, payload json.RawMessage) (*message, bool) {
	if partition == "" {
		partition = "Default"
	}
	pid := b.partitionLocked(queue, partition)
	if txid == "" {
		txid = b.nextIDLocked()
	}
	k := msgKey{pid, txid}
	if m, ok := b.messages[k]; ok {
		if !b.line.Does().DedupWindowed {
			return m, true
		}
		if w := b.queues[queue].DedupWindow; w > 0 && b.now().Sub(b.lastPush[k]) < w {
			return m, true
		}
	}
	b.seq++
	m := &message{ID: b.messageIDLocked(b.now()), TxID: txid, PartitionID: pid, Queue: queue, Partition: partition,
		Payload: payload, Encrypted: b.queues[queue].Encrypted, Live: true, CreatedAt: b.now().UTC(), seq: b.seq, offset: b.nextOffsetLocked(pid)}
	// An address names the message whose dead-letter rows it holds: a
	// second message under the same id (pushed past the dedup window)
	// does not take the address from rows still dead-lettered.
	if old, ok := b.messages[k]; !ok || len(old.rows) == 0 {
		b.messages[k] = m
	}
	b.pushedLocked(k, m.CreatedAt)
	b.live = append(b.live, m)
	b.applied++
	return m, false
}

// nextOffsetLocked takes the next offset of a partition.
func (b *Broker) nextOffsetLocked(pid string) int64 {
	if b.offsets == nil {
		b.offsets = map[string]int64{}
	}
	n := b.offsets[pid]
	b.offsets[pid] = n + 1
	return n
}

// pushedLocked remembers when a transaction id was last pushed to a
// partition (the dedup window runs from there).
func (b *Broker) pushedLocked(k msgKey, at time.Time) {
	if b.lastPush == nil {
		b.lastPush = map[msgKey]time.Time{}
	}
	b.lastPush[k] = at
}
