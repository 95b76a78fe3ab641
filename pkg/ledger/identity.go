package ledger

import (
	"context"
	"os/user"
)

// Who recorded a batch and who approved one is the ledger's to say, not
// a name the person types (--by, DLQCTL_USER): the author of a batch and
// the approver of one are an identity the ledger writes itself. On
// PostgreSQL that is the role the database authenticated (session_user,
// put in by the database in the statement that records the batch or the
// approval), which no flag or variable can change: one role a person is
// what makes four eyes mean two people. SQLite authenticates nobody:
// there the identity is the operating system's account running dlqctl,
// which the ledger cannot vouch for (anyone who can write the file can
// write any name), and approvals say so.

// Vouches reports whether the ledger itself vouches for the identities
// it records (PostgreSQL's session role), as opposed to taking the
// operating system's word (SQLite).
func (s *Store) Vouches() bool { return s.engine == Postgres }

// Identity is who this session records batches and approvals as: the
// database role on PostgreSQL, the operating system's account on SQLite.
func (s *Store) Identity(ctx context.Context) (string, error) {
	if s.engine == Postgres {
		var role string
		err := s.db.QueryRowContext(ctx, `SELECT session_user`).Scan(&role)
		return role, s.wrap("reading the database role", err)
	}
	return osAccount(), nil
}

// identityValue is the SQL for the identity in a statement and its
// arguments: session_user itself on PostgreSQL, so the database writes
// it; the operating system's account on SQLite.
func (s *Store) identityValue() (string, []any) {
	if s.engine == Postgres {
		return "session_user", nil
	}
	return "?", []any{osAccount()}
}

// osAccount is the operating system's account running dlqctl (not
// $USER or DLQCTL_USER, which anyone can set), "unknown" when it cannot
// be read.
func osAccount() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "unknown"
}
