package batch

import (
	"context"
	"database/sql"
	"fmt"
	"iter"
	"sort"
	"sync"

	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
	"github.com/dlqctl/dlqctl/pkg/stream"
)

// The order a run takes a staged batch in, and the run's reads of it.

// chains are the destination partitions of the items a run acts on, in
// the order they first appear, each with how many and whether every
// one's message id is a UUIDv7: as the plan's pass counted them, or read
// from the stage (a batch recorded without a plan: dlq decide).
func (st *stage) chains(ctx context.Context, toQueue string) ([]replay.ChainCount, error) {
	if c := st.counted; c != nil && c.toQueue == toQueue {
		return c.list, nil
	}
	var out []replay.ChainCount
	err := st.each(ctx, "arranging the snapshot", `SELECT coalesce(?, queue) AS q, part, count(*), min(v7), min(item) AS f
		FROM items WHERE skipped = 0 GROUP BY q, part ORDER BY f`, []any{nullIfEmpty(toQueue)}, func(rows *sql.Rows) error {
		var c replay.ChainCount
		var f int
		if err := rows.Scan(&c.Chain.Queue, &c.Chain.Partition, &c.N, &c.ByID, &f); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// countedChains are the chains of the items a plan's pass kept, counted
// as it goes, in the order they first appear.
type countedChains struct {
	toQueue string
	at      map[replay.Chain]int
	list    []replay.ChainCount
}

func countChains(toQueue string) *countedChains {
	return &countedChains{toQueue: toQueue, at: map[replay.Chain]int{}}
}

// add counts an item kept (its first selected row's message id is the
// one its order is by).
func (c *countedChains) add(it replay.Item) {
	ch := replay.ChainOf(it, c.toQueue)
	i, ok := c.at[ch]
	if !ok {
		i = len(c.list)
		c.at[ch] = i
		c.list = append(c.list, replay.ChainCount{Chain: ch, ByID: true})
	}
	c.list[i].N++
	if len(it.Rows) == 0 || !replay.IsUUIDv7(it.Rows[0].ID) {
		c.list[i].ByID = false
	}
}

// arrange settles the order a run acts on the items --skip-held kept:
// replay order when ordered (each destination partition's messages
// together, by message id when every id of the partition is a UUIDv7,
// then by first failure, then by address; partitions by their first
// message, the oldest first), the numbered order otherwise (the list's,
// or a recorded manifest's, which is in replay order already).
func (st *stage) arrange(ctx context.Context, ordered bool, toQueue string) error {
	if st.arranged >= 0 {
		return nil
	}
	if err := st.exec(ctx, "arranging the snapshot", `CREATE TABLE arranged (pos INTEGER PRIMARY KEY, item INTEGER NOT NULL)`); err != nil {
		return err
	}
	if !ordered {
		if err := st.exec(ctx, "arranging the snapshot", `INSERT INTO arranged (pos, item) SELECT row_number() OVER (ORDER BY item) - 1, item FROM items WHERE skipped = 0 ORDER BY item`); err != nil {
			return err
		}
		return st.countArranged(ctx)
	}
	if err := st.rankChains(ctx, toQueue); err != nil {
		return err
	}
	if _, err := st.db.ExecContext(ctx, `INSERT INTO arranged (pos, item)
		SELECT row_number() OVER (ORDER BY c.rank, k.idkey, k.first, k.addr) - 1, k.item
		FROM (`+keyedItems+`) k JOIN chains c ON c.chain = k.chain`, nullIfEmpty(toQueue)); err != nil {
		return stageErr(ctx, "arranging the snapshot", err)
	}
	return st.countArranged(ctx)
}

// keyedItems are the items a run acts on, each with its chain and its key
// within it (toQueue is the query's one argument).
const keyedItems = `SELECT i.item, c.chain, CASE WHEN c.byid = 1 THEN lower(i.mid) ELSE '' END AS idkey, i.first, i.pid || '/' || i.tid AS addr
	FROM items i JOIN chains c ON c.q = coalesce(?, i.queue) AND c.part = i.part WHERE i.skipped = 0`

// rankChains stages the chains of the items a run acts on, ranked by their
// first message as Arrange ranks them (the oldest first), with each
// item's earliest failure.
func (st *stage) rankChains(ctx context.Context, toQueue string) error {
	chains, err := st.chains(ctx, toQueue)
	if err != nil {
		return err
	}
	if err := st.exec(ctx, "arranging the snapshot",
		`UPDATE items SET first = failed WHERE failed IS NOT NULL`,
		`UPDATE items SET first = CASE WHEN items.failed IS NULL OR f.f < items.failed THEN f.f ELSE items.failed END
			FROM (SELECT item, min(failed) AS f FROM rows GROUP BY item) f WHERE items.item = f.item`,
		`CREATE TABLE chains (chain INTEGER PRIMARY KEY, q TEXT NOT NULL, part TEXT NOT NULL, byid INTEGER NOT NULL, rank INTEGER NOT NULL DEFAULT 0)`); err != nil {
		return err
	}
	ins, err := st.db.PrepareContext(ctx, `INSERT INTO chains (chain, q, part, byid) VALUES (?, ?, ?, ?)`)
	if err != nil {
		return stageErr(ctx, "arranging the snapshot", err)
	}
	for k, c := range chains {
		if _, err := ins.ExecContext(ctx, k, c.Chain.Queue, c.Chain.Partition, c.ByID); err != nil {
			_ = ins.Close()
			return stageErr(ctx, "arranging the snapshot", err)
		}
	}
	_ = ins.Close()
	if err := st.exec(ctx, "arranging the snapshot", `CREATE UNIQUE INDEX chains_q ON chains (q, part)`); err != nil {
		return err
	}
	// Chains by their first message, as Arrange sorts them.
	type head struct {
		k     int
		byID  bool
		id    string
		first int64
	}
	heads := make([]head, 0, len(chains))
	err = st.each(ctx, "arranging the snapshot", `SELECT chain, idkey, first FROM (SELECT chain, idkey, first,
		row_number() OVER (PARTITION BY chain ORDER BY idkey, first, addr) AS n FROM (`+keyedItems+`)) WHERE n = 1 ORDER BY chain`,
		[]any{nullIfEmpty(toQueue)}, func(rows *sql.Rows) error {
			var h head
			if err := rows.Scan(&h.k, &h.id, &h.first); err != nil {
				return err
			}
			h.byID = chains[h.k].ByID
			heads = append(heads, h)
			return nil
		})
	if err != nil {
		return err
	}
	sort.SliceStable(heads, func(i, j int) bool {
		a, b := heads[i], heads[j]
		if a.byID && b.byID {
			return a.id < b.id
		}
		return a.first < b.first
	})
	up, err := st.db.PrepareContext(ctx, `UPDATE chains SET rank = ? WHERE chain = ?`)
	if err != nil {
		return stageErr(ctx, "arranging the snapshot", err)
	}
	for rank, h := range heads {
		if _, err := up.ExecContext(ctx, rank, h.k); err != nil {
			_ = up.Close()
			return stageErr(ctx, "arranging the snapshot", err)
		}
	}
	_ = up.Close()
	return nil
}

func (st *stage) countArranged(ctx context.Context) error {
	if err := st.db.QueryRowContext(ctx, `SELECT count(*) FROM arranged`).Scan(&st.arranged); err != nil {
		return stageErr(ctx, "arranging the snapshot", err)
	}
	return nil
}

// inOrder are the arranged items, in replay order, a chunk at a time;
// an error reading the stage ends them. The next chunk is read ahead
// (stream.Ahead) while the caller takes this one's items: it writes them
// to the ledger, another database on another connection.
func (st *stage) inOrder(ctx context.Context) iter.Seq2[replay.Item, error] {
	return stream.Ahead(ctx, 1, func(ctx context.Context, emit func([]replay.Item) ([]replay.Item, bool)) error {
		for from := 0; from < st.arranged; from += inOrderChunk {
			to := min(from+inOrderChunk, st.arranged)
			got, err := st.at(ctx, from, to-1)
			if err == nil && len(got) != to-from {
				err = fmt.Errorf("reading the staged snapshot: %d of the %d items arranged at %d", len(got), to-from, from)
			}
			if err != nil {
				return err
			}
			items := make([]replay.Item, len(got))
			for i, p := range got {
				items[i] = p.it
			}
			if _, ok := emit(items); !ok {
				return nil
			}
		}
		return nil
	})
}

// inOrderChunk is how many items inOrder reads at a time.
const inOrderChunk = 500

// at reads the arranged items at positions from to to (inclusive).
func (st *stage) at(ctx context.Context, from, to int) ([]placed, error) {
	return st.load(ctx, `SELECT a.pos, `+itemCols+` FROM arranged a JOIN items i ON i.item = a.item
		WHERE a.pos BETWEEN ? AND ? ORDER BY a.pos`,
		`SELECT a.pos, `+rowCols+` FROM arranged a JOIN rows r ON r.item = a.item
		WHERE a.pos BETWEEN ? AND ? ORDER BY a.pos, r.sel DESC, r.k`, from, to)
}

// source is the arranged stage as a run reads it: a claim's items at a
// time.
type source struct {
	st *stage
	// arch, when set, archives every row of the items a claim reads that
	// are in the DLQ (not Absent) before the claim is the run's: no row
	// leaves the broker unrecorded, other groups' rows included, and a
	// discard is recoverable. Archived as the run reads them, the rows
	// cost the ledger's time while the run waits on the broker, not
	// before the first write; a claim read again (a resume) archives its
	// rows again, as seen again.
	arch *archiving
}

// archiving is a run's archiver, which its claims, read at once on their
// partitions' goroutines, take in turn.
type archiving struct {
	mu sync.Mutex
	a  *ledger.Archiver
}

// add archives the rows of items in the DLQ, in one transaction.
func (a *archiving) add(ctx context.Context, items []replay.Item) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, it := range items {
		if it.Absent {
			continue
		}
		if err := archiveItem(ctx, a.a, it); err != nil {
			return err
		}
	}
	return a.a.Flush(ctx)
}

func (s source) Len() int { return s.st.arranged }

func (s source) Chains(ctx context.Context, from, to int, toQueue string, f func(pos int, c replay.Chain)) error {
	return s.st.each(ctx, "reading the staged snapshot", `SELECT a.pos, i.queue, i.part FROM arranged a JOIN items i ON i.item = a.item
		WHERE a.pos >= ? AND a.pos < ? ORDER BY a.pos`, []any{from, to}, func(rows *sql.Rows) error {
		var pos int
		var it replay.Item
		if err := rows.Scan(&pos, &it.Queue, &it.Partition); err != nil {
			return err
		}
		f(pos, replay.ChainOf(it, toQueue))
		return nil
	})
}

func (s source) Load(ctx context.Context, pos []int32) ([]replay.Item, error) {
	out := make([]replay.Item, 0, len(pos))
	// A claim is a run of positions, or a chain's scattered ones: read
	// the span between the first and the last when it is dense enough.
	for start := 0; start < len(pos); {
		end := start + 1
		for end < len(pos) && int(pos[end]-pos[start]) < 4*(end-start+1) {
			end++
		}
		got, err := s.st.at(ctx, int(pos[start]), int(pos[end-1]))
		if err != nil {
			return nil, err
		}
		k := start
		for _, p := range got {
			if k < end && p.at == int(pos[k]) {
				out = append(out, p.it)
				k++
			}
		}
		if k != end {
			return nil, fmt.Errorf("reading the staged snapshot: %d of %d items found", len(out), len(pos))
		}
		start = end
	}
	if s.arch != nil {
		if err := s.arch.add(ctx, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}
