package replay

import (
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// AddrResult is an address the report lists: what became of it, in
// the broker's and the ledger's terms (Reason), and what is left to an
// operator (Next), which the front ends word in their own vocabulary.
type AddrResult struct {
	Address deadletter.Address `json:"address"`
	Reason  string             `json:"reason"`
	Next    Next               `json:"next,omitempty"`
	// Generation is the generation a replay of it would publish (Next
	// ReplayOrDiscard).
	Generation int `json:"generation,omitempty"`
}

// Next is what a run leaves to an operator about an address, or about
// the whole run when it stopped (Report.StopNext).
type Next string

const (
	// RetryUnknownNext: a call's answer was lost and the row is still
	// there; once the live queue is checked, the unknown ones can be
	// retried.
	RetryUnknownNext Next = "retry-unknown"
	// OtherPathNext: the broker lacks the route this path calls (the
	// /retry endpoint); another path can replay it.
	OtherPathNext Next = "other-path"
	// ManualPathNext: the broker has no move route; the manual path can
	// replay the batch.
	ManualPathNext Next = "manual-path"
	// AnotherQueueNext: its destination queue is gone; it can be restored
	// to another.
	AnotherQueueNext Next = "another-queue"
	// ReplayOrDiscardNext: it came back after this batch acted on it; a
	// new batch replays it (as Generation) or discards it.
	ReplayOrDiscardNext Next = "replay-or-discard"
	// CheckEarlierCopyNext: an earlier attempt may have published it with
	// another payload; whether that copy is live decides between a
	// discard and a replay with the earlier transform.
	CheckEarlierCopyNext Next = "check-earlier-copy"
	// DiscardNext: it cannot be replayed as it is (undecryptable); a
	// discard archives and removes it.
	DiscardNext Next = "discard"
	// GenerationCapNext: it is past the batch's generation cap; a discard
	// removes it, a higher cap replays it once more.
	GenerationCapNext Next = "generation-cap"
	// PrimaryNext: the broker is a standby cluster; the primary takes the
	// writes, or this one once promoted.
	PrimaryNext Next = "primary"
	// RerunNext: this run could not act on it (its listing missed it);
	// the next run of the batch does.
	RerunNext Next = "rerun"
	// FailureLimitNext, RefailureLimitNext: the run stopped at the limit
	// of failures, or of replayed messages failing again, it was given.
	FailureLimitNext   Next = "failure-limit"
	RefailureLimitNext Next = "refailure-limit"
)

// Report is the outcome of an execution.
type Report struct {
	BatchID   string `json:"batchId"`
	Action    string `json:"action"`
	Total     int    `json:"total"`
	Replayed  int    `json:"replayed"`
	Duplicate int    `json:"duplicateSuppressed"`
	Discarded int    `json:"discarded"`
	// Restored counts archived dead letters a restore published again.
	Restored int `json:"restored,omitempty"`
	// Imported counts the messages of an export file an import published.
	Imported    int `json:"imported,omitempty"`
	AlreadyGone int `json:"alreadyGone"`
	// MovedElsewhere counts addresses another hand replayed while this
	// batch held them (Queen's console, on a broker that moves): their
	// copy is in the broker, published once, not by this batch.
	MovedElsewhere int `json:"movedElsewhere"`
	// HeldMoreThanOnce counts messages the broker now holds more than one
	// copy of: one an attempt of this batch published and another hand's
	// (the console moved another of the message's rows meanwhile), or
	// the console's moves of two of its rows. dlqctl published once at
	// most; the report says what the broker holds, and by whose hand.
	HeldMoreThanOnce  int `json:"heldMoreThanOnce,omitempty"`
	AlreadyDone       int `json:"alreadyDone"`
	Failed            int `json:"failed"`
	Unknown           int `json:"unknown"`
	SkippedEncrypted  int `json:"skippedEncrypted"`
	SkippedGeneration int `json:"skippedGeneration"`
	Unreachable       int `json:"unreachable"`
	// QueueGone counts messages a restore did not publish because their
	// destination queue no longer exists.
	QueueGone int `json:"queueGone,omitempty"`
	// DeadLetteredAgain counts addresses this batch already replayed or
	// discarded that are back in the DLQ (another group failed the
	// message, or the replay failed under its original id): they are not
	// acted on twice by one batch.
	DeadLetteredAgain int `json:"deadLetteredAgain"`
	// Missed counts addresses still dead-lettered that this run's
	// listing did not see (rows removed while it paged): left for the
	// next run, which sees them.
	Missed int `json:"missedByListing,omitempty"`
	// Traced counts the copies given a trace event in the broker (the
	// batch's lineage, on Queen 1.x and 2.x); TraceFailed those whose
	// event could not be written, TraceError the first reason. A trace
	// never fails the replay.
	Traced      int    `json:"traced,omitempty"`
	TraceFailed int    `json:"traceFailed,omitempty"`
	TraceError  string `json:"traceError,omitempty"`
	Claimed     int    `json:"claimedElsewhere"`
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
	Unrecorded  int  `json:"unrecorded"`
	NotStarted  int  `json:"notStarted"`
	Interrupted bool `json:"interrupted"`
	// StoppedBy: the run was interrupted by a stop asked of it from
	// anywhere (decisions stop), by whom and why.
	StoppedBy *ledger.Stop `json:"stoppedBy,omitempty"`
	Stopped   string       `json:"stopped,omitempty"` // why scheduling stopped early
	// StopNext is what the stop leaves to an operator, if a front end
	// can say more than Stopped.
	StopNext Next `json:"stopNext,omitempty"`
	// Pauses are the waits on pausers (consumer lag, the window), by kind.
	Pauses      []Pause       `json:"pauses,omitempty"`
	Elapsed     time.Duration `json:"-"`
	ElapsedSecs float64       `json:"elapsedSeconds"`
	// Phases is how long each phase of the command took, where the batch
	// was planned and run in one process.
	Phases *Phases      `json:"phases,omitempty"`
	Listed []AddrResult `json:"addresses,omitempty"` // failed, unknown, skipped
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
	return r.Replayed + r.Duplicate + r.Discarded + r.Restored + r.Imported + r.AlreadyGone + r.MovedElsewhere + r.AlreadyDone + r.Failed + r.Unknown +
		r.SkippedEncrypted + r.SkippedGeneration + r.Unreachable + r.QueueGone + r.DeadLetteredAgain + r.Missed + r.Claimed + r.HeldBack +
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
	add("restored", r.Restored)
	add("imported", r.Imported)
	add("alreadyGone", r.AlreadyGone)
	add(deadletter.OutcomeMovedElsewhere, r.MovedElsewhere)
	add("alreadyDone", r.AlreadyDone)
	add("failed", r.Failed)
	add("unknown", r.Unknown)
	add("skippedEncrypted", r.SkippedEncrypted)
	add("skippedGeneration", r.SkippedGeneration)
	add("unreachable", r.Unreachable)
	add("queueGone", r.QueueGone)
	add("deadLetteredAgain", r.DeadLetteredAgain)
	add("missedByListing", r.Missed)
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
	return r.Failed == 0 && r.Unknown == 0 && r.NotStarted == 0 && r.Unreachable == 0 && r.QueueGone == 0 && r.DeadLetteredAgain == 0 && r.Missed == 0 &&
		r.Claimed == 0 && r.HeldBack == 0 && r.SkippedEncrypted == 0 && r.SkippedGeneration == 0 && r.Unrecorded == 0 &&
		!r.Interrupted && r.Stopped == "" && r.LedgerError == ""
}

// Phases is how long, in seconds, each phase of a batch took: planning
// (reading the DLQ and the ledger, staging), recording the decision and
// its manifest, starting the run in the ledger, the run (which archives
// the rows it reads as it goes), and settling its outcome in the ledger.
type Phases struct {
	Plan   float64 `json:"plan"`
	Record float64 `json:"record"`
	Start  float64 `json:"start"`
	Run    float64 `json:"run"`
	Settle float64 `json:"settle"`
}
