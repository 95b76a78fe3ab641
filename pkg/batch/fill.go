package batch

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
	"github.com/dlqctl/dlqctl/pkg/stream"
)

// input is what a batch acts on: its stage, and what filling it found.
type input struct {
	st    *stage
	batch *ledger.Batch // set when executing a recorded batch
	// from is the discard batch whose archived rows a restore selects
	// (restore --batch of a discard).
	from *ledger.Batch
	// file is what an import's file said of itself, once read whole.
	file *fileSaid
	// unrestorable counts the archived messages a restore's selection
	// matched that it cannot restore, by why (already restored, replayed,
	// still in the DLQ, …).
	unrestorable map[string]int
	// missing are explicit addresses that are not dead-lettered.
	missing []deadletter.Address
	// copiesBack are the copies a recorded batch published that are
	// dead-lettered again (found as its queues are read to resume it).
	copiesBack []copyBack
	planAt     time.Time
}

// copyBack is a batch's copy back in the DLQ.
type copyBack struct {
	Copy    deadletter.Address
	Lineage ledger.Lineage
}

// fill stages what a request acts on: a recorded batch's manifest with
// what the DLQ holds of it now, explicit addresses, or a selection. A
// lean stage keeps no payload but the encryption envelopes the plan
// counts (a dry run's, with no --transform to try): what it writes and
// reads does not grow with the payloads. The stage is the caller's to
// close, error or not.
func fill(ctx context.Context, env Env, req Request, in *input, lean bool) error {
	cl := env.Client
	var err error
	if in.st, err = openStage(ctx); err != nil {
		return err
	}
	switch sel, from := req.Selection, deadletter.ActionOf(req.Action).From; {
	case in.batch != nil && from != deadletter.FromDLQ:
		return foldManifest(ctx, env.Ledger, in, lean)
	case in.batch != nil:
		return fillManifest(ctx, cl, env.Ledger, in, lean)
	case from == deadletter.FromArchive:
		return fillArchive(ctx, env, sel, in)
	case from == deadletter.FromFile:
		return fillFile(ctx, env, req.File, in)
	case sel.OnlyAddresses():
		in.missing, err = fillAddresses(ctx, cl, in.st, sel.Addresses)
		return err
	default:
		if err := fillSelection(ctx, cl, in.st, sel, lean); err != nil {
			return err
		}
		if len(sel.Addresses) > 0 {
			in.missing, err = in.st.notStaged(ctx, sel.Addresses)
		}
		return err
	}
}

// OtherBrokerError refuses a batch recorded against another broker than
// the one the command talks to. A front end says how to reach that one
// (Words).
type OtherBrokerError struct {
	Batch, Broker, Here string
	// Doing is what was asked of the batch ("verify"), when not running
	// it.
	Doing string
}

func (e *OtherBrokerError) Error() string { return e.Words("point dlqctl at it") }

// Words is the refusal with how to reach the batch's broker.
func (e *OtherBrokerError) Words(reach string) string {
	if e.Doing != "" {
		return fmt.Sprintf("batch %s was run against %s, not %s: to %s it, %s", e.Batch, e.Broker, e.Here, e.Doing, reach)
	}
	return fmt.Sprintf("batch %s belongs to broker %s, not %s (%s)", e.Batch, e.Broker, e.Here, reach)
}

// loadBatch reads the recorded batch a request executes, refusing one
// that is another broker's, cancelled, or another action's.
func loadBatch(ctx context.Context, env Env, id, action string) (*ledger.Batch, error) {
	cl := env.Client
	b, err := env.Ledger.Batch(ctx, id)
	if err != nil {
		return nil, err
	}
	if b.Broker != cl.Broker() {
		return nil, &errs.Error{Kind: errs.Usage, Err: &OtherBrokerError{Batch: b.ID, Broker: b.Broker, Here: cl.Broker()}}
	}
	if b.Status == ledger.StatusCancelled {
		return nil, errs.Usagef("batch %s was cancelled (see dlqctl decisions show %s): it is no longer a decision; select the dead letters again for a new batch", b.ID, b.ID)
	}
	if !deadletter.ActionOf(action).Runs(b.Action) {
		with := "nothing (a hold is not executed)"
		if a := deadletter.ActionNamed(b.Action); a != nil {
			with = "dlq " + a.Verb
			if a.Discards() {
				with += " (dlq restore --batch re-publishes what it archived)"
			}
		}
		return nil, errs.Usagef("batch %s records a %s decision; execute it with %s", b.ID, b.Action, with)
	}
	return b, nil
}

// fillSelection stages the rows a selection chooses as the list gives
// them (newest failure first; --limit counts addresses), then, when it
// can choose some rows of an address and not others, the address's
// other rows from its queue.
func fillSelection(ctx context.Context, cl *client.Client, st *stage, sel *deadletter.Selection, lean bool) error {
	w, err := st.write(ctx, "rows")
	if err != nil {
		return err
	}
	num := newNumbering()
	err = func() error {
		sel.Bind(ctx)
		inScope, matched := 0, 0
		rows := cl.Rows(ctx, client.QueryFor(sel, inspect.PageSize))
		if sel.WhereRows != nil {
			rows = sel.WhereRows(ctx, rows)
		}
		for r, err := range rows {
			if err != nil {
				return err
			}
			if sel.InScope(r) {
				inScope++
			}
			if !sel.Match(r) {
				if err := sel.WhereErr(); err != nil {
					return err
				}
				continue
			}
			matched++
			// --limit: the first Limit addresses, every row of each.
			item := num.number(r.Address(), sel.Limit == 0 || num.len() < sel.Limit)
			if item == 0 {
				continue
			}
			if err := w.add(ctx, item, r, payload(r.Data, lean), false, true); err != nil {
				return err
			}
		}
		return sel.Everything(sel.Acting, inScope, matched)
	}()
	if err := w.end(ctx, err); err != nil {
		return err
	}
	num = nil
	if !sel.RowLevel() {
		return nil
	}
	queues, err := st.queues(ctx)
	if err != nil {
		return err
	}
	if err := fillNow(ctx, cl, st, queues, true, nil); err != nil {
		return err
	}
	return st.takeNow(ctx)
}

// payload is what a stage keeps of a payload: all of it, or, lean, an
// envelope only.
func payload(p json.RawMessage, lean bool) json.RawMessage {
	if lean && !deadletter.IsEnvelope(p) {
		return nil
	}
	return p
}

// fillNow stages into now the rows the DLQ holds of each queue (its own
// rows: a list by queue may give others), without payloads when noData;
// maybe marks the rows whose transaction id may be a replay's copy.
func fillNow(ctx context.Context, cl *client.Client, st *stage, queues []string, noData bool, maybe func(txid string) bool) error {
	w, err := st.write(ctx, "now")
	if err != nil {
		return err
	}
	if err := w.end(ctx, func() error {
		for _, q := range queues {
			for r, err := range cl.Rows(ctx, client.ListQuery{Queue: q, Limit: inspect.PageSize, NoData: noData}) {
				if err != nil {
					return err
				}
				if q != "" && r.Queue != q {
					continue
				}
				data := r.Data
				if noData {
					data = nil // one the broker gives anyway is not kept: now is read for addresses, groups and times
				}
				if err := w.add(ctx, 0, r, data, false, maybe != nil && maybe(r.TransactionID)); err != nil {
					return err
				}
			}
		}
		return nil
	}()); err != nil {
		return err
	}
	return st.exec(ctx, "staging the snapshot", `CREATE INDEX now_addr ON now (pid, tid, grp, failed)`)
}

// notStaged are the addresses the stage has no item of.
func (st *stage) notStaged(ctx context.Context, addrs []deadletter.Address) ([]deadletter.Address, error) {
	if err := st.byAddress(ctx); err != nil {
		return nil, err
	}
	q, err := st.db.PrepareContext(ctx, `SELECT count(*) FROM items WHERE pid = ? AND tid = ?`)
	if err != nil {
		return nil, stageErr(ctx, "reading the staged snapshot", err)
	}
	defer q.Close()
	var out []deadletter.Address
	for _, a := range addrs {
		var n int
		if err := q.QueryRowContext(ctx, a.PartitionID, a.TransactionID).Scan(&n); err != nil {
			return nil, stageErr(ctx, "reading the staged snapshot", err)
		}
		if n == 0 {
			out = append(out, a)
		}
	}
	return out, nil
}

// The detail route's answer for an explicit address (asked.state).
const (
	askedFound   = 1 // dead-lettered: its payload is the route's (decrypted)
	askedMissing = 2 // not dead-lettered
	askedLook    = 3 // the route cannot be asked (see Address.PathSafe): looked for in the list
)

// fillAddresses stages explicit addresses without reading the whole DLQ:
// the detail route says whether each is dead-lettered (and gives its
// payload, decrypted); the rows are read from their queues only, without
// payloads. An address the broker cannot be asked about is looked for in
// the whole list. It returns the addresses that are not dead-lettered.
func fillAddresses(ctx context.Context, cl *client.Client, st *stage, addrs []deadletter.Address) ([]deadletter.Address, error) {
	if err := askAll(ctx, cl, st, addrs); err != nil {
		return nil, err
	}
	var queues []string
	look := false
	err := st.each(ctx, "staging the snapshot", `SELECT state, queue FROM asked WHERE state <> ? GROUP BY state, queue`, []any{askedMissing}, func(rows *sql.Rows) error {
		var state int
		var q string
		if err := rows.Scan(&state, &q); err != nil {
			return err
		}
		if state == askedLook {
			look = true
		} else {
			queues = append(queues, q)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if look {
		queues = []string{""}
	}
	if err := fillNow(ctx, cl, st, queues, !look, nil); err != nil {
		return nil, err
	}
	// The rows of the addresses found, in list order (newest first), each
	// once, with the detail route's payload.
	if err := st.exec(ctx, "staging the snapshot",
		`CREATE INDEX asked_addr ON asked (pid, tid)`,
		// Numbered in the order the list gives them.
		`INSERT INTO rows (item, sel, k, grp, failed, body)
			SELECT a.item, 1, n.k, n.grp, n.failed, n.body
			FROM now n JOIN (SELECT m.pid, m.tid, row_number() OVER (ORDER BY min(m.k)) AS item FROM now m
				WHERE EXISTS (SELECT 1 FROM asked q WHERE q.pid = m.pid AND q.tid = m.tid AND q.state <> `+strconv.Itoa(askedMissing)+`)
				GROUP BY m.pid, m.tid) a ON a.pid = n.pid AND a.tid = n.tid
			WHERE n.k IN (SELECT min(k) FROM now GROUP BY pid, tid, grp, failed)
			ORDER BY n.k`,
	); err != nil {
		return nil, err
	}
	if err := st.sealRows(ctx); err != nil {
		return nil, err
	}
	if err := st.byAddress(ctx); err != nil {
		return nil, err
	}
	if err := st.exec(ctx, "staging the snapshot",
		`UPDATE items SET payload = a.payload, checked = 1 FROM asked a WHERE a.pid = items.pid AND a.tid = items.tid AND a.state = `+strconv.Itoa(askedFound),
	); err != nil {
		return nil, err
	}
	// Not dead-lettered, or dead-lettered a moment ago and gone by the
	// time the list was read: in the order given, each once.
	var missing []deadletter.Address
	err = st.each(ctx, "staging the snapshot", `SELECT a.pid, a.tid FROM asked a WHERE a.n = (SELECT min(n) FROM asked b WHERE b.pid = a.pid AND b.tid = a.tid)
		AND NOT EXISTS (SELECT 1 FROM items i WHERE i.pid = a.pid AND i.tid = a.tid) ORDER BY a.n`, nil, func(rows *sql.Rows) error {
		var a deadletter.Address
		if err := rows.Scan(&a.PartitionID, &a.TransactionID); err != nil {
			return err
		}
		missing = append(missing, a)
		return nil
	})
	return missing, err
}

// askAll asks the detail route about each address, 8 at a time, and
// stages each answer (asked) as it comes.
func askAll(ctx context.Context, cl *client.Client, st *stage, addrs []deadletter.Address) error {
	tx, err := st.db.BeginTx(ctx, nil)
	if err != nil {
		return stageErr(ctx, "staging the snapshot", err)
	}
	defer func() { _ = tx.Rollback() }()
	ins, err := tx.PrepareContext(ctx, `INSERT INTO asked (n, pid, tid, state, queue, payload) VALUES (?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return stageErr(ctx, "staging the snapshot", err)
	}
	defer ins.Close()
	type answer struct {
		i     int
		state int
		m     *client.Message
	}
	var first error
	err = askDetails(ctx, cl, nil, len(addrs), func(i int) deadletter.Address { return addrs[i] }, func(i int, m *client.Message, err error) error {
		a := answer{i: i, state: askedFound, m: m}
		switch {
		case !addrs[i].PathSafe(), errors.Is(err, client.ErrRouteMissing):
			a.state, a.m = askedLook, nil
		case errors.Is(err, client.ErrNoDeadLetterRow):
			a.state = askedMissing
		case err != nil:
			return err
		case m.Status != "" && m.Status != "dead_letter":
			a.state = askedMissing
		}
		var queue string
		var payload any
		if a.m != nil && a.state == askedFound {
			queue = a.m.Queue
			if len(a.m.Payload) > 0 {
				payload = string(a.m.Payload)
			}
		}
		if _, err := ins.ExecContext(ctx, i, addrs[i].PartitionID, addrs[i].TransactionID, a.state, queue, payload); err != nil {
			if first == nil {
				first = stageErr(ctx, "staging the snapshot", err)
			}
		}
		return nil
	})
	if err == nil {
		err = first
	}
	if err != nil {
		return err
	}
	return stageErr(ctx, "staging the snapshot", tx.Commit())
}

// detailAsks is how many detail-route calls a command has in flight at
// most.
const detailAsks = 8

// askDetails asks the detail route about n addresses, at most cap(sem)
// at a time with the other callers that share sem (nil: detailAsks, its
// own), and gives each answer to got, one at a time (an address that
// cannot be put in a path is not asked: got has it with ErrRouteMissing).
// got's error ends the asking and is returned.
func askDetails(ctx context.Context, cl *client.Client, sem chan struct{}, n int, addr func(i int) deadletter.Address, got func(i int, m *client.Message, err error) error) error {
	var wg sync.WaitGroup
	if sem == nil {
		sem = make(chan struct{}, detailAsks)
	}
	var mu sync.Mutex
	var first error
	for i := range n {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop {
			break
		}
		a := addr(i)
		if !a.PathSafe() {
			mu.Lock()
			if err := got(i, nil, client.ErrRouteMissing); err != nil && first == nil {
				first = err
			}
			mu.Unlock()
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			m, err := cl.Get(ctx, a)
			mu.Lock()
			defer mu.Unlock()
			if err := got(i, m, err); err != nil && first == nil {
				first = err
			}
		}()
	}
	wg.Wait()
	return first
}

// fillManifest stages a recorded batch's manifest, a chunk at a time, and
// reads what the DLQ holds of it now: a recorded manifest may be old, so
// nothing is deleted that is not dead-lettered (an older server's DELETE
// removes live messages too), every row a delete removes now is
// accounted for, and the batch's copies that failed again are found.
func fillManifest(ctx context.Context, cl *client.Client, ld *ledger.Store, in *input, lean bool) error {
	b, st := in.batch, in.st
	if err := foldManifest(ctx, ld, in, lean); err != nil {
		return err
	}
	endpoint, err := ld.HasEndpointCopies(ctx, b.Broker)
	if err != nil {
		return err
	}
	queues, err := st.queues(ctx)
	if err != nil {
		return err
	}
	if b.Destination != "" && !slices.Contains(queues, b.Destination) {
		queues = append(queues, b.Destination)
	}
	maybe := func(txid string) bool { return endpoint || ledger.MayBeCopy(txid) }
	if err := fillNow(ctx, cl, st, queues, true, maybe); err != nil {
		return err
	}
	if err := st.takeNow(ctx); err != nil {
		return err
	}
	if err := st.exec(ctx, "staging the snapshot",
		`UPDATE items SET absent = 1 WHERE NOT EXISTS (SELECT 1 FROM now n WHERE n.pid = items.pid AND n.tid = items.tid)`); err != nil {
		return err
	}
	return findCopiesBack(ctx, ld, in)
}

// findCopiesBack finds the copies a recorded batch published that are
// dead-lettered again: the other addresses of its queues now that may be
// copies, looked up a chunk at a time.
func findCopiesBack(ctx context.Context, ld *ledger.Store, in *input) error {
	b, st := in.batch, in.st
	var all []deadletter.Address
	err := st.each(ctx, "staging the snapshot", `SELECT DISTINCT n.pid, n.tid FROM now n WHERE n.maybe = 1
		AND NOT EXISTS (SELECT 1 FROM items i WHERE i.pid = n.pid AND i.tid = n.tid) ORDER BY n.pid, n.tid`, nil, func(rows *sql.Rows) error {
		var a deadletter.Address
		if err := rows.Scan(&a.PartitionID, &a.TransactionID); err != nil {
			return err
		}
		all = append(all, a)
		return nil
	})
	if err != nil {
		return err
	}
	for cands := range slices.Chunk(all, 400) {
		lin, err := ld.LineageOf(ctx, b.Broker, cands)
		if err != nil {
			return err
		}
		for _, a := range cands {
			if l, ok := lin[a]; ok && l.BatchID == b.ID {
				in.copiesBack = append(in.copiesBack, copyBack{Copy: a, Lineage: l})
			}
		}
	}
	return nil
}

// fillArchive stages the archived rows a restore's selection matches
// (newest failure first, as ls --archived lists them), or every row the
// discard batch in.from archived: a message is restorable when the
// journal's last word on it is a discard. The others it matched are
// counted by what became of them (in.unrestorable): a restore says why
// it leaves each out.
func fillArchive(ctx context.Context, env Env, sel *deadletter.Selection, in *input) error {
	st, ld, broker := in.st, env.Ledger, env.Client.Broker()
	if sel == nil {
		sel = &deadletter.Selection{All: true}
		if err := sel.Compile(); err != nil {
			return err
		}
	}
	in.unrestorable = map[string]int{}
	w, err := st.write(ctx, "rows")
	if err != nil {
		return err
	}
	num := newNumbering()
	seen := newNumbering() // the messages counted as unrestorable
	var page []inspect.ArchivedRow
	flush := func() error {
		if in.from != nil && len(page) > 0 {
			addrs := make([]deadletter.Address, len(page))
			for i, a := range page {
				addrs[i] = a.Address
			}
			of, err := ld.InBatch(ctx, broker, in.from.ID, addrs)
			if err != nil {
				return err
			}
			page = slices.DeleteFunc(page, func(a inspect.ArchivedRow) bool { return !of[a.Address] })
		}
		for _, a := range page {
			if a.Outcome != inspect.OutcomeDiscarded {
				if seen.number(a.Address, false) == 0 && num.number(a.Address, false) == 0 {
					seen.number(a.Address, true)
					in.unrestorable[unrestorableWhy(a)]++
				}
				continue
			}
			if err := w.add(ctx, num.number(a.Address, true), a.Row(), a.Payload, false, true); err != nil {
				return err
			}
		}
		page = page[:0]
		return nil
	}
	err = w.end(ctx, func() error {
		err := inspect.EachArchived(ctx, ld, broker, sel, env.Policies, env.Now(), func(a inspect.ArchivedRow) error {
			if page = append(page, a); len(page) == 400 {
				return flush()
			}
			return nil
		})
		if err == nil {
			err = flush()
		}
		return err
	}())
	return err
}

// unrestorableWhy says why a restore leaves an archived message out.
func unrestorableWhy(a inspect.ArchivedRow) string {
	switch a.Outcome {
	case inspect.OutcomeRestored:
		return "already restored"
	case inspect.OutcomeReplayed, inspect.OutcomeDuplicate, inspect.OutcomeMovedElsewhere:
		return "replayed, not discarded"
	case inspect.OutcomeInDLQ:
		return "still in the DLQ"
	case inspect.OutcomeVanished:
		return "vanished with no discard"
	}
	return "left the DLQ with no discard"
}

// manifestRange is how many manifest items foldManifest reads at a time.
const manifestRange = 1000

// foldManifest stages a recorded batch's manifest, a thousand items at a
// time, each numbered as recorded. The next thousand are read from the
// ledger ahead (stream.Ahead) while the stage takes these: two databases,
// each on a connection of its own.
func foldManifest(ctx context.Context, ld *ledger.Store, in *input, lean bool) error {
	b, st := in.batch, in.st
	w, err := st.write(ctx, "rows")
	if err != nil {
		return err
	}
	items := stream.Ahead(ctx, 1, func(ctx context.Context, emit func([]replay.Item) ([]replay.Item, bool)) error {
		for from := 0; ; from += manifestRange {
			man, err := ld.ManifestRange(ctx, b.ID, from, from+manifestRange)
			if err != nil {
				return err
			}
			if _, ok := emit(ManifestItems(man)); !ok || len(man) < manifestRange {
				return nil
			}
		}
	})
	return w.end(ctx, func() error {
		item := 0
		for it, err := range items {
			if err != nil {
				return err
			}
			item++ // numbered as recorded
			for k, row := range it.Rows {
				if err := w.add(ctx, item, row, payload(it.Data(), lean), k == 0 && it.Checked, true); err != nil {
					return err
				}
			}
			for _, row := range it.Others {
				if err := w.add(ctx, item, row, nil, false, false); err != nil {
					return err
				}
			}
		}
		return nil
	}())
}

// ManifestItems turns a recorded manifest back into items to execute.
func ManifestItems(man []ledger.ManifestItem) []replay.Item {
	items := make([]replay.Item, 0, len(man))
	for _, m := range man {
		it := replay.Item{Address: m.Address, Queue: m.Queue, Partition: m.Partition, Payload: m.Payload, Checked: m.Checked}
		row := func(id, g, errText string, retries int, failed time.Time) deadletter.Row {
			if id == "" {
				id = m.MessageID // a manifest written before rows kept their ids
			}
			return deadletter.Row{ID: id, PartitionID: m.Address.PartitionID, TransactionID: m.Address.TransactionID, Queue: m.Queue,
				Partition: m.Partition, ConsumerGroup: g, ErrorMessage: errText, RetryCount: retries, FailedAt: failed, Data: m.Payload}
		}
		for _, r := range m.Rows {
			if r.Selected {
				it.Rows = append(it.Rows, row(r.ID, r.ConsumerGroup, r.Error, r.RetryCount, r.FailedAt))
			} else {
				it.Others = append(it.Others, row(r.ID, r.ConsumerGroup, r.Error, r.RetryCount, r.FailedAt))
			}
		}
		if len(it.Rows) == 0 {
			// Manifests written before rows were recorded: one row per group.
			groups := m.Groups
			if len(groups) == 0 {
				groups = []string{""}
			}
			for _, g := range groups {
				it.Rows = append(it.Rows, row("", g, m.Error, m.RetryCount, m.FailedAt))
			}
		}
		items = append(items, it)
	}
	return items
}
