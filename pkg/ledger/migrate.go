package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// migrations are applied in order, each in one transaction; the schema's
// version is the number applied. Append, never edit.
var migrations = []string{
	`CREATE TABLE batches (
		id          TEXT PRIMARY KEY,
		broker      TEXT NOT NULL,
		action      TEXT NOT NULL,
		by_name     TEXT NOT NULL,
		at          TEXT NOT NULL,
		why         TEXT NOT NULL,
		owner       TEXT NOT NULL DEFAULT '',
		until_at    TEXT,
		selection   TEXT NOT NULL DEFAULT '',
		size        INTEGER NOT NULL,
		destination TEXT NOT NULL DEFAULT '',
		executed_at TEXT,
		status      TEXT NOT NULL DEFAULT 'recorded',
		outcome     TEXT NOT NULL DEFAULT '{}'
	);
	CREATE INDEX batches_broker_at ON batches (broker, at);
	CREATE TABLE batch_items (
		batch_id       TEXT NOT NULL REFERENCES batches (id),
		seq            INTEGER NOT NULL,
		broker         TEXT NOT NULL,
		partition_id   TEXT NOT NULL,
		transaction_id TEXT NOT NULL,
		queue          TEXT NOT NULL,
		partition_name TEXT NOT NULL,
		groups         TEXT NOT NULL,
		error          TEXT NOT NULL,
		retry_count    INTEGER NOT NULL,
		failed_at      TEXT NOT NULL,
		payload        TEXT,
		undecryptable  INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (batch_id, partition_id, transaction_id)
	);
	CREATE INDEX batch_items_address ON batch_items (broker, partition_id, transaction_id);
	CREATE TABLE journal (
		broker         TEXT NOT NULL,
		partition_id   TEXT NOT NULL,
		transaction_id TEXT NOT NULL,
		state          TEXT NOT NULL,
		batch_id       TEXT NOT NULL,
		action         TEXT NOT NULL,
		generation     INTEGER NOT NULL DEFAULT 1,
		replay_txid    TEXT NOT NULL DEFAULT '',
		via            TEXT NOT NULL DEFAULT '',
		outcome        TEXT NOT NULL DEFAULT '',
		claim_owner    TEXT,
		claim_until    TEXT,
		attempts       INTEGER NOT NULL DEFAULT 0,
		last_error     TEXT NOT NULL DEFAULT '',
		updated_at     TEXT NOT NULL,
		PRIMARY KEY (broker, partition_id, transaction_id)
	);
	CREATE INDEX journal_batch ON journal (batch_id);
	CREATE TABLE archive (
		broker         TEXT NOT NULL,
		partition_id   TEXT NOT NULL,
		transaction_id TEXT NOT NULL,
		consumer_group TEXT NOT NULL,
		failed_at      TEXT NOT NULL,
		message_id     TEXT NOT NULL DEFAULT '',
		queue          TEXT NOT NULL,
		partition_name TEXT NOT NULL,
		error          TEXT NOT NULL,
		retry_count    INTEGER NOT NULL,
		payload        TEXT,
		first_seen     TEXT NOT NULL,
		last_seen      TEXT NOT NULL,
		gone_at        TEXT,
		vanished       INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (broker, partition_id, transaction_id, consumer_group, failed_at)
	);
	CREATE INDEX archive_gone ON archive (broker, gone_at);
	CREATE TABLE audit (
		id       TEXT PRIMARY KEY,
		at       TEXT NOT NULL,
		broker   TEXT NOT NULL,
		batch_id TEXT NOT NULL DEFAULT '',
		kind     TEXT NOT NULL,
		by_name  TEXT NOT NULL DEFAULT '',
		detail   TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX audit_batch ON audit (batch_id);`,
	// 2: what a batch ran with (resumes reuse it), every row of a
	// manifest's address (a delete removes them all), and where a manual
	// replay's copy landed.
	`ALTER TABLE batches ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';
	ALTER TABLE batch_items ADD COLUMN row_list TEXT NOT NULL DEFAULT '';
	ALTER TABLE batch_items ADD COLUMN checked INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE journal ADD COLUMN replay_partition_id TEXT NOT NULL DEFAULT '';
	CREATE INDEX journal_txid ON journal (broker, transaction_id);
	CREATE INDEX archive_txid ON archive (broker, transaction_id);`,
}

// SchemaVersion is the schema this binary writes.
var SchemaVersion = len(migrations)

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.notLedger(s.wrap("opening", err), err)
	}
	defer tx.Rollback()
	if s.engine == Postgres {
		// One migrator at a time across processes sharing the database.
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7351245)`); err != nil {
			return s.wrap("locking for migration", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS dlqctl_schema (version INTEGER NOT NULL)`); err != nil {
		return s.notLedger(s.wrap("creating the schema table", err), err)
	}
	var version int
	err = tx.QueryRowContext(ctx, `SELECT version FROM dlqctl_schema`).Scan(&version)
	switch {
	case err == sql.ErrNoRows:
		var other int
		if s.engine == SQLite {
			_ = tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type='table' AND name NOT IN ('dlqctl_schema')`).Scan(&other)
		}
		if other > 0 {
			return fmt.Errorf("%w: %s is a SQLite database but not a dlqctl ledger (it has other tables); point --ledger at a new file", ErrBadDSN, s.shown)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO dlqctl_schema (version) VALUES (0)`); err != nil {
			return s.wrap("initialising the schema", err)
		}
	case err != nil:
		return s.wrap("reading the schema version", err)
	}
	if version > len(migrations) {
		return fmt.Errorf("%w: %s has schema version %d, newer than this dlqctl understands (%d): upgrade dlqctl", ErrBadDSN, s.shown, version, len(migrations))
	}
	for i := version; i < len(migrations); i++ {
		for _, stmt := range strings.Split(migrations[i], ";") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return s.wrap(fmt.Sprintf("migration %d", i+1), err)
			}
		}
	}
	if version < len(migrations) {
		if _, err := tx.ExecContext(ctx, s.rebind(`UPDATE dlqctl_schema SET version = ?`), len(migrations)); err != nil {
			return s.wrap("recording the schema version", err)
		}
	}
	return s.wrap("committing the migration", tx.Commit())
}

// notLedger turns SQLite's "not a database" into a clear refusal.
func (s *Store) notLedger(wrapped, err error) error {
	if s.engine == SQLite && (strings.Contains(err.Error(), "not a database") || strings.Contains(err.Error(), "malformed")) {
		return fmt.Errorf("%w: %s is not a SQLite database (corrupt, or another kind of file)", ErrBadDSN, s.shown)
	}
	return wrapped
}
