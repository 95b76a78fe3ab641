package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"iter"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"golang.org/x/time/rate"
)

// Broker is what the engine needs of the broker; *client.Client is one.
type Broker interface {
	Rows(ctx context.Context, q client.ListQuery) iter.Seq2[client.Row, error]
	Get(ctx context.Context, a client.Address) (*client.Message, error)
	Push(ctx context.Context, items []client.PushItem) ([]client.PushResult, error)
	Retry(ctx context.Context, a client.Address) (*client.RetryResult, error)
	Delete(ctx context.Context, a client.Address) error
}

// Journal is what the engine needs of the ledger; *ledger.Store is one.
type Journal interface {
	// Acquire claims addresses, enrolling those the journal has never
	// seen on the way, as enrol says.
	Acquire(ctx context.Context, broker, batchID, action string, addrs []client.Address, enrol []ledger.Enrolment, owner string, now time.Time, lease time.Duration) (map[client.Address]*ledger.Entry, error)
	Release(ctx context.Context, broker string, ents []*ledger.Entry, owner string) error
	SaveMany(ctx context.Context, items []ledger.SaveItem, owner string, now time.Time) []error
}

// Options configure an execution.
type Options struct {
	Action  string // Replay or Discard
	Broker  string // the broker URL the journal files entries under
	BatchID string
	Owner   string // claim owner (ledger.NewOwner)

	Rate        float64 // per second; 0 = unlimited
	Burst       int
	Concurrency int

	Via string // auto, endpoint, manual
	// Order is OrderPartition (the default when empty), OrderSkipGaps or
	// OrderNone; items come in replay order (Arrange).
	Order         string
	ToQueue       string
	Transform     func(json.RawMessage) (json.RawMessage, error)
	MaxFailures   int // stop scheduling after this many failures; 0 = never
	MaxGeneration int // refuse replays past this generation; 0 = no cap
	// Generations are the endpoint's copies' generations (see Generations).
	Generations  Generations
	RetryUnknown bool

	Canary        int
	CanaryWait    time.Duration
	MaxRefailures int // pause when this many replayed messages failed again; 0 = never
	RefailEvery   time.Duration

	// Absent names manifest addresses no longer dead-lettered (a recorded
	// batch executed later): nothing is sent for them. Every other address
	// is taken to be in the DLQ, and one the journal says is done is
	// checked with the broker before it is called done.
	Absent map[client.Address]bool

	// Gates hold scheduling back while any is closed (--max-lag,
	// --window); Paused is told each pause's reason as it starts or
	// changes, and "" when scheduling goes on.
	Gates  []Gate
	Paused func(why string)

	Lease time.Duration
	Now   func() time.Time
	Sleep func(context.Context, time.Duration) error
	// Progress is told each address as it completes.
	Progress func(done int)
}

// AddrResult is an address the report lists.
type AddrResult struct {
	Address client.Address `json:"address"`
	Reason  string         `json:"reason"`
}

// Report is the outcome of an execution.
type Report struct {
	BatchID           string `json:"batchId"`
	Action            string `json:"action"`
	Total             int    `json:"total"`
	Replayed          int    `json:"replayed"`
	Duplicate         int    `json:"duplicateSuppressed"`
	Discarded         int    `json:"discarded"`
	AlreadyGone       int    `json:"alreadyGone"`
	AlreadyDone       int    `json:"alreadyDone"`
	Failed            int    `json:"failed"`
	Unknown           int    `json:"unknown"`
	SkippedEncrypted  int    `json:"skippedEncrypted"`
	SkippedGeneration int    `json:"skippedGeneration"`
	Unreachable       int    `json:"unreachable"`
	// DeadLetteredAgain counts addresses this batch already replayed or
	// discarded that are back in the DLQ (another group failed the
	// message, or the replay failed under its original id): they are not
	// acted on twice by one batch.
	DeadLetteredAgain int `json:"deadLetteredAgain"`
	Claimed           int `json:"claimedElsewhere"`
	// HeldBack counts messages not replayed because an earlier message of
	// their partition was not (BlockedPartitions names each partition and
	// what holds it back).
	HeldBack          int       `json:"heldBack"`
	BlockedPartitions []Blocked `json:"blockedPartitions,omitempty"`
	Refailed          int       `json:"refailed"`
	// RowsRemoved counts the dead-letter rows this run's deletes removed:
	// every row of each address done, selected or not.
	RowsRemoved int `json:"rowsRemoved"`
	// Unrecorded counts addresses whose outcome the journal could not
	// record (the ledger failed under them): the resume settles them.
	Unrecorded  int    `json:"unrecorded"`
	NotStarted  int    `json:"notStarted"`
	Interrupted bool   `json:"interrupted"`
	Stopped     string `json:"stopped,omitempty"` // why scheduling stopped early
	// Pauses are the waits on gates (consumer lag, the window), by kind.
	Pauses      []Pause       `json:"pauses,omitempty"`
	Elapsed     time.Duration `json:"-"`
	ElapsedSecs float64       `json:"elapsedSeconds"`
	Listed      []AddrResult  `json:"addresses,omitempty"` // failed, unknown, skipped
	// LedgerError is why the run stopped when the journal could not be
	// written: nothing more was published after it.
	LedgerError string `json:"ledgerError,omitempty"`
	// copies are the transaction ids this run published copies as.
	copies *copySet
	// AuthRefused: the broker refused the token mid-run (exit 4).
	AuthRefused bool `json:"-"`
	// BrokerDown: the run stopped because calls in a row got no answer
	// at all (refused, timed out): the broker is down (exit 3).
	BrokerDown bool `json:"-"`
}

// Published reports whether txid is one this run published a copy as (a
// dead letter with it is one of the run's replays that failed again).
func (r *Report) Published(txid string) bool { return r.copies.has(txid) }

// copySet holds transaction ids as 64-bit hashes, 8 bytes an id however
// long it is and with nothing besides (a map took about 40 bytes an id):
// a batch of a million addresses keeps no million strings. The hashes are
// appended as copies are published and sorted when asked about (after
// the canary, after the run). An id whose hash collides with one of the
// set's counts as in it.
type copySet struct {
	mu     sync.Mutex
	seed   maphash.Seed
	ids    []uint64
	sorted int // ids[:sorted] are in order
}

func newCopySet() *copySet { return &copySet{seed: maphash.MakeSeed()} }

func (c *copySet) add(txid string) {
	h := maphash.String(c.seed, txid)
	c.mu.Lock()
	c.ids = append(c.ids, h)
	c.mu.Unlock()
}

func (c *copySet) has(txid string) bool {
	if c == nil {
		return false
	}
	h := maphash.String(c.seed, txid)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sorted < len(c.ids) {
		slices.Sort(c.ids)
		c.ids = slices.Compact(c.ids)
		c.sorted = len(c.ids)
	}
	_, ok := slices.BinarySearch(c.ids, h)
	return ok
}

// empty reports whether no copy was published.
func (c *copySet) empty() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids) == 0
}

// Accounted is the number of addresses the report puts in a bucket:
// Total, when every address is accounted for exactly once.
func (r *Report) Accounted() int {
	return r.Replayed + r.Duplicate + r.Discarded + r.AlreadyGone + r.AlreadyDone + r.Failed + r.Unknown +
		r.SkippedEncrypted + r.SkippedGeneration + r.Unreachable + r.DeadLetteredAgain + r.Claimed + r.HeldBack +
		r.Unrecorded + r.NotStarted
}

// Outcome is the report as the ledger's outcome counts.
func (r *Report) Outcome() map[string]int {
	m := map[string]int{}
	add := func(k string, v int) {
		if v != 0 {
			m[k] = v
		}
	}
	add("replayed", r.Replayed)
	add("duplicate", r.Duplicate)
	add("discarded", r.Discarded)
	add("alreadyGone", r.AlreadyGone)
	add("alreadyDone", r.AlreadyDone)
	add("failed", r.Failed)
	add("unknown", r.Unknown)
	add("skippedEncrypted", r.SkippedEncrypted)
	add("skippedGeneration", r.SkippedGeneration)
	add("unreachable", r.Unreachable)
	add("deadLetteredAgain", r.DeadLetteredAgain)
	add("claimedElsewhere", r.Claimed)
	add("heldBack", r.HeldBack)
	add("refailed", r.Refailed)
	add("unrecorded", r.Unrecorded)
	add("notStarted", r.NotStarted)
	return m
}

// Clean reports whether every address of the batch was carried out: none
// failed, is unknown, unreachable, skipped (undecryptable, past the
// generation cap), back in the DLQ after this batch, held by another
// run or behind a gap, unrecorded, or not started.
func (r *Report) Clean() bool {
	return r.Failed == 0 && r.Unknown == 0 && r.NotStarted == 0 && r.Unreachable == 0 && r.DeadLetteredAgain == 0 &&
		r.Claimed == 0 && r.HeldBack == 0 && r.SkippedEncrypted == 0 && r.SkippedGeneration == 0 && r.Unrecorded == 0 &&
		!r.Interrupted && r.Stopped == "" && r.LedgerError == ""
}

// Engine executes one batch.
type Engine struct {
	b   Broker
	j   Journal
	o   Options
	lim *rate.Limiter

	src       Source
	pushes    *pusher
	saves     chan saveReq // waited for
	behind    chan saveReq // written behind
	behindErr error        // the first failed write-behind save (read after the committer ends)
	start     time.Time

	mu      sync.Mutex
	blocked map[Chain]bool // partitions held back by a gap, across the canary and the rest
	rep     Report
	rows    map[client.Address]int // rows each address being worked on has in the DLQ (0 when absent)
	copies  *copySet
	failed  int
	done    int
	// silent counts calls in a row that got no answer at all; at
	// maxSilent the broker is taken to be down and the run stops.
	silent int

	gateMu      sync.Mutex // one worker at a time asks the gates
	pausedSince time.Time  // zero: not paused
	pausedKind  string
	pausedWhy   string
	pauses      map[string]*Pause
}

// maxSilent is how many calls in a row may get no answer (refused,
// timed out) before a run stops: enough to ride out a blip, few enough
// that a broker that is down is not asked once per address.
const maxSilent = 8

// NewEngine prepares an execution.
func NewEngine(b Broker, j Journal, o Options) *Engine {
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.Burst <= 0 {
		o.Burst = 1
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		}
	}
	if o.Lease <= 0 {
		o.Lease = 5 * time.Minute
	}
	if o.Via == "" {
		o.Via = ViaAuto
	}
	if o.RefailEvery <= 0 {
		o.RefailEvery = 5 * time.Second
	}
	if o.Order == "" {
		o.Order = OrderPartition
	}
	lim := rate.NewLimiter(rate.Inf, 0)
	if o.Rate > 0 {
		lim = rate.NewLimiter(rate.Limit(o.Rate), o.Burst)
	}
	return &Engine{b: b, j: j, o: o, lim: lim, rows: map[client.Address]int{}, copies: newCopySet(), blocked: map[Chain]bool{}}
}

// errNotStarted: a job was stopped before its first broker call (an
// interrupt while it waited for the rate limiter); it is released.
var errNotStarted = errors.New("not started")

// Run executes items held in memory (see RunSource).
func (e *Engine) Run(ctx context.Context, items []Item) (*Report, error) {
	return e.RunSource(ctx, Items(items))
}

// RunSource executes a batch's items, read from src a claim at a time.
// ctx stops scheduling (SIGINT): calls already sent finish under their
// own timeout and are journaled, then RunSource returns with Interrupted
// set. The report is returned even with an error (a journal write that
// failed, or a source that could not be read, stops the run at once, and
// the report says what was done before it).
func (e *Engine) RunSource(ctx context.Context, src Source) (*Report, error) {
	start := e.o.Now()
	e.start = start.Add(-time.Second) // the broker's clock may lag ours a little
	total := src.Len()
	e.src = src
	e.rep = Report{BatchID: e.o.BatchID, Action: e.o.Action, Total: total, copies: e.copies}
	// Journal writes must land even after SIGINT: they record what happened.
	jctx := context.WithoutCancel(ctx)
	e.saves, e.behind = make(chan saveReq, 256), make(chan saveReq, 1024)
	committed := make(chan struct{})
	go func() { e.committer(jctx); close(committed) }()
	// A few callers make the coalesced pushes: one call carries what the
	// workers have waiting, so a handful keeps every worker busy.
	e.pushes = newPusher(jctx, e.b, max(1, e.o.Concurrency/4))
	flushed := false
	flush := func() error {
		if !flushed {
			flushed = true
			e.pushes.stop()
			close(e.saves)
			close(e.behind)
			<-committed
		}
		return e.behindErr
	}
	finish := func(err error) (*Report, error) {
		if ferr := flush(); err == nil {
			err = ferr
		}
		if err != nil {
			e.rep.LedgerError = err.Error()
		}
		e.endPause()
		e.rep.Interrupted = ctx.Err() != nil
		e.rep.NotStarted = total - e.done
		e.rep.Pauses = e.pauseList()
		e.rep.Elapsed = e.o.Now().Sub(start)
		e.rep.ElapsedSecs = e.rep.Elapsed.Seconds()
		sort.Slice(e.rep.Listed, func(i, j int) bool { return e.rep.Listed[i].Address.String() < e.rep.Listed[j].Address.String() })
		return &e.rep, err
	}
	rest := 0
	if e.o.Action == Replay && e.o.Canary > 0 && total > e.o.Canary {
		if err := e.runSome(ctx, 0, e.o.Canary, 1); err != nil {
			return finish(err)
		}
		rest = e.o.Canary
		if ctx.Err() == nil && !e.stopped() {
			if err := e.o.Sleep(ctx, e.o.CanaryWait); err == nil {
				n, err := e.refailures(ctx)
				if err != nil {
					return finish(err)
				}
				if n > 0 {
					e.rep.Refailed = n
					e.stop(fmt.Sprintf("canary: %d of %d canary message(s) came back to the DLQ", n, e.o.Canary))
				}
			}
		}
	}
	if ctx.Err() == nil && !e.stopped() {
		if err := e.runSome(ctx, rest, total, e.o.Concurrency); err != nil {
			return finish(err)
		}
	}
	return finish(nil)
}

func (e *Engine) stopped() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rep.Stopped != ""
}

func (e *Engine) stop(reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rep.Stopped == "" {
		e.rep.Stopped = reason
	}
}

type job struct {
	it  Item
	ent *ledger.Entry
}

// claimChunk is how many addresses the next claim of a partition (or,
// unordered, of the feeder) takes, after one of last (0: the first). At a
// rate, at most a second of work (and 32), so claims are not held long.
// Unlimited, 32 and then twice the last, up to 256: each claim is a
// journal write a partition's worker waits for, queued behind the other
// workers' saves, and claiming 32 at a time held an unlimited run to
// about 0.78 of a bare push-and-delete loop (BenchmarkUnlimited), while
// a short partition still claims little.
func (e *Engine) claimChunk(last int) int {
	if e.o.Rate > 0 {
		return min(max(int(e.o.Rate), 1), 32)
	}
	if last == 0 {
		return 32
	}
	return min(2*last, 256)
}

// acquire claims a chunk of items, enrolling the addresses the journal
// has never seen: an address is enrolled when its run reaches it. On the
// manual path an address that will be pushed is enrolled with its
// intent (derived id, destination), so its push waits for no journal
// write of its own.
func (e *Engine) acquire(ctx context.Context, part []Item) (map[client.Address]*ledger.Entry, error) {
	addrs := make([]client.Address, len(part))
	enrol := make([]ledger.Enrolment, len(part))
	for k, it := range part {
		addrs[k] = it.Address
		gen := e.o.Generations.Of(it.Address)
		enrol[k].Generation = gen
		if e.intentAhead(it, gen) {
			enrol[k].ReplayTxID, enrol[k].ReplayQueue = ReplayTxID(it.Address, gen), e.destQueue(it)
		}
	}
	return e.j.Acquire(ctx, e.o.Broker, e.o.BatchID, e.o.Action, addrs, enrol, e.o.Owner, e.o.Now(), e.o.Lease)
}

// intentAhead reports whether an item's manual replay intent may be
// journaled with its claim: a replay on the manual path, of an address
// in the DLQ with a payload to push and under the generation cap. Any
// other item is enrolled pending and journals its intent (if any) when
// it gets there.
func (e *Engine) intentAhead(it Item, gen int) bool {
	return e.o.Action == Replay && e.manualPath() && !e.o.Absent[it.Address] && it.Address.Unreachable() == "" &&
		(e.o.MaxGeneration <= 0 || gen <= e.o.MaxGeneration) && len(it.Data()) > 0 && !it.Undecryptable()
}

// manualPath reports whether this run replays by get, push and delete:
// every run but one told --via endpoint (which cannot transform a payload
// or change its queue).
func (e *Engine) manualPath() bool {
	return e.o.Via != ViaEndpoint || e.o.Transform != nil || e.o.ToQueue != ""
}

func (e *Engine) markDone() {
	e.mu.Lock()
	e.done++
	d := e.done
	e.mu.Unlock()
	if e.o.Progress != nil {
		e.o.Progress(d)
	}
}

// pace waits for the gates and the rate limiter before an address's
// first call that changes the broker: addresses settled from the journal
// or the list cost nothing. An interrupt while waiting leaves the address
// not started.
func (e *Engine) pace(ctx context.Context) error {
	if ctx.Err() != nil || e.stopped() {
		return errNotStarted
	}
	if err := e.waitGates(ctx); err != nil {
		return errNotStarted
	}
	if err := e.lim.Wait(ctx); err != nil {
		return errNotStarted
	}
	if e.stopped() {
		return errNotStarted
	}
	return nil
}

// waitGates returns once every gate is open. While one is closed, the
// pause is timed and announced once (again when its reason changes).
func (e *Engine) waitGates(ctx context.Context) error {
	for len(e.o.Gates) > 0 {
		why, kind, recheck := e.askGates(ctx)
		if why == "" {
			e.endPause()
			return nil
		}
		e.beginPause(kind, why)
		if err := e.o.Sleep(ctx, max(recheck, 10*time.Millisecond)); err != nil {
			return err
		}
		if e.stopped() {
			return errNotStarted
		}
	}
	return nil
}

func (e *Engine) askGates(ctx context.Context) (why, kind string, recheck time.Duration) {
	e.gateMu.Lock()
	defer e.gateMu.Unlock()
	now := e.o.Now()
	for _, g := range e.o.Gates {
		if why, recheck := g.Closed(ctx, now); why != "" {
			return why, g.Kind(), recheck
		}
	}
	return "", "", 0
}

func (e *Engine) beginPause(kind, why string) {
	e.mu.Lock()
	now := e.o.Now()
	if !e.pausedSince.IsZero() && e.pausedKind != kind {
		e.closePauseLocked(now)
	}
	changed := e.pausedWhy != why
	if e.pausedSince.IsZero() {
		e.pausedSince, e.pausedKind = now, kind
		if e.pauses == nil {
			e.pauses = map[string]*Pause{}
		}
		p := e.pauses[kind]
		if p == nil {
			p = &Pause{Kind: kind}
			e.pauses[kind] = p
		}
		p.Times++
	}
	e.pausedWhy = why
	e.pauses[kind].Last = why
	e.mu.Unlock()
	if changed && e.o.Paused != nil {
		e.o.Paused(why)
	}
}

func (e *Engine) endPause() {
	e.mu.Lock()
	was := !e.pausedSince.IsZero()
	if was {
		e.closePauseLocked(e.o.Now())
	}
	e.mu.Unlock()
	if was && e.o.Paused != nil {
		e.o.Paused("")
	}
}

func (e *Engine) closePauseLocked(now time.Time) {
	p := e.pauses[e.pausedKind]
	p.For += now.Sub(e.pausedSince)
	p.Seconds = p.For.Seconds()
	e.pausedSince, e.pausedKind, e.pausedWhy = time.Time{}, "", ""
}

func (e *Engine) pauseList() []Pause {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Pause
	for _, p := range e.pauses {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// runSome runs the items from position from to to-1 in order (a
// partition at a time per worker) or not, as Options.Order says.
func (e *Engine) runSome(ctx context.Context, from, to, workers int) error {
	if e.o.Action == Replay && Ordered(e.o.Order) {
		return e.runChains(ctx, from, to, workers)
	}
	return e.runItems(ctx, from, to, workers)
}

// chainAt is a destination partition's items: their positions in the
// source, in replay order (4 bytes an item; the items are read a claim
// at a time).
type chainAt struct {
	c   Chain
	pos []int32
}

// runChains replays each destination partition's items one after
// another, in the order given, with up to workers partitions at once. A
// partition is claimed a chunk at a time, from its first unfinished
// address: another run holding that address is working the partition,
// and this one leaves it to it. An address that is not replayed holds
// back the rest of its partition (OrderSkipGaps goes on past it).
func (e *Engine) runChains(ctx context.Context, from, to, workers int) error {
	var chains []chainAt
	idx := map[Chain]int{}
	err := e.src.Chains(context.WithoutCancel(ctx), from, to, e.o.ToQueue, func(pos int, c Chain) {
		i, ok := idx[c]
		if !ok {
			i = len(chains)
			idx[c] = i
			chains = append(chains, chainAt{c: c})
		}
		chains[i].pos = append(chains[i].pos, int32(pos))
	})
	if err != nil {
		e.stop("ledger error: " + err.Error())
		return err
	}
	clear(idx)
	feed := make(chan chainAt)
	var wg sync.WaitGroup
	var fatal error
	var fatalOnce sync.Once
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ch := range feed {
				if err := e.runChain(ctx, ch.c, ch.pos); err != nil {
					fatalOnce.Do(func() { fatal = err })
					e.stop("ledger error: " + err.Error())
				}
			}
		}()
	}
	lastCheck := e.o.Now()
feeding:
	for _, ch := range chains {
		if ctx.Err() != nil || e.stopped() {
			break
		}
		if e.o.MaxRefailures > 0 && e.o.Now().Sub(lastCheck) >= e.o.RefailEvery {
			lastCheck = e.o.Now()
			if e.refailedTooOften(ctx) {
				break
			}
		}
		select {
		case feed <- ch:
		case <-ctx.Done():
			break feeding
		}
	}
	close(feed)
	wg.Wait()
	if e.o.MaxRefailures > 0 && !e.stopped() && ctx.Err() == nil {
		e.refailedTooOften(ctx)
	}
	return fatal
}

// refailedTooOften counts this run's replays back in the DLQ and stops
// the run at --max-refailures.
func (e *Engine) refailedTooOften(ctx context.Context) bool {
	n, err := e.refailures(ctx)
	if err != nil {
		return false
	}
	e.mu.Lock()
	e.rep.Refailed = n
	e.mu.Unlock()
	if n >= e.o.MaxRefailures {
		e.stop(fmt.Sprintf("paused: %d replayed message(s) failed again (--max-refailures %d)", n, e.o.MaxRefailures))
		return true
	}
	return false
}

// runChain replays one partition's items (their positions, in order),
// reading them a claim at a time.
func (e *Engine) runChain(ctx context.Context, c Chain, pos []int32) error {
	jctx := context.WithoutCancel(ctx)
	e.mu.Lock()
	held := e.blocked[c]
	e.mu.Unlock()
	if held && e.o.Order != OrderSkipGaps {
		e.holdBack(c, nil, "", false, len(pos))
		return nil
	}
	chunk := 0
	for i := 0; i < len(pos); i += chunk {
		if ctx.Err() != nil || e.stopped() {
			return nil
		}
		chunk = e.claimChunk(chunk)
		part, err := e.src.Load(jctx, pos[i:min(i+chunk, len(pos))])
		if err != nil {
			return err
		}
		claimed, err := e.acquire(jctx, part)
		if err != nil {
			return err
		}
		release := func(from int) error {
			var rest []*ledger.Entry
			for _, it := range part[from:] {
				if ent := claimed[it.Address]; ent != nil {
					rest = append(rest, ent)
				}
			}
			return e.j.Release(jctx, e.o.Broker, rest, e.o.Owner)
		}
		for k, it := range part {
			ent := claimed[it.Address]
			if ent == nil {
				// Another run holds it: the partition is that run's from here.
				e.claimedChain(c, it.Address, len(pos)-(i+k))
				return release(k + 1)
			}
			if ctx.Err() != nil || e.stopped() {
				return release(k)
			}
			err := e.one(ctx, it, ent)
			if errors.Is(err, errNotStarted) {
				return release(k)
			}
			e.markDone()
			if err != nil {
				e.record(func(r *Report) { r.Unrecorded++ })
				_ = release(k + 1)
				return err
			}
			if !passes(ent) && e.o.Order != OrderSkipGaps {
				if rest := len(pos) - (i + k + 1); rest > 0 {
					reason := ent.State
					if ent.Outcome != "" {
						reason += " (" + ent.Outcome + ")"
					}
					e.holdBack(c, &it.Address, reason, ent.State == ledger.Skipped, rest)
				}
				e.mu.Lock()
				e.blocked[c] = true
				e.mu.Unlock()
				return release(k + 1)
			}
		}
	}
	return nil
}

// claimedChain records the rest of a partition, n messages from a, as
// another run's.
func (e *Engine) claimedChain(c Chain, a client.Address, n int) {
	e.record(func(r *Report) {
		r.Claimed += n
		r.Listed = append(r.Listed, AddrResult{a, fmt.Sprintf("claimed by another run working partition %s/%s; it and the %d after it are that run's (re-run this batch after it ends)", c.Queue, c.Partition, n-1)})
	})
	for range n {
		e.markDone()
	}
}

// holdBack records n messages of a partition not replayed behind a gap.
func (e *Engine) holdBack(c Chain, by *client.Address, reason string, permanent bool, n int) {
	e.record(func(r *Report) {
		r.HeldBack += n
		for i := range r.BlockedPartitions {
			if r.BlockedPartitions[i].Chain == c {
				r.BlockedPartitions[i].Messages += n
				return
			}
		}
		b := Blocked{Chain: c, Reason: reason, Messages: n, Permanent: permanent}
		if by != nil {
			b.Address = *by
		}
		r.BlockedPartitions = append(r.BlockedPartitions, b)
	})
	for range n {
		e.markDone()
	}
}

// runItems claims the items from position from to to-1 a chunk at a
// time and feeds them to workers until done, stopped or interrupted;
// claims not worked on are released.
func (e *Engine) runItems(ctx context.Context, from, to, workers int) error {
	feed := make(chan job)
	var wg sync.WaitGroup
	var fatal error
	var fatalOnce sync.Once
	setFatal := func(err error) {
		fatalOnce.Do(func() { fatal = err })
		e.stop("ledger error: " + err.Error())
	}
	var unworked []*ledger.Entry // claimed, then not worked on: released at the end
	var unworkedMu sync.Mutex
	release := func(ent *ledger.Entry) {
		unworkedMu.Lock()
		unworked = append(unworked, ent)
		unworkedMu.Unlock()
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range feed {
				// A job handed over just before a stop is not started.
				if ctx.Err() != nil || e.stopped() {
					release(j.ent)
					continue
				}
				err := e.one(ctx, j.it, j.ent)
				if errors.Is(err, errNotStarted) {
					release(j.ent)
					continue
				}
				e.markDone()
				if err != nil {
					e.record(func(r *Report) { r.Unrecorded++ })
					setFatal(err)
				}
			}
		}()
	}
	jctx := context.WithoutCancel(ctx)
	lastCheck := e.o.Now()
	// The next chunk is claimed while the workers take this one: a claim
	// is a journal write, and made in line it stalled every worker (an
	// unlimited run went at 0.8 of the ordered one). Claimed ahead and
	// never fed, a chunk is released.
	type claim struct {
		part    []Item
		claimed map[client.Address]*ledger.Entry
	}
	claims, quit := make(chan claim, 1), make(chan struct{})
	go func() {
		defer close(claims)
		chunk := 0
		for i := from; i < to; i += chunk {
			chunk = e.claimChunk(chunk)
			if ctx.Err() != nil || e.stopped() {
				return
			}
			part, err := e.src.Load(jctx, span(i, min(i+chunk, to)))
			if err != nil {
				setFatal(err)
				return
			}
			claimed, err := e.acquire(jctx, part)
			if err != nil {
				setFatal(err)
				return
			}
			select {
			case claims <- claim{part, claimed}:
			case <-quit:
				for _, ent := range claimed {
					release(ent)
				}
				return
			}
		}
	}()
feeding:
	for c := range claims {
		part, claimed := c.part, c.claimed
		for k, it := range part {
			ent := claimed[it.Address]
			if ent == nil {
				e.claimedItem(it.Address)
				continue
			}
			rest := func() {
				for _, x := range part[k:] {
					if ent := claimed[x.Address]; ent != nil {
						release(ent)
					}
				}
			}
			if ctx.Err() != nil || e.stopped() {
				rest()
				break feeding
			}
			if e.o.MaxRefailures > 0 && e.o.Now().Sub(lastCheck) >= e.o.RefailEvery {
				lastCheck = e.o.Now()
				if n, err := e.refailures(ctx); err == nil && n >= e.o.MaxRefailures {
					e.mu.Lock()
					e.rep.Refailed = n
					e.mu.Unlock()
					e.stop(fmt.Sprintf("paused: %d replayed message(s) failed again (--max-refailures %d)", n, e.o.MaxRefailures))
					rest()
					break feeding
				}
			}
			select {
			case feed <- job{it, ent}:
			case <-ctx.Done():
				rest()
				break feeding
			}
		}
	}
	close(quit)
	for c := range claims {
		for _, ent := range c.claimed {
			release(ent)
		}
	}
	close(feed)
	wg.Wait()
	if err := e.j.Release(jctx, e.o.Broker, unworked, e.o.Owner); err != nil && fatal == nil {
		fatal = err
	}
	if e.o.MaxRefailures > 0 && !e.stopped() && ctx.Err() == nil {
		if n, err := e.refailures(ctx); err == nil {
			e.mu.Lock()
			e.rep.Refailed = n
			e.mu.Unlock()
			if n >= e.o.MaxRefailures {
				e.stop(fmt.Sprintf("paused: %d replayed message(s) failed again (--max-refailures %d)", n, e.o.MaxRefailures))
			}
		}
	}
	return fatal
}

func (e *Engine) claimedItem(a client.Address) {
	e.record(func(r *Report) {
		r.Claimed++
		r.Listed = append(r.Listed, AddrResult{a, "claimed by another run that is working on this batch; re-run it after that run ends"})
	})
	e.markDone()
}

// refailures counts dead letters whose transaction id is one this run
// replayed as: the replay failed again.
func (e *Engine) refailures(ctx context.Context) (int, error) {
	if e.copies.empty() {
		return 0, nil
	}
	n := 0
	for r, err := range e.b.Rows(ctx, client.ListQuery{Limit: 500}) {
		if err != nil {
			return 0, err
		}
		if r.FailedAt.Before(e.start) {
			break // newest first: a re-failure of this run is newer than its start
		}
		if e.copies.has(r.TransactionID) {
			n++
		}
	}
	return n, nil
}

func (e *Engine) record(f func(r *Report)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f(&e.rep)
}

func (e *Engine) list(a client.Address, reason string) {
	e.record(func(r *Report) { r.Listed = append(r.Listed, AddrResult{Address: a, Reason: reason}) })
}

// one executes one address. Only ledger errors (and errNotStarted) are
// returned: broker errors are the address's outcome.
func (e *Engine) one(ctx context.Context, it Item, ent *ledger.Entry) error {
	// Calls already begun run to completion: interrupting between a push
	// and its journal entry is what the journal exists to survive, but
	// there is no reason to cause it.
	cctx := context.WithoutCancel(ctx)
	a := it.Address
	absent := e.o.Absent[a]
	// The rows a removal takes with it, held while the address is worked
	// on (settle counts them), not for the whole batch.
	e.mu.Lock()
	if absent {
		e.rows[a] = 0
	} else {
		e.rows[a] = len(it.Rows) + len(it.Others)
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.rows, a)
		e.mu.Unlock()
	}()
	if ent.State == ledger.Removed {
		if absent {
			return e.settle(cctx, ent, ledger.Removed, ent.Outcome, "", func(r *Report) { r.AlreadyDone++ })
		}
		// The journal says done, but the snapshot saw it in the DLQ (or it
		// is a recorded batch's and may be back): ask the broker, since
		// another run may also have removed it since.
		present, err := e.rowPresent(cctx, a)
		if err != nil {
			return e.settle(cctx, ent, ledger.Removed, ent.Outcome, "", func(r *Report) {
				r.Failed++
				r.Listed = append(r.Listed, AddrResult{a, "failed: checking whether it is back in the DLQ: " + err.Error()})
			})
		}
		if !present {
			return e.settle(cctx, ent, ledger.Removed, ent.Outcome, "", func(r *Report) { r.AlreadyDone++ })
		}
		if ent.BatchID == e.o.BatchID {
			// This batch already acted on it and it came back: one batch
			// does not act twice on an address; a person decides.
			return e.settle(cctx, ent, ledger.Removed, ent.Outcome, "", func(r *Report) {
				r.DeadLetteredAgain++
				r.Listed = append(r.Listed, AddrResult{a, fmt.Sprintf("dead-lettered again after this batch %s it (%s): replay it as generation %d with dlqctl dlq replay %s --why …, or discard it with dlqctl dlq rm %s --why …",
					pastTense(ent.Action), stamp(ent.UpdatedAt), ent.Generation+1, a, a)})
			})
		}
		// Back in the DLQ after another batch: acted on afresh, a replay as
		// a new generation, so its derived transaction id is not a duplicate.
		if e.o.Action == Replay {
			ent.Generation++
		}
		ent.State, ent.ReplayTxID, ent.ReplayPartitionID, ent.Via, ent.Outcome = ledger.Pending, "", "", "", ""
	}
	ent.BatchID = e.o.BatchID
	manualTried := ent.Via == ViaManual && (ent.State == ledger.Inflight || ent.State == ledger.Failed)
	if absent && (ent.State == ledger.Pending || ent.State == ledger.Failed || ent.State == ledger.Skipped || ent.State == ledger.Unknown || manualTried) {
		if e.o.Action == Replay && (ent.State == ledger.Pending || manualTried) {
			// A run that died between its push and its delete, or whose
			// push answer was lost, may have published: if the copy with
			// the derived id exists, the address was replayed, not lost
			// to someone else.
			if cp, ok := copyAddress(it, ent, e.o.ToQueue); ok {
				if m, err := e.b.Get(cctx, cp); err == nil && m != nil {
					ent.ReplayTxID, ent.Via = cp.TransactionID, ViaManual
					return e.settle(cctx, ent, ledger.Removed, "replayed", "", func(r *Report) { r.Replayed++ })
				}
			}
		}
		return e.settle(cctx, ent, ledger.Removed, "gone", "", func(r *Report) { r.AlreadyGone++ })
	}
	if why := a.Unreachable(); why != "" {
		return e.settle(cctx, ent, ledger.Skipped, "unreachable", why, func(r *Report) {
			r.Unreachable++
			r.Listed = append(r.Listed, AddrResult{a, "unreachable: " + why + "; nothing was sent (the broker cannot be asked about this address)"})
		})
	}
	if e.o.Action == Discard {
		return e.discard(ctx, cctx, it, ent)
	}
	return e.replay(ctx, cctx, it, ent)
}

func pastTense(action string) string {
	if action == Discard {
		return "discarded"
	}
	return "replayed"
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "earlier"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

type saveReq struct {
	item ledger.SaveItem
	done chan error // nil: nobody waits (a final state; see save)
}

// save journals an entry. Saves are committed by one goroutine, whatever
// is waiting in one transaction.
//
// A final state (release) other than published is written behind: the
// worker moves on without waiting, since losing it in a crash is safe.
// The address is then found pending or inflight and still claimed by a
// dead run: a manual replay re-pushes its derived id (a duplicate) and
// finds the row gone; an endpoint replay is settled by looking at the
// row. Everything else (the inflight mark before a /retry call, a
// published whose delete failed) is durable before save returns. Run
// returns only after every save is committed.
func (e *Engine) save(ctx context.Context, ent *ledger.Entry, release bool) error {
	if release && ent.State != ledger.Published {
		cp := *ent
		e.behind <- saveReq{item: ledger.SaveItem{Entry: &cp, Release: true}}
		return nil
	}
	req := saveReq{ledger.SaveItem{Entry: ent, Release: release}, make(chan error, 1)}
	e.saves <- req
	return <-req.done
}

// committer runs until both queues are closed; errors of saves nobody
// waits for are kept for Run to return. Each transaction takes every save
// a worker waits for (an intent before its call: the sooner it commits,
// the sooner the call goes out), and the written-behind ones when none
// is waited for or when they pile up. (Holding a group open for workers
// still in a broker call made bigger groups and a slower run.)
func (e *Engine) committer(ctx context.Context) {
	const most, pileUp = 256, 512
	saves, behind := e.saves, e.behind
	linger := time.NewTimer(0)
	defer linger.Stop()
	take := func(ch *chan saveReq, batch []saveReq, n int) []saveReq {
		for len(batch) < n && *ch != nil {
			select {
			case r, ok := <-*ch:
				if !ok {
					*ch = nil
					return batch
				}
				batch = append(batch, r)
			default:
				return batch
			}
		}
		return batch
	}
	for saves != nil || behind != nil {
		var batch []saveReq
		select {
		case r, ok := <-saves:
			if !ok {
				saves = nil
				continue
			}
			batch = append(batch, r)
		case r, ok := <-behind:
			if !ok {
				behind = nil
				continue
			}
			batch = append(batch, r)
			batch = e.gatherBehind(&saves, &behind, batch, linger)
		}
		batch = take(&saves, batch, most)
		waited := 0
		for _, r := range batch {
			if r.done != nil {
				waited++
			}
		}
		if waited == 0 || len(e.behind) >= pileUp {
			batch = take(&behind, batch, 2*most)
		}
		items := make([]ledger.SaveItem, len(batch))
		for i, r := range batch {
			items[i] = r.item
		}
		errs := e.j.SaveMany(ctx, items, e.o.Owner, e.o.Now())
		for i, r := range batch {
			switch {
			case r.done != nil:
				r.done <- errs[i]
			case errs[i] != nil && e.behindErr == nil:
				// Nothing more is published once the journal cannot keep up.
				e.behindErr = errs[i]
				e.stop("ledger error: " + errs[i].Error())
			}
		}
	}
}

// behindLinger and behindFew: a written-behind save waits up to
// behindLinger for behindFew others before it is committed. Nobody waits
// for it, and a transaction costs as much as dozens of its statements:
// committed as they came, one or two at a time, the saves of an
// unlimited manual replay took a third of its time.
const (
	behindLinger = 20 * time.Millisecond
	behindFew    = 128
)

// gatherBehind adds written-behind saves to batch until there are
// behindFew, a save someone waits for arrives (it goes in too, and the
// batch is committed at once), behindLinger passes, or the queues close.
func (e *Engine) gatherBehind(saves, behind *chan saveReq, batch []saveReq, linger *time.Timer) []saveReq {
	linger.Reset(behindLinger)
	defer linger.Stop()
	for len(batch) < behindFew && *behind != nil {
		select {
		case r, ok := <-*behind:
			if !ok {
				*behind = nil
				return batch
			}
			batch = append(batch, r)
		case r, ok := <-*saves:
			if !ok {
				*saves = nil
			} else {
				batch = append(batch, r)
			}
			return batch
		case <-linger.C:
			return batch
		}
	}
	return batch
}

// settle records a final state, releases the claim and counts the outcome
// (and, when the count says this run removed the address, its rows).
func (e *Engine) settle(ctx context.Context, ent *ledger.Entry, state, outcome, lastErr string, count func(r *Report)) error {
	ent.State, ent.Outcome, ent.LastError = state, outcome, lastErr
	if err := e.save(ctx, ent, true); err != nil {
		return err
	}
	if state != ledger.Failed {
		e.heard(nil)
	}
	e.mu.Lock()
	removed := e.rep.Replayed + e.rep.Duplicate + e.rep.Discarded
	count(&e.rep)
	if e.rep.Replayed+e.rep.Duplicate+e.rep.Discarded > removed {
		e.rep.RowsRemoved += e.rows[ent.Address]
	}
	e.mu.Unlock()
	if state == ledger.Failed {
		e.mu.Lock()
		e.failed++
		over := e.o.MaxFailures > 0 && e.failed >= e.o.MaxFailures
		e.mu.Unlock()
		if over {
			e.stop(fmt.Sprintf("stopped after %d failure(s) (--max-failures %d)", e.o.MaxFailures, e.o.MaxFailures))
		}
	}
	return nil
}

// fail records a failed address (retryable by a later run); an
// authentication or permission refusal stops the batch, since every other
// call would be refused too.
func (e *Engine) fail(ctx context.Context, ent *ledger.Entry, reason string, err error) error {
	if errors.Is(err, client.ErrUnauthorized) || errors.Is(err, client.ErrForbidden) {
		e.mu.Lock()
		e.rep.AuthRefused = true
		e.mu.Unlock()
		e.stop("the broker refused the token: " + err.Error())
	}
	if serr := e.settle(ctx, ent, ledger.Failed, "", err.Error(), func(r *Report) {
		r.Failed++
		r.Listed = append(r.Listed, AddrResult{ent.Address, reason + err.Error()})
	}); serr != nil {
		return serr
	}
	e.heard(err)
	return nil
}

// heard counts calls in a row that got no answer (err is one) and stops
// the run at maxSilent: a broker that is down is not asked about every
// address. Any answer (err nil, or an error the broker sent) resets it.
func (e *Engine) heard(err error) {
	e.mu.Lock()
	if err == nil || !client.NoAnswer(err) {
		e.silent = 0
		e.mu.Unlock()
		return
	}
	e.silent++
	down := e.silent >= maxSilent
	if down {
		e.rep.BrokerDown = true
	}
	e.mu.Unlock()
	if down {
		e.stop(fmt.Sprintf("the broker is not answering (%d calls in a row got no answer; the last: %v); resume when it is back", maxSilent, err))
	}
}

// destQueue is the queue an item is published to.
func (e *Engine) destQueue(it Item) string {
	if e.o.ToQueue != "" {
		return e.o.ToQueue
	}
	return it.Queue
}

// Pinned reports whether an address was attempted on the manual path
// and may have been published under its derived id: every later run
// keeps that path (and id), so a repeat is a harmless duplicate.
func Pinned(ent *ledger.Entry) bool {
	return ent != nil && ent.Via == ViaManual && ent.ReplayTxID != "" &&
		(ent.State == ledger.Inflight || ent.State == ledger.Failed || ent.State == ledger.Published || ent.State == ledger.Unknown)
}

// copyAddress is where a manual replay's copy of an item would be: the
// partition the push answer named, or the item's own partition when it
// went to the item's own queue. ok is false when it cannot be known.
func copyAddress(it Item, ent *ledger.Entry, toQueue string) (client.Address, bool) {
	txid := ent.ReplayTxID
	if txid == "" {
		txid = ReplayTxID(it.Address, ent.Generation)
	}
	switch {
	case ent.ReplayPartitionID != "":
		return client.Address{PartitionID: ent.ReplayPartitionID, TransactionID: txid}, true
	case ent.ReplayQueue == it.Queue, ent.ReplayQueue == "" && toQueue == "":
		return client.Address{PartitionID: it.Address.PartitionID, TransactionID: txid}, true
	}
	return client.Address{}, false
}

func (e *Engine) replay(pctx, ctx context.Context, it Item, ent *ledger.Entry) error {
	a := it.Address
	switch ent.State {
	case ledger.Unknown:
		if !e.o.RetryUnknown {
			if err := e.save(ctx, ent, true); err != nil {
				return err
			}
			e.record(func(r *Report) { r.Unknown++ })
			e.list(a, "unknown: an endpoint replay's answer was lost and the row is still there; check the live queue, then re-run with --retry-unknown")
			return nil
		}
		ent.State = ledger.Pending
	case ledger.Published:
		if err := e.pace(pctx); err != nil {
			return err
		}
		return e.finishDelete(ctx, ent, func(r *Report) { r.Replayed++ })
	case ledger.Inflight:
		if ent.Via == ViaEndpoint {
			return e.resolveEndpoint(ctx, ent)
		}
		// Manual path: re-pushing the same derived id is safe.
	}
	ent.Action = Replay
	if e.o.MaxGeneration > 0 && ent.Generation > e.o.MaxGeneration {
		return e.settle(ctx, ent, ledger.Skipped, "generation-cap", "", func(r *Report) {
			r.SkippedGeneration++
			r.Listed = append(r.Listed, AddrResult{a, fmt.Sprintf("skipped: generation %d is past --max-generation %d (it keeps failing after replays)", ent.Generation, e.o.MaxGeneration)})
		})
	}
	payload := it.Data()
	if !it.Checked && (it.Envelope() || len(payload) == 0) {
		// The released server's list shows the envelope; the detail route
		// decrypts. Never push an envelope.
		m, err := e.b.Get(ctx, a)
		switch {
		case errors.Is(err, client.ErrNoDeadLetterRow):
			return e.settle(ctx, ent, ledger.Removed, "gone", "", func(r *Report) { r.AlreadyGone++ })
		case err != nil:
			return e.fail(ctx, ent, "failed: ", err)
		}
		payload = m.Payload
	}
	if client.IsEnvelope(payload) {
		return e.settle(ctx, ent, ledger.Skipped, "undecryptable", "", func(r *Report) {
			r.SkippedEncrypted++
			r.Listed = append(r.Listed, AddrResult{a, "skipped: undecryptable envelope (wrong or rotated key); left in place"})
		})
	}
	if Pinned(ent) && ent.ReplayQueue != "" && ent.ReplayQueue != e.destQueue(it) {
		// Its earlier push (which may have landed) went elsewhere: the
		// same id in another queue is no duplicate. A person decides.
		e.record(func(r *Report) {
			r.Failed++
			r.Listed = append(r.Listed, AddrResult{a, fmt.Sprintf("not sent: an earlier attempt pushed it to queue %s as %s and may have landed; replay it to that queue, or check that queue and discard it", ent.ReplayQueue, ent.ReplayTxID)})
		})
		return e.save(ctx, ent, true)
	}
	if err := e.pace(pctx); err != nil {
		return err
	}
	// An address attempted on the manual path stays on it: its derived id
	// makes a repeat a duplicate, where /retry would mint a second copy.
	if !e.manualPath() && !Pinned(ent) {
		return e.endpoint(ctx, ent)
	}
	return e.manual(ctx, it, ent, payload)
}

// endpoint replays through /retry (--via endpoint).
func (e *Engine) endpoint(ctx context.Context, ent *ledger.Entry) error {
	a := ent.Address
	ent.State, ent.Via = ledger.Inflight, ViaEndpoint
	ent.Attempts++
	if err := e.save(ctx, ent, false); err != nil {
		return err
	}
	res, err := e.b.Retry(ctx, a)
	var he *client.HTTPError
	switch {
	case err == nil:
		if res.ReplayedAs != nil {
			ent.ReplayTxID = res.ReplayedAs.TransactionID
			e.copies.add(ent.ReplayTxID)
		}
		ent.Outcome = "replayed"
		if !res.DLQRowRemoved {
			// The message now exists twice; the row is ours to delete.
			// Published is journaled first: a crash before the delete
			// then resumes with the delete, not with an unknown.
			ent.State = ledger.Published
			if err := e.save(ctx, ent, false); err != nil {
				return err
			}
			return e.finishDelete(ctx, ent, func(r *Report) { r.Replayed++ })
		}
		return e.settle(ctx, ent, ledger.Removed, "replayed", "", func(r *Report) { r.Replayed++ })
	case errors.Is(err, client.ErrRouteMissing):
		return e.settle(ctx, ent, ledger.Failed, "", "the broker has no /retry route; use --via manual or auto", func(r *Report) {
			r.Failed++
			r.Listed = append(r.Listed, AddrResult{a, "failed: the broker has no /retry route (use --via auto or manual)"})
		})
	case errors.Is(err, client.ErrNoDeadLetterRow):
		return e.settle(ctx, ent, ledger.Removed, "gone", "", func(r *Report) { r.AlreadyGone++ })
	case errors.As(err, &he) && he.Err == nil && (he.Status == 503 || he.Status == 429 || he.Status == 401 || he.Status == 403):
		// The broker answered that it did not take the call.
		return e.fail(ctx, ent, "failed: ", err)
	case errors.Is(err, client.ErrNotSent):
		// Refused, or never written: the broker has not seen it.
		return e.fail(ctx, ent, "failed: ", err)
	}
	// The answer was lost: the push may or may not have happened.
	return e.resolveEndpoint(ctx, ent)
}

// resolveEndpoint settles an endpoint call whose answer was lost by
// looking at the row: gone means replayed; still there means unknown
// (the push may have happened with dlqRowRemoved:false), left for a human
// rather than risking a second copy.
func (e *Engine) resolveEndpoint(ctx context.Context, ent *ledger.Entry) error {
	present, err := e.rowPresent(ctx, ent.Address)
	if err != nil {
		ent.State = ledger.Inflight
		if serr := e.save(ctx, ent, true); serr != nil {
			return serr
		}
		e.record(func(r *Report) {
			r.Failed++
			r.Listed = append(r.Listed, AddrResult{ent.Address, "unresolved: the replay call's answer was lost and the row could not be checked: " + err.Error()})
		})
		e.heard(err)
		return nil
	}
	if !present {
		return e.settle(ctx, ent, ledger.Removed, "replayed", "", func(r *Report) { r.Replayed++ })
	}
	return e.settle(ctx, ent, ledger.Unknown, "", "answer lost; row still dead-lettered", func(r *Report) {
		r.Unknown++
		r.Listed = append(r.Listed, AddrResult{ent.Address, "unknown: the replay call's answer was lost and the row is still there; check the live queue, then re-run with --retry-unknown"})
	})
}

// rowPresent asks the broker whether the address is still dead-lettered.
func (e *Engine) rowPresent(ctx context.Context, a client.Address) (bool, error) {
	m, err := e.b.Get(ctx, a)
	switch {
	case errors.Is(err, client.ErrNoDeadLetterRow):
		return false, nil
	case err != nil:
		return false, err
	}
	return m.Status == "" || m.Status == "dead_letter", nil
}

// manual replays by get-push-delete with the derived transaction id:
// every retry of the push is safe, a repeat comes back "duplicate".
func (e *Engine) manual(ctx context.Context, it Item, ent *ledger.Entry, payload json.RawMessage) error {
	a := it.Address
	if e.o.Transform != nil {
		out, err := e.o.Transform(payload)
		if err != nil {
			return e.settle(ctx, ent, ledger.Failed, "", "transform: "+err.Error(), func(r *Report) {
				r.Failed++
				r.Listed = append(r.Listed, AddrResult{a, "failed: --transform: " + err.Error()})
			})
		}
		payload = out
	}
	queue, partition := e.destQueue(it), it.Partition
	// The intent is journaled before the push: whatever happens next (a
	// lost answer, a kill), every later run, on any path and in any
	// process, finds that a push with this derived id may exist and
	// repeats it (a duplicate) instead of minting a copy through /retry.
	// The claim may have journaled it already (intentAhead), or a run
	// that died after journaling it: then there is nothing to wait for,
	// and its id is this one (a generation changes only in one, which
	// clears the id with it), not derived a second time.
	if ent.Via != ViaManual || ent.ReplayTxID == "" {
		ent.ReplayTxID = ReplayTxID(a, ent.Generation)
	}
	ent.State, ent.Via, ent.ReplayQueue = ledger.Inflight, ViaManual, queue
	ent.Attempts++
	if !ent.Holds() {
		if err := e.save(ctx, ent, false); err != nil {
			return err
		}
	}
	e.copies.add(ent.ReplayTxID)
	var res client.PushResult
	var err error
	// Safe to retry: the id is derived, so a push that did land answers
	// "duplicate" the second time.
	for try := 0; try < 4; try++ {
		if try > 0 {
			if serr := e.o.Sleep(ctx, time.Duration(try)*200*time.Millisecond); serr != nil {
				break
			}
		}
		res, err = e.pushes.push(client.PushItem{Queue: queue, Partition: partition, Payload: payload, TransactionID: ent.ReplayTxID})
		if err == nil || errors.Is(err, client.ErrUnauthorized) || errors.Is(err, client.ErrForbidden) {
			break
		}
	}
	if err == nil && res.Buffered() {
		// Not in the broker's database yet: the dead letter stays, and
		// the derived id makes a later attempt safe either way.
		e.stop("the broker buffered a push (its database is down); re-run when its /health says the database is connected")
		err = fmt.Errorf("the broker buffered the push instead of storing it (its database is down); the dead letter is kept")
	}
	if err == nil && !res.Accepted() {
		err = fmt.Errorf("push refused: status %q %s", res.Status, res.Error)
	}
	if err != nil {
		// Stays retryable: the derived id makes the next attempt safe.
		return e.fail(ctx, ent, "failed: ", err)
	}
	dup := res.Status == "duplicate"
	ent.ReplayPartitionID = res.PartitionID
	ent.State = ledger.Published
	ent.Outcome = "replayed"
	if dup {
		ent.Outcome = "duplicate"
	}
	// Published is journaled only if the delete fails (finishDelete);
	// otherwise the next write is the final one.
	return e.finishDelete(ctx, ent, func(r *Report) {
		if dup {
			r.Duplicate++
		} else {
			r.Replayed++
		}
	})
}

// finishDelete deletes the row of a published address; a 404 means it is
// already gone, which is what we wanted.
func (e *Engine) finishDelete(ctx context.Context, ent *ledger.Entry, count func(r *Report)) error {
	var err error
	for try := 0; try < 3; try++ {
		if try > 0 {
			if serr := e.o.Sleep(ctx, time.Duration(try)*300*time.Millisecond); serr != nil {
				break
			}
		}
		err = e.b.Delete(ctx, ent.Address)
		if err == nil || errors.Is(err, client.ErrNoDeadLetterRow) {
			err = nil
			break
		}
	}
	if err != nil {
		// Published stays: the next run only finishes this delete.
		ent.State, ent.LastError = ledger.Published, err.Error()
		if serr := e.save(ctx, ent, true); serr != nil {
			return serr
		}
		e.record(func(r *Report) {
			r.Failed++
			r.Listed = append(r.Listed, AddrResult{ent.Address, "published, but the dead-letter row could not be deleted: " + err.Error() + " (re-run to finish)"})
		})
		return nil
	}
	return e.settle(ctx, ent, ledger.Removed, ent.Outcome, "", count)
}

// discard deletes an address whose rows are archived.
func (e *Engine) discard(pctx, ctx context.Context, it Item, ent *ledger.Entry) error {
	a := it.Address
	if err := e.pace(pctx); err != nil {
		return err
	}
	if ent.State == ledger.Published || ent.State == ledger.Inflight && ent.Via != "" {
		// A replay is half done at this address; finishing the delete is
		// all either action needs now.
		return e.finishDelete(ctx, ent, func(r *Report) { r.Replayed++ })
	}
	// The command archived every row of the batch before the run began.
	ent.Action, ent.State, ent.Via = Discard, ledger.Pending, ""
	ent.Attempts++
	err := e.b.Delete(ctx, a)
	switch {
	case err == nil:
		return e.settle(ctx, ent, ledger.Removed, "discarded", "", func(r *Report) { r.Discarded++ })
	case errors.Is(err, client.ErrNoDeadLetterRow):
		return e.settle(ctx, ent, ledger.Removed, "gone", "", func(r *Report) { r.AlreadyGone++ })
	}
	return e.fail(ctx, ent, "failed: ", err)
}
