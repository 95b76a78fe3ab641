package ledger

import (
	"context"
	"database/sql"
)

// An address's current decision is the latest batch, by (at, id), that
// covers it and was not cancelled: what ls's DECISION column, check,
// stats, triage and plans read. current_decisions keeps it, one row an
// address, so a lookup reads one row however often the address was
// decided (a hold renewed daily for a week is eight batches). It changes
// only when a batch is recorded (CreateBatchFrom: the batch is the
// latest for its addresses unless a later one already is) and when one
// is cancelled (the addresses it was current for fall back to their
// latest other batch). A hold that expires, or a batch whose status
// moves, stays current: what it says is read from its batch.
// The history stays in batch_items for show and decisions.

// currentSchema is the migration that made current_decisions as it is
// (16 made it; 18 rebuilt it with each address's queue and failure time).
const currentSchema = 18

// setCurrent makes batch id (recorded at at) the current decision of its
// addresses where no later batch is.
func (s *Store) setCurrent(ctx context.Context, q execer, id, at string) error {
	if s.schema < currentSchema {
		return nil // a ledger as an older dlqctl wrote it (tests)
	}
	_, err := s.exec(ctx, q, `INSERT INTO current_decisions (broker, partition_id, transaction_id, batch_id, at, queue, failed_at)
		SELECT broker, partition_id, transaction_id, batch_id, ?, queue, failed_at FROM batch_items WHERE batch_id = ?
		ON CONFLICT (broker, partition_id, transaction_id) DO UPDATE SET batch_id = excluded.batch_id, at = excluded.at, queue = excluded.queue, failed_at = excluded.failed_at
		WHERE excluded.at > current_decisions.at OR (excluded.at = current_decisions.at AND excluded.batch_id > current_decisions.batch_id)`, at, id)
	return err
}

// dropCurrent lets a cancelled batch go: its addresses' current decision
// becomes their latest other batch not cancelled, or none. Its DELETE
// reads the whole table: cancelling is rare, and an index on batch_id
// would cost every recorded item a second index entry (BenchmarkManifest;
// docs/performance.md).
func (s *Store) dropCurrent(ctx context.Context, q execer, id string) error {
	if s.schema < currentSchema {
		return nil
	}
	if _, err := s.exec(ctx, q, `DELETE FROM current_decisions WHERE batch_id = ?`, id); err != nil {
		return err
	}
	_, err := s.exec(ctx, q, `INSERT INTO current_decisions (broker, partition_id, transaction_id, batch_id, at, queue, failed_at)
		SELECT broker, partition_id, transaction_id, id, at, queue, failed_at FROM (
			SELECT bi.broker, bi.partition_id, bi.transaction_id, b.id, b.at, bi.queue, bi.failed_at,
				ROW_NUMBER() OVER (PARTITION BY bi.broker, bi.partition_id, bi.transaction_id ORDER BY b.at DESC, b.id DESC) AS n
			FROM batch_items mine
			JOIN batch_items bi ON bi.broker = mine.broker AND bi.partition_id = mine.partition_id AND bi.transaction_id = mine.transaction_id
			JOIN batches b ON b.id = bi.batch_id
			WHERE mine.batch_id = ? AND b.status <> 'cancelled') latest
		WHERE n = 1
		ON CONFLICT (broker, partition_id, transaction_id) DO NOTHING`, id)
	return err
}

// rebuildCurrent makes current_decisions anew from the history, with each
// address's queue and failure time (migration 18). On SQLite the table
// is WITHOUT ROWID: its key is the row, so a lookup walks one tree, not
// the key's index and then the table (a listing's lookups, each on pages
// of its own, read half the pages).
func rebuildCurrent(ctx context.Context, s *Store, tx *sql.Tx) error {
	table := `CREATE TABLE current_decisions (
		broker         TEXT NOT NULL,
		partition_id   TEXT NOT NULL,
		transaction_id TEXT NOT NULL,
		batch_id       TEXT NOT NULL,
		at             TEXT NOT NULL,
		queue          TEXT NOT NULL,
		failed_at      TEXT NOT NULL,
		PRIMARY KEY (broker, partition_id, transaction_id)
	)`
	if s.engine == SQLite {
		table += ` WITHOUT ROWID`
	}
	for _, q := range []string{`DROP TABLE current_decisions`, table,
		`INSERT INTO current_decisions (broker, partition_id, transaction_id, batch_id, at, queue, failed_at)
		SELECT broker, partition_id, transaction_id, id, at, queue, failed_at FROM (
			SELECT bi.broker, bi.partition_id, bi.transaction_id, b.id, b.at, bi.queue, bi.failed_at,
				ROW_NUMBER() OVER (PARTITION BY bi.broker, bi.partition_id, bi.transaction_id ORDER BY b.at DESC, b.id DESC) AS n
			FROM batch_items bi JOIN batches b ON b.id = bi.batch_id WHERE b.status <> 'cancelled') latest
		WHERE n = 1`} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}
