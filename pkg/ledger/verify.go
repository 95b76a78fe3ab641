package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Copy statuses a verification finds (decisions verify).
const (
	CopyCompleted = "completed"         // every consumer group consumed it
	CopyPending   = "pending"           // not consumed yet (or being consumed)
	CopyDeadAgain = "deadLetteredAgain" // back in the DLQ
	CopyMissing   = "missing"           // gone with no completion: deleted, or retained away
	// CopyNotPublished: an attempt that may have published a copy (a run
	// killed or failed after its intent) left none: not a copy.
	CopyNotPublished = "notPublished"
)

// Copy is a copy a replay published, from the journal.
type Copy struct {
	// Of is the dead letter it replays.
	Of deadletter.Address `json:"of"`
	// Address is the copy's own, where the journal knows it.
	Address deadletter.Address `json:"address"`
	// Queue is where the copy was published ("" when the journal did not
	// record it: the dead letter's own queue, Origin).
	Queue string `json:"queue,omitempty"`
	// Origin is the dead letter's queue, from the batch's manifest.
	Origin string `json:"-"`
	// Seq is the dead letter's place in the manifest: CopiesAfter reads
	// on from the last copy's.
	Seq int `json:"-"`
	// Verified is the copy's status when last asked ("" never asked).
	Verified string `json:"verified,omitempty"`
	// Elsewhere: another hand published it (the broker's console, while
	// the batch held the address); the batch found it there.
	Elsewhere bool `json:"movedElsewhere,omitempty"`
	// Maybe: the journal does not say it was published, only that an
	// attempt under its id was made (a run killed after its intent, a
	// push whose answer was lost, then failed): the broker may hold it.
	Maybe bool `json:"maybe,omitempty"`
}

// copyWhere picks every copy the broker may hold of a batch's replays or
// restores from the journal: the addresses it says were replayed or
// restored (published, or published and removed, the push answered
// queued or duplicate), those another hand replayed while the batch held
// them, and those an attempt may have published under a recorded id
// (inflight, failed, unknown: a run killed, or a push's answer lost).
var copyWhere = `j.batch_id = ? AND j.action IN (` + actionsThat(func(a *deadletter.Action) bool { return a.Publishes }) + `) AND j.replay_txid <> '' AND (j.state IN ('published', 'inflight', 'failed', 'unknown') OR (j.state = 'removed' AND j.outcome IN (` + copiedOutcomes() + `)))`

// copiedOutcomes lists, as SQL, the outcomes of an address whose copy
// was published: what each publishing action says of it, a duplicate
// the broker dropped, and a copy another hand published.
func copiedOutcomes() string {
	out := []string{sqlString(deadletter.OutcomeDuplicate), sqlString(deadletter.OutcomeMovedElsewhere)}
	for _, a := range deadletter.Actions() {
		if a.Publishes {
			out = append(out, sqlString(a.Past))
		}
	}
	return strings.Join(out, ", ")
}

// CountCopies counts the copies a batch published.
func (s *Store) CountCopies(ctx context.Context, batchID string) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT COUNT(*) FROM journal j WHERE `+copyWhere), batchID).Scan(&n)
	return n, s.wrap("reading the journal", err)
}

// CopiesAfter reads at most limit of the copies a batch published, in
// manifest order, after the one at manifest place after (-1 for the
// first): a verification holds a page, never the batch.
func (s *Store) CopiesAfter(ctx context.Context, batchID string, after, limit int) ([]Copy, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT bi.seq, bi.queue, j.partition_id, j.transaction_id, j.replay_partition_id, j.replay_txid, j.replay_queue, j.verified, j.outcome, j.state
		FROM batch_items bi JOIN journal j ON j.broker = bi.broker AND j.partition_id = bi.partition_id AND j.transaction_id = bi.transaction_id
		WHERE bi.batch_id = ? AND bi.seq > ? AND `+copyWhere+`
		ORDER BY bi.seq LIMIT ?`), batchID, after, batchID, limit)
	if err != nil {
		return nil, s.wrap("reading the journal", err)
	}
	defer rows.Close()
	out := make([]Copy, 0, limit)
	for rows.Next() {
		var c Copy
		var outcome, state string
		if err := rows.Scan(&c.Seq, &c.Origin, &c.Of.PartitionID, &c.Of.TransactionID, &c.Address.PartitionID, &c.Address.TransactionID, &c.Queue, &c.Verified, &outcome, &state); err != nil {
			return nil, s.wrap("reading the journal", err)
		}
		c.Elsewhere = outcome == "movedElsewhere"
		c.Maybe = state != Published && state != Removed
		out = append(out, c)
	}
	return out, s.wrap("reading the journal", rows.Err())
}

// Verified is one copy's status, found at a verification.
type Verified struct {
	Of     deadletter.Address
	Status string
}

// SaveVerified records copies' statuses, in one transaction.
func (s *Store) SaveVerified(ctx context.Context, broker string, vs []Verified, at time.Time) error {
	if len(vs) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("recording the verification", err)
	}
	defer tx.Rollback()
	for _, v := range vs {
		if _, err := s.exec(ctx, tx, `UPDATE journal SET verified = ?, verified_at = ? WHERE broker = ? AND partition_id = ? AND transaction_id = ?`,
			v.Status, fmtTime(at), broker, v.Of.PartitionID, v.Of.TransactionID); err != nil {
			return s.wrap("recording the verification", err)
		}
	}
	return s.wrap("recording the verification", tx.Commit())
}

// Verification is one run of decisions verify over a batch.
type Verification struct {
	BatchID string         `json:"batchId"`
	At      time.Time      `json:"at"`
	By      string         `json:"by"`
	Counts  map[string]int `json:"counts"`
	// Complete: every copy was found completed.
	Complete bool `json:"complete"`
}

// RecordVerification appends a verification, marks the batch verified
// when it is complete (and the batch was done), and audits it.
func (s *Store) RecordVerification(ctx context.Context, broker string, v Verification) error {
	counts, _ := json.Marshal(v.Counts)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("recording the verification", err)
	}
	defer tx.Rollback()
	if _, err := s.exec(ctx, tx, `INSERT INTO verifications (broker, batch_id, at, by_name, counts, complete) VALUES (?, ?, ?, ?, ?, ?)`,
		broker, v.BatchID, fmtTime(v.At), v.By, string(counts), boolInt(v.Complete)); err != nil {
		return s.wrap("recording the verification", err)
	}
	if v.Complete {
		if _, err := s.exec(ctx, tx, `UPDATE batches SET status = 'verified' WHERE id = ? AND status = 'done'`, v.BatchID); err != nil {
			return s.wrap("recording the verification", err)
		}
	}
	if err := s.auditTx(ctx, tx, v.At, broker, v.BatchID, "verified", v.By, verificationWords(v)); err != nil {
		return err
	}
	return s.wrap("recording the verification", tx.Commit())
}

func verificationWords(v Verification) string {
	b, _ := json.Marshal(v.Counts)
	if v.Complete {
		return "every copy completed " + string(b)
	}
	return string(b)
}

// LastVerification is a batch's latest verification, nil when it has none.
func (s *Store) LastVerification(ctx context.Context, batchID string) (*Verification, error) {
	var v Verification
	var at sql.NullString
	var counts string
	var complete int
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT batch_id, at, by_name, counts, complete FROM verifications WHERE batch_id = ? ORDER BY at DESC LIMIT 1`), batchID).
		Scan(&v.BatchID, &at, &v.By, &counts, &complete)
	if err == sql.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, s.wrap("reading verifications", err)
	}
	v.At, v.Complete = parseTime(at), complete == 1
	_ = json.Unmarshal([]byte(counts), &v.Counts)
	return &v, nil
}
