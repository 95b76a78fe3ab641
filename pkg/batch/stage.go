package batch

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/replay"
	"github.com/dlqctl/dlqctl/pkg/stream"
)

// Every batch goes through one snapshot on disk, its stage: a SQLite file
// of its own in the temporary directory ($TMPDIR), unlinked once open (a
// process killed mid-plan leaves nothing behind). A fresh selection of any
// kind, a list of addresses, and a recorded batch's manifest are staged
// the same way (fill.go); the plan is made in one pass over the stage
// (plan.go); the manifest and the archive are written from it in replay
// order, and the run reads it a claim at a time. The process holds a
// few chunks of items (chunks) and the plan's figures, never the batch:
// memory is the same for a hundred messages and a million. The stage
// takes about 250 bytes a row beside the payloads.
//
// Tables:
//
//	items    the addresses, numbered from 1 in the order they were first
//	         staged (the list's, newest failure first; the manifest's),
//	         each with the first row the selection chose of it
//	rows     the batch's other dead-letter rows, each once: sel=1 the
//	         rows the selection (or manifest) chose, sel=0 the other rows
//	         of their addresses, which a delete removes too
//	now      the DLQ's rows now, without payloads, read to widen a
//	         selection to whole messages and to resume a recorded batch
//
// A row has as columns only what a statement of the stage looks at (its
// address in now, its group, its failure time); the rest is its body,
// one value (rowBody). SQLite's cost of a row grows with its columns
// more than with its bytes (a row of fourteen columns took about four
// times as long to write as one of a single value), and with the rows: a
// message failed in one group, most of a DLQ, is one row, its item.
//	asked    the detail route's answers for explicit addresses
//	arranged the items a run acts on, in replay order (pos from 0)

// stage is a batch's snapshot on disk.
type stage struct {
	db   *sql.DB
	path string
	// n is how many items were staged, arranged how many a run acts on
	// (-1 until arranged).
	n, arranged int
	closed      bool
	// k numbers the rows staged, in the order they were.
	k int64
	// pairs are the queues and consumer groups of the rows staged, into
	// rows or into now (whose rows are the DLQ's, of the queues the batch
	// reads): the groups a re-push may reach.
	pairs map[[2]string]struct{}
	// counted are the chains the plan's pass counted, for toQueue: a run
	// arranges by them without counting again.
	counted *countedChains
	// stmts are the statements the stage runs again and again, prepared
	// once (a plan reads ahead on another goroutine: mu).
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

const stagePattern = "dlqctl-stage-*.db"

// staleStage is how old a stage file left in the temporary directory
// must be before a new stage removes it. A stage's file is unlinked once
// open, a moment after it is made, so one that stays was left by a
// process killed in that moment (a cron job's timeout, kill -9).
const staleStage = time.Hour

// zeroTime stands for a row without a failure time: it sorts first, as
// the zero time.Time does.
const zeroTime = math.MinInt64

func openStage(ctx context.Context) (st *stage, err error) {
	sweepStages(time.Now().Add(-staleStage))
	f, err := os.CreateTemp("", stagePattern)
	if err != nil {
		return nil, stageErr(ctx, "staging the snapshot", err)
	}
	path := f.Name()
	_ = f.Close()
	defer func() {
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	q := url.Values{}
	// Nothing here outlives the process, nor is shared with another: no
	// journal, no syncs, no file locks taken and given back a statement.
	q.Add("_pragma", "locking_mode(EXCLUSIVE)")
	q.Add("_pragma", "journal_mode(OFF)")
	q.Add("_pragma", "synchronous(OFF)")
	q.Add("_pragma", "temp_store(FILE)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, stageErr(ctx, "staging the snapshot", err)
	}
	// One connection: the file is opened once, then unlinked.
	db.SetMaxOpenConns(1)
	st = &stage{db: db, path: path, arranged: -1, stmts: map[string]*sql.Stmt{}, pairs: map[[2]string]struct{}{}}
	for _, q := range []string{
		// Kept in the order a plan and a run read them: an item's rows
		// together, the selected ones first, each as it was staged.
		`CREATE TABLE rows (item INTEGER NOT NULL, sel INTEGER NOT NULL, k INTEGER NOT NULL, grp TEXT NOT NULL,
			failed INTEGER NOT NULL, -- Unix nanoseconds (zeroTime: none)
			body BLOB NOT NULL,
			PRIMARY KEY (item, sel DESC, k)) WITHOUT ROWID`,
		`CREATE TABLE now (k INTEGER PRIMARY KEY, pid TEXT NOT NULL, tid TEXT NOT NULL, grp TEXT NOT NULL,
			failed INTEGER NOT NULL, maybe INTEGER NOT NULL, body BLOB NOT NULL)`,
		`CREATE TABLE asked (n INTEGER PRIMARY KEY, pid TEXT NOT NULL, tid TEXT NOT NULL, state INTEGER NOT NULL, queue TEXT NOT NULL, payload TEXT)`,
		`CREATE TABLE items (
			item    INTEGER PRIMARY KEY,
			pid     TEXT NOT NULL,
			tid     TEXT NOT NULL,
			queue   TEXT NOT NULL,
			part    TEXT NOT NULL,
			mid     TEXT NOT NULL,    -- its first selected row's message id
			v7      INTEGER NOT NULL,
			k       INTEGER,          -- its first selected row (NULL: it is in rows, see sealRows)
			grp     TEXT,
			failed  INTEGER,
			body    BLOB,
			first   INTEGER NOT NULL DEFAULT 0, -- its earliest failure, every row's (once arranged)
			payload TEXT,             -- the message: the list's, or the detail route's when checked
			checked INTEGER NOT NULL,
			absent  INTEGER NOT NULL DEFAULT 0, -- not in the DLQ now (a resume)
			skipped INTEGER NOT NULL DEFAULT 0, -- under a hold, left out by --skip-held
			pinned  INTEGER NOT NULL DEFAULT 0, -- its journal keeps it on the manual path
			hold    TEXT              -- the active hold that covers it
		)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			st.close()
			return nil, stageErr(ctx, "staging the snapshot", err)
		}
	}
	if os.Remove(path) == nil {
		st.path = ""
	}
	return st, nil
}

// sweepStages removes the stage files in the temporary directory last
// changed before before.
func sweepStages(before time.Time) {
	left, _ := filepath.Glob(filepath.Join(os.TempDir(), stagePattern))
	for _, path := range left {
		if fi, err := os.Stat(path); err == nil && fi.ModTime().Before(before) {
			_ = os.Remove(path)
		}
	}
}

// close lets the stage go: its file is removed (if it could not be
// unlinked while open).
func (st *stage) close() {
	if st == nil || st.closed {
		return
	}
	st.closed = true
	for _, s := range st.stmts {
		_ = s.Close()
	}
	_ = st.db.Close()
	if st.path != "" {
		_ = os.Remove(st.path)
	}
}

// exec runs statements on the stage, said as doing when one fails.
func (st *stage) exec(ctx context.Context, doing string, qs ...string) error {
	for _, q := range qs {
		if _, err := st.db.ExecContext(ctx, q); err != nil {
			return stageErr(ctx, doing, err)
		}
	}
	return nil
}

// writer stages rows into a table (rows or now) in one transaction, a
// few dozen rows a statement. Into rows, an item is made as its first
// selected row is staged (items are numbered in the order they are first
// met, from 1, and an item's selected rows come before its others): the
// item has that row's address, queue, partition, message id and flags,
// and its payload only when the detail route gave it.
type writer struct {
	st    *stage
	tx    *sql.Tx
	rows  *inserts
	items *inserts // nil into now
}

// inserts writes the rows of one table a statement of writeBatch at a
// time (the last few in one of their own).
type inserts struct {
	into  string // INSERT INTO table (columns) VALUES
	width int    // values a row
	many  *sql.Stmt
	args  []any
}

// writeBatch is how many rows one statement writes: a statement's round
// trip through the driver costs about as much as a few rows.
const writeBatch = 64

func newInserts(ctx context.Context, tx *sql.Tx, into string, width int) (*inserts, error) {
	in := &inserts{into: into, width: width, args: make([]any, 0, writeBatch*width)}
	var err error
	in.many, err = tx.PrepareContext(ctx, in.statement(writeBatch))
	return in, err
}

// statement inserts n rows.
func (in *inserts) statement(n int) string {
	one := "(" + strings.Repeat("?, ", in.width-1) + "?)"
	return in.into + strings.Repeat(one+", ", n-1) + one
}

// add queues a row's values, writing the statement once it is full.
func (in *inserts) add(ctx context.Context, tx *sql.Tx, vals ...any) error {
	if in.args = append(in.args, vals...); len(in.args) < writeBatch*in.width {
		return nil
	}
	return in.flush(ctx, tx)
}

// flush writes the rows queued since the last.
func (in *inserts) flush(ctx context.Context, tx *sql.Tx) error {
	var err error
	switch {
	case len(in.args) == 0:
	case len(in.args) == writeBatch*in.width:
		_, err = in.many.ExecContext(ctx, in.args...)
	default:
		_, err = tx.ExecContext(ctx, in.statement(len(in.args)/in.width), in.args...)
	}
	clear(in.args)
	in.args = in.args[:0]
	return stageErr(ctx, "staging the snapshot", err)
}

func (in *inserts) close() {
	if in != nil && in.many != nil {
		_ = in.many.Close()
	}
}

// write begins staging rows into table: rows (sel: selected) or now
// (sel: may be a copy, see fillNow).
func (st *stage) write(ctx context.Context, table string) (w *writer, err error) {
	tx, err := st.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, stageErr(ctx, "staging the snapshot", err)
	}
	w = &writer{st: st, tx: tx}
	defer func() {
		if err != nil {
			w.rows.close()
			w.items.close()
			_ = tx.Rollback()
			err = stageErr(ctx, "staging the snapshot", err)
		}
	}()
	if table == "now" {
		w.rows, err = newInserts(ctx, tx, `INSERT INTO now (k, pid, tid, grp, failed, maybe, body) VALUES `, 7)
		return w, err
	}
	if w.rows, err = newInserts(ctx, tx, `INSERT INTO rows (item, sel, k, grp, failed, body) VALUES `, 6); err != nil {
		return nil, err
	}
	w.items, err = newInserts(ctx, tx, `INSERT INTO items (item, pid, tid, queue, part, mid, v7, payload, checked, k, grp, failed, body) VALUES `, 13)
	return w, err
}

// add stages a row of the item numbered item (0 in now); payload is the
// message as the row carries it (checked: as the detail route returned
// it), flag the table's own column.
func (w *writer) add(ctx context.Context, item int, r deadletter.Row, payload json.RawMessage, checked, flag bool) error {
	failed := int64(zeroTime)
	if !r.FailedAt.IsZero() {
		failed = r.FailedAt.UnixNano()
	}
	w.st.k++
	v7 := replay.IsUUIDv7(r.ID)
	body := rowBody(r, payload, v7)
	w.st.pairs[[2]string{r.Queue, r.ConsumerGroup}] = struct{}{}
	if w.items == nil {
		return w.rows.add(ctx, w.tx, w.st.k, r.PartitionID, r.TransactionID, r.ConsumerGroup, failed, flag, body)
	}
	switch {
	case flag && item == w.st.n+1:
		w.st.n++
		var kept any
		if checked && len(payload) > 0 {
			kept = string(payload)
		}
		return w.items.add(ctx, w.tx, item, r.PartitionID, r.TransactionID, r.Queue, r.Partition, r.ID, v7, kept, checked, w.st.k, r.ConsumerGroup, failed, body)
	case flag && item > w.st.n:
		return fmt.Errorf("staging the snapshot: item %d staged before item %d", item, w.st.n+1)
	}
	return w.rows.add(ctx, w.tx, item, flag, w.st.k, r.ConsumerGroup, failed, body)
}

// A row's body holds what the stage's statements never look at: a byte
// of flags (bodyV7, bodyPayload), the retry count (a varint),
// the message id, queue, partition and error (each its length, a
// uvarint, then its bytes), then the payload, to the end.
const (
	bodyV7      = 1 << iota // the message id is a UUIDv7
	bodyPayload             // a payload follows (none: NULL, as the list gave none or it was not kept)
)

// rowBody is r's body, with payload as the row's message.
func rowBody(r deadletter.Row, payload json.RawMessage, v7 bool) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+4*binary.MaxVarintLen32+len(r.ID)+len(r.Queue)+len(r.Partition)+len(r.ErrorMessage)+len(payload))
	var flags byte
	if v7 {
		flags |= bodyV7
	}
	if len(payload) > 0 {
		flags |= bodyPayload
	}
	b = append(b, flags)
	b = binary.AppendVarint(b, int64(r.RetryCount))
	for _, f := range []string{r.ID, r.Queue, r.Partition, r.ErrorMessage} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	if len(payload) > 0 {
		b = append(b, payload...)
	}
	return b
}

// body is a row's body read back (its bytes are SQLite's until the next
// row: the payload is a copy).
type body struct {
	id, queue, part, err string
	retries              int
	v7                   bool
	payload              json.RawMessage
}

// readBody reads a row's body.
func readBody(b []byte) (body, error) {
	var out body
	if len(b) == 0 {
		return out, errors.New("a staged row without its body")
	}
	flags := b[0]
	b = b[1:]
	retries, n := binary.Varint(b)
	if n <= 0 {
		return out, errors.New("a staged row's body is cut short")
	}
	b = b[n:]
	out.retries, out.v7 = int(retries), flags&bodyV7 != 0
	for _, f := range []*string{&out.id, &out.queue, &out.part, &out.err} {
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return out, errors.New("a staged row's body is cut short")
		}
		*f = string(b[n : n+int(l)])
		b = b[n+int(l):]
	}
	if flags&bodyPayload != 0 {
		out.payload = json.RawMessage(slices.Clone(b))
	}
	return out, nil
}

// end commits what was written (or, on err, rolls it back and returns err).
func (w *writer) end(ctx context.Context, err error) error {
	if err == nil {
		err = w.rows.flush(ctx, w.tx)
	}
	if err == nil && w.items != nil {
		err = w.items.flush(ctx, w.tx)
	}
	w.rows.close()
	w.items.close()
	if err != nil {
		_ = w.tx.Rollback()
		return err
	}
	if err := w.tx.Commit(); err != nil {
		return stageErr(ctx, "staging the snapshot", err)
	}
	return nil
}

// sealRows makes the items of selected rows staged by a statement from
// now rather than by a writer (which makes them as it goes), by the
// numbers they were staged under: each from its first selected row, as a
// writer makes them, a chunk of items at a time. Their rows stay in
// rows.
func (st *stage) sealRows(ctx context.Context) error {
	var last int
	if err := st.db.QueryRowContext(ctx, `SELECT coalesce(max(item), 0) FROM rows`).Scan(&last); err != nil {
		return stageErr(ctx, "staging the snapshot", err)
	}
	type first struct {
		item     int
		pid, tid string
		b        body
	}
	for from := 1; from <= last; from += sealChunk {
		var got []first
		var raw sql.RawBytes
		err := st.each(ctx, "staging the snapshot", `SELECT r.item, n.pid, n.tid, r.body FROM rows r JOIN now n ON n.k = r.k
			WHERE r.item BETWEEN ? AND ? AND r.sel = 1 ORDER BY r.item, r.k`, []any{from, from + sealChunk - 1}, func(rows *sql.Rows) error {
			var f first
			if err := rows.Scan(&f.item, &f.pid, &f.tid, &raw); err != nil {
				return err
			}
			if len(got) > 0 && got[len(got)-1].item == f.item {
				return nil
			}
			var err error
			f.b, err = readBody(raw)
			f.b.payload = nil
			got = append(got, f)
			return err
		})
		if err != nil {
			return err
		}
		w, err := st.write(ctx, "rows")
		if err != nil {
			return err
		}
		for _, f := range got {
			if err = w.items.add(ctx, w.tx, f.item, f.pid, f.tid, f.b.queue, f.b.part, f.b.id, f.b.v7, nil, false, nil, nil, nil, nil); err != nil {
				break
			}
		}
		if err := w.end(ctx, err); err != nil {
			return err
		}
	}
	return st.db.QueryRowContext(ctx, `SELECT count(*) FROM items`).Scan(&st.n)
}

// sealChunk is how many items sealRows makes at a time.
const sealChunk = 1000

// numbering numbers addresses in the order they are first met, from 1,
// holding 16 bytes of hash and 4 of number an address (about 28 in a
// map). Two addresses would share a number only if their 128-bit hashes
// met: at a million addresses, about once in 10^26 stages.
type numbering struct {
	seeds [2]maphash.Seed
	of    map[[2]uint64]int32
}

func newNumbering() *numbering {
	return &numbering{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, of: map[[2]uint64]int32{}}
}

// number is a's number, numbering it if it is new and add says so (0
// when it is new and not).
func (n *numbering) number(a deadletter.Address, add bool) int {
	var k [2]uint64
	for i, seed := range n.seeds {
		var h maphash.Hash
		h.SetSeed(seed)
		h.WriteString(a.PartitionID)
		h.WriteByte('/')
		h.WriteString(a.TransactionID)
		k[i] = h.Sum64()
	}
	if i, ok := n.of[k]; ok {
		return int(i)
	}
	if !add {
		return 0
	}
	i := int32(len(n.of) + 1)
	n.of[k] = i
	return int(i)
}

// len is how many addresses were numbered.
func (n *numbering) len() int { return len(n.of) }

// byAddress indexes the items by address, for what looks them up by it
// (a widening, a resume, a list of addresses).
func (st *stage) byAddress(ctx context.Context) error {
	return st.exec(ctx, "staging the snapshot", `CREATE UNIQUE INDEX IF NOT EXISTS items_addr ON items (pid, tid)`)
}

// takeNow adds to the staged addresses the rows of theirs that now has
// and the stage does not (other groups', other failures'), as rows the
// selection did not choose, each once as first listed.
func (st *stage) takeNow(ctx context.Context) error {
	if err := st.byAddress(ctx); err != nil {
		return err
	}
	return st.exec(ctx, "widening the snapshot",
		`INSERT INTO rows (item, sel, k, grp, failed, body)
			SELECT i.item, 0, n.k, n.grp, n.failed, n.body
			FROM now n JOIN items i ON i.pid = n.pid AND i.tid = n.tid
			WHERE n.k IN (SELECT min(k) FROM now GROUP BY pid, tid, grp, failed)
			AND NOT (i.grp IS n.grp AND i.failed IS n.failed)
			AND NOT EXISTS (SELECT 1 FROM rows r WHERE r.item = i.item AND r.grp = n.grp AND r.failed = n.failed)
			ORDER BY n.k`,
	)
}

// queues are the staged items' queues.
func (st *stage) queues(ctx context.Context) ([]string, error) {
	var out []string
	err := st.each(ctx, "reading the staged snapshot", `SELECT DISTINCT queue FROM items`, nil, func(rows *sql.Rows) error {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

// stmt is q prepared, once.
func (st *stage) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if s, ok := st.stmts[q]; ok {
		return s, nil
	}
	s, err := st.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	st.stmts[q] = s
	return s, nil
}

// each runs a query and calls f for each row; the rows are closed before
// it returns (the stage has one connection).
func (st *stage) each(ctx context.Context, doing, q string, args []any, f func(*sql.Rows) error) error {
	s, err := st.stmt(ctx, q)
	if err != nil {
		return stageErr(ctx, doing, err)
	}
	rows, err := s.QueryContext(ctx, args...)
	if err != nil {
		return stageErr(ctx, doing, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := f(rows); err != nil {
			return stageErr(ctx, doing, err)
		}
	}
	return stageErr(ctx, doing, rows.Err())
}

// placed is a staged item and its place: its number (items.item), or its
// position in replay order.
type placed struct {
	at int
	it replay.Item
	// answered: the plan's pass asked the detail route about it, and
	// its payload (it.Payload, Checked) is to be written beside it.
	answered bool
}

// load reads the items that items picks (itemCols, ordered by place),
// then the rows of theirs in rows that more picks (rowCols, ordered by
// place, selected first, then as staged), each in one ordered scan: a
// join would repeat an item's columns for each of its rows. args are
// both queries'.
func (st *stage) load(ctx context.Context, items, more string, args ...any) ([]placed, error) {
	var out []placed
	var payload, raw sql.RawBytes
	var grp sql.NullString
	var failed sql.NullInt64
	err := st.each(ctx, "reading the staged snapshot", items, args, func(rows *sql.Rows) error {
		var p placed
		it := &p.it
		if err := rows.Scan(&p.at, &it.Address.PartitionID, &it.Address.TransactionID, &it.Queue, &it.Partition, &payload, &it.Checked, &it.Absent, &grp, &failed, &raw); err != nil {
			return err
		}
		if payload != nil {
			it.Payload = json.RawMessage(slices.Clone(payload))
		}
		if out = append(out, p); raw == nil {
			return nil // its rows are all in rows
		}
		return addRow(&out[len(out)-1].it, grp.String, failed.Int64, raw, true)
	})
	if err != nil || len(out) == 0 {
		return out, err
	}
	k := 0
	var at int
	var sel bool
	var g string
	var f int64
	err = st.each(ctx, "reading the staged snapshot", more, args, func(rows *sql.Rows) error {
		if err := rows.Scan(&at, &g, &f, &raw, &sel); err != nil {
			return err
		}
		for k < len(out) && out[k].at < at {
			k++
		}
		if k == len(out) || out[k].at != at {
			return fmt.Errorf("a staged row of item %d, which the stage does not have", at)
		}
		return addRow(&out[k].it, g, f, raw, sel)
	})
	for i := range out {
		settleItem(&out[i].it)
	}
	return out, err
}

// itemCols are what load reads of an item, after its place.
const itemCols = `i.pid, i.tid, i.queue, i.part, i.payload, i.checked, i.absent, i.grp, i.failed, i.body`

// rowCols are what load reads of a row, after its item's place.
const rowCols = `r.grp, r.failed, r.body, r.sel`

// between reads the items numbered from to to (inclusive).
func (st *stage) between(ctx context.Context, from, to int) ([]placed, error) {
	return st.load(ctx, `SELECT i.item, `+itemCols+` FROM items i WHERE i.item BETWEEN ? AND ? ORDER BY i.item`,
		`SELECT r.item, `+rowCols+` FROM rows r WHERE r.item BETWEEN ? AND ? ORDER BY r.item, r.sel DESC, r.k`, from, to)
}

// addRow adds a staged row to its item (whose address, queue and
// partition it has), from its group, failure time and body: the body's
// payload is the list's (for the first selected row; none for the rows a
// selection widened to).
func addRow(it *replay.Item, grp string, failed int64, raw []byte, sel bool) error {
	b, err := readBody(raw)
	if err != nil {
		return err
	}
	r := deadletter.Row{ID: b.id, PartitionID: it.Address.PartitionID, TransactionID: it.Address.TransactionID, Queue: it.Queue,
		Partition: it.Partition, ConsumerGroup: grp, ErrorMessage: b.err, RetryCount: b.retries, Data: b.payload}
	if failed != zeroTime {
		r.FailedAt = time.Unix(0, failed).UTC()
	}
	switch {
	case !sel:
		it.Others = append(it.Others, r)
	case len(it.Rows) > 0:
		// Every selected row carries the message as the list gave it.
		r.Data = it.Rows[0].Data
		it.Rows = append(it.Rows, r)
	default:
		it.Rows = append(it.Rows, r)
	}
	return nil
}

// settleItem keeps an item's payload only when the detail route gave it
// (Checked): otherwise the message is its rows' Data.
func settleItem(it *replay.Item) {
	if !it.Checked {
		it.Payload = nil
	}
}

// chunks calls f with the items a chunk at a time, in their numbered
// order, each chunk first given to ahead. While f works on one chunk, the
// next is read from the stage (stream.Ahead), and each chunk is given to
// ahead as soon as it is read, on a goroutine of its own: the read waits
// on SQLite, ahead on the broker (its calls for two chunks overlap, their
// round trips hidden behind the reads), f on the ledger. Three chunks are
// in hand at most: f's, the one read ahead, and the one being read. Each
// may write to the stage: the writes are few (the stage has one
// connection, which a read holds while it scans).
func (st *stage) chunks(ctx context.Context, size int, ahead, f func([]placed) error) error {
	type chunk struct {
		got  []placed
		done chan error // ahead's, once it returned
	}
	var asking sync.WaitGroup
	defer asking.Wait()
	read := stream.Ahead(ctx, 1, func(ctx context.Context, emit func([]chunk) ([]chunk, bool)) error {
		for from := 1; from <= st.n; from += size {
			got, err := st.between(ctx, from, min(from+size-1, st.n))
			if err != nil {
				return err
			}
			c := chunk{got: got, done: make(chan error, 1)}
			asking.Go(func() { c.done <- ahead(got) })
			if _, ok := emit([]chunk{c}); !ok {
				return nil
			}
		}
		return nil
	})
	for c, err := range read {
		if err != nil {
			return err
		}
		if err := <-c.done; err != nil {
			return err
		}
		if err := f(c.got); err != nil {
			return err
		}
	}
	return nil
}

// mark sets a column of the items numbered in places to v: the plan's
// facts (checked payloads, holds, skips, pins) are few.
func (st *stage) mark(ctx context.Context, col string, v any, places []int) error {
	if len(places) == 0 {
		return nil
	}
	stmt, err := st.stmt(ctx, `UPDATE items SET `+col+` = ? WHERE item = ?`)
	if err != nil {
		return stageErr(ctx, "planning the snapshot", err)
	}
	for _, at := range places {
		if _, err := stmt.ExecContext(ctx, v, at); err != nil {
			return stageErr(ctx, "planning the snapshot", err)
		}
	}
	return nil
}

// checked records what the detail route returned for the item at place.
func (st *stage) checked(ctx context.Context, at int, payload json.RawMessage) error {
	var p any
	if len(payload) > 0 {
		p = string(payload)
	}
	stmt, err := st.stmt(ctx, `UPDATE items SET payload = ?, checked = 1 WHERE item = ?`)
	if err != nil {
		return stageErr(ctx, "staging the snapshot", err)
	}
	if _, err := stmt.ExecContext(ctx, p, at); err != nil {
		return stageErr(ctx, "staging the snapshot", err)
	}
	return nil
}

// nullIfEmpty is s, or NULL for "".
func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// stageErr is err from the stage, said as what was being done; an
// interrupt (ctx done) is said as such, whatever the stage made of it.
func stageErr(ctx context.Context, doing string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// The stage is the only file here, and where it lives is the one
	// thing a person can change: a full disk names it.
	hint := ""
	if msg := err.Error(); strings.Contains(msg, "full") || strings.Contains(msg, "no space") {
		hint = ": free space there, or set TMPDIR to a folder on a larger disk"
	}
	return fmt.Errorf("%s (in TMPDIR, %s): %w%s", doing, os.TempDir(), err, hint)
}
