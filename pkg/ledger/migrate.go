package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// A migration is SQL statements, then (optionally) a step in Go over the
// data the statements left.
type migration struct {
	sql  string
	data func(ctx context.Context, s *Store, tx *sql.Tx) error
}

// migrations are applied in order, in one transaction; the schema's
// version is the number applied. Append, never edit.
var migrations = []migration{{sql: `CREATE TABLE batches (
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
	CREATE INDEX audit_batch ON audit (batch_id);`},
	// 2: what a batch ran with (resumes reuse it), every row of a
	// manifest's address (a delete removes them all), and where a manual
	// replay's copy landed.
	{sql: `ALTER TABLE batches ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';
	ALTER TABLE batch_items ADD COLUMN row_list TEXT NOT NULL DEFAULT '';
	ALTER TABLE batch_items ADD COLUMN checked INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE journal ADD COLUMN replay_partition_id TEXT NOT NULL DEFAULT '';
	CREATE INDEX journal_txid ON journal (broker, transaction_id);
	CREATE INDEX archive_txid ON archive (broker, transaction_id);`},
	// 3: one identity per broker however its URL was written
	// (deadletter.Identity): rows filed under http://127.0.0.1:6632 and
	// http://localhost:6632/ are one broker's history.
	{data: unifyBrokers},
	// 4: the queue a replay's attempt published to: an address attempted
	// on the manual path keeps its derived id, and its destination.
	{sql: `ALTER TABLE journal ADD COLUMN replay_queue TEXT NOT NULL DEFAULT ''`},
	// 5: a manifest item's message id (its enqueue order, for a resume's
	// plan to tell).
	{sql: `ALTER TABLE batch_items ADD COLUMN message_id TEXT NOT NULL DEFAULT ''`},
	// 6: what became of the copies a batch published (decisions verify):
	// each copy's status when last asked, and each verification's counts.
	{sql: `ALTER TABLE journal ADD COLUMN verified TEXT NOT NULL DEFAULT '';
	ALTER TABLE journal ADD COLUMN verified_at TEXT;
	CREATE TABLE verifications (
		broker   TEXT NOT NULL,
		batch_id TEXT NOT NULL,
		at       TEXT NOT NULL,
		by_name  TEXT NOT NULL DEFAULT '',
		counts   TEXT NOT NULL DEFAULT '{}',
		complete INTEGER NOT NULL DEFAULT 0
	);
	CREATE INDEX verifications_batch ON verifications (batch_id, at);`},
	// 7: the queues each batch covers, so "which queues have a decision"
	// costs the batches, not every item ever decided; and the archive's
	// vanished rows (check) and a window's arrivals (stats) found by index,
	// not by reading every row ever archived.
	{sql: `CREATE TABLE batch_queues (
		batch_id TEXT NOT NULL,
		queue    TEXT NOT NULL,
		PRIMARY KEY (batch_id, queue)
	);
	INSERT INTO batch_queues (batch_id, queue) SELECT DISTINCT batch_id, queue FROM batch_items;
	CREATE INDEX archive_vanished ON archive (broker) WHERE vanished = 1;
	CREATE INDEX archive_failed ON archive (broker, failed_at);`},
	// 8: when each batch last ran (a run's start and end), so a window's
	// replay outcomes are read from the journal entries of the batches
	// that ran in it, not from every entry ever written. A batch's runs so
	// far are dated by the journal entries they wrote.
	{sql: `ALTER TABLE batches ADD COLUMN active_at TEXT;
	UPDATE batches SET active_at = COALESCE((SELECT max(j.updated_at) FROM journal j WHERE j.batch_id = batches.id), executed_at, at);
	CREATE INDEX batches_active ON batches (broker, active_at);
	CREATE INDEX batches_running ON batches (broker) WHERE status = 'running'`},
	// 9: the copies the /retry endpoint published, by their address: the
	// broker minted their ids, which carry no generation, so a copy that
	// is dead-lettered again learns its generation from the journal.
	{sql: `CREATE INDEX journal_copies ON journal (broker, partition_id, replay_txid) WHERE via = 'endpoint'`},
	// 10: a manifest read by position, a claim at a time (a run holds
	// what it works on, not its batch).
	{sql: `CREATE INDEX batch_items_seq ON batch_items (batch_id, seq)`},
	// 11: the copies the broker's move published (Queen 1.6, 2.x), and
	// the manual path's pushed under its copy ids, by their address: a
	// copy dlq:<row id> carries no generation, so one dead-lettered again
	// learns it from the journal.
	{sql: `CREATE INDEX journal_moved ON journal (broker, partition_id, replay_txid) WHERE replay_txid LIKE 'dlq:%'`},
	// 12: identities as deadletter.Identity now writes them (a port as its
	// number, 0.0.0.0 and :: as localhost): history kept under
	// http://127.0.0.1:06632 or http://0.0.0.0:6632 is localhost:6632's;
	// and what people said of two identities that may be one broker.
	{sql: `CREATE TABLE broker_aliases (
		identity TEXT PRIMARY KEY,
		canonical TEXT NOT NULL,
		at TEXT NOT NULL,
		by_name TEXT NOT NULL DEFAULT ''
	)`, data: unifyBrokers},
	// 13: the digest of the payload a manual replay pushed, so a rerun
	// that would push another payload under the same id (suppressed as a
	// duplicate) is refused instead.
	{sql: `ALTER TABLE journal ADD COLUMN replay_digest TEXT NOT NULL DEFAULT ''`},
	// 14: who runs a running batch, and when it last said so (runs.go):
	// a batch whose run was killed shows as interrupted.
	{sql: `ALTER TABLE batches ADD COLUMN runner TEXT NOT NULL DEFAULT '';
	ALTER TABLE batches ADD COLUMN beat_at TEXT`},
	// 15: every copy a replay published, by the id it went out under: a
	// dead letter that is a copy names its original (Copies).
	{sql: `CREATE INDEX journal_replayed ON journal (broker, replay_txid) WHERE replay_txid <> ''`},
	// 16: each address's current decision, one row (current.go): a
	// lookup reads it once, however many decisions the address has had.
	{sql: `CREATE TABLE current_decisions (
		broker         TEXT NOT NULL,
		partition_id   TEXT NOT NULL,
		transaction_id TEXT NOT NULL,
		batch_id       TEXT NOT NULL,
		at             TEXT NOT NULL,
		PRIMARY KEY (broker, partition_id, transaction_id)
	);
	INSERT INTO current_decisions (broker, partition_id, transaction_id, batch_id, at)
		SELECT broker, partition_id, transaction_id, id, at FROM (
			SELECT bi.broker, bi.partition_id, bi.transaction_id, b.id, b.at,
				ROW_NUMBER() OVER (PARTITION BY bi.broker, bi.partition_id, bi.transaction_id ORDER BY b.at DESC, b.id DESC) AS n
			FROM batch_items bi JOIN batches b ON b.id = bi.batch_id WHERE b.status <> 'cancelled') latest
		WHERE n = 1`},
	// 17: four eyes (approval.go): a batch that needs a second person's
	// approval before it runs, and the approvals, bound to the plan.
	{sql: `ALTER TABLE batches ADD COLUMN needs_approval INTEGER NOT NULL DEFAULT 0;
	CREATE TABLE approvals (
		batch_id TEXT PRIMARY KEY,
		by_name  TEXT NOT NULL,
		at       TEXT NOT NULL,
		why      TEXT NOT NULL,
		digest   TEXT NOT NULL
	)`},
	// 18: the current decision carries its address's queue and the
	// newest failure its batch saw (batch_items' queue and failed_at), so
	// that a lookup reads no batch item: they are scattered through the
	// whole history, and reading them was most of a lookup. Rebuilt, as
	// 16 made it, with them (current.go).
	{data: rebuildCurrent},
	// 19: who recorded a batch and who approved one, as the ledger knows
	// them (identity.go), beside the names people gave; '' where an older
	// dlqctl recorded the name alone.
	{sql: `ALTER TABLE batches ADD COLUMN author TEXT NOT NULL DEFAULT '';
	ALTER TABLE approvals ADD COLUMN approver TEXT NOT NULL DEFAULT ''`},
	// 20: where a broker known by a name (a context's broker:) was
	// reached, so that a session reaching it by its URL, with no context
	// that names it, is told its history may be there (brokers.go).
	{sql: `CREATE TABLE broker_servers (
		broker TEXT NOT NULL,
		server TEXT NOT NULL,
		at     TEXT NOT NULL,
		PRIMARY KEY (broker, server)
	)`},
	// 21: a copy was recorded completed from the broker's status alone,
	// which the 0.x server gives once queue mode consumed a message
	// whatever its other groups did; verify now asks each group. The
	// verdicts so recorded are forgotten (the next verify asks again), and
	// the batches they made verified are done again.
	{sql: `UPDATE journal SET verified = '' WHERE verified = 'completed';
	UPDATE batches SET status = 'done' WHERE status = 'verified'`},
	// 22: times to the nanosecond (ts), so that a failure time is kept as
	// the broker sent it: 2.x lists microseconds, and a hold recorded at
	// milliseconds covered none of its rows. Stored times are widened
	// (widenTimes); the archive's keys are re-keyed as their rows are seen
	// again (Archiver), and the partial index finds those left.
	{sql: `CREATE INDEX archive_millis ON archive (broker) WHERE length(failed_at) = 24`, data: widenTimes},
	// 23: four eyes kept by the database (guard.go): the team's approval
	// threshold in the ledger, the role that wrote each audit line, one
	// manifest item a position, and on PostgreSQL the guards.
	{sql: `CREATE TABLE ledger_settings (
		name    TEXT PRIMARY KEY,
		value   TEXT NOT NULL,
		at      TEXT NOT NULL,
		by_name TEXT NOT NULL DEFAULT '',
		by_role TEXT NOT NULL DEFAULT '',
		why     TEXT NOT NULL DEFAULT ''
	);
	ALTER TABLE audit ADD COLUMN role TEXT NOT NULL DEFAULT '';
	DROP INDEX batch_items_seq;
	CREATE UNIQUE INDEX batch_items_seq ON batch_items (batch_id, seq)`, data: installGuards},
	// 24: a run says how far it got as it beats (runs.go): when it began,
	// how many addresses it set out to do and has done; and a stop asked
	// of it from anywhere (decisions stop), by whom and why.
	{sql: `ALTER TABLE batches ADD COLUMN run_started_at TEXT;
	ALTER TABLE batches ADD COLUMN run_total INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE batches ADD COLUMN run_done INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE batches ADD COLUMN stop_at TEXT;
	ALTER TABLE batches ADD COLUMN stop_by TEXT NOT NULL DEFAULT '';
	ALTER TABLE batches ADD COLUMN stop_role TEXT NOT NULL DEFAULT '';
	ALTER TABLE batches ADD COLUMN stop_why TEXT NOT NULL DEFAULT ''`},
}

// SchemaVersion is the schema this binary writes.
var SchemaVersion = len(migrations)

// migrateTo applies the migrations up to version upto (tests build a
// ledger of an older schema with it).
func (s *Store) migrateTo(ctx context.Context, upto int) error {
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
	// A role that may only read and write the ledger's tables (each
	// person's own, on a team's ledger) may not create one, even one that
	// exists: it is created only where it is missing.
	var made sql.NullString
	if s.engine == Postgres {
		if err := tx.QueryRowContext(ctx, `SELECT to_regclass('dlqctl_schema')::text`).Scan(&made); err != nil {
			return s.wrap("reading the schema version", err)
		}
	}
	if !made.Valid {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS dlqctl_schema (version INTEGER NOT NULL)`); err != nil {
			return s.notLedger(s.wrap("creating the schema table", err), err)
		}
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
	for i := version; i < upto; i++ {
		for _, stmt := range strings.Split(migrations[i].sql, ";") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return s.wrap(fmt.Sprintf("migration %d", i+1), err)
			}
		}
		if f := migrations[i].data; f != nil {
			if err := f(ctx, s, tx); err != nil {
				return s.wrap(fmt.Sprintf("migration %d", i+1), err)
			}
		}
	}
	if version < upto {
		if _, err := tx.ExecContext(ctx, s.rebind(`UPDATE dlqctl_schema SET version = ?`), upto); err != nil {
			return s.wrap("recording the schema version", err)
		}
	}
	return s.wrap("committing the migration", tx.Commit())
}

// widenTimes rewrites the times a ledger kept to the millisecond in the
// nanosecond format. The failure time a manifest saw (batch_items',
// current_decisions') becomes the last nanosecond of its millisecond: it
// stood for a row of a broker that may have sent microseconds, which the
// decision still covers. Every other time becomes its millisecond's
// first. The archive's failure time is a key, matched to what the broker
// sends: it is left to the Archiver.
func widenTimes(ctx context.Context, s *Store, tx *sql.Tx) error {
	cols := map[string][]string{
		"batches":           {"at", "until_at", "executed_at", "active_at", "beat_at"},
		"batch_items":       {"failed_at"},
		"journal":           {"claim_until", "updated_at", "verified_at"},
		"archive":           {"first_seen", "last_seen", "gone_at"},
		"audit":             {"at"},
		"verifications":     {"at"},
		"broker_aliases":    {"at"},
		"current_decisions": {"at", "failed_at"},
		"approvals":         {"at"},
		"broker_servers":    {"at"},
	}
	for table, names := range cols {
		for _, c := range names {
			pad := "000000Z"
			if c == "failed_at" {
				pad = "999999Z"
			}
			if _, err := tx.ExecContext(ctx, `UPDATE `+table+` SET `+c+` = substr(`+c+`, 1, 23) || '`+pad+`' WHERE length(`+c+`) = 24`); err != nil {
				return err
			}
		}
	}
	return nil
}

// notLedger turns SQLite's "not a database" into a clear refusal.
func (s *Store) notLedger(wrapped, err error) error {
	if s.engine == SQLite && (strings.Contains(err.Error(), "not a database") || strings.Contains(err.Error(), "malformed")) {
		return fmt.Errorf("%w: %s is not a SQLite database (corrupt, or another kind of file)", ErrBadDSN, s.shown)
	}
	return wrapped
}

// unifyBrokers rewrites every table's broker column to the broker's
// identity. Where one address has a journal entry under two spellings,
// the one further along is kept (removed, published, unknown, inflight
// before the rest: the entry that stops a second publish wins); archive
// rows kept under both are one row.
func unifyBrokers(ctx context.Context, s *Store, tx *sql.Tx) error {
	olds := map[string]string{}
	for _, table := range []string{"batches", "batch_items", "journal", "archive", "audit"} {
		rows, err := tx.QueryContext(ctx, `SELECT DISTINCT broker FROM `+table)
		if err != nil {
			return err
		}
		for rows.Next() {
			var b string
			if err := rows.Scan(&b); err != nil {
				rows.Close()
				return err
			}
			if id, err := deadletter.Identity(b); err == nil && id != b {
				olds[b] = id
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	for old, id := range olds {
		if err := mergeJournal(ctx, s, tx, old, id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.rebind(`DELETE FROM archive WHERE broker = ? AND EXISTS (SELECT 1 FROM archive a2 WHERE a2.broker = ?
			AND a2.partition_id = archive.partition_id AND a2.transaction_id = archive.transaction_id
			AND a2.consumer_group = archive.consumer_group AND a2.failed_at = archive.failed_at)`), old, id); err != nil {
			return err
		}
		for _, table := range []string{"batches", "batch_items", "journal", "archive", "audit"} {
			if _, err := tx.ExecContext(ctx, s.rebind(`UPDATE `+table+` SET broker = ? WHERE broker = ?`), id, old); err != nil {
				return err
			}
		}
	}
	return nil
}

// stateRank orders journal states by how far an address got: a merge
// keeps the entry that says more was done.
var stateRank = map[string]int{Pending: 0, Failed: 1, Skipped: 2, Inflight: 3, Unknown: 4, Published: 5, Removed: 6}

func mergeJournal(ctx context.Context, s *Store, tx *sql.Tx, old, id string) error {
	rows, err := tx.QueryContext(ctx, s.rebind(`SELECT a.partition_id, a.transaction_id, a.state, a.updated_at, b.state, b.updated_at
		FROM journal a JOIN journal b ON b.broker = ? AND b.partition_id = a.partition_id AND b.transaction_id = a.transaction_id
		WHERE a.broker = ?`), id, old)
	if err != nil {
		return err
	}
	type loser struct{ broker, pid, txid string }
	var drop []loser
	for rows.Next() {
		var pid, txid, sa, ua, sb, ub string
		if err := rows.Scan(&pid, &txid, &sa, &ua, &sb, &ub); err != nil {
			rows.Close()
			return err
		}
		if stateRank[sa] > stateRank[sb] || stateRank[sa] == stateRank[sb] && ua > ub {
			drop = append(drop, loser{id, pid, txid})
		} else {
			drop = append(drop, loser{old, pid, txid})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, d := range drop {
		if _, err := tx.ExecContext(ctx, s.rebind(`DELETE FROM journal WHERE broker = ? AND partition_id = ? AND transaction_id = ?`), d.broker, d.pid, d.txid); err != nil {
			return err
		}
	}
	return nil
}
