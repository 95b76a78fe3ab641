package batch

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"golang.org/x/time/rate"
)

// VerifyOptions bound a verification's load on the broker.
type VerifyOptions struct {
	Concurrency int     // requests in flight; 0 means 8
	Rate        float64 // requests a second; 0 means unlimited
	By          string
	Now         func() time.Time
	// Progress is told how many copies have been asked about.
	Progress func(done, total int)
	// NotCompleted, when set, is given each copy that is not completed,
	// in manifest order, and Verification.NotCompleted stays empty: a
	// verification of a million copies holds a page of them, never the
	// list. An error from it ends the verification.
	NotCompleted func(CopyState) error
}

// Verification is what became of the copies a replay batch published
// (`decisions verify -o json`).
type Verification struct {
	BatchID           string `json:"batchId"`
	Copies            int    `json:"copies"`
	Completed         int    `json:"completed"`
	Pending           int    `json:"pending"`
	DeadLetteredAgain int    `json:"deadLetteredAgain"`
	Missing           int    `json:"missing"`
	// Unchecked counts copies the broker could not be asked about (no
	// address recorded, or the call failed): a later verify asks again.
	Unchecked int `json:"unchecked"`
	// Envelopes counts the copies whose payload is an encryption envelope:
	// a 2.x broker (or its console) moved a row it could not decrypt and
	// pushed the envelope as it was, which no consumer can read.
	Envelopes int `json:"envelopeCopies,omitempty"`
	// NotPublished counts the attempts that may have published a copy
	// (a run killed after its intent, a push whose answer was lost) and
	// left none in the broker: they are not copies.
	NotPublished int `json:"notPublished,omitempty"`
	// MovedElsewhere counts the copies among these that another hand
	// published (the broker's console) while the batch held the address.
	MovedElsewhere int `json:"movedElsewhere"`
	// Asked counts the copies asked this time; the rest were completed at
	// an earlier verification (completed is final).
	Asked   int             `json:"asked"`
	ByQueue []QueueVerified `json:"byQueue"`
	// NotAsked counts the copies an interrupted verification did not
	// reach (counted in Unchecked, not listed).
	NotAsked int `json:"notAsked,omitempty"`
	// NotCompleted lists every copy that is not completed (unless
	// VerifyOptions.NotCompleted took them).
	NotCompleted []CopyState `json:"notCompleted,omitempty"`
	// Complete: every copy completed; the batch is now "verified".
	Complete bool `json:"complete"`
}

// QueueVerified is a destination queue's share of a verification.
type QueueVerified struct {
	Queue             string `json:"queue"`
	Completed         int    `json:"completed"`
	Pending           int    `json:"pending"`
	DeadLetteredAgain int    `json:"deadLetteredAgain"`
	Missing           int    `json:"missing"`
	Unchecked         int    `json:"unchecked"`
	// PendingGroups counts the pending copies each consumer group has not
	// consumed, where the broker says (the released server does).
	PendingGroups map[string]int `json:"pendingGroups,omitempty"`
	// Groups say, for each consumer group the broker lists for the copies
	// asked about, how many of them it consumed: a copy is completed only
	// once every group has (its status alone can say completed while a
	// group has not).
	Groups []GroupVerified `json:"groups,omitempty"`
	groups map[string]*GroupVerified
}

// GroupVerified is how many of the copies asked about a consumer group
// consumed, of those the broker lists it for.
type GroupVerified struct {
	Name     string `json:"name"`
	Consumed int    `json:"consumed"`
	Of       int    `json:"of"`
}

// CopyState is one copy that is not completed.
type CopyState struct {
	Of      deadletter.Address `json:"of"`
	Address deadletter.Address `json:"address"`
	Queue   string             `json:"queue"`
	Status  string             `json:"status"`
	// Groups are the consumer groups that have not consumed it (pending),
	// or that dead-lettered it again, where the broker says.
	Groups []string `json:"consumerGroups,omitempty"`
	Reason string   `json:"reason,omitempty"`
	// consumed is what the broker said of each of its groups; envelope,
	// that its payload is an encryption envelope.
	consumed []client.GroupConsumed
	envelope bool
}

// unchecked is the status of a copy that could not be asked about.
const unchecked = "unchecked"

// copyPage is how many copies a verification reads, asks about and
// records at a time.
const copyPage = 1000

// Verify asks the broker what became of each copy a replay batch
// published, records every answer and the counts in the ledger, and marks
// the batch verified when every copy completed. Copies an earlier
// verification found completed are not asked again, so a large batch's
// verification can be run again until it is done. It holds a page of
// copies at a time: each page's answers are recorded before the next is
// read, so an interrupted verification keeps what it learned.
func Verify(ctx context.Context, cl *client.Client, ld *ledger.Store, batchID string, o VerifyOptions) (*Verification, error) {
	b, err := verifiable(ctx, cl, ld, batchID)
	if err != nil {
		return nil, err
	}
	total, err := ld.CountCopies(ctx, b.ID)
	if err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	t := newTally(b.ID)
	collect := o.NotCompleted
	if collect == nil {
		collect = func(st CopyState) error {
			t.v.NotCompleted = append(t.v.NotCompleted, st)
			return nil
		}
	}
	asked := &progress{total: total, report: o.Progress}
	jctx := context.WithoutCancel(ctx)
	now := o.Now()
	for after := -1; ctx.Err() == nil; {
		page, err := ld.CopiesAfter(ctx, b.ID, after, copyPage)
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].Seq
		save, err := t.page(page, askCopies(ctx, cl, page, o, asked), collect)
		if err != nil {
			return nil, err
		}
		if err := ld.SaveVerified(jctx, b.Broker, save, now); err != nil {
			return nil, err
		}
	}
	v := t.done(total)
	counts := map[string]int{ledger.CopyCompleted: v.Completed, ledger.CopyPending: v.Pending, ledger.CopyDeadAgain: v.DeadLetteredAgain,
		ledger.CopyMissing: v.Missing, unchecked: v.Unchecked}
	if err := ld.RecordVerification(jctx, b.Broker, ledger.Verification{BatchID: b.ID, At: now, By: o.By, Counts: counts, Complete: v.Complete}); err != nil {
		return nil, err
	}
	return v, ctx.Err()
}

// verifiable is the batch batchID, refused unless it published copies
// through this broker.
func verifiable(ctx context.Context, cl *client.Client, ld *ledger.Store, batchID string) (*ledger.Batch, error) {
	b, err := ld.Batch(ctx, batchID)
	if err != nil {
		return nil, err
	}
	if a := deadletter.ActionNamed(b.Action); a == nil || !a.Publishes {
		return nil, errs.Usagef("batch %s is a %s: only a replay or a restore publishes copies to verify", b.ID, b.Action)
	}
	if b.Broker != cl.Broker() {
		return nil, &errs.Error{Kind: errs.Usage, Err: &OtherBrokerError{Batch: b.ID, Broker: b.Broker, Here: cl.Broker(), Doing: "verify"}}
	}
	return b, nil
}

// page tallies a page of copies with their states, gives each not
// completed to collect, and returns the answers to record (those that
// say something new).
func (t *tally) page(page []ledger.Copy, states []CopyState, collect func(CopyState) error) ([]ledger.Verified, error) {
	var save []ledger.Verified
	for i, c := range page {
		st := states[i]
		if t.add(c, st) {
			if err := collect(st); err != nil {
				return nil, err
			}
		}
		if st.Status != unchecked && st.Status != ledger.CopyNotPublished && st.Status != c.Verified {
			save = append(save, ledger.Verified{Of: c.Of, Status: st.Status})
		}
	}
	return save, nil
}

// progress counts the copies asked about, across pages and workers.
type progress struct {
	mu     sync.Mutex
	done   int
	total  int
	report func(done, total int)
}

func (p *progress) one() {
	if p.report == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	p.report(p.done, max(p.total, p.done))
}

// askCopies asks the broker about each copy of a page not known to be
// completed, at most o.Concurrency at a time and o.Rate a second.
func askCopies(ctx context.Context, cl *client.Client, copies []ledger.Copy, o VerifyOptions, asked *progress) []CopyState {
	states := make([]CopyState, len(copies))
	workers := o.Concurrency
	if workers <= 0 {
		workers = 8
	}
	lim := rate.NewLimiter(rate.Inf, 0)
	if o.Rate > 0 {
		lim = rate.NewLimiter(rate.Limit(o.Rate), 1)
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				states[i] = askCopy(ctx, cl, lim, copies[i])
				asked.one()
			}
		}()
	}
	for i := range copies {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return states
}

func askCopy(ctx context.Context, cl *client.Client, lim *rate.Limiter, c ledger.Copy) CopyState {
	queue := c.Queue
	if queue == "" {
		queue = c.Origin
	}
	st := CopyState{Of: c.Of, Address: c.Address, Queue: queue}
	if c.Verified == ledger.CopyCompleted {
		st.Status = ledger.CopyCompleted // final: not asked again
		return st
	}
	if st.Address.PartitionID == "" && (c.Queue == "" || c.Queue == c.Origin) {
		// Published to the dead letter's own queue and partition: the
		// copy's partition is the original's.
		st.Address.PartitionID = c.Of.PartitionID
	}
	if st.Address.PartitionID == "" {
		st.Status, st.Reason = unchecked, "the journal has no partition for the copy"
		return st
	}
	if err := lim.Wait(ctx); err != nil {
		st.Status, st.Reason = unchecked, "interrupted"
		return st
	}
	m, err := cl.Get(ctx, st.Address)
	switch {
	case errors.Is(err, client.ErrNoDeadLetterRow) && c.Maybe:
		st.Status = ledger.CopyNotPublished
		return st
	case errors.Is(err, client.ErrNoDeadLetterRow):
		st.Status = ledger.CopyMissing
		return st
	case err != nil:
		st.Status, st.Reason = unchecked, err.Error()
		return st
	}
	st.answered(m)
	return st
}

// answered settles a copy's state from what the detail route said of it.
func (st *CopyState) answered(m *client.Message) {
	if m.Queue != "" {
		st.Queue = m.Queue
	}
	st.consumed = m.Groups
	st.envelope = deadletter.IsEnvelope(m.Payload)
	switch {
	case m.Status == "dead_letter":
		st.Status, st.Groups = ledger.CopyDeadAgain, m.FailedGroups
	case len(m.Groups) > 0:
		// Each group says whether it consumed the copy: completed once
		// every one has, whatever the status (0.x says completed once
		// queue mode consumed it).
		st.Status, st.Groups = ledger.CopyCompleted, m.PendingGroups
		if len(m.PendingGroups) > 0 {
			st.Status = ledger.CopyPending
		}
	case m.Status == "completed":
		st.Status = ledger.CopyCompleted
	default: // pending, processing
		st.Status, st.Groups = ledger.CopyPending, m.PendingGroups
	}
}

// tally counts a verification's copies as their answers come, a page at
// a time: what it holds grows with the destination queues and consumer
// groups, not the copies.
type tally struct {
	v       *Verification
	byQueue map[string]*QueueVerified
}

func newTally(batchID string) *tally {
	return &tally{v: &Verification{BatchID: batchID}, byQueue: map[string]*QueueVerified{}}
}

// consumedBy counts, for each group a copy of the queue reached, whether
// it consumed it.
func (q *QueueVerified) consumedBy(groups []client.GroupConsumed) {
	for _, g := range groups {
		if q.groups == nil {
			q.groups = map[string]*GroupVerified{}
		}
		gv := q.groups[g.Name]
		if gv == nil {
			gv = &GroupVerified{Name: g.Name}
			q.groups[g.Name] = gv
		}
		gv.Of++
		if g.Consumed {
			gv.Consumed++
		}
	}
}

// add counts one copy's answer, and says whether it is not completed.
func (t *tally) add(c ledger.Copy, st CopyState) (notCompleted bool) {
	v := t.v
	if st.Status == ledger.CopyNotPublished {
		v.NotPublished++
		return false
	}
	v.Copies++
	q := t.byQueue[st.Queue]
	if q == nil {
		q = &QueueVerified{Queue: st.Queue}
		t.byQueue[st.Queue] = q
	}
	if c.Verified != ledger.CopyCompleted {
		v.Asked++
	}
	q.consumedBy(st.consumed)
	if c.Elsewhere {
		v.MovedElsewhere++
	}
	if st.envelope {
		v.Envelopes++
	}
	switch st.Status {
	case ledger.CopyCompleted:
		v.Completed++
		q.Completed++
		return false
	case ledger.CopyPending:
		v.Pending++
		q.Pending++
		for _, g := range st.Groups {
			if q.PendingGroups == nil {
				q.PendingGroups = map[string]int{}
			}
			q.PendingGroups[g]++
		}
	case ledger.CopyDeadAgain:
		v.DeadLetteredAgain++
		q.DeadLetteredAgain++
	case ledger.CopyMissing:
		v.Missing++
		q.Missing++
	default:
		v.Unchecked++
		q.Unchecked++
	}
	return true
}

// done ends the count: copies of the batch's total the verification
// did not reach (it was interrupted) are unchecked.
func (t *tally) done(total int) *Verification {
	v := t.v
	if rest := total - v.Copies - v.NotPublished; rest > 0 {
		v.NotAsked, v.Unchecked, v.Copies = rest, v.Unchecked+rest, total
	}
	for _, q := range t.byQueue {
		for _, g := range q.groups {
			q.Groups = append(q.Groups, *g)
		}
		sort.Slice(q.Groups, func(i, j int) bool { return q.Groups[i].Name < q.Groups[j].Name })
		v.ByQueue = append(v.ByQueue, *q)
	}
	sort.Slice(v.ByQueue, func(i, j int) bool { return v.ByQueue[i].Queue < v.ByQueue[j].Queue })
	v.Complete = v.Copies > 0 && v.Completed == v.Copies
	return v
}
