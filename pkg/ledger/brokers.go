package ledger

import (
	"context"
	"database/sql"
	"slices"
	"time"
)

// HasHistory reports whether the ledger holds anything of a broker: a
// batch, a journal entry or an archived row.
func (s *Store) HasHistory(ctx context.Context, broker string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT
		(SELECT COUNT(*) FROM (SELECT 1 FROM batches WHERE broker = ? LIMIT 1) b) +
		(SELECT COUNT(*) FROM (SELECT 1 FROM journal WHERE broker = ? LIMIT 1) j) +
		(SELECT COUNT(*) FROM (SELECT 1 FROM archive WHERE broker = ? LIMIT 1) a)`), broker, broker, broker).Scan(&n)
	return n > 0, s.wrap("reading the ledger", err)
}

// Brokers lists the brokers the ledger holds batches or archived rows of.
func (s *Store) Brokers(ctx context.Context) ([]string, error) {
	var out []string
	err := s.each(ctx, `SELECT broker FROM batches UNION SELECT broker FROM archive`, func(rows *sql.Rows) error {
		var b string
		err := rows.Scan(&b)
		out = append(out, b)
		return err
	})
	return out, s.wrap("reading the ledger", err)
}

// Alias is the identity a broker identity's history is filed under, as a
// person said (SetAlias): "" when nobody said, the identity itself when
// they said it is a broker of its own.
func (s *Store) Alias(ctx context.Context, identity string) (string, error) {
	var canonical string
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT canonical FROM broker_aliases WHERE identity = ?`), identity).Scan(&canonical)
	if isNoRows(err) {
		return "", nil
	}
	return canonical, s.wrap("reading the ledger", err)
}

// SetAlias records what a person said of a broker identity that may be
// another one: that its history is canonical's (the same broker), or,
// with canonical equal to identity, that it is a broker of its own. It
// is audited, under the identity.
func (s *Store) SetAlias(ctx context.Context, identity, canonical, by string, at time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("recording the broker's name", err)
	}
	defer tx.Rollback()
	if _, err := s.exec(ctx, tx, `INSERT INTO broker_aliases (identity, canonical, at, by_name) VALUES (?, ?, ?, ?)
		ON CONFLICT (identity) DO UPDATE SET canonical = excluded.canonical, at = excluded.at, by_name = excluded.by_name`,
		identity, canonical, fmtTime(at), by); err != nil {
		return s.wrap("recording the broker's name", err)
	}
	detail := identity + " is a broker of its own"
	if canonical != identity {
		detail = identity + " is the same broker as " + canonical + ": its history is filed under " + canonical
	}
	if err := s.auditTx(ctx, tx, at, identity, "", "broker-identity", by, detail); err != nil {
		return err
	}
	return s.wrap("recording the broker's name", tx.Commit())
}

// serversSchema is the migration that recorded where named brokers were
// reached.
const serversSchema = 20

// NoteServer records that the broker the ledger knows by name was
// reached at server (a URL's identity), once: a session that reaches the
// same address with no context naming the broker is then told that its
// history may be filed under the name (a hold recorded there holds it).
func (s *Store) NoteServer(ctx context.Context, name, server string, at time.Time) error {
	if s.schema < serversSchema {
		return nil
	}
	var n int
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT COUNT(*) FROM broker_servers WHERE broker = ? AND server = ?`), name, server).Scan(&n)
	if err != nil || n > 0 {
		return s.wrap("reading the ledger", err)
	}
	_, err = s.db.ExecContext(ctx, s.rebind(`INSERT INTO broker_servers (broker, server, at) VALUES (?, ?, ?) ON CONFLICT (broker, server) DO NOTHING`), name, server, fmtTime(at))
	return s.wrap("recording where the broker was reached", err)
}

// Servers are where the broker the ledger knows by name was reached
// (NoteServer), by the identities of their URLs.
func (s *Store) Servers(ctx context.Context, name string) ([]string, error) {
	if s.schema < serversSchema {
		return nil, nil
	}
	out, err := s.textSet(ctx, "reading the ledger", `SELECT server FROM broker_servers WHERE broker = ?`, name)
	list := make([]string, 0, len(out))
	for k := range out {
		list = append(list, k)
	}
	slices.Sort(list)
	return list, err
}
