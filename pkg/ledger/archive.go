package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Archived is one dead-letter row as the ledger's archive keeps it.
type Archived struct {
	Broker        string             `json:"broker"`
	Address       deadletter.Address `json:"address"`
	ConsumerGroup string             `json:"consumerGroup"`
	Queue         string             `json:"queue"`
	Partition     string             `json:"partition"`
	MessageID     string             `json:"messageId,omitempty"`
	Error         string             `json:"errorMessage"`
	RetryCount    int                `json:"retryCount"`
	FailedAt      time.Time          `json:"failedAt"`
	Payload       json.RawMessage    `json:"data,omitempty"`
	FirstSeen     time.Time          `json:"firstSeen"`
	LastSeen      time.Time          `json:"lastSeen"`
	GoneAt        time.Time          `json:"goneAt,omitzero"`
	Vanished      bool               `json:"vanished"`
}

// Archiver writes rows to the archive in chunks, one transaction a chunk;
// Flush writes what is left.
type Archiver struct {
	s      *Store
	broker string
	now    time.Time
	buf    []deadletter.Row
	at     map[archiveKey]int // where each buffered row is in buf
	n      int
	// millis: the broker's archive still has rows keyed by a failure time
	// kept to the millisecond (before migration 22), asked once.
	millis *bool
}

// archiveKey is what makes an archived row one row.
type archiveKey struct {
	partition, txid, group string
	failedAt               string // as written: the key's column
}

// NewArchiver starts archiving rows seen at now.
func (s *Store) NewArchiver(broker string, now time.Time) *Archiver {
	return &Archiver{s: s, broker: broker, now: now}
}

// Add queues a row; it is written when the chunk fills or on Flush. A
// row given twice (a paging broker's listing can repeat one that a
// newer dead letter pushed onto the next page) is written once: the
// later copy wins.
func (a *Archiver) Add(ctx context.Context, r deadletter.Row) error {
	k := archiveKey{r.PartitionID, r.TransactionID, r.ConsumerGroup, fmtTime(r.FailedAt)}
	if i, ok := a.at[k]; ok {
		a.buf[i] = r
		return nil
	}
	if a.at == nil {
		a.at = map[archiveKey]int{}
	}
	a.at[k] = len(a.buf)
	a.buf = append(a.buf, r)
	if len(a.buf) >= 1000 {
		return a.Flush(ctx)
	}
	return nil
}

// Count is how many rows were archived.
func (a *Archiver) Count() int { return a.n + len(a.buf) }

// Flush writes the queued rows: new rows are inserted, known ones get
// last_seen (and lose any gone mark: they are back).
func (a *Archiver) Flush(ctx context.Context) error {
	if len(a.buf) == 0 {
		return nil
	}
	s := a.s
	if err := s.checkFile(ctx); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("archiving", err)
	}
	defer tx.Rollback()
	if err := a.rekey(ctx, tx); err != nil {
		return s.wrap("archiving", err)
	}
	seen := fmtTime(a.now)
	err = s.insertRows(ctx, tx, `INSERT INTO archive (broker, partition_id, transaction_id, consumer_group, failed_at, message_id, queue, partition_name, error, retry_count, payload, first_seen, last_seen) VALUES `,
		` ON CONFLICT (broker, partition_id, transaction_id, consumer_group, failed_at)
		DO UPDATE SET last_seen = excluded.last_seen, gone_at = NULL, vanished = 0,
			payload = CASE WHEN excluded.payload IS NULL THEN archive.payload ELSE excluded.payload END`,
		13, len(a.buf), func(i int) []any {
			r := a.buf[i]
			var payload any
			if len(r.Data) > 0 {
				payload = string(r.Data)
			}
			return []any{a.broker, r.PartitionID, r.TransactionID, r.ConsumerGroup, fmtTime(r.FailedAt), r.ID,
				r.Queue, r.Partition, r.ErrorMessage, r.RetryCount, payload, seen, seen}
		})
	if err != nil {
		return s.wrap("archiving", err)
	}
	if err := tx.Commit(); err != nil {
		return s.wrap("archiving", err)
	}
	a.n += len(a.buf)
	a.buf = a.buf[:0]
	clear(a.at)
	return nil
}

// rekey gives the buffered rows' archived rows that an older dlqctl
// keyed by their failure time to the millisecond the key the row has
// now, so that the row is one row (and not a row seen again beside one
// that vanished).
func (a *Archiver) rekey(ctx context.Context, tx *sql.Tx) error {
	if a.millis == nil {
		var one int
		err := tx.QueryRowContext(ctx, a.s.rebind(`SELECT 1 FROM archive WHERE broker = ? AND length(failed_at) = 24 LIMIT 1`), a.broker).Scan(&one)
		if err != nil && err != sql.ErrNoRows {
			return err
		}
		millis := err == nil
		a.millis = &millis
	}
	if !*a.millis {
		return nil
	}
	for _, r := range a.buf {
		now := fmtTime(r.FailedAt)
		if _, err := a.s.exec(ctx, tx, `UPDATE archive SET failed_at = ? WHERE broker = ? AND partition_id = ? AND transaction_id = ? AND consumer_group = ? AND failed_at = ?
			AND NOT EXISTS (SELECT 1 FROM archive a2 WHERE a2.broker = archive.broker AND a2.partition_id = archive.partition_id
				AND a2.transaction_id = archive.transaction_id AND a2.consumer_group = archive.consumer_group AND a2.failed_at = ?)`,
			now, a.broker, r.PartitionID, r.TransactionID, r.ConsumerGroup, r.FailedAt.UTC().Format(tsMillis), now); err != nil {
			return err
		}
	}
	return nil
}

// SyncResult counts what a sync found.
type SyncResult struct {
	Seen     int `json:"seen"`
	Gone     int `json:"gone"`     // left the broker with a recorded replay or discard
	Vanished int `json:"vanished"` // left the broker with no recorded decision
}

// MarkGone closes a sync: every archived row of the broker (and queue,
// when the sync was scoped to one) not seen since syncStart has left the
// broker. Those no replay or discard decision covers are vanished.
func (s *Store) MarkGone(ctx context.Context, broker, queue string, syncStart, now time.Time) (SyncResult, error) {
	var r SyncResult
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return r, s.wrap("marking vanished rows", err)
	}
	defer tx.Rollback()
	scope := ` broker = ? AND gone_at IS NULL AND last_seen < ?`
	args := []any{broker, fmtTime(syncStart)}
	if queue != "" {
		scope += ` AND queue = ?`
		args = append(args, queue)
	}
	res, err := s.exec(ctx, tx, `UPDATE archive SET gone_at = ?, vanished = 1 WHERE`+scope+` AND NOT EXISTS (
		SELECT 1 FROM batch_items bi JOIN batches b ON b.id = bi.batch_id
		WHERE bi.broker = archive.broker AND bi.partition_id = archive.partition_id AND bi.transaction_id = archive.transaction_id
		AND b.action IN (`+actionsThat(func(a *deadletter.Action) bool { return a.Deletes })+`) AND b.status <> 'cancelled')`, append([]any{fmtTime(now)}, args...)...)
	if err != nil {
		return r, s.wrap("marking vanished rows", err)
	}
	n, _ := res.RowsAffected()
	r.Vanished = int(n)
	res, err = s.exec(ctx, tx, `UPDATE archive SET gone_at = ?, vanished = 0 WHERE`+scope, append([]any{fmtTime(now)}, args...)...)
	if err != nil {
		return r, s.wrap("marking gone rows", err)
	}
	n, _ = res.RowsAffected()
	r.Gone = int(n)
	return r, s.wrap("marking vanished rows", tx.Commit())
}

// ArchiveFilter narrows ArchivedRows.
type ArchiveFilter struct {
	Queue        string
	VanishedOnly bool
	Address      *deadletter.Address
}

// ArchivedRows reads the archive of a broker.
func (s *Store) ArchivedRows(ctx context.Context, broker string, f ArchiveFilter) ([]Archived, error) {
	var out []Archived
	err := s.EachArchived(ctx, broker, f, func(a Archived) error {
		out = append(out, a)
		return nil
	})
	return out, err
}

// EachArchived hands fn the archived rows of a broker one at a time,
// newest failure first, a page at a time: no more than a page is held,
// and fn may use the ledger itself (no query is open while it runs).
func (s *Store) EachArchived(ctx context.Context, broker string, f ArchiveFilter, fn func(Archived) error) error {
	var after *Archived
	for {
		page, err := s.archivedPage(ctx, broker, f, after, 500)
		if err != nil {
			return err
		}
		for _, a := range page {
			if err := fn(a); err != nil {
				return err
			}
		}
		if len(page) < 500 {
			return nil
		}
		after = &page[len(page)-1]
	}
}

// archivedPage reads up to limit archived rows after a row, in the order
// EachArchived gives them (keyset paging: each page costs the same).
func (s *Store) archivedPage(ctx context.Context, broker string, f ArchiveFilter, after *Archived, limit int) ([]Archived, error) {
	q := `SELECT broker, partition_id, transaction_id, consumer_group, queue, partition_name, message_id, error, retry_count, failed_at, payload, first_seen, last_seen, gone_at, vanished
		FROM archive WHERE broker = ?`
	args := []any{broker}
	if f.Queue != "" {
		q += ` AND queue = ?`
		args = append(args, f.Queue)
	}
	if f.VanishedOnly {
		q += ` AND vanished = 1`
	}
	if f.Address != nil {
		q += ` AND partition_id = ? AND transaction_id = ?`
		args = append(args, f.Address.PartitionID, f.Address.TransactionID)
	}
	if after != nil {
		q += ` AND (failed_at, partition_id, transaction_id, consumer_group) < (?, ?, ?, ?)`
		args = append(args, fmtTime(after.FailedAt), after.Address.PartitionID, after.Address.TransactionID, after.ConsumerGroup)
	}
	q += fmt.Sprintf(` ORDER BY failed_at DESC, partition_id DESC, transaction_id DESC, consumer_group DESC LIMIT %d`, limit)
	var out []Archived
	err := s.each(ctx, q, func(rows *sql.Rows) error {
		var a Archived
		var failed, first, last, gone, payload sql.NullString
		var vanished int
		if err := rows.Scan(&a.Broker, &a.Address.PartitionID, &a.Address.TransactionID, &a.ConsumerGroup, &a.Queue, &a.Partition, &a.MessageID,
			&a.Error, &a.RetryCount, &failed, &payload, &first, &last, &gone, &vanished); err != nil {
			return err
		}
		a.FailedAt, a.FirstSeen, a.LastSeen, a.GoneAt = parseTime(failed), parseTime(first), parseTime(last), parseTime(gone)
		if payload.Valid {
			a.Payload = json.RawMessage(payload.String)
		}
		a.Vanished = vanished != 0
		out = append(out, a)
		return nil
	}, args...)
	return out, s.wrap("reading the archive", err)
}

// Departed hands fn, one at a time, each archived row of the broker that
// failed at or after since and has left the DLQ since (replayed,
// discarded, vanished): with the rows still in the DLQ, every arrival of
// the window.
func (s *Store) Departed(ctx context.Context, broker string, since time.Time, fn func(queue, errorText string, failedAt time.Time)) error {
	err := s.each(ctx, `SELECT queue, error, failed_at FROM archive WHERE broker = ? AND gone_at IS NOT NULL AND failed_at >= ?`, func(rows *sql.Rows) error {
		var q, e string
		var f sql.NullString
		if err := rows.Scan(&q, &e, &f); err != nil {
			return err
		}
		fn(q, e, parseTime(f))
		return nil
	}, broker, fmtTime(since))
	return s.wrap("reading the archive", err)
}

// MarkRemoved records in the archive that a batch's run removed its
// addresses' rows from the DLQ (the journal says removed): they left
// under a decision, as a sync would find.
func (s *Store) MarkRemoved(ctx context.Context, broker, batchID string, now time.Time) error {
	if err := s.checkFile(ctx); err != nil {
		return err
	}
	_, err := s.exec(ctx, s.db, `UPDATE archive SET gone_at = ?, vanished = 0
		WHERE broker = ? AND gone_at IS NULL AND EXISTS (SELECT 1 FROM journal j WHERE j.broker = archive.broker
			AND j.partition_id = archive.partition_id AND j.transaction_id = archive.transaction_id AND j.batch_id = ? AND j.state = 'removed'
			AND archive.last_seen <= j.updated_at)`, fmtTime(now), broker, batchID)
	return s.wrap("marking removed rows in the archive", err)
}

// ArchivedRowIDs returns, for each address, the ids the broker listed its
// archived rows under (on Queen 1.6 and 2.x the rows' own ids): the rows
// a batch, rm or sync saw, including rows since moved by another hand.
// Addresses are read 400 a statement.
func (s *Store) ArchivedRowIDs(ctx context.Context, broker string, addrs []deadletter.Address) (map[deadletter.Address][]string, error) {
	out := map[deadletter.Address][]string{}
	err := s.byAddrs(ctx, "reading the archive", `SELECT partition_id, transaction_id, message_id FROM archive WHERE broker = ? AND message_id <> '' AND (partition_id, transaction_id) IN `, addrs, func(rows *sql.Rows) error {
		var a deadletter.Address
		var id string
		if err := rows.Scan(&a.PartitionID, &a.TransactionID, &id); err != nil {
			return err
		}
		out[a] = append(out[a], id)
		return nil
	}, broker)
	return out, err
}
