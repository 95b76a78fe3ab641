package batch

import (
	"slices"
	"sort"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// Plan is what a batch will do, computed before anything is written.
type Plan struct {
	Action string `json:"action"`
	// Messages counts the messages (addresses) the batch acts on;
	// Addresses is the same count under the name the plan gave it first,
	// kept for the scripts that read it.
	Messages    int            `json:"messages"`
	Addresses   int            `json:"addresses"`
	Rows        int            `json:"rows"` // selected dead-letter rows
	ByQueue     map[string]int `json:"byQueue"`
	ByClass     []ClassCount   `json:"byClass"`
	Destination string         `json:"destination"`
	// Source is where an import's messages come from: the file, and the
	// broker, line and time it was exported from.
	Source string `json:"source,omitempty"`
	// Broker is which Queen the broker runs, as dlqctl told it.
	Broker *client.Release `json:"broker,omitempty"`
	// Trace: each copy gets a trace event in the broker naming the batch
	// (Queen 1.x, 2.x; --no-trace leaves them out).
	Trace bool `json:"trace,omitempty"`
	// ApprovalAbove: the batch is larger than this, and is recorded
	// awaiting a second person's approval rather than run.
	ApprovalAbove int           `json:"approvalAbove,omitempty"`
	Via           string        `json:"via,omitempty"`
	Rate          float64       `json:"rate"`
	Estimated     time.Duration `json:"-"`
	EstimatedSecs float64       `json:"estimatedSeconds"`
	FanOut        []FanOut      `json:"fanOut,omitempty"`
	Undecryptable int           `json:"undecryptable"`
	OverGenCap    int           `json:"overGenerationCap"`
	// OtherGroups counts the rows the selection left out that the deletes
	// remove with their message (other groups', other classes'); AlsoRemoves
	// names them by group and class.
	OtherGroups int           `json:"otherGroupRows"`
	AlsoRemoves []AlsoRemoved `json:"alsoRemoves,omitempty"`
	// Held counts messages under an active hold; Holds names the holds.
	Held  int         `json:"held"`
	Holds []HoldShare `json:"holds,omitempty"`
	// Decided names the batches of the same action, decided and never
	// run, that already cover messages of a fresh batch (dlq decide, then
	// the same selection again): running them is what was decided.
	Decided []DecidedShare `json:"alreadyDecided,omitempty"`
	// SkippedHeld counts messages under an active hold that --skip-held
	// left out of the batch.
	SkippedHeld int `json:"skippedHeld,omitempty"`
	// Order is what order the replay keeps (replays only).
	Order *replay.OrderInfo `json:"order,omitempty"`
	// Pinned counts addresses that keep the manual path an earlier
	// attempt took; NoCall those already done or gone (a recorded batch's
	// resume), which cost neither a call nor time.
	Pinned int `json:"pinnedToManual,omitempty"`
	NoCall int `json:"alreadyDone,omitempty"`
	// Lag is the destination's consumer groups and their lag as the plan
	// found them (replays); Window, the --window publishing is kept to.
	Lag    *LagPlan `json:"consumerLag,omitempty"`
	Window string   `json:"window,omitempty"`
	// Where is what --where has to say: rows it failed on, envelopes it
	// saw, GETs it made to decrypt.
	Where []string `json:"where,omitempty"`
	// QueueGone counts a restore's messages by destination queue that no
	// longer exists (they are not restored); Unrestorable, the archived
	// messages its selection matched that it cannot restore, by why.
	QueueGone    map[string]int `json:"queueGone,omitempty"`
	Unrestorable map[string]int `json:"unrestorable,omitempty"`
	// NewQueue is a replay's destination queue the broker does not have:
	// its first copy creates it (every Queen line makes a queue on its
	// first push), and no consumer reads it yet.
	NewQueue string `json:"newQueue,omitempty"`
}

// LagPlan is the lag of the consumer groups a replay publishes to.
type LagPlan struct {
	// Reported: the broker reports lag (the released server does; the
	// seed contract has none).
	Reported bool       `json:"reported"`
	Groups   []GroupLag `json:"groups,omitempty"`
	// MaxLag is --max-lag: the run waits while any group lags more.
	MaxLag     time.Duration `json:"-"`
	MaxLagSecs float64       `json:"maxLagSeconds,omitempty"`
}

// GroupLag is one destination group's lag.
type GroupLag struct {
	Queue         string        `json:"queue"`
	ConsumerGroup string        `json:"consumerGroup"`
	Lag           time.Duration `json:"-"`
	LagSecs       float64       `json:"lagSeconds"`
	Messages      *int          `json:"messages"`
	State         string        `json:"state"`
}

// AlsoRemoved is a share of the rows a batch removes without having
// selected them.
type AlsoRemoved struct {
	ConsumerGroup string `json:"consumerGroup"`
	Class         string `json:"class"`
	Pattern       string `json:"pattern"`
	Rows          int    `json:"rows"`
}

// HoldShare is an active hold that covers messages of a plan.
type HoldShare struct {
	BatchID  string    `json:"batchId"`
	By       string    `json:"by"`
	Until    time.Time `json:"until,omitzero"`
	Why      string    `json:"why"`
	Messages int       `json:"messages"`
}

// DecidedShare is a batch decided and never run (recorded, or awaiting
// approval) that covers messages of a plan.
type DecidedShare struct {
	BatchID  string `json:"batchId"`
	By       string `json:"by"`
	Status   string `json:"status"`
	Why      string `json:"why"`
	Messages int    `json:"messages"`
}

// ClassCount is a failure class's share of a plan.
type ClassCount struct {
	Class   string `json:"class"`
	Pattern string `json:"pattern"`
	Count   int    `json:"count"`
}

// FanOut warns that a re-push reaches every consumer group of a queue,
// not only the one that failed: Messages of this queue will also be
// delivered to groups that had processed them.
type FanOut struct {
	Queue       string   `json:"queue"`
	Messages    int      `json:"messages"`
	AlsoReaches []string `json:"alsoReaches"`
}

// PlanOptions are what the plan depends on besides the items.
type PlanOptions struct {
	Action        string
	Via           string // the path as it will be taken, in words
	ToQueue       string
	MaxGeneration int
	// Generations are the endpoint's copies' generations (see Generations).
	Generations replay.Generations
	// QueueGroups lists every consumer group known per queue (from the
	// broker's queue and consumer-group lists and the DLQ), for the
	// fan-out warning.
	QueueGroups map[string][]string
	// Order is the batch's order (replays; see SetOrder).
	Order replay.OrderInfo
	// ToPartition and GoneQueues are a restore's: the partition it
	// publishes to, and the destination queues that no longer exist.
	ToPartition string
	GoneQueues  map[string]bool
	// Lag and Window go into the plan as they are (see Plan).
	Lag    *LagPlan
	Window string
	// Release is the broker's, for the plan to say.
	Release *client.Release
}

// planEntry is what a plan takes of one item.
type planEntry struct {
	Queue string
	// Rows is how many of the address's rows are selected.
	Rows int
	// Class is the newest selected row's class id, Pattern its pattern.
	Class, Pattern string
	NoCall         bool
	Undecryptable  bool
	OverGenCap     bool
	// Hold is the active hold that covers the item, if any.
	Hold *HoldShare
	// Decided: a batch of the same action, never run, covers it.
	Decided *DecidedShare
	// Groups are the consumer groups that dead-lettered the message (every
	// row of the address); Others the rows the selection left out.
	Groups []string
	Others []deadletter.Row
	// Pinned: its journal keeps it on the manual path.
	Pinned bool
}

// ItemFacts are what the ledger says of an item that its plan counts.
type ItemFacts struct {
	// Hold is the active hold that covers it (nil: none).
	Hold *HoldShare
	// Decided is a batch of the same action, decided and never run, that
	// covers it already (a fresh batch's; nil: none).
	Decided *DecidedShare
	// Pinned: an earlier attempt's journal entry keeps it on the manual
	// path (see Pinned).
	Pinned bool
}

// Planner makes a plan from items given one at a time.
type Planner struct {
	o       PlanOptions
	p       Plan
	n       int
	classes map[string]*ClassCount
	also    map[[2]string]*AlsoRemoved
	holds   map[string]*HoldShare
	decided map[string]*DecidedShare
	fan     map[string]*FanOut
	reached map[string]map[string]bool
}

// act is the plan's action.
func (o PlanOptions) act() *deadletter.Action { return deadletter.ActionOf(o.Action) }

// NewPlanner starts a plan. Its options' QueueGroups must be complete
// before the first item: fan-out is judged item by item.
func NewPlanner(o PlanOptions) *Planner {
	return &Planner{o: o, p: Plan{Action: o.Action, ByQueue: map[string]int{}, Via: o.Via, Lag: o.Lag, Window: o.Window, Broker: o.Release},
		classes: map[string]*ClassCount{}, also: map[[2]string]*AlsoRemoved{}, holds: map[string]*HoldShare{}, decided: map[string]*DecidedShare{},
		fan: map[string]*FanOut{}, reached: map[string]map[string]bool{}}
}

// Add counts an item, with what the ledger says of it.
func (pl *Planner) Add(it replay.Item, f ItemFacts) {
	o := pl.o
	r := it.Newest()
	e := planEntry{Queue: it.Queue, Rows: len(it.Rows), Class: deadletter.ClassID(r.ErrorMessage), Undecryptable: it.Undecryptable(),
		OverGenCap: o.act().Generations && o.MaxGeneration > 0 && o.Generations.Of(it.Address) > o.MaxGeneration,
		Groups:     it.Groups(), Others: it.Others}
	if _, ok := pl.classes[e.Class]; !ok {
		e.Pattern = deadletter.NormalizeError(r.ErrorMessage)
	}
	e.NoCall, e.Hold, e.Pinned, e.Decided = it.Absent, f.Hold, f.Pinned, f.Decided
	pl.add(e)
}

// add counts an item by its entry. Pattern is left empty for a class
// already counted.
func (pl *Planner) add(e planEntry) {
	p, o := &pl.p, pl.o
	pl.n++
	p.Rows += e.Rows
	p.ByQueue[e.Queue]++
	if pl.classes[e.Class] == nil {
		pl.classes[e.Class] = &ClassCount{Class: e.Class, Pattern: e.Pattern}
	}
	pl.classes[e.Class].Count++
	if e.NoCall {
		p.NoCall++
	}
	if e.Undecryptable {
		p.Undecryptable++
	}
	if e.OverGenCap {
		p.OverGenCap++
	}
	if e.Pinned {
		p.Pinned++
	}
	pl.shares(e)
	if o.act().Publishes && o.ToQueue == "" {
		pl.fanOut(e.Queue, e.Groups)
	}
	dest := e.Queue
	if o.ToQueue != "" {
		dest = o.ToQueue
	}
	if o.GoneQueues[dest] {
		if p.QueueGone == nil {
			p.QueueGone = map[string]int{}
		}
		p.QueueGone[dest]++
	}
}

// shares counts what an entry shares with others: the rows of other
// groups and classes its delete removes, the decided batch and the hold
// that cover it.
func (pl *Planner) shares(e planEntry) {
	p := &pl.p
	for _, x := range e.Others {
		p.OtherGroups++
		k := [2]string{x.ConsumerGroup, deadletter.ClassID(x.ErrorMessage)}
		if pl.also[k] == nil {
			pl.also[k] = &AlsoRemoved{ConsumerGroup: k[0], Class: k[1], Pattern: deadletter.NormalizeError(x.ErrorMessage)}
		}
		pl.also[k].Rows++
	}
	if d := e.Decided; d != nil {
		if pl.decided[d.BatchID] == nil {
			d := *d
			pl.decided[d.BatchID] = &d
		}
		pl.decided[d.BatchID].Messages++
	}
	if h := e.Hold; h != nil {
		p.Held++
		if pl.holds[h.BatchID] == nil {
			h := *h
			pl.holds[h.BatchID] = &h
		}
		pl.holds[h.BatchID].Messages++
	}
}

// fanOut counts a message whose re-push reaches groups of its queue that
// did not fail it.
func (pl *Planner) fanOut(queue string, groups []string) {
	var others []string
	for _, g := range pl.o.QueueGroups[queue] {
		if !slices.Contains(groups, g) {
			others = append(others, g)
		}
	}
	if len(others) == 0 {
		return
	}
	if pl.fan[queue] == nil {
		pl.fan[queue] = &FanOut{Queue: queue}
		pl.reached[queue] = map[string]bool{}
	}
	pl.fan[queue].Messages++
	for _, g := range others {
		if !pl.reached[queue][g] {
			pl.reached[queue][g] = true
			pl.fan[queue].AlsoReaches = append(pl.fan[queue].AlsoReaches, g)
		}
	}
}

// SetOrder gives the plan what the batch's order is (replays): known
// once every item is counted.
func (pl *Planner) SetOrder(info replay.OrderInfo) { pl.o.Order = info }

// Plan is the plan of what was added.
func (pl *Planner) Plan() Plan {
	p, o := pl.p, pl.o
	p.Messages, p.Addresses = pl.n, pl.n
	for _, c := range pl.classes {
		p.ByClass = append(p.ByClass, *c)
	}
	sort.Slice(p.ByClass, func(i, j int) bool {
		if p.ByClass[i].Count != p.ByClass[j].Count {
			return p.ByClass[i].Count > p.ByClass[j].Count
		}
		return p.ByClass[i].Class < p.ByClass[j].Class
	})
	for _, a := range pl.also {
		p.AlsoRemoves = append(p.AlsoRemoves, *a)
	}
	sort.Slice(p.AlsoRemoves, func(i, j int) bool {
		a, b := p.AlsoRemoves[i], p.AlsoRemoves[j]
		if a.Rows != b.Rows {
			return a.Rows > b.Rows
		}
		return a.ConsumerGroup+a.Class < b.ConsumerGroup+b.Class
	})
	for _, h := range pl.holds {
		p.Holds = append(p.Holds, *h)
	}
	sort.Slice(p.Holds, func(i, j int) bool { return p.Holds[i].BatchID < p.Holds[j].BatchID })
	for _, d := range pl.decided {
		p.Decided = append(p.Decided, *d)
	}
	sort.Slice(p.Decided, func(i, j int) bool { return p.Decided[i].BatchID < p.Decided[j].BatchID })
	p.Destination = o.destination()
	for _, f := range pl.fan {
		sort.Strings(f.AlsoReaches)
		p.FanOut = append(p.FanOut, *f)
	}
	sort.Slice(p.FanOut, func(i, j int) bool { return p.FanOut[i].Queue < p.FanOut[j].Queue })
	if o.act().Ordered && o.Order.Mode != "" {
		info := o.Order
		p.Order = &info
	}
	return p
}

// destination says where the batch's messages go.
func (o PlanOptions) destination() string {
	switch act := o.act(); {
	case !act.Publishes:
		return "deleted (archived in the ledger first)"
	case act.Outside():
		queue, partition := "each message's own queue", "its own partition"
		if o.ToQueue != "" {
			queue = "queue " + o.ToQueue
		}
		if o.ToPartition != "" {
			partition = "partition " + o.ToPartition
		}
		from := ", from the ledger's archive"
		if act.From == deadletter.FromFile {
			from = ", from the file"
		}
		return queue + ", " + partition + from
	case o.ToQueue != "":
		return "queue " + o.ToQueue + " (recovery queue)"
	}
	return "original queue and partition of each message"
}

// WithRate is the plan at another rate: its estimate follows.
func (p Plan) WithRate(r float64) Plan {
	p.Rate, p.Estimated, p.EstimatedSecs = r, 0, 0
	if r > 0 {
		p.Estimated = time.Duration(float64(p.Messages-p.NoCall) / r * float64(time.Second))
		p.EstimatedSecs = p.Estimated.Seconds()
	}
	return p
}
