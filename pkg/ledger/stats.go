package ledger

import (
	"context"
	"database/sql"
	"time"
)

// DecisionLatencies returns, for every address first decided since
// `since`, the time from its failure to that first decision.
func (s *Store) DecisionLatencies(ctx context.Context, broker string, since time.Time) ([]time.Duration, error) {
	// Only addresses decided since then can have been first decided since
	// then: they are found from the batches recorded since (by the
	// broker's batches index), and only theirs are looked up in the whole
	// history for their first decisions. A year of history is not read.
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT bi.partition_id, bi.transaction_id, bi.failed_at, MIN(b.at)
		FROM batch_items bi JOIN batches b ON b.id = bi.batch_id
		WHERE bi.broker = ? AND (bi.partition_id, bi.transaction_id) IN (
			SELECT r.partition_id, r.transaction_id FROM batches rb JOIN batch_items r ON r.batch_id = rb.id
			WHERE rb.broker = ? AND rb.at >= ?)
		GROUP BY bi.partition_id, bi.transaction_id, bi.failed_at`), broker, broker, fmtTime(since))
	if err != nil {
		return nil, s.wrap("reading decision times", err)
	}
	defer rows.Close()
	var out []time.Duration
	for rows.Next() {
		var p, t string
		var failed, first sql.NullString
		if err := rows.Scan(&p, &t, &failed, &first); err != nil {
			return nil, s.wrap("reading decision times", err)
		}
		f, d := parseTime(failed), parseTime(first)
		if d.Before(since) || f.IsZero() {
			continue
		}
		out = append(out, d.Sub(f))
	}
	return out, s.wrap("reading decision times", rows.Err())
}

// OutcomeCounts counts journal outcomes (replayed, duplicate, gone,
// discarded) of entries the runs since `since` wrote: entries updated
// since then, of the batches active since then or still running (a run
// dates its batch at its start and its end). It reads those batches'
// entries, not the broker's whole journal. An entry a run only found
// done (another batch's) keeps that batch's id and is not counted.
func (s *Store) OutcomeCounts(ctx context.Context, broker string, since time.Time) (map[string]int, []string, error) {
	at := fmtTime(since)
	// The batches first, then each one's entries by journal_batch: SQLite
	// keeps a CROSS JOIN's order (left to itself it read the broker's whole
	// journal by journal_txid and looked each entry's batch up). A batch
	// is one broker's, and so are its entries.
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT j.outcome, j.state, j.replay_txid
		FROM (SELECT id FROM batches WHERE broker = ? AND active_at >= ? UNION SELECT id FROM batches WHERE broker = ? AND status = 'running') b
		CROSS JOIN journal j WHERE j.batch_id = b.id AND j.updated_at >= ?`), broker, at, broker, at)
	if err != nil {
		return nil, nil, s.wrap("reading outcomes", err)
	}
	defer rows.Close()
	out := map[string]int{}
	var txids []string
	for rows.Next() {
		var outcome, state, txid string
		if err := rows.Scan(&outcome, &state, &txid); err != nil {
			return nil, nil, s.wrap("reading outcomes", err)
		}
		key := outcome
		if key == "" || state == Failed || state == Unknown {
			key = state
		}
		out[key]++
		if txid != "" {
			txids = append(txids, txid)
		}
	}
	return out, txids, s.wrap("reading outcomes", rows.Err())
}
