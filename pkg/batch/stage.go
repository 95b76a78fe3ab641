package batch

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"iter"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// A fresh batch planned from the rows as they stream (see stream) stages
// the rows on disk as they pass, in a SQLite file of its own: the
// process holds the plan's figures (about 45 bytes an address), not the
// rows. The stage is read back in replay order to write the manifest and
// the archive, and the run then reads the manifest a claim at a time, so
// a batch of any size runs in bounded memory. The file is unlinked once
// open (a process killed mid-plan leaves nothing behind); it lives in
// the temporary directory ($TMPDIR), about 250 bytes a row beside the
// payloads.

// stage is a snapshot's rows on disk.
type stage struct {
	db   *sql.DB
	path string
	tx   *sql.Tx
	ins  *sql.Stmt
	// chk checks envelopes as the detail route answers (one at a time).
	chk *sql.Stmt
}

const stagePattern = "dlqctl-stage-*.db"

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

// zeroTime stands for a row without a failure time: it sorts first, as
// the zero time.Time does.
const zeroTime = math.MinInt64

// staleStage is how old a stage file left in the temporary directory
// must be before a new stage removes it. A stage's file is unlinked once
// open, a moment after it is made, so one that stays was left by a
// process killed in that moment (a cron job's timeout, kill -9).
const staleStage = time.Hour

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
	// Nothing here outlives the process: no journal, no syncs.
	q.Add("_pragma", "journal_mode(OFF)")
	q.Add("_pragma", "synchronous(OFF)")
	q.Add("_pragma", "temp_store(FILE)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, stageErr(ctx, "staging the snapshot", err)
	}
	// One connection: the file is opened once, then unlinked.
	db.SetMaxOpenConns(1)
	st = &stage{db: db, path: path}
	if _, err := db.ExecContext(ctx, `CREATE TABLE rows (
		k        INTEGER PRIMARY KEY, -- the order the list gave
		item     INTEGER NOT NULL,    -- the address's place in the snapshot
		chain    INTEGER NOT NULL,    -- its destination partition (streamed.chains)
		pid      TEXT NOT NULL,
		tid      TEXT NOT NULL,
		mid      TEXT NOT NULL,
		queue    TEXT NOT NULL,
		part     TEXT NOT NULL,
		grp      TEXT NOT NULL,
		err      TEXT NOT NULL,
		retries  INTEGER NOT NULL,
		failed   INTEGER NOT NULL,    -- Unix nanoseconds (zeroTime: none)
		payload  TEXT                 -- the address's first row's only
	)`); err != nil {
		st.close()
		return nil, stageErr(ctx, "staging the snapshot", err)
	}
	if os.Remove(path) == nil {
		st.path = ""
	}
	if st.tx, err = db.BeginTx(ctx, nil); err == nil {
		st.ins, err = st.tx.PrepareContext(ctx, `INSERT INTO rows (item, chain, pid, tid, mid, queue, part, grp, err, retries, failed, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	}
	if err != nil {
		st.close()
		return nil, stageErr(ctx, "staging the snapshot", err)
	}
	return st, nil
}

// add stages a row of the address at place item; first: its first row
// (the newest), whose payload is the message's.
func (st *stage) add(ctx context.Context, item, chain uint32, r deadletter.Row, first bool) error {
	var payload any
	if first && len(r.Data) > 0 {
		payload = string(r.Data)
	}
	failed := int64(zeroTime)
	if !r.FailedAt.IsZero() {
		failed = r.FailedAt.UnixNano()
	}
	if _, err := st.ins.ExecContext(ctx, item, chain, r.PartitionID, r.TransactionID, r.ID, r.Queue, r.Partition, r.ConsumerGroup,
		r.ErrorMessage, r.RetryCount, failed, payload); err != nil {
		return stageErr(ctx, "staging the snapshot", err)
	}
	return nil
}

// seal ends the staging: the rows are indexed by address and each
// address's figures for the replay order gathered.
func (st *stage) seal(ctx context.Context) error {
	if err := st.ins.Close(); err != nil {
		return stageErr(ctx, "staging the snapshot", err)
	}
	if err := st.tx.Commit(); err != nil {
		return stageErr(ctx, "staging the snapshot", err)
	}
	st.tx, st.ins = nil, nil
	for _, q := range []string{
		`CREATE INDEX rows_item ON rows (item, k)`,
		`CREATE TABLE items (
			item     INTEGER PRIMARY KEY,
			chain    INTEGER NOT NULL,
			first    INTEGER NOT NULL, -- its earliest failure
			mid      TEXT NOT NULL,    -- its newest row's message id
			addr     TEXT NOT NULL,
			idkey    TEXT NOT NULL DEFAULT '',
			payload  TEXT,             -- what the detail route returned, when checked
			checked  INTEGER NOT NULL DEFAULT 0
		)`,
		`INSERT INTO items (item, chain, first, mid, addr)
			SELECT r.item, r.chain, f.first, r.mid, r.pid || '/' || r.tid
			FROM (SELECT item, min(k) AS k0, min(failed) AS first FROM rows GROUP BY item) f JOIN rows r ON r.k = f.k0
			ORDER BY r.item`,
	} {
		if _, err := st.db.ExecContext(ctx, q); err != nil {
			return stageErr(ctx, "staging the snapshot", err)
		}
	}
	return nil
}

// checked records what the detail route returned for the address at
// place item.
func (st *stage) checked(ctx context.Context, item uint32, payload json.RawMessage) error {
	if st.chk == nil {
		var err error
		if st.chk, err = st.db.PrepareContext(ctx, `UPDATE items SET payload = ?, checked = 1 WHERE item = ?`); err != nil {
			return stageErr(ctx, "staging the snapshot", err)
		}
	}
	var p any
	if len(payload) > 0 {
		p = string(payload)
	}
	if _, err := st.chk.ExecContext(ctx, p, item); err != nil {
		return stageErr(ctx, "staging the snapshot", err)
	}
	return nil
}

// arrange settles the order the addresses are read back in: replay
// order (replay.Arrange's, the chains' counts given in the order they
// first appeared) when ordered, the snapshot's otherwise.
func (st *stage) arrange(ctx context.Context, ordered bool, chains []replay.ChainCount) error {
	exec := func(q string, args ...any) error {
		if _, err := st.db.ExecContext(ctx, q, args...); err != nil {
			return stageErr(ctx, "arranging the snapshot", err)
		}
		return nil
	}
	if err := exec(`CREATE TABLE arranged (pos INTEGER PRIMARY KEY, item INTEGER NOT NULL)`); err != nil {
		return err
	}
	if !ordered {
		return exec(`INSERT INTO arranged (item) SELECT item FROM items ORDER BY item`)
	}
	// Within a chain: by message id when every id of the chain is a
	// UUIDv7 (compared lower-cased), then by first failure, then by
	// address.
	if err := exec(`CREATE TABLE chains (chain INTEGER PRIMARY KEY, byid INTEGER NOT NULL, rank INTEGER NOT NULL DEFAULT 0)`); err != nil {
		return err
	}
	for k, c := range chains {
		if err := exec(`INSERT INTO chains (chain, byid) VALUES (?, ?)`, k, c.ByID); err != nil {
			return err
		}
	}
	if err := exec(`UPDATE items SET idkey = lower(mid) WHERE chain IN (SELECT chain FROM chains WHERE byid = 1)`); err != nil {
		return err
	}
	if err := exec(`CREATE INDEX items_order ON items (chain, idkey, first, addr)`); err != nil {
		return err
	}
	// Chains by their first message, as Arrange sorts them.
	type head struct {
		k     int
		byID  bool
		id    string
		first int64
	}
	heads := make([]head, len(chains))
	q, err := st.db.PrepareContext(ctx, `SELECT idkey, first FROM items WHERE chain = ? ORDER BY idkey, first, addr LIMIT 1`)
	if err != nil {
		return stageErr(ctx, "arranging the snapshot", err)
	}
	defer q.Close()
	for k, c := range chains {
		heads[k] = head{k: k, byID: c.ByID}
		if err := q.QueryRowContext(ctx, k).Scan(&heads[k].id, &heads[k].first); err != nil {
			return stageErr(ctx, "arranging the snapshot", err)
		}
	}
	sort.SliceStable(heads, func(i, j int) bool {
		a, b := heads[i], heads[j]
		if a.byID && b.byID {
			return a.id < b.id
		}
		return a.first < b.first
	})
	for rank, h := range heads {
		if err := exec(`UPDATE chains SET rank = ? WHERE chain = ?`, rank, h.k); err != nil {
			return err
		}
	}
	return exec(`INSERT INTO arranged (item)
		SELECT i.item FROM items i JOIN chains c ON c.chain = i.chain ORDER BY c.rank, i.idkey, i.first, i.addr`)
}

// items are the staged addresses' items, in the arranged order, those
// keep says yes to (given an address's place in the snapshot); an error
// reading the stage ends them.
func (st *stage) items(ctx context.Context, keep func(place uint32) bool) iter.Seq2[replay.Item, error] {
	return func(yield func(replay.Item, error) bool) {
		rows, err := st.db.QueryContext(ctx, `SELECT a.item, r.pid, r.tid, r.mid, r.queue, r.part, r.grp, r.err, r.retries, r.failed, r.payload, i.payload, i.checked
			FROM arranged a JOIN items i ON i.item = a.item JOIN rows r ON r.item = a.item ORDER BY a.pos, r.k`)
		if err != nil {
			yield(replay.Item{}, stageErr(ctx, "reading the staged snapshot", err))
			return
		}
		defer rows.Close()
		var it replay.Item
		place, have := uint32(0), false
		give := func() bool { return !have || !keep(place) || yield(it, nil) }
		for rows.Next() {
			var r deadletter.Row
			var item uint32
			var failed int64
			var payload, checkedPayload sql.NullString
			var checked bool
			if err := rows.Scan(&item, &r.PartitionID, &r.TransactionID, &r.ID, &r.Queue, &r.Partition, &r.ConsumerGroup, &r.ErrorMessage,
				&r.RetryCount, &failed, &payload, &checkedPayload, &checked); err != nil {
				yield(replay.Item{}, stageErr(ctx, "reading the staged snapshot", err))
				return
			}
			if failed != zeroTime {
				r.FailedAt = time.Unix(0, failed).UTC()
			}
			if have && item == place {
				if r.PartitionID != it.Address.PartitionID || r.TransactionID != it.Address.TransactionID {
					// Two addresses whose 64-bit hashes met (streamed.key):
					// about once in 10^7 plans of a million addresses.
					yield(replay.Item{}, fmt.Errorf("%s and %s share a hash in this plan; nothing was recorded: run the command again", it.Address, r.Address()))
					return
				}
				r.Data = it.Rows[0].Data
				it.Rows = append(it.Rows, r)
				continue
			}
			if !give() {
				return
			}
			place, have = item, true
			if payload.Valid {
				r.Data = json.RawMessage(payload.String)
			}
			it = replay.Item{Address: r.Address(), Queue: r.Queue, Partition: r.Partition, Checked: checked, Rows: []deadletter.Row{r}}
			if checked && checkedPayload.Valid {
				it.Payload = json.RawMessage(checkedPayload.String)
			}
		}
		if err := rows.Err(); err != nil {
			yield(replay.Item{}, stageErr(ctx, "reading the staged snapshot", err))
			return
		}
		give()
	}
}

// stageErr is err from the stage, said as what was being done; an
// interrupt (ctx done) is said as such, whatever the stage made of it.
func stageErr(ctx context.Context, doing string, err error) error {
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

// close lets the stage go: its file is removed (if it could not be
// unlinked while open).
func (st *stage) close() {
	if st == nil {
		return
	}
	if st.tx != nil {
		_ = st.tx.Rollback()
	}
	if st.chk != nil {
		_ = st.chk.Close()
	}
	_ = st.db.Close()
	if st.path != "" {
		_ = os.Remove(st.path)
	}
}

// payloads calls f with each staged address and the payload a replay
// publishes for it (the detail route's, where checked): before the
// stage is arranged.
func (st *stage) payloads(ctx context.Context, keep func(place uint32) bool, f func(addr string, payload json.RawMessage) error) error {
	rows, err := st.db.QueryContext(ctx, `SELECT i.item, i.addr, CASE WHEN i.checked = 1 THEN i.payload ELSE r.payload END
		FROM items i JOIN rows r ON r.item = i.item AND r.payload IS NOT NULL ORDER BY i.item`)
	if err != nil {
		return stageErr(ctx, "reading the staged snapshot", err)
	}
	defer rows.Close()
	for rows.Next() {
		var item uint32
		var addr string
		var payload sql.NullString
		if err := rows.Scan(&item, &addr, &payload); err != nil {
			return stageErr(ctx, "reading the staged snapshot", err)
		}
		if !keep(item) || !payload.Valid {
			continue
		}
		if err := f(addr, json.RawMessage(payload.String)); err != nil {
			return err
		}
	}
	return stageErr(ctx, "reading the staged snapshot", rows.Err())
}
