package ledger

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"time"
)

// AuditEntry is one line of the append-only audit.
type AuditEntry struct {
	At      time.Time `json:"at"`
	Broker  string    `json:"broker"`
	BatchID string    `json:"batchId,omitempty"`
	Kind    string    `json:"kind"`
	By      string    `json:"by,omitempty"`
	Detail  string    `json:"detail"`
	// Role is who wrote the line as the ledger knows them (Identity):
	// on PostgreSQL the database writes it.
	Role string `json:"role,omitempty"`
}

// Audit appends an entry.
func (s *Store) Audit(ctx context.Context, e AuditEntry) error {
	return s.auditTx(ctx, s.db, e.At, e.Broker, e.BatchID, e.Kind, e.By, e.Detail)
}

func (s *Store) auditTx(ctx context.Context, q execer, at time.Time, broker, batch, kind, by, detail string) error {
	var r [4]byte
	_, _ = rand.Read(r[:])
	id := fmtTime(at) + "-" + hex.EncodeToString(r[:])
	cols, vals, args := `id, at, broker, batch_id, kind, by_name, detail`, `?, ?, ?, ?, ?, ?, ?`, []any{id, fmtTime(at), broker, batch, kind, by, detail}
	if s.schema >= guardSchema {
		who, whoArgs := s.identityValue()
		cols, vals, args = cols+", role", vals+", "+who, append(args, whoArgs...)
	}
	_, err := s.exec(ctx, q, `INSERT INTO audit (`+cols+`) VALUES (`+vals+`)`, args...)
	return s.wrap("writing the audit", err)
}

// AuditFor returns a batch's audit entries, oldest first.
func (s *Store) AuditFor(ctx context.Context, batchID string) ([]AuditEntry, error) {
	var out []AuditEntry
	role := "''"
	if s.schema >= guardSchema {
		role = "role"
	}
	err := s.each(ctx, `SELECT at, broker, batch_id, kind, by_name, detail, `+role+` FROM audit WHERE batch_id = ? ORDER BY id`, func(rows *sql.Rows) error {
		var e AuditEntry
		var at sql.NullString
		err := rows.Scan(&at, &e.Broker, &e.BatchID, &e.Kind, &e.By, &e.Detail, &e.Role)
		e.At = parseTime(at)
		out = append(out, e)
		return err
	}, batchID)
	return out, s.wrap("reading the audit", err)
}
