package ledger

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Decision is the latest decision that covers an address.
type Decision struct {
	BatchID string    `json:"batchId"`
	Action  string    `json:"action"`
	By      string    `json:"by"`
	At      time.Time `json:"at"`
	Why     string    `json:"why"`
	Until   time.Time `json:"until,omitzero"`
	Status  string    `json:"status"`
	Owner   string    `json:"owner,omitempty"`
	// Queue and Seen are the address's queue and the newest failure of it
	// the batch's manifest saw: a row that failed later is not covered.
	Queue string    `json:"-"`
	Seen  time.Time `json:"-"`
	// Copy: the address is no batch's, but a copy the batch published
	// of another dead letter, back in the DLQ. It covers nothing: the
	// copy failed again, and is undecided.
	Copy *Lineage `json:"copyOf,omitempty"`
}

// Label is the DECISION column's text: "replay", "replayed", "hold",
// "hold (expired)", "hold (resolved)".
func (d Decision) Label(now time.Time) string {
	if IsHold(d.Action) {
		switch {
		case d.Status == StatusResolved:
			return "hold (resolved)"
		case !d.Until.IsZero() && now.After(d.Until):
			return "hold (expired)"
		}
		return "hold"
	}
	if d.Status == StatusDone || d.Status == StatusVerified {
		return deadletter.ActionOf(d.Action).Past
	}
	if d.Status == StatusAwaiting {
		return d.Action + " (awaiting approval)"
	}
	return d.Action
}

// Covers reports whether the decision speaks for a dead-letter row that
// failed at failedAt: it is active, and the row had failed when the batch
// was recorded (its manifest saw it). A row that failed later (the message
// dead-lettered again, by another group or after a replay) is undecided.
func (d Decision) Covers(failedAt, now time.Time) bool {
	return d.Copy == nil && d.Active(now) && (d.Seen.IsZero() || !failedAt.After(d.Seen))
}

// Holds reports whether the decision is a hold in force over a row that
// failed at failedAt: such a row is left alone (replay and rm refuse or
// skip it) and not counted waiting.
func (d Decision) Holds(failedAt, now time.Time) bool {
	return IsHold(d.Action) && d.Covers(failedAt, now)
}

// Holder is who a hold is with: its owner, else who recorded it.
func (d Decision) Holder() string {
	if d.Owner != "" {
		return d.Owner
	}
	return d.By
}

// NotCarriedOut reports whether the decision is a replay or discard
// recorded more than slo before now whose batch is not done: past the
// triage SLO a decision that was never carried out (recorded, or left
// interrupted or failed) no longer counts as one. slo 0 is no SLO.
func (d Decision) NotCarriedOut(now time.Time, slo time.Duration) bool {
	return slo > 0 && deadletter.ActionOf(d.Action).Deletes && d.Status != StatusDone && d.Status != StatusVerified && now.Sub(d.At) > slo
}

// Active reports whether the decision stops the undecided alert at now: a
// hold only until its until.
func (d Decision) Active(now time.Time) bool {
	if IsHold(d.Action) {
		return d.Until.IsZero() || now.Before(d.Until)
	}
	return true
}

// LatestDecisions returns, for every address of a broker that any batch
// covers, its latest decision. It reads the whole decision history of the
// broker (one query): no command reads a DLQ through it any more, since
// that cost grows with the history (LatestDecisionsFor is what they use);
// it is the whole answer tests hold the lookups to.
func (s *Store) LatestDecisions(ctx context.Context, broker string) (map[deadletter.Address]Decision, error) {
	out := map[deadletter.Address]Decision{}
	err := s.each(ctx, `SELECT bi.partition_id, bi.transaction_id, bi.queue, bi.failed_at, b.id, b.action, b.by_name, b.at, b.why, b.until_at, b.status, b.owner
		FROM batch_items bi JOIN batches b ON b.id = bi.batch_id WHERE bi.broker = ? AND b.status <> 'cancelled' ORDER BY b.at, b.id`, func(rows *sql.Rows) error {
		var a deadletter.Address
		var d Decision
		var at, until, seen sql.NullString
		err := rows.Scan(&a.PartitionID, &a.TransactionID, &d.Queue, &seen, &d.BatchID, &d.Action, &d.By, &at, &d.Why, &until, &d.Status, &d.Owner)
		d.At, d.Until, d.Seen = parseTime(at), parseTime(until), parseTime(seen)
		out[a] = d
		return err
	}, broker)
	return out, s.wrap("reading decisions", err)
}

// DecidedQueues names the queues where some batch that is still a
// decision at now (not cancelled; a hold before its until) covers an
// address, and those with an active hold. It reads the batches, not their
// items: it is a superset of what LatestDecisions would say (an address
// whose hold was followed by a replay still counts its queue as held),
// which callers use only to skip reading queues with no decision.
func (s *Store) DecidedQueues(ctx context.Context, broker string, now time.Time) (holds, decided map[string]bool, err error) {
	holds, decided = map[string]bool{}, map[string]bool{}
	err = s.each(ctx, `SELECT DISTINCT bq.queue, b.action FROM batch_queues bq JOIN batches b ON b.id = bq.batch_id
		WHERE b.broker = ? AND b.status <> 'cancelled' AND (b.action <> 'hold' OR b.until_at IS NULL OR b.until_at = '' OR b.until_at > ?)`, func(rows *sql.Rows) error {
		var q, action string
		err := rows.Scan(&q, &action)
		decided[q] = true
		if IsHold(action) {
			holds[q] = true
		}
		return err
	}, broker, fmtTime(now))
	return holds, decided, s.wrap("reading decisions", err)
}

// QueuesPending names the queues where an address may be under a hold
// in force at now, or (action given) covered by a batch of that action
// recorded and not run (recorded, or awaiting approval): a superset,
// read from the batches, not their items. A plan need not look up the
// decision of an address in any other queue: none of its addresses is
// held, nor already decided to be done.
func (s *Store) QueuesPending(ctx context.Context, broker, action string, now time.Time) (map[string]bool, error) {
	// A second's slack, as HoldsInForce reads holds.
	at := fmtTime(now.Add(-time.Second))
	return s.textSet(ctx, "reading decisions", `SELECT DISTINCT bq.queue FROM batch_queues bq JOIN batches h ON h.id = bq.batch_id
		WHERE (`+holdsInCondition+`) OR (h.broker = ? AND h.action = ? AND h.status IN (?, ?))`,
		broker, at, broker, action, StatusRecorded, StatusAwaiting)
}

// QueuesWithDecisions names the queues any batch not cancelled covers
// (holds past their end included): a reader need not look up the
// decisions of a row in any other queue. It reads batch_queues, a few rows
// a batch.
func (s *Store) QueuesWithDecisions(ctx context.Context, broker string) (map[string]bool, error) {
	return s.textSet(ctx, "reading decisions", `SELECT DISTINCT bq.queue FROM batch_queues bq JOIN batches b ON b.id = bq.batch_id
		WHERE b.broker = ? AND b.status <> 'cancelled'`, broker)
}

// textSet runs a query of one text column and gives its values as a set;
// what says what was being read, for its errors.
func (s *Store) textSet(ctx context.Context, what, q string, args ...any) (map[string]bool, error) {
	out := map[string]bool{}
	err := s.each(ctx, q, func(rows *sql.Rows) error {
		var v string
		err := rows.Scan(&v)
		out[v] = true
		return err
	}, args...)
	return out, s.wrap(what, err)
}

// LatestDecisionsFor is LatestDecisions for the given addresses only,
// looked up a few hundred a statement in current_decisions (current.go):
// one row an address, so what reading part of the DLQ costs grows with
// that part, not with the ledger's history nor with how often each
// address was decided. A batch is read once a call, and the decisions
// it makes share its texts.
func (s *Store) LatestDecisionsFor(ctx context.Context, broker string, addrs []deadletter.Address) (map[deadletter.Address]Decision, error) {
	out := map[deadletter.Address]Decision{} // sized by what is found: most addresses have no decision
	batches := map[string]*Decision{}        // each batch's part of a decision
	const chunk = 400
	for start := 0; start < len(addrs); start += chunk {
		found, err := s.currentDecisions(ctx, broker, addrs[start:min(start+chunk, len(addrs))])
		if err != nil {
			return nil, err
		}
		var unread []string
		for _, c := range found {
			if _, ok := batches[c.batchID]; !ok {
				batches[c.batchID] = nil
				unread = append(unread, c.batchID)
			}
		}
		if err := s.decisionBatches(ctx, unread, batches); err != nil {
			return nil, err
		}
		for _, c := range found {
			if b := batches[c.batchID]; b != nil { // nil: no such batch
				d := *b
				d.Queue, d.Seen = c.queue, parseTime(sql.NullString{String: c.seen, Valid: true})
				out[c.addr] = d
			}
		}
	}
	return out, s.copiesBack(ctx, broker, addrs, out)
}

// current is an address's row of current_decisions.
type current struct {
	addr                 deadletter.Address
	batchID, queue, seen string
}

// currentDecisions reads the current_decisions rows of up to 400
// addresses in one statement.
func (s *Store) currentDecisions(ctx context.Context, broker string, part []deadletter.Address) ([]current, error) {
	const cols = `SELECT cd.partition_id, cd.transaction_id, cd.batch_id, cd.queue, cd.failed_at`
	var rows *sql.Rows
	var err error
	if s.engine == Postgres {
		// A join on the addresses as arrays: PostgreSQL walks the
		// address index for each (a row-value IN list it may scan).
		pids, txids := make([]string, len(part)), make([]string, len(part))
		for i, a := range part {
			pids[i], txids[i] = a.PartitionID, a.TransactionID
		}
		rows, err = s.db.QueryContext(ctx, s.rebind(cols+` FROM unnest(?::text[], ?::text[]) AS a(p, t)
			JOIN current_decisions cd ON cd.broker = ? AND cd.partition_id = a.p AND cd.transaction_id = a.t`), pids, txids, broker)
	} else {
		// Padded to a whole chunk with its last address, so that every
		// statement has one text and is prepared once: parsing 400
		// pairs was most of a lookup's cost.
		const chunk = 400
		padded := part
		if len(part) < chunk {
			padded = make([]deadletter.Address, chunk)
			copy(padded, part)
			for i := len(part); i < chunk; i++ {
				padded[i] = part[len(part)-1]
			}
		}
		q, args := inAddrs(cols+` FROM current_decisions cd WHERE cd.broker = ? AND (cd.partition_id, cd.transaction_id) IN `, padded, broker)
		var st *sql.Stmt
		if st, err = s.prepared(ctx, q); err == nil {
			rows, err = st.QueryContext(ctx, args...)
		}
	}
	if err != nil {
		return nil, s.wrap("reading decisions", err)
	}
	defer rows.Close()
	var out []current
	for rows.Next() {
		var c current
		if err := rows.Scan(&c.addr.PartitionID, &c.addr.TransactionID, &c.batchID, &c.queue, &c.seen); err != nil {
			return nil, s.wrap("reading decisions", err)
		}
		out = append(out, c)
	}
	return out, s.wrap("reading decisions", rows.Err())
}

// decisionBatches reads the batches named in ids into into, each as the
// part of a decision that is the batch's.
func (s *Store) decisionBatches(ctx context.Context, ids []string, into map[string]*Decision) error {
	for start := 0; start < len(ids); start += 400 {
		part := ids[start:min(start+400, len(ids))]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		err := s.each(ctx, `SELECT id, action, by_name, at, why, until_at, status, owner FROM batches WHERE id IN (`+
			strings.TrimSuffix(strings.Repeat("?, ", len(part)), ", ")+`)`, func(rows *sql.Rows) error {
			var d Decision
			var at, until sql.NullString
			err := rows.Scan(&d.BatchID, &d.Action, &d.By, &at, &d.Why, &until, &d.Status, &d.Owner)
			d.At, d.Until = parseTime(at), parseTime(until)
			into[d.BatchID] = &d
			return err
		}, args...)
		if err != nil {
			return s.wrap("reading decisions", err)
		}
	}
	return nil
}

// copiesBack adds, for the addresses with no decision of their own that
// are a replay's copies, the batch that published them (Decision.Copy).
// Only ids a copy can have are asked about, unless the 0.x endpoint's
// copies (ids of any shape) are in the journal.
func (s *Store) copiesBack(ctx context.Context, broker string, addrs []deadletter.Address, out map[deadletter.Address]Decision) error {
	var cands []deadletter.Address
	endpoint, asked := false, false
	for _, a := range addrs {
		if _, ok := out[a]; ok {
			continue
		}
		if !MayBeCopy(a.TransactionID) {
			if !asked {
				var err error
				if endpoint, err = s.HasEndpointCopies(ctx, broker); err != nil {
					return err
				}
				asked = true
			}
			if !endpoint {
				continue
			}
		}
		cands = append(cands, a)
	}
	lin, err := s.LineageOf(ctx, broker, cands)
	if err != nil {
		return err
	}
	for a, l := range lin {
		l := l
		out[a] = Decision{BatchID: l.BatchID, Action: ActionReplay, Copy: &l}
	}
	return nil
}

// DecisionsFor returns every decision that covered an address, oldest first.
func (s *Store) DecisionsFor(ctx context.Context, broker string, a deadletter.Address) ([]Decision, error) {
	var out []Decision
	err := s.each(ctx, `SELECT b.id, b.action, b.by_name, b.at, b.why, b.until_at, b.status, b.owner, b.runner, b.beat_at
		FROM batch_items bi JOIN batches b ON b.id = bi.batch_id
		WHERE bi.broker = ? AND bi.partition_id = ? AND bi.transaction_id = ? ORDER BY b.at, b.id`, func(rows *sql.Rows) error {
		var d Decision
		var at, until, beat sql.NullString
		var runner string
		if err := rows.Scan(&d.BatchID, &d.Action, &d.By, &at, &d.Why, &until, &d.Status, &d.Owner, &runner, &beat); err != nil {
			return err
		}
		d.At, d.Until = parseTime(at), parseTime(until)
		if d.Status == StatusRunning && RunGone(runner, parseTime(beat)) {
			d.Status = StatusInterrupted // shown as such: its run is gone
		}
		out = append(out, d)
		return nil
	}, broker, a.PartitionID, a.TransactionID)
	return out, s.wrap("reading decisions", err)
}
