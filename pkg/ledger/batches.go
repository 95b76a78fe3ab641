package ledger

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// The decision actions.
const (
	ActionReplay  = "replay"
	ActionDiscard = "discard"
	ActionHold    = "hold"
	// ActionRestore re-publishes what a discard archived.
	ActionRestore = "restore"
	// ActionImport publishes the messages of an export file.
	ActionImport = "import"
)

// IsHold reports whether a decision's action is a hold: a decision that
// a batch never executes, in force until its until.
func IsHold(action string) bool { return action == ActionHold }

// actionsThat lists, as SQL, the names of the batch actions that do
// what does asks (deadletter.Actions): batches and the journal record an
// action by its name, so a query about what actions do asks by name.
func actionsThat(does func(*deadletter.Action) bool) string {
	var names []string
	for _, a := range deadletter.Actions() {
		if does(a) {
			names = append(names, sqlString(a.Name))
		}
	}
	return strings.Join(names, ", ")
}

// sqlString is s as an SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// DecisionActions are the actions dlq decide records.
func DecisionActions() []string { return []string{ActionReplay, ActionDiscard, ActionHold} }

// Batch statuses.
const (
	StatusRecorded    = "recorded"          // decided, not executed
	StatusRunning     = "running"           // execution started (or was interrupted by a crash)
	StatusInterrupted = "interrupted"       // stopped by SIGINT or a guard; resumable
	StatusDone        = "done"              // executed, no failures
	StatusFailed      = "failed"            // executed, some addresses failed or are unknown
	StatusResolved    = "resolved"          // a hold whose messages have all left the DLQ
	StatusCancelled   = "cancelled"         // ended by decisions cancel: no longer a decision
	StatusVerified    = "verified"          // done, and every copy it published was consumed (decisions verify)
	StatusAwaiting    = "awaiting-approval" // a large batch recorded, not to run until a second person approves it
)

// ErrNotCancellable: a batch that was carried out (done), a hold that
// resolved, or one already cancelled cannot be cancelled (exit 2).
var ErrNotCancellable = errors.New("the batch cannot be cancelled")

// Batch is one recorded decision and, once executed, its outcome.
type Batch struct {
	ID          string         `json:"id"`
	Broker      string         `json:"broker"`
	Action      string         `json:"action"`
	By          string         `json:"by"`
	At          time.Time      `json:"at"`
	Why         string         `json:"why"`
	Owner       string         `json:"owner,omitempty"`
	Until       time.Time      `json:"until,omitzero"`
	Selection   string         `json:"selection"`
	Size        int            `json:"size"`
	Destination string         `json:"destination,omitempty"`
	ExecutedAt  time.Time      `json:"executedAt,omitzero"`
	Status      string         `json:"status"`
	Outcome     map[string]int `json:"outcome,omitempty"`
	// Settings is what the batch was last executed with (rate, path,
	// destination, …), as its command recorded them: a resume reuses them.
	Settings json.RawMessage `json:"settings,omitempty"`
	// Stale: the ledger says running, but the run is gone (RunGone);
	// Shown says interrupted.
	Stale bool `json:"stale,omitempty"`
	// NeedsApproval: the batch runs only once someone other than its
	// author approved its plan (approval.go).
	NeedsApproval bool `json:"needsApproval,omitempty"`
	// Author is who recorded the batch as the ledger knows them
	// (identity.go): the database role on PostgreSQL, the operating
	// system's account on SQLite; By is the name given (--by). "" for a
	// batch an older dlqctl recorded.
	Author string `json:"author,omitempty"`

	runner string
	beat   time.Time
}

// ManifestItem is one frozen address of a batch with a snapshot of its row.
type ManifestItem struct {
	Address       deadletter.Address `json:"address"`
	MessageID     string             `json:"messageId,omitempty"`
	Queue         string             `json:"queue"`
	Partition     string             `json:"partition"`
	Groups        []string           `json:"consumerGroups"`
	Error         string             `json:"errorMessage"`
	RetryCount    int                `json:"retryCount"`
	FailedAt      time.Time          `json:"failedAt"`
	Payload       json.RawMessage    `json:"data,omitempty"`
	Undecryptable bool               `json:"undecryptable,omitempty"`
	// Checked: Payload is what the broker's detail route returned (the
	// released server's list shows encrypted payloads as envelopes).
	Checked bool `json:"checked,omitempty"`
	// Rows are every dead-letter row of the address when the batch was
	// recorded, every consumer group's: a delete removes them all.
	Rows []ManifestRow `json:"rows,omitempty"`
}

// ManifestRow is one dead-letter row of a manifest's address.
type ManifestRow struct {
	// ID is the id the broker listed the row under: on Queen 1.6 and 2.x
	// the row's own (the move's key), elsewhere the message's.
	ID            string    `json:"id,omitempty"`
	ConsumerGroup string    `json:"consumerGroup"`
	Error         string    `json:"errorMessage"`
	RetryCount    int       `json:"retryCount"`
	FailedAt      time.Time `json:"failedAt"`
	Selected      bool      `json:"selected"` // matched the selection (the others go with their message)
}

// NewBatchID returns a sortable, readable id: UTC time plus 4 random hex.
func NewBatchID(now time.Time) string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// CreateBatch records a batch and its frozen manifest in one transaction:
// an interrupted write leaves no half-recorded batch.
func (s *Store) CreateBatch(ctx context.Context, b *Batch, items []ManifestItem) error {
	i := 0
	return s.CreateBatchFrom(ctx, b, len(items), func() (ManifestItem, error) {
		i++
		return items[i-1], nil
	})
}

// CreateBatchFrom is CreateBatch with the manifest's n items read from
// next, in order, as they are written (a staged snapshot): an error from
// next records nothing.
func (s *Store) CreateBatchFrom(ctx context.Context, b *Batch, n int, next func() (ManifestItem, error)) error {
	if b.ID == "" {
		b.ID = NewBatchID(b.At)
	}
	if b.Status == "" {
		b.Status = StatusRecorded
	}
	b.Size = n
	if err := s.checkFile(ctx); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("recording the batch", err)
	}
	defer tx.Rollback()
	settings := "{}"
	if len(b.Settings) > 0 {
		settings = string(b.Settings)
	}
	cols, vals := `id, broker, action, by_name, at, why, owner, until_at, selection, size, destination, status, settings, active_at`, `?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?`
	args := []any{b.ID, b.Broker, b.Action, b.By, fmtTime(b.At), b.Why, b.Owner, nullTime(b.Until), b.Selection, b.Size, b.Destination, b.Status, settings, fmtTime(b.At)}
	if b.NeedsApproval {
		cols, vals = cols+", needs_approval", vals+", 1"
	}
	if s.schema >= authorSchema {
		who, whoArgs := s.identityValue()
		cols, vals, args = cols+", author", vals+", "+who, append(args, whoArgs...)
	}
	if err := tx.QueryRowContext(ctx, s.rebind(`INSERT INTO batches (`+cols+`) VALUES (`+vals+`) RETURNING `+s.authorCol()), args...).Scan(&b.Author); err != nil {
		return s.wrap("recording the batch", err)
	}
	var queues []string
	seenQ := map[string]bool{}
	var failed error
	err = s.insertRows(ctx, tx, `INSERT INTO batch_items (batch_id, seq, broker, partition_id, transaction_id, queue, partition_name, groups, error, retry_count, failed_at, payload, undecryptable, row_list, checked, message_id) VALUES `,
		"", 16, n, func(i int) []any {
			it, err := ManifestItem{}, failed
			if err == nil {
				it, err = next()
			}
			if err != nil {
				// A row the manifest's key refuses ends the insert; the
				// error said is next's.
				failed = err
				return []any{b.ID, i, b.Broker, "", "", "", "", "", "", 0, "", nil, 0, "", 0, ""}
			}
			if !seenQ[it.Queue] {
				seenQ[it.Queue] = true
				queues = append(queues, it.Queue)
			}
			groups, _ := json.Marshal(it.Groups)
			var payload any
			if len(it.Payload) > 0 {
				payload = string(it.Payload)
			}
			var rows string
			if len(it.Rows) > 0 {
				b, _ := json.Marshal(it.Rows)
				rows = string(b)
			}
			return []any{b.ID, i, b.Broker, it.Address.PartitionID, it.Address.TransactionID, it.Queue, it.Partition,
				string(groups), it.Error, it.RetryCount, fmtTime(it.FailedAt), payload, boolInt(it.Undecryptable), rows, boolInt(it.Checked), it.MessageID}
		})
	if failed != nil {
		return failed
	}
	if err != nil {
		return s.wrap("recording the manifest", err)
	}
	if err := s.insertRows(ctx, tx, `INSERT INTO batch_queues (batch_id, queue) VALUES `, "", 2, len(queues), func(i int) []any {
		return []any{b.ID, queues[i]}
	}); err != nil {
		return s.wrap("recording the batch's queues", err)
	}
	if err := s.setCurrent(ctx, tx, b.ID, fmtTime(b.At)); err != nil {
		return s.wrap("recording the current decisions", err)
	}
	if err := s.auditTx(ctx, tx, b.At, b.Broker, b.ID, "decided", b.By,
		fmt.Sprintf("%s of %d address(es): %s", b.Action, b.Size, b.Why)); err != nil {
		return err
	}
	return s.wrap("recording the batch", tx.Commit())
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// authorSchema is the migration that recorded who wrote a batch and who
// approved it as the ledger knows them (identity.go).
const authorSchema = 19

// authorCol is batches.author where the schema has it (” for a ledger
// as an older dlqctl wrote it, in tests).
func (s *Store) authorCol() string {
	if s.schema < authorSchema {
		return "''"
	}
	return "author"
}

// batchCols are the columns scanBatch reads.
func (s *Store) batchCols() string {
	return `id, broker, action, by_name, at, why, owner, until_at, selection, size, destination, executed_at, status, outcome, settings, runner, beat_at, needs_approval, ` + s.authorCol()
}

func scanBatch(sc interface{ Scan(...any) error }) (*Batch, error) {
	var b Batch
	var at, until, executed, beat sql.NullString
	var outcome, settings, runner string
	var approval int
	if err := sc.Scan(&b.ID, &b.Broker, &b.Action, &b.By, &at, &b.Why, &b.Owner, &until, &b.Selection, &b.Size,
		&b.Destination, &executed, &b.Status, &outcome, &settings, &runner, &beat, &approval, &b.Author); err != nil {
		return nil, err
	}
	b.NeedsApproval = approval != 0
	b.judge(runner, beat)
	if settings != "" && settings != "{}" {
		b.Settings = json.RawMessage(settings)
	}
	b.At, b.Until, b.ExecutedAt = parseTime(at), parseTime(until), parseTime(executed)
	_ = json.Unmarshal([]byte(outcome), &b.Outcome)
	return &b, nil
}

// Batch returns a batch by id or by a unique prefix of its id.
func (s *Store) Batch(ctx context.Context, id string) (*Batch, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT `+s.batchCols()+` FROM batches WHERE id = ? OR id LIKE ? ORDER BY id LIMIT 3`), id, escapeLike(id)+"%")
	if err != nil {
		return nil, s.wrap("reading the batch", err)
	}
	defer rows.Close()
	var found []*Batch
	for rows.Next() {
		b, err := scanBatch(rows)
		if err != nil {
			return nil, s.wrap("reading the batch", err)
		}
		if b.ID == id {
			return b, nil
		}
		found = append(found, b)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("reading the batch", err)
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%w: no batch %q (see dlqctl decisions ls)", ErrNotFound, id)
	case 1:
		return found[0], nil
	}
	return nil, fmt.Errorf("%w: batch id %q is ambiguous; give more of it", ErrNotFound, id)
}

func escapeLike(s string) string {
	return strings.NewReplacer("%", "", "_", "").Replace(s)
}

// BatchFilter narrows Batches.
type BatchFilter struct {
	Broker string // "" = every broker
	Action string
	// Statuses, when set, keeps the batches in one of them.
	Statuses []string
	Since    time.Time
	Limit    int
}

// Batches lists batches, newest first.
func (s *Store) Batches(ctx context.Context, f BatchFilter) ([]Batch, error) {
	q := `SELECT ` + s.batchCols() + ` FROM batches WHERE 1=1`
	var args []any
	if f.Broker != "" {
		q += ` AND broker = ?`
		args = append(args, f.Broker)
	}
	if f.Action != "" {
		q += ` AND action = ?`
		args = append(args, f.Action)
	}
	if len(f.Statuses) > 0 {
		q += ` AND status IN (?` + strings.Repeat(`, ?`, len(f.Statuses)-1) + `)`
		for _, st := range f.Statuses {
			args = append(args, st)
		}
	}
	if !f.Since.IsZero() {
		q += ` AND at >= ?`
		args = append(args, fmtTime(f.Since))
	}
	q += ` ORDER BY at DESC, id DESC`
	if f.Limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, f.Limit)
	}
	rows, err := s.db.QueryContext(ctx, s.rebind(q), args...)
	if err != nil {
		return nil, s.wrap("listing batches", err)
	}
	defer rows.Close()
	var out []Batch
	for rows.Next() {
		b, err := scanBatch(rows)
		if err != nil {
			return nil, s.wrap("listing batches", err)
		}
		out = append(out, *b)
	}
	return out, s.wrap("listing batches", rows.Err())
}

// InBatch reports which of addrs the batch's manifest holds, looked up a
// few hundred addresses a statement by the manifest's address index.
func (s *Store) InBatch(ctx context.Context, broker, batchID string, addrs []deadletter.Address) (map[deadletter.Address]bool, error) {
	out := map[deadletter.Address]bool{}
	err := s.byAddrs(ctx, "reading the manifest", `SELECT partition_id, transaction_id FROM batch_items WHERE broker = ? AND batch_id = ? AND (partition_id, transaction_id) IN `, addrs, func(rows *sql.Rows) error {
		var a deadletter.Address
		if err := rows.Scan(&a.PartitionID, &a.TransactionID); err != nil {
			return err
		}
		out[a] = true
		return nil
	}, broker, batchID)
	return out, err
}

// Manifest returns a batch's frozen addresses in their recorded order.
func (s *Store) Manifest(ctx context.Context, batchID string) ([]ManifestItem, error) {
	return s.manifest(ctx, `WHERE batch_id = ? ORDER BY seq`, batchID)
}

// ManifestRange reads the manifest's items at positions from to to-1
// (fewer at its end): a resume stages its batch a chunk at a time.
func (s *Store) ManifestRange(ctx context.Context, batchID string, from, to int) ([]ManifestItem, error) {
	return s.manifest(ctx, `WHERE batch_id = ? AND seq >= ? AND seq < ? ORDER BY seq`, batchID, from, to)
}

func (s *Store) manifest(ctx context.Context, where string, args ...any) ([]ManifestItem, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT partition_id, transaction_id, queue, partition_name, groups, error, retry_count, failed_at, payload, undecryptable, row_list, checked, message_id
		FROM batch_items `+where), args...)
	if err != nil {
		return nil, s.wrap("reading the manifest", err)
	}
	defer rows.Close()
	var out []ManifestItem
	for rows.Next() {
		var it ManifestItem
		var groups string
		var failed, payload sql.NullString
		var undec, checked int
		var rowList string
		if err := rows.Scan(&it.Address.PartitionID, &it.Address.TransactionID, &it.Queue, &it.Partition, &groups, &it.Error,
			&it.RetryCount, &failed, &payload, &undec, &rowList, &checked, &it.MessageID); err != nil {
			return nil, s.wrap("reading the manifest", err)
		}
		if rowList != "" {
			_ = json.Unmarshal([]byte(rowList), &it.Rows)
		}
		_ = json.Unmarshal([]byte(groups), &it.Groups)
		it.FailedAt = parseTime(failed)
		if payload.Valid {
			it.Payload = json.RawMessage(payload.String)
		}
		it.Undecryptable, it.Checked = undec != 0, checked != 0
		out = append(out, it)
	}
	return out, s.wrap("reading the manifest", rows.Err())
}

// SetBatchSettings records what a batch is executed with.
func (s *Store) SetBatchSettings(ctx context.Context, id string, settings json.RawMessage) error {
	_, err := s.exec(ctx, s.db, `UPDATE batches SET settings = ? WHERE id = ?`, string(settings), id)
	return s.wrap("recording the batch settings", err)
}

// SetBatchStatus records an execution's progress and outcome counts: at
// its start (status running; executedAt, the first run's start, is kept
// from the first) and at its end. now dates the batch's latest activity:
// every journal entry a run writes is dated between its start and its
// end, so a window's outcomes are those of the batches active in it or
// still running (OutcomeCounts).
func (s *Store) SetBatchStatus(ctx context.Context, id, status string, executedAt, now time.Time, outcome map[string]int) error {
	if err := s.checkFile(ctx); err != nil {
		return err
	}
	out, _ := json.Marshal(outcome)
	_, err := s.exec(ctx, s.db, `UPDATE batches SET status = ?, executed_at = COALESCE(executed_at, ?), active_at = ?, outcome = ? WHERE id = ?`,
		status, nullTime(executedAt), fmtTime(now), string(out), id)
	return s.wrap("recording the batch outcome", err)
}

// CancelBatch ends a hold or a replay or discard decision that was not
// carried out (recorded, interrupted, failed, or running with no run
// working on it any more): it is no longer a decision, plans stop
// counting its hold, and check counts its dead letters as undecided. Who
// and why go to the audit.
func (s *Store) CancelBatch(ctx context.Context, id, by, why string, now time.Time) (*Batch, error) {
	b, err := s.Batch(ctx, id)
	if err != nil {
		return nil, err
	}
	switch b.Status {
	case StatusDone, StatusVerified, StatusResolved, StatusCancelled:
		return nil, fmt.Errorf("%w: batch %s is %s", ErrNotCancellable, b.ID, b.Status)
	}
	var working int
	if err := s.db.QueryRowContext(ctx, s.rebind(`SELECT COUNT(*) FROM journal WHERE batch_id = ? AND claim_owner IS NOT NULL AND claim_until > ?`),
		b.ID, fmtTime(now)).Scan(&working); err != nil {
		return nil, s.wrap("reading the journal", err)
	}
	if working > 0 {
		return nil, fmt.Errorf("%w: batch %s is being run now (%d address(es) claimed); stop that run first", ErrNotCancellable, b.ID, working)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, s.wrap("cancelling the batch", err)
	}
	defer tx.Rollback()
	res, err := s.exec(ctx, tx, `UPDATE batches SET status = 'cancelled' WHERE id = ? AND status = ?`, b.ID, b.Status)
	if err != nil {
		return nil, s.wrap("cancelling the batch", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil, fmt.Errorf("%w: batch %s changed while it was being cancelled; look again (decisions show %s)", ErrNotCancellable, b.ID, b.ID)
	}
	if err := s.dropCurrent(ctx, tx, b.ID); err != nil {
		return nil, s.wrap("cancelling the batch", err)
	}
	if err := s.auditTx(ctx, tx, now, b.Broker, b.ID, "cancelled", by, why); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, s.wrap("cancelling the batch", err)
	}
	b.Status = StatusCancelled
	return b, nil
}

var errNoRows = sql.ErrNoRows

func isNoRows(err error) bool { return errors.Is(err, errNoRows) }

// ResolveHolds marks recorded holds of a broker whose every address has
// left the DLQ since the hold (its journal says removed after the hold
// was recorded, or every archived row of it is gone) as resolved. It
// returns how many it marked.
func (s *Store) ResolveHolds(ctx context.Context, broker string) (int, error) {
	res, err := s.exec(ctx, s.db, `UPDATE batches SET status = 'resolved'
		WHERE broker = ? AND action = 'hold' AND status = 'recorded' AND NOT EXISTS (
			SELECT 1 FROM batch_items bi WHERE bi.batch_id = batches.id
			AND NOT EXISTS (SELECT 1 FROM journal j WHERE j.broker = bi.broker AND j.partition_id = bi.partition_id
				AND j.transaction_id = bi.transaction_id AND j.state = 'removed' AND j.updated_at >= batches.at)
			AND NOT (EXISTS (SELECT 1 FROM archive a WHERE a.broker = bi.broker AND a.partition_id = bi.partition_id AND a.transaction_id = bi.transaction_id)
				AND NOT EXISTS (SELECT 1 FROM archive a WHERE a.broker = bi.broker AND a.partition_id = bi.partition_id
					AND a.transaction_id = bi.transaction_id AND a.gone_at IS NULL)))`, broker)
	if err != nil {
		return 0, s.wrap("resolving holds", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// AddressesOf returns the addresses of a broker with this transaction id
// that the ledger knows (journal, manifests or archive): how a bare id is
// found once its message has left the DLQ.
func (s *Store) AddressesOf(ctx context.Context, broker, txid string) ([]deadletter.Address, error) {
	var out []deadletter.Address
	err := s.each(ctx, `SELECT partition_id FROM journal WHERE broker = ? AND transaction_id = ?
		UNION SELECT partition_id FROM batch_items WHERE broker = ? AND transaction_id = ?
		UNION SELECT partition_id FROM archive WHERE broker = ? AND transaction_id = ?`, func(rows *sql.Rows) error {
		a := deadletter.Address{TransactionID: txid}
		err := rows.Scan(&a.PartitionID)
		out = append(out, a)
		return err
	}, broker, txid, broker, txid, broker, txid)
	return out, s.wrap("looking up a transaction id", err)
}
