package inspect

import (
	"context"
	"iter"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/policy"
)

// ListOptions say how a listing reads.
type ListOptions struct {
	// OldestFirst reads the oldest failure first (newest first otherwise).
	OldestFirst bool
	// NoData reads the rows without their payloads, unless --where looks
	// at them.
	NoData   bool
	Policies policy.Set // the triage SLOs of --where's decision labels
	Now      time.Time
}

// Listing is a read of the dead letters a selection matches, as dlq ls
// and the triage screen read them.
type Listing struct {
	rows    iter.Seq2[deadletter.Row, error]
	where   *WhereStats
	limited bool
}

// List reads the dead letters sel matches: its queue and consumer group
// checked against the broker's, its --where readied, and each row's
// latest decision looked up into dec with its chunk, before --where and
// the caller see the row (with no --limit, dec is told every row is read).
func List(ctx context.Context, cl *client.Client, sel *deadletter.Selection, dec *Decisions, o ListOptions) (*Listing, error) {
	if err := CheckNames(ctx, cl, sel); err != nil {
		return nil, err
	}
	ws, err := PrepareWhere(ctx, cl, sel, dec.Lookup(), o.Policies, o.Now)
	if err != nil {
		return nil, err
	}
	q := client.QueryFor(sel, PageSize)
	q.NoData = o.NoData && sel.Where == ""
	read := cl.Rows
	if o.OldestFirst {
		read = cl.RowsOldestFirst
	}
	if sel.Limit == 0 {
		dec.ReadsAll()
	}
	l := &Listing{where: ws}
	l.rows = Select(ctx, dec.Through(ctx, read(ctx, q)), sel, &l.limited)
	return l, nil
}

// Rows are the rows selected, or the error the read stopped on.
func (l *Listing) Rows() iter.Seq2[deadletter.Row, error] { return l.rows }

// Limited reports whether the selection's --limit cut the rows short.
func (l *Listing) Limited() bool { return l.limited }

// Notes are what --where has to say once the rows are read.
func (l *Listing) Notes() []string { return l.where.Notes() }

// Tally is what ls's first line says of the rows it listed: how many,
// the oldest, how many failure classes and how many undecided.
type Tally struct {
	Rows, Undecided int
	Oldest          deadletter.Row
	classes         map[string]struct{}
}

// Add counts a row, with its latest decision (ok: it has one) and its
// triage SLO.
func (t *Tally) Add(r deadletter.Row, d ledger.Decision, ok bool, now time.Time, slo time.Duration) {
	if t.classes == nil {
		t.classes = map[string]struct{}{}
	}
	t.Rows++
	if Undecided(d, ok, r, now, slo) {
		t.Undecided++
	}
	t.classes[deadletter.ClassID(r.ErrorMessage)] = struct{}{}
	if t.Oldest.PartitionID == "" || r.FailedAt.Before(t.Oldest.FailedAt) {
		t.Oldest = r
	}
}

// Classes is how many failure classes the rows counted are in.
func (t *Tally) Classes() int { return len(t.classes) }
