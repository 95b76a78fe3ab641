package ledger

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Four eyes: a policy can make a replay or discard of many messages a
// recorded plan (StatusAwaiting) that runs only once someone other than
// its author approved it. The approval is bound to the plan: a digest of
// the frozen manifest and of what decides where the copies go, which the
// run computes again (pkg/batch); a plan changed since is a new plan.

// ErrNotApprovable: the batch does not await an approval (exit 2).
var ErrNotApprovable = errors.New("the batch does not await approval")

// ErrOwnApproval: the author of a batch cannot approve it (exit 2).
var ErrOwnApproval = errors.New("a batch is approved by someone other than its author")

// Approval is a second person's approval of a batch's plan.
type Approval struct {
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Why    string    `json:"why"`
	Digest string    `json:"digest"`
	// Approver is who approved as the ledger knows them (identity.go);
	// "" for an approval an older dlqctl recorded.
	Approver string `json:"approver,omitempty"`
}

// ManifestDigest is a digest of a batch's action and frozen manifest (its
// addresses, in order): what an approval is bound to, with the settings
// the caller adds.
func (s *Store) ManifestDigest(ctx context.Context, id string) (string, error) {
	b, err := s.Batch(ctx, id)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", b.ID, b.Action, b.Size)
	err = s.each(ctx, `SELECT partition_id, transaction_id FROM batch_items WHERE batch_id = ? ORDER BY seq`, func(rows *sql.Rows) error {
		var p, t string
		err := rows.Scan(&p, &t)
		fmt.Fprintf(h, "%s/%s\x00", p, t)
		return err
	}, b.ID)
	if err != nil {
		return "", s.wrap("reading the manifest", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Approve records an approval of a batch awaiting one, bound to digest;
// the batch is then recorded (it may run). The approver is the ledger's
// identity of this session (Identity): on a ledger that vouches for it
// (PostgreSQL), the database role, written by the database, which is
// also the name recorded; elsewhere by, the name the caller gives. The
// author of the batch is refused, whether told by that identity or by
// the name the batch was recorded under.
func (s *Store) Approve(ctx context.Context, id, by, why, digest string, now time.Time) (*Batch, error) {
	b, err := s.Batch(ctx, id)
	if err != nil {
		return nil, err
	}
	who, err := s.Identity(ctx)
	if err != nil {
		return nil, err
	}
	if s.Vouches() {
		by = who
	}
	switch {
	case b.Status != StatusAwaiting:
		return nil, fmt.Errorf("%w: batch %s is %s", ErrNotApprovable, b.ID, b.Shown())
	case by == b.By || who == b.By:
		return nil, fmt.Errorf("%w: %s recorded batch %s", ErrOwnApproval, b.By, b.ID)
	case who == b.Author:
		return nil, fmt.Errorf("%w: %s recorded batch %s (as %s)", ErrOwnApproval, s.identityName(who), b.ID, b.By)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, s.wrap("approving the batch", err)
	}
	defer tx.Rollback()
	// The approval first: on PostgreSQL the database lets a batch that
	// needs one leave awaiting-approval only once it exists (guard.go).
	val, args := s.identityValue()
	if _, err := s.exec(ctx, tx, `INSERT INTO approvals (batch_id, by_name, at, why, digest, approver) VALUES (?, ?, ?, ?, ?, `+val+`)`,
		append([]any{b.ID, by, fmtTime(now), why, digest}, args...)...); err != nil {
		return nil, s.wrap("approving the batch", err)
	}
	res, err := s.exec(ctx, tx, `UPDATE batches SET status = ? WHERE id = ? AND status = ?`, StatusRecorded, b.ID, StatusAwaiting)
	if err != nil {
		return nil, s.wrap("approving the batch", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil, fmt.Errorf("%w: batch %s changed while it was being approved; look again (decisions show %s)", ErrNotApprovable, b.ID, b.ID)
	}
	if err := s.auditTx(ctx, tx, now, b.Broker, b.ID, "approved", by, why); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, s.wrap("approving the batch", err)
	}
	b.Status = StatusRecorded
	return b, nil
}

// identityName says an identity as the ledger knows it.
func (s *Store) identityName(who string) string {
	if s.Vouches() {
		return "database role " + who
	}
	return "operating-system account " + who
}

// ApprovalOf is a batch's approval, or nil.
func (s *Store) ApprovalOf(ctx context.Context, id string) (*Approval, error) {
	var a Approval
	var at string
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT by_name, at, why, digest, `+strings.Replace(s.authorCol(), "author", "approver", 1)+` FROM approvals WHERE batch_id = ?`), id).Scan(&a.By, &at, &a.Why, &a.Digest, &a.Approver)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, s.wrap("reading the approval", err)
	}
	a.At = parseTime(sql.NullString{String: at, Valid: true})
	return &a, nil
}

// Threshold is the team's approval threshold as the ledger keeps it: a
// replay, discard or restore of more than Above messages needs a second
// person's approval. Above 0: the ledger sets none.
type Threshold struct {
	Above int       `json:"minMessages"`
	At    time.Time `json:"at,omitzero"`
	By    string    `json:"by,omitempty"`
	Role  string    `json:"role,omitempty"`
	Why   string    `json:"why,omitempty"`
}

const thresholdName = "approval.min-messages"

// ApprovalThreshold reads the ledger's threshold (zero Above: none).
func (s *Store) ApprovalThreshold(ctx context.Context) (Threshold, error) {
	var t Threshold
	if s.schema < guardSchema {
		return t, nil
	}
	var v, at string
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT value, at, by_name, by_role, why FROM ledger_settings WHERE name = ?`), thresholdName).Scan(&v, &at, &t.By, &t.Role, &t.Why)
	if errors.Is(err, sql.ErrNoRows) {
		return t, nil
	}
	if err != nil {
		return t, s.wrap("reading the approval threshold", err)
	}
	t.Above, _ = strconv.Atoi(v)
	t.At = parseTime(sql.NullString{String: at, Valid: true})
	return t, nil
}

// SetApprovalThreshold records the team's threshold (0 removes it), with
// who and why in the audit. On PostgreSQL only the role that owns the
// ledger may (ErrRefused otherwise).
func (s *Store) SetApprovalThreshold(ctx context.Context, above int, by, why string, now time.Time) error {
	if err := s.checkFile(ctx); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("setting the approval threshold", err)
	}
	defer tx.Rollback()
	if above == 0 {
		_, err = s.exec(ctx, tx, `DELETE FROM ledger_settings WHERE name = ?`, thresholdName)
	} else {
		who, whoArgs := s.identityValue()
		_, err = s.exec(ctx, tx, `INSERT INTO ledger_settings (name, value, at, by_name, why, by_role) VALUES (?, ?, ?, ?, ?, `+who+`)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value, at = excluded.at, by_name = excluded.by_name, why = excluded.why, by_role = excluded.by_role`,
			append([]any{thresholdName, strconv.Itoa(above), fmtTime(now), by, why}, whoArgs...)...)
	}
	if err != nil {
		return s.wrap("setting the approval threshold", err)
	}
	detail := fmt.Sprintf("approval above %d messages: %s", above, why)
	if above == 0 {
		detail = "no approval threshold: " + why
	}
	if err := s.auditTx(ctx, tx, now, "", "", "approval-threshold", by, detail); err != nil {
		return err
	}
	return s.wrap("setting the approval threshold", tx.Commit())
}
