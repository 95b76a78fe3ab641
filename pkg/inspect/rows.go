// Package inspect is what dlqctl reads and shows of a DLQ: the rows a
// selection matches, as ls prints them; the groups (failure classes,
// queues, groups, partitions) they fall into; everything known about one
// address (show); the archive's mirror of the DLQ (sync); and the DLQ's
// numbers (stats). The commands and the triage screen read through it.
package inspect

import (
	"context"
	"iter"
	"runtime"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/policy"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/go-json-experiment/json/jsontext"
)

// PageSize is how many rows dlqctl asks the list route for at a time.
const PageSize = 500

// Row is a dead-letter row as ls prints it in json, ndjson and yaml, and
// the one way a row is written (render.Stream). The field names are part
// of the contract (docs/ci.md, "JSON fields").
type Row struct {
	Address       string `json:"address"`
	PartitionID   string `json:"partitionId"`
	TransactionID string `json:"transactionId"`
	MessageID     string `json:"messageId"`
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	ConsumerGroup string `json:"consumerGroup"`
	ErrorMessage  string `json:"errorMessage"`
	ErrorClass    string `json:"errorClass"`
	RetryCount    int    `json:"retryCount"`
	FailedAt      string `json:"failedAt"`
	AgeSeconds    int64  `json:"ageSeconds"`
	// IsEncrypted: the payload is encrypted at rest (the list decrypted
	// it, or shows its envelope). It never depends on which kind of
	// broker answered, so a row reads the same before and after the
	// client has learnt it.
	IsEncrypted bool `json:"isEncrypted"`
	// Envelope: the list shows the stored encryption envelope, not the
	// payload (undecryptable on a current broker; an older broker's list
	// never decrypts, and dlq show tells which).
	Envelope      bool   `json:"envelope"`
	Decision      string `json:"decision,omitempty"`
	DecisionBatch string `json:"decisionBatch,omitempty"`
	// CopyOf and Generation: the row is a replay's copy that failed
	// again, of that dead letter (Decision "back after replay").
	CopyOf     string         `json:"copyOf,omitempty"`
	Generation int            `json:"generation,omitempty"`
	Data       jsontext.Value `json:"data,omitempty"`
}

// ToRow is a row as ls prints it.
func ToRow(r deadletter.Row, now time.Time, d *ledger.Decision, slo time.Duration) Row {
	env := r.Undecryptable()
	out := Row{Address: r.Address().String(), PartitionID: r.PartitionID, TransactionID: r.TransactionID, MessageID: r.ID,
		Queue: r.Queue, Partition: r.Partition, ConsumerGroup: r.ConsumerGroup, ErrorMessage: r.ErrorMessage,
		ErrorClass: deadletter.ClassID(r.ErrorMessage), RetryCount: r.RetryCount, FailedAt: render.Timestamp(r.FailedAt),
		AgeSeconds: int64(render.SecondsSince(now, r.FailedAt)), IsEncrypted: r.IsEncrypted || env,
		Envelope: env, Data: jsontext.Value(r.Data)}
	if d != nil {
		out.Decision, out.DecisionBatch = DecisionLabel(*d, r, now, slo), d.BatchID
		if c := d.Copy; c != nil {
			out.CopyOf, out.Generation = c.Original.String(), c.Generation
		}
	}
	return out
}

// DecisionLabel is the DECISION column for a row: the latest decision's
// label when it covers the row ("replay (not carried out)" once a replay
// or discard has waited longer than the row's triage SLO slo), and "back
// after replay" (or discard, hold) when the row failed after it: the
// message dead-lettered again, and that row is undecided.
func DecisionLabel(d ledger.Decision, r deadletter.Row, now time.Time, slo time.Duration) string {
	switch {
	case d.Copy != nil && deadletter.ActionOf(d.Copy.Action).Outside():
		return "back after " + d.Copy.Action
	case d.Copy != nil:
		return "back after replay"
	case d.Covers(r.FailedAt, now) && d.NotCarriedOut(now, slo):
		return d.Label(now) + " (not carried out)"
	case d.Covers(r.FailedAt, now) || !d.Active(now):
		return d.Label(now)
	}
	return "back after " + d.Action
}

// TriageSLO is the triage SLO the policies give a queue's consumer group
// (0 when none sets one).
func TriageSLO(p policy.Set, queue, group string) time.Duration {
	pol, _ := p.For(queue, group)
	return pol.TriageSLO
}

// Undecided reports whether a row counts as undecided at now: no
// decision covers it, or the replay or discard that does was not carried
// out within the row's triage SLO.
func Undecided(d ledger.Decision, ok bool, r deadletter.Row, now time.Time, slo time.Duration) bool {
	return !ok || !d.Covers(r.FailedAt, now) || d.NotCarriedOut(now, slo)
}

// HeldBy says whether a row is under an active hold, and who it is with
// (the hold's owner, else who recorded it).
func HeldBy(dec DecisionLookup, now time.Time) func(deadletter.Row) (string, bool) {
	return func(r deadletter.Row) (string, bool) {
		d, ok := dec(r.Address())
		if !ok || !d.Holds(r.FailedAt, now) {
			return "", false
		}
		return d.Holder(), true
	}
}

// Select streams the rows of src that sel matches, up to its --limit
// (then it stops reading, and sets *limited). A --where runs on every
// core, rows kept in order, a few chunks in flight: memory stays flat.
//
// The predicate runs under ctx: an interrupt, a result that is not true
// or false, or an evaluation over jq's budget ends the read with that
// error (Selection.WhereErr).
func Select(ctx context.Context, src iter.Seq2[deadletter.Row, error], sel *deadletter.Selection, limited *bool) iter.Seq2[deadletter.Row, error] {
	sel.Bind(ctx)
	if sel.ConcurrentWhere() {
		return selectConcurrent(src, sel, limited)
	}
	return func(yield func(deadletter.Row, error) bool) {
		n := 0
		for r, err := range src {
			if err != nil {
				yield(r, err)
				return
			}
			if !sel.Match(r) {
				if err := sel.WhereErr(); err != nil {
					yield(r, err)
					return
				}
				continue
			}
			if !yield(r, nil) {
				return
			}
			if n++; sel.Limit > 0 && n >= sel.Limit {
				// Stop reading: the rest of the answer is not needed.
				*limited = true
				return
			}
		}
	}
}

// whereChunk is rows on their way through the --where workers.
type whereChunk struct {
	rows []deadletter.Row
	keep []bool
	err  error
	done chan struct{}
}

const whereChunkRows = 64

func selectConcurrent(src iter.Seq2[deadletter.Row, error], sel *deadletter.Selection, limited *bool) iter.Seq2[deadletter.Row, error] {
	return func(yield func(deadletter.Row, error) bool) {
		workers := max(runtime.GOMAXPROCS(0), 1)
		order := make(chan *whereChunk, 2*workers)
		work := make(chan *whereChunk, 2*workers)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				scratch := map[string]any{} // one row's value at a time
				for c := range work {
					c.keep = make([]bool, len(c.rows))
					for i, r := range c.rows {
						c.keep[i] = sel.MatchWhereInto(r, scratch)
					}
					close(c.done)
				}
			}()
		}
		go func() {
			defer close(order)
			defer close(work)
			send := func(c *whereChunk) bool {
				select {
				case order <- c:
				case <-stop:
					return false
				}
				work <- c // every chunk is evaluated, the last (with the error) too
				return true
			}
			c := &whereChunk{done: make(chan struct{})}
			for r, err := range src {
				if err != nil {
					c.err = err
					break
				}
				if !sel.MatchFields(r) {
					continue
				}
				if c.rows = append(c.rows, r); len(c.rows) == whereChunkRows {
					if !send(c) {
						return
					}
					c = &whereChunk{done: make(chan struct{})}
				}
			}
			if len(c.rows) > 0 || c.err != nil {
				send(c)
			}
		}()
		defer func() {
			close(stop)
			for c := range order { // let the producer and the workers end
				<-c.done
			}
			wg.Wait()
		}()
		n := 0
		for c := range order {
			<-c.done
			if err := sel.WhereErr(); err != nil {
				yield(deadletter.Row{}, err)
				return
			}
			for i, r := range c.rows {
				if !c.keep[i] {
					continue
				}
				if !yield(r, nil) {
					return
				}
				if n++; sel.Limit > 0 && n >= sel.Limit {
					*limited = true
					return
				}
			}
			if c.err != nil {
				yield(deadletter.Row{}, c.err)
				return
			}
		}
	}
}

// CheckNames makes sure a selection's queue and consumer group are ones
// the broker has (a typo is a usage error with a suggestion, never an
// empty answer that looks like good news).
func CheckNames(ctx context.Context, cl *client.Client, sel *deadletter.Selection) error {
	if sel.Queue == "" && sel.ConsumerGroup == "" {
		return nil
	}
	topo, err := cl.Topology(ctx)
	if err != nil {
		return err
	}
	return cl.CheckNames(ctx, topo, []string{sel.Queue}, sel.ConsumerGroup)
}
