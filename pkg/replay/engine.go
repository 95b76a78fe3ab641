package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"sort"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"golang.org/x/time/rate"
)

// Broker is what the engine needs of the broker; *client.Client is one.
type Broker interface {
	Rows(ctx context.Context, q client.ListQuery) iter.Seq2[deadletter.Row, error]
	Get(ctx context.Context, a deadletter.Address) (*client.Message, error)
	Push(ctx context.Context, items []client.PushItem) ([]client.PushResult, error)
	Retry(ctx context.Context, a deadletter.Address) (*client.RetryResult, error)
	Move(ctx context.Context, rowID string, to *client.Destination) (*client.Moved, error)
	// Deleted deletes an address's rows and says how many the broker
	// removed (2.x says it; -1 where the broker does not).
	Deleted(ctx context.Context, a deadletter.Address) (int, error)
}

// Journal is what the engine needs of the ledger; *ledger.Store is one.
type Journal interface {
	// Acquire claims addresses, enrolling those the journal has never
	// seen on the way, as enrol says.
	Acquire(ctx context.Context, broker, batchID, action string, addrs []deadletter.Address, enrol []ledger.Enrolment, owner string, now time.Time, lease time.Duration) (map[deadletter.Address]*ledger.Entry, error)
	Release(ctx context.Context, broker string, ents []*ledger.Entry, owner string) error
	SaveMany(ctx context.Context, items []ledger.SaveItem, owner string, now time.Time) []error
	// ArchivedRowIDs are the ids of the rows the ledger archived of each
	// address: on a broker that moves, a row another hand moved since
	// leaves its copy under one of them.
	ArchivedRowIDs(ctx context.Context, broker string, addrs []deadletter.Address) (map[deadletter.Address][]string, error)
}

// Options configure an execution.
type Options struct {
	Action  string // what the batch does (deadletter.Replay when empty)
	Broker  string // the broker URL the journal files entries under
	BatchID string
	Owner   string // claim owner (ledger.NewOwner)

	Rate        float64 // per second; 0 = unlimited
	Burst       int
	Concurrency int

	Via string // auto, move, endpoint, manual
	// Release is the broker's line: on one that moves (Queen 1.6, 2.x)
	// auto and endpoint take the broker's move, and a push of dlqctl's own
	// goes out under the broker's copy id for the row, dlq:<row id>.
	Release client.Release
	// Order is OrderPartition (the default when empty), OrderSkipGaps or
	// OrderNone; items come in replay order (Arrange).
	Order   string
	ToQueue string
	// ToPartition is the partition a restore publishes to instead of
	// each message's own (--to-partition).
	ToPartition string
	// GoneQueues are destination queues that no longer exist: a restore
	// publishes nothing to them, and says so.
	GoneQueues map[string]bool
	// Transform rewrites a payload before it is pushed (--transform); a
	// batch that carries one has run it on every payload in its plan.
	Transform     func(context.Context, json.RawMessage) (json.RawMessage, error)
	MaxFailures   int // stop scheduling after this many failures; 0 = never
	MaxGeneration int // refuse replays past this generation; 0 = no cap
	// Generations are the endpoint's copies' generations (see Generations).
	Generations  Generations
	RetryUnknown bool

	Canary        int
	CanaryWait    time.Duration
	MaxRefailures int // pause when this many replayed messages failed again; 0 = never
	RefailEvery   time.Duration

	// Pausers hold scheduling back while any is closed (--max-lag,
	// --window); Paused is told each pause's reason as it starts or
	// changes, and "" when scheduling goes on.
	Pausers []Pauser
	Paused  func(why string)

	Lease time.Duration
	Now   func() time.Time
	Sleep func(context.Context, time.Duration) error
	// Progress is told each address as it completes.
	Progress func(done int)
	// Replayed, when set, is told each address whose copy this run
	// published, once it is settled: the original, the copy's address
	// and the copy's generation (its original is one less). It must not
	// block (batch's tracer hands it on).
	Replayed func(orig, copy deadletter.Address, generation int)
}

// Engine executes one batch.
type Engine struct {
	b   Broker
	j   Journal
	o   Options
	lim *rate.Limiter
	// act is what Options.Action does: the engine asks it, never its name;
	// step is what it does to one address (stepFor).
	act  *deadletter.Action
	step step

	src       Source
	pushes    *pusher
	saves     chan saveReq // waited for
	behind    chan saveReq // written behind
	behindErr error        // the first failed write-behind save (read after the committer ends)
	start     time.Time

	mu      sync.Mutex
	blocked map[Chain]bool // partitions held back by a gap, across the canary and the rest
	rep     Report
	rows    map[deadletter.Address]int // rows each address being worked on has in the DLQ (0 when absent)
	// archived are the archived row ids of the addresses claimed and not
	// yet worked on (on a broker that moves; see siblings).
	archived map[deadletter.Address][]string
	copies   *copySet
	// partitions are the destination partitions' ids an import asked
	// for, by queue and partition name.
	partitions map[string]string
	failed     int
	done       int
	// silent counts calls in a row that got no answer at all; at
	// maxSilent the broker is taken to be down and the run stops.
	silent int

	pauseMu     sync.Mutex // one worker at a time asks the pausers
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
	o = o.withDefaults()
	lim := rate.NewLimiter(rate.Inf, 0)
	if o.Rate > 0 {
		lim = rate.NewLimiter(rate.Limit(o.Rate), o.Burst)
	}
	act := deadletter.ActionOf(o.Action)
	return &Engine{b: b, j: j, o: o, lim: lim, act: act, step: stepFor(act), rows: map[deadletter.Address]int{}, archived: map[deadletter.Address][]string{}, copies: newCopySet(), blocked: map[Chain]bool{}}
}

// withDefaults are the options with what was left unsaid filled in.
func (o Options) withDefaults() Options {
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
		o.Sleep = client.Sleep
	}
	if o.Lease <= 0 {
		o.Lease = 5 * time.Minute
	}
	if o.Action == "" {
		o.Action = deadletter.Replay
	}
	if o.Via == "" {
		o.Via = ViaAuto
	}
	o.Via, _ = PathOn(o.Release, o.Via)
	if o.RefailEvery <= 0 {
		o.RefailEvery = 5 * time.Second
	}
	if o.Order == "" {
		o.Order = OrderPartition
	}
	return o
}

// errNotStarted: a job was stopped before its first broker call (an
// interrupt while it waited for the rate limiter); it is released.
var errNotStarted = errors.New("not started")

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
	// A caller a worker: every worker's push goes out at once, so the
	// broker has as many calls in flight as --concurrency allows. (A
	// quarter as many callers, each carrying what the workers had waiting,
	// kept about one call in flight of four against a broker whose push
	// costs milliseconds: BenchmarkPace.) A caller still takes in one call
	// whatever is waiting when it is free.
	e.pushes = newPusher(jctx, e.b, e.o.Concurrency)
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
	rest, err := e.canary(ctx, total)
	if err != nil {
		return finish(err)
	}
	if ctx.Err() == nil && !e.stopped() {
		if err := e.runSome(ctx, rest, total, e.o.Concurrency); err != nil {
			return finish(err)
		}
	}
	return finish(nil)
}

// canary runs a replay's first --canary messages one at a time, waits
// --canary-wait, and stops the run if any of them came back to the DLQ.
// It returns how many it ran (0: no canary).
func (e *Engine) canary(ctx context.Context, total int) (int, error) {
	if !e.act.Republishes() || e.o.Canary <= 0 || total <= e.o.Canary {
		return 0, nil
	}
	if err := e.runSome(ctx, 0, e.o.Canary, 1); err != nil {
		return e.o.Canary, err
	}
	if ctx.Err() != nil || e.stopped() || e.o.Sleep(ctx, e.o.CanaryWait) != nil {
		return e.o.Canary, nil
	}
	n, err := e.refailures(ctx)
	if err != nil {
		return e.o.Canary, err
	}
	if n > 0 {
		e.rep.Refailed = n
		e.stop(fmt.Sprintf("canary: %d of %d canary message(s) came back to the DLQ", n, e.o.Canary))
	}
	return e.o.Canary, nil
}

func (e *Engine) stopped() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rep.Stopped != ""
}

func (e *Engine) stop(reason string) { e.stopFor(reason, "") }

// stopFor stops scheduling for reason, leaving next to an operator.
func (e *Engine) stopFor(reason string, next Next) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rep.Stopped == "" {
		e.rep.Stopped, e.rep.StopNext = reason, next
	}
}

type job struct {
	it  Item
	ent *ledger.Entry
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

func (e *Engine) record(f func(r *Report)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f(&e.rep)
}

func (e *Engine) list(a deadletter.Address, reason string, next Next) {
	e.record(func(r *Report) { r.Listed = append(r.Listed, AddrResult{Address: a, Reason: reason, Next: next}) })
}
