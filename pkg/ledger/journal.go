package ledger

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Journal states of an address. An address's journal outlives its batch.
const (
	Pending   = "pending"   // enrolled, nothing sent
	Inflight  = "inflight"  // a publish was sent; its outcome is not recorded yet
	Published = "published" // the broker accepted the publish; the row may remain
	Removed   = "removed"   // published (or discarded) and the row is gone
	Failed    = "failed"    // the broker refused; safe to try again
	Unknown   = "unknown"   // an endpoint call's answer was lost and the row is still there
	Skipped   = "skipped"   // deliberately not executed (undecryptable, generation cap)
)

// ErrClaimed: another live process holds the address.
var ErrClaimed = errors.New("claimed by another run")

// ErrLostClaim: the claim expired and was taken over while we worked.
var ErrLostClaim = errors.New("claim lost to another run")

// Entry is an address's journal.
type Entry struct {
	Broker     string             `json:"broker"`
	Address    deadletter.Address `json:"address"`
	State      string             `json:"state"`
	BatchID    string             `json:"batchId"`
	Action     string             `json:"action"`
	Generation int                `json:"generation"`
	ReplayTxID string             `json:"replayTransactionId,omitempty"`
	// ReplayPartitionID is the partition the replayed copy went to, when
	// the broker said (a push answer's partition_id).
	ReplayPartitionID string `json:"replayPartitionId,omitempty"`
	// ReplayQueue is the queue a manual replay's push went to.
	ReplayQueue string `json:"replayQueue,omitempty"`
	// ReplayDigest is the digest of the payload a manual replay pushed
	// (PayloadDigest): a later push under the same id with another
	// payload would be suppressed as a duplicate, so it is refused.
	ReplayDigest string    `json:"replayDigest,omitempty"`
	Via          string    `json:"via,omitempty"`
	Outcome      string    `json:"outcome,omitempty"`
	Attempts     int       `json:"attempts"`
	LastError    string    `json:"lastError,omitempty"`
	UpdatedAt    time.Time `json:"updatedAt"`
	ClaimOwner   string    `json:"-"`

	// stored is what the journal holds of the entry, as last read or
	// written: a save that leaves the attribution (batch, action,
	// generation) as it is writes a narrower row update, one that touches
	// no index; an intent the journal already holds is not written again
	// (Holds).
	stored held
	// ahead: this claim enrolled the address with a manual replay's
	// intent (Enrolment.ReplayTxID), before anything was pushed; Release
	// takes the intent back while no attempt has been made.
	ahead bool
}

type held struct {
	known bool // false: not read from the journal (a full save)
	attribution
	intent
}

type attribution struct {
	batchID    string
	action     string
	generation int
}

// intent is where an address stands and what a replay of it may have
// published: the fields a push must find durable before it is sent.
type intent struct {
	state, via, replayTxID, replayQueue, replayDigest string
}

func (e *Entry) attribution() attribution {
	return attribution{batchID: e.BatchID, action: e.Action, generation: e.Generation}
}

func (e *Entry) intent() intent {
	return intent{state: e.State, via: e.Via, replayTxID: e.ReplayTxID, replayQueue: e.ReplayQueue, replayDigest: e.ReplayDigest}
}

func (e *Entry) markStored() {
	e.stored = held{known: true, attribution: e.attribution(), intent: e.intent()}
}

// Holds reports whether the journal already holds the entry's state,
// path, replay id, destination and attribution as they are now: saving
// it would record nothing a crash could need (attempts aside).
func (e *Entry) Holds() bool {
	return e.stored.known && e.stored.attribution == e.attribution() && e.stored.intent == e.intent()
}

const entryCols = `broker, partition_id, transaction_id, state, batch_id, action, generation, replay_txid, via, outcome, attempts, last_error, updated_at, claim_owner, replay_partition_id, replay_queue, replay_digest`

func scanEntry(sc interface{ Scan(...any) error }) (*Entry, error) {
	var e Entry
	var updated, owner sql.NullString
	if err := sc.Scan(&e.Broker, &e.Address.PartitionID, &e.Address.TransactionID, &e.State, &e.BatchID, &e.Action, &e.Generation,
		&e.ReplayTxID, &e.Via, &e.Outcome, &e.Attempts, &e.LastError, &updated, &owner, &e.ReplayPartitionID, &e.ReplayQueue, &e.ReplayDigest); err != nil {
		return nil, err
	}
	e.UpdatedAt = parseTime(updated)
	e.ClaimOwner = owner.String
	e.markStored()
	return &e, nil
}

// Entry returns an address's journal, or nil when it has none.
func (s *Store) Entry(ctx context.Context, broker string, a deadletter.Address) (*Entry, error) {
	e, err := scanEntry(s.db.QueryRowContext(ctx, s.rebind(`SELECT `+entryCols+` FROM journal WHERE broker = ? AND partition_id = ? AND transaction_id = ?`),
		broker, a.PartitionID, a.TransactionID))
	if isNoRows(err) {
		return nil, nil
	}
	return e, s.wrap("reading the journal", err)
}

// Entries returns the journal of each address that has one, looked up a
// few hundred addresses a statement.
func (s *Store) Entries(ctx context.Context, broker string, addrs []deadletter.Address) (map[deadletter.Address]*Entry, error) {
	out := map[deadletter.Address]*Entry{} // sized by what is found: most addresses of a fresh batch have no entry
	err := s.byAddrs(ctx, "reading the journal", `SELECT `+entryCols+` FROM journal WHERE broker = ? AND (partition_id, transaction_id) IN `, addrs, func(rows *sql.Rows) error {
		e, err := scanEntry(rows)
		if err == nil {
			out[e.Address] = e
		}
		return err
	}, broker)
	return out, err
}

// byAddrs runs q (ending in IN) over addrs, a few hundred addresses a
// statement after args, and calls scan for every row; what names the
// work in an error.
func (s *Store) byAddrs(ctx context.Context, what, q string, addrs []deadletter.Address, scan func(*sql.Rows) error, args ...any) error {
	const chunk = 400
	for start := 0; start < len(addrs); start += chunk {
		part := addrs[start:min(start+chunk, len(addrs))]
		if s.engine == SQLite {
			// Padded to a whole chunk with its last address, so that every
			// statement has one text and is prepared once (IN is a set: the
			// address repeated matches once): parsing 400 pairs was most of
			// a lookup's cost.
			if len(part) < chunk {
				padded := make([]deadletter.Address, chunk)
				copy(padded, part)
				for i := len(part); i < chunk; i++ {
					padded[i] = part[len(part)-1]
				}
				part = padded
			}
			text, all := inAddrs(q, part, args...)
			if err := s.eachPrepared(ctx, text, scan, all...); err != nil {
				return s.wrap(what, err)
			}
			continue
		}
		text, all := inAddrs(q, part, args...)
		if err := s.each(ctx, text, scan, all...); err != nil {
			return s.wrap(what, err)
		}
	}
	return nil
}

// eachPrepared is each with the statement prepared once a store.
func (s *Store) eachPrepared(ctx context.Context, q string, f func(*sql.Rows) error, args ...any) error {
	st, err := s.prepared(ctx, q)
	if err != nil {
		return err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := f(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// BatchEntries returns the journal entries currently attributed to a batch.
func (s *Store) BatchEntries(ctx context.Context, batchID string) ([]Entry, error) {
	var out []Entry
	err := s.each(ctx, `SELECT `+entryCols+` FROM journal WHERE batch_id = ? ORDER BY partition_id, transaction_id`, func(rows *sql.Rows) error {
		e, err := scanEntry(rows)
		if err == nil {
			out = append(out, *e)
		}
		return err
	}, batchID)
	return out, s.wrap("reading the journal", err)
}

// Claim takes an address for owner until now+lease and returns its entry.
// A claim held by a live other owner fails with ErrClaimed; one whose
// lease ran out, or whose owner is a dead process on this host, is taken
// over. The entry keeps the batch that last acted on it until Save. The conditional UPDATE is atomic on both engines, so two runs
// never hold one address at once.
func (s *Store) Claim(ctx context.Context, broker string, a deadletter.Address, owner string, now time.Time, lease time.Duration) (*Entry, error) {
	// RETURNING (SQLite 3.35+, PostgreSQL) claims and reads in one statement.
	e, err := scanEntry(s.db.QueryRowContext(ctx, s.rebind(`UPDATE journal SET claim_owner = ?, claim_until = ?
		WHERE broker = ? AND partition_id = ? AND transaction_id = ? AND (claim_owner IS NULL OR claim_owner = ? OR claim_until < ?)
		RETURNING `+entryCols),
		owner, fmtTime(now.Add(lease)), broker, a.PartitionID, a.TransactionID, owner, fmtTime(now)))
	if err == nil {
		return e, nil
	}
	if !isNoRows(err) {
		return nil, s.wrap("claiming an address", err)
	}
	held, err := s.Entry(ctx, broker, a)
	if err != nil {
		return nil, err
	}
	if held == nil {
		return nil, fmt.Errorf("%w: %s is not enrolled", ErrNotFound, a)
	}
	if OwnerAlive(held.ClaimOwner) {
		return nil, fmt.Errorf("%s: %w (%s)", a, ErrClaimed, held.ClaimOwner)
	}
	e, err = scanEntry(s.db.QueryRowContext(ctx, s.rebind(`UPDATE journal SET claim_owner = ?, claim_until = ?
		WHERE broker = ? AND partition_id = ? AND transaction_id = ? AND claim_owner = ?
		RETURNING `+entryCols),
		owner, fmtTime(now.Add(lease)), broker, a.PartitionID, a.TransactionID, held.ClaimOwner))
	if isNoRows(err) {
		return nil, fmt.Errorf("%s: %w", a, ErrClaimed)
	}
	return e, s.wrap("claiming an address", err)
}

// CopyGenerations finds, among addrs, copies the /retry endpoint or the
// broker's move published (and pushes under the move's copy ids) and
// returns the generation of each: one more than that of the replay that
// made it. Their ids do not say it, unlike a derived id (dlqr-<gen>-…);
// an in-place copy goes to its original's partition, so its address is
// that partition and the id the journal recorded. Only the addresses
// given are read, 400 a statement, and nothing at all when the journal
// holds no such copy.
func (s *Store) CopyGenerations(ctx context.Context, broker string, addrs []deadletter.Address) (map[deadletter.Address]int, error) {
	out := map[deadletter.Address]int{}
	if len(addrs) == 0 {
		return out, nil
	}
	// The endpoint's copies (ids minted by the broker), then the broker's
	// copy ids (dlq:<row id>): each query runs only where the journal
	// holds such copies at all, and each reads its own partial index.
	for _, kind := range []string{`via = 'endpoint'`, `replay_txid LIKE 'dlq:%'`} {
		var some int
		err := s.db.QueryRowContext(ctx, s.rebind(`SELECT COUNT(*) FROM (SELECT 1 FROM journal WHERE broker = ? AND `+kind+` LIMIT 1) x`), broker).Scan(&some)
		if err != nil || some == 0 {
			if err != nil {
				return out, s.wrap("reading the journal", err)
			}
			continue
		}
		err = s.byAddrs(ctx, "reading the journal", `SELECT partition_id, replay_txid, generation FROM journal WHERE broker = ? AND `+kind+` AND (partition_id, replay_txid) IN `, addrs, func(rows *sql.Rows) error {
			var a deadletter.Address
			var gen int
			if err := rows.Scan(&a.PartitionID, &a.TransactionID, &gen); err != nil {
				return err
			}
			out[a] = max(out[a], gen+1)
			return nil
		}, broker)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// BatchOutcome counts the journal of a batch's addresses: settled ones by
// outcome (replayed, duplicate, discarded, gone), the rest by state
// (failed, unknown, skipped, pending, inflight, published). Across resumed
// runs, it is the batch's whole outcome, not the last run's.
func (s *Store) BatchOutcome(ctx context.Context, batchID string) (map[string]int, error) {
	out := map[string]int{}
	err := s.each(ctx, `SELECT CASE WHEN state = 'removed' AND outcome <> '' THEN outcome ELSE state END, COUNT(*)
		FROM journal WHERE batch_id = ? GROUP BY 1`, func(rows *sql.Rows) error {
		var k string
		var n int
		err := rows.Scan(&k, &n)
		out[k] = n
		return err
	}, batchID)
	return out, s.wrap("reading the batch outcome", err)
}

// ReplayTxIDs are the transaction ids a batch's replays were published
// as: a dead letter with one of them is a replay that failed again.
func (s *Store) ReplayTxIDs(ctx context.Context, batchID string) (map[string]bool, error) {
	return s.textSet(ctx, "reading the journal", `SELECT replay_txid FROM journal WHERE batch_id = ? AND replay_txid <> ''`, batchID)
}

// ClaimMany claims addresses in one statement where it can (the common
// case: nobody else holds them), falling back to Claim for the rest.
// Addresses another live run holds are absent from the result.
func (s *Store) ClaimMany(ctx context.Context, broker string, addrs []deadletter.Address, owner string, now time.Time, lease time.Duration) (map[deadletter.Address]*Entry, error) {
	out := make(map[deadletter.Address]*Entry, len(addrs))
	if len(addrs) == 0 {
		return out, nil
	}
	var q string
	var args []any
	if s.engine == Postgres {
		// One chunk is claimed whole or not at all against another run
		// claiming it at the same moment: the rows are locked in one
		// order (so two runs cannot deadlock), and a run that waited on a
		// row sees it claimed once the other commits. Skipping locked rows
		// instead split a partition's chunk between two runs, and each
		// then left the partition to the other.
		q, args = inAddrs(`UPDATE journal SET claim_owner = ?, claim_until = ?
			WHERE (broker, partition_id, transaction_id) IN (
				SELECT broker, partition_id, transaction_id FROM journal
				WHERE broker = ? AND (claim_owner IS NULL OR claim_owner = ? OR claim_until < ?) AND (partition_id, transaction_id) IN `,
			addrs, owner, fmtTime(now.Add(lease)), broker, owner, fmtTime(now))
		q += ` ORDER BY partition_id, transaction_id FOR UPDATE)`
	} else {
		// SQLite has one writer at a time: no lock order to get wrong.
		q, args = inAddrs(`UPDATE journal SET claim_owner = ?, claim_until = ?
			WHERE broker = ? AND (claim_owner IS NULL OR claim_owner = ? OR claim_until < ?) AND (partition_id, transaction_id) IN `,
			addrs, owner, fmtTime(now.Add(lease)), broker, owner, fmtTime(now))
	}
	rows, err := s.db.QueryContext(ctx, s.rebind(q+` RETURNING `+entryCols), args...)
	if err != nil {
		return nil, s.wrap("claiming addresses", err)
	}
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			rows.Close()
			return nil, s.wrap("claiming addresses", err)
		}
		out[e.Address] = e
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, s.wrap("claiming addresses", err)
	}
	for _, a := range addrs {
		if out[a] != nil {
			continue
		}
		e, err := s.Claim(ctx, broker, a, owner, now, lease)
		if errors.Is(err, ErrClaimed) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[a] = e
	}
	return out, nil
}

// Enrolment is what Acquire writes for an address the journal has never
// seen.
type Enrolment struct {
	Generation int
	// ReplayTxID and ReplayQueue, when set, enrol the address with a
	// replay's intent (inflight, via Via, that copy id and destination)
	// in the claim's own statement, so that the run need not write it
	// again before its call. Only paths whose copy id a repeat finds may
	// be journaled ahead: the manual path (its derived id makes a push
	// repeated after a crash a duplicate) and the broker's move (a second
	// move of a row is a 404, its copy found by the id), so an intent
	// recorded for an address that was then never published costs nothing
	// but that repeat. Via "" is the manual path.
	ReplayTxID, ReplayQueue, Via string
	// Digest is the digest of the payload the intent will push (manual
	// path).
	Digest string
}

// PlainEnrolments enrol addresses pending, of the given generations.
func PlainEnrolments(gens ...int) []Enrolment {
	out := make([]Enrolment, len(gens))
	for i, g := range gens {
		out[i].Generation = g
	}
	return out
}

// Acquire claims addresses for owner as ClaimMany does, enrolling on the
// way those the journal has never seen: a fresh address is inserted
// already claimed (pending, or with the intent its enrolment carries),
// one row write where enrolling and then claiming took two. An address
// is so enrolled when a run reaches it, not before. Addresses with a
// journal keep their state; those another live run holds are absent from
// the result. enrol says how each address is enrolled if it is fresh.
func (s *Store) Acquire(ctx context.Context, broker, batchID, action string, addrs []deadletter.Address, enrol []Enrolment, owner string, now time.Time, lease time.Duration) (map[deadletter.Address]*Entry, error) {
	out := make(map[deadletter.Address]*Entry, len(addrs))
	if len(addrs) == 0 {
		return out, nil
	}
	if err := s.checkFile(ctx); err != nil {
		return nil, err
	}
	fresh := make(map[deadletter.Address]bool, len(addrs))
	const chunk = 400 // 400 × 14 parameters stays far below PostgreSQL's 65,535
	for start := 0; start < len(addrs); start += chunk {
		end := min(start+chunk, len(addrs))
		if err := s.enrollClaimed(ctx, broker, batchID, action, addrs[start:end], enrol[start:end], owner, now, lease, fresh); err != nil {
			return nil, s.wrap("claiming addresses", err)
		}
	}
	var rest []deadletter.Address
	for i, a := range addrs {
		if !fresh[a] {
			rest = append(rest, a)
			continue
		}
		n := enrol[i]
		e := &Entry{Broker: broker, Address: a, State: Pending, BatchID: batchID, Action: action, Generation: n.Generation, UpdatedAt: now.UTC().Truncate(time.Millisecond), ClaimOwner: owner}
		if n.ReplayTxID != "" {
			e.State, e.Via, e.ReplayTxID, e.ReplayQueue, e.ReplayDigest, e.ahead = Inflight, n.via(), n.ReplayTxID, n.ReplayQueue, n.Digest, true
		}
		e.markStored()
		out[a] = e
	}
	if len(rest) == 0 {
		return out, nil
	}
	held, err := s.ClaimMany(ctx, broker, rest, owner, now, lease)
	if err != nil {
		return nil, err
	}
	for a, e := range held {
		out[a] = e
	}
	return out, nil
}

// viaManual is the journal's name of the manual replay path (replay.ViaManual).
const viaManual = "manual"

// via is the path an enrolment's intent names.
func (n Enrolment) via() string {
	if n.Via == "" {
		return viaManual
	}
	return n.Via
}

// Fresh reports an entry this run's claim enrolled with its intent and
// that no attempt has touched: whatever the broker holds of its copy was
// not made by this entry.
func (e *Entry) Fresh() bool { return e.ahead && e.Attempts == 0 }

const enrollClaimedSQL = `INSERT INTO journal (broker, partition_id, transaction_id, state, batch_id, action, generation, updated_at, claim_owner, claim_until, via, replay_txid, replay_queue, replay_digest) VALUES `

// enrollClaimed inserts the addresses the journal lacks, claimed by
// owner, and marks in fresh those it inserted. Rows go in address order, the
// order every multi-row writer locks in: on PostgreSQL a run inserting
// the same chunk at the same moment waits for this one and then finds
// every row taken.
func (s *Store) enrollClaimed(ctx context.Context, broker, batchID, action string, addrs []deadletter.Address, enrol []Enrolment, owner string, now time.Time, lease time.Duration, fresh map[deadletter.Address]bool) error {
	order := make([]int, len(addrs))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(x, y int) bool {
		a, b := addrs[order[x]], addrs[order[y]]
		return a.PartitionID < b.PartitionID || a.PartitionID == b.PartitionID && a.TransactionID < b.TransactionID
	})
	at, until := fmtTime(now), fmtTime(now.Add(lease))
	row := func(i int) []any {
		n := enrol[i]
		state, via := Pending, ""
		if n.ReplayTxID != "" {
			state, via = Inflight, n.via()
		}
		return []any{broker, addrs[i].PartitionID, addrs[i].TransactionID, state, batchID, action, n.Generation, at, owner, until, via, n.ReplayTxID, n.ReplayQueue, n.Digest}
	}
	const place = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	const conflict = ` ON CONFLICT (broker, partition_id, transaction_id) DO NOTHING`
	if s.engine == SQLite {
		// In-process: one prepared single-row statement a row, and
		// RowsAffected says whether it went in.
		stmt, err := s.prepared(ctx, enrollClaimedSQL+place+conflict)
		if err != nil {
			return err
		}
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		st := tx.StmtContext(ctx, stmt)
		defer st.Close()
		for _, i := range order {
			res, err := st.ExecContext(ctx, row(i)...)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				fresh[addrs[i]] = true
			}
		}
		return tx.Commit()
	}
	var b strings.Builder
	b.WriteString(enrollClaimedSQL)
	args := make([]any, 0, len(addrs)*13)
	for k, i := range order {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteString(place)
		args = append(args, row(i)...)
	}
	b.WriteString(conflict + ` RETURNING partition_id, transaction_id`)
	rows, err := s.db.QueryContext(ctx, s.rebind(b.String()), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var a deadletter.Address
		if err := rows.Scan(&a.PartitionID, &a.TransactionID); err != nil {
			return err
		}
		fresh[a] = true
	}
	return rows.Err()
}

// Release drops owner's claims on entries it will not work on after
// all. An intent this claim enrolled ahead (Enrolment.ReplayTxID) is taken
// back with it, the entry pending again: nothing was pushed for it, since
// every attempt is made by the process that holds the claim and releases
// it only when it has not attempted the address.
func (s *Store) Release(ctx context.Context, broker string, ents []*Entry, owner string) error {
	var plain, ahead []deadletter.Address
	for _, e := range ents {
		if e.ahead && e.Attempts == 0 {
			ahead = append(ahead, e.Address)
		} else {
			plain = append(plain, e.Address)
		}
	}
	for _, r := range []struct {
		addrs []deadletter.Address
		set   string
	}{
		{plain, `claim_owner = NULL, claim_until = NULL`},
		{ahead, `claim_owner = NULL, claim_until = NULL, state = 'pending', via = '', replay_txid = '', replay_queue = '', replay_digest = ''`},
	} {
		for start := 0; start < len(r.addrs); start += 400 {
			q, args := inAddrs(`UPDATE journal SET `+r.set+` WHERE broker = ? AND claim_owner = ? AND (partition_id, transaction_id) IN `,
				r.addrs[start:min(start+400, len(r.addrs))], broker, owner)
			if _, err := s.exec(ctx, s.db, q, args...); err != nil {
				return s.wrap("releasing claims", err)
			}
		}
	}
	return nil
}

// inAddrs appends "((?, ?), (?, ?), …)" for addrs to q, after args.
func inAddrs(q string, addrs []deadletter.Address, args ...any) (string, []any) {
	var b strings.Builder
	b.WriteString(q)
	b.WriteByte('(')
	for i, a := range addrs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?)")
		args = append(args, a.PartitionID, a.TransactionID)
	}
	b.WriteByte(')')
	return b.String(), args
}

// Save writes an entry's state while owner holds its claim; release drops
// the claim in the same statement.
func (s *Store) Save(ctx context.Context, e *Entry, owner string, now time.Time, release bool) error {
	return s.SaveMany(ctx, []SaveItem{{Entry: e, Release: release}}, owner, now)[0]
}

// SaveItem is one entry for SaveMany.
type SaveItem struct {
	Entry   *Entry
	Release bool
}

const saveSQL = `UPDATE journal SET state = ?, batch_id = ?, action = ?, generation = ?, replay_txid = ?, replay_partition_id = ?, replay_queue = ?, replay_digest = ?, via = ?, outcome = ?, attempts = ?, last_error = ?,
	updated_at = ?, claim_owner = ?, claim_until = CASE WHEN ? = 1 THEN NULL ELSE claim_until END
	WHERE broker = ? AND partition_id = ? AND transaction_id = ? AND claim_owner = ?`

// progressSQL is saveSQL for an entry whose attribution is unchanged: it
// leaves batch_id (indexed) alone, which makes it about a third cheaper
// on SQLite, where the journal's writes are most of a fast run's cost.
const progressSQL = `UPDATE journal SET state = ?, replay_txid = ?, replay_partition_id = ?, replay_queue = ?, replay_digest = ?, via = ?, outcome = ?, attempts = ?, last_error = ?,
	updated_at = ?, claim_owner = ?, claim_until = CASE WHEN ? = 1 THEN NULL ELSE claim_until END
	WHERE broker = ? AND partition_id = ? AND transaction_id = ? AND claim_owner = ?`

// SaveMany writes several entries in one transaction (a group commit:
// each caller's write is durable when SaveMany returns). The result has
// one error per item: ErrLostClaim for an entry owner no longer holds.
func (s *Store) SaveMany(ctx context.Context, items []SaveItem, owner string, now time.Time) []error {
	errs := make([]error, len(items))
	fail := func(err error) []error {
		for i := range errs {
			errs[i] = s.wrap("writing the journal", err)
		}
		return errs
	}
	if err := s.checkFile(ctx); err != nil {
		return fail(err)
	}
	// Prepared before the transaction takes the (SQLite: only) connection.
	full, err := s.prepared(ctx, saveSQL)
	if err != nil {
		return fail(err)
	}
	slim, err := s.prepared(ctx, progressSQL)
	if err != nil {
		return fail(err)
	}

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	fullTx, slimTx := tx.StmtContext(ctx, full), tx.StmtContext(ctx, slim)
	defer fullTx.Close()
	defer slimTx.Close()
	// Rows in address order: every multi-row writer locks in one order.
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool {
		x, y := items[order[a]].Entry.Address, items[order[b]].Entry.Address
		return x.PartitionID < y.PartitionID || x.PartitionID == y.PartitionID && x.TransactionID < y.TransactionID
	})
	for _, i := range order {
		it := items[i]
		e := it.Entry
		var claim any = owner
		if it.Release {
			claim = nil
		}
		var res sql.Result
		if e.stored.known && e.stored.attribution == e.attribution() {
			res, err = slimTx.ExecContext(ctx, e.State, e.ReplayTxID, e.ReplayPartitionID, e.ReplayQueue, e.ReplayDigest, e.Via, e.Outcome, e.Attempts, truncate(e.LastError, 500),
				fmtTime(now), claim, boolInt(it.Release), e.Broker, e.Address.PartitionID, e.Address.TransactionID, owner)
		} else {
			res, err = fullTx.ExecContext(ctx, e.State, e.BatchID, e.Action, e.Generation, e.ReplayTxID, e.ReplayPartitionID, e.ReplayQueue, e.ReplayDigest, e.Via, e.Outcome, e.Attempts, truncate(e.LastError, 500),
				fmtTime(now), claim, boolInt(it.Release), e.Broker, e.Address.PartitionID, e.Address.TransactionID, owner)
		}
		if err != nil {
			return fail(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			errs[i] = fmt.Errorf("%s: %w", e.Address, ErrLostClaim)
		}
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	for i, it := range items {
		if errs[i] == nil {
			it.Entry.UpdatedAt = now
			it.Entry.markStored()
		}
	}
	return errs
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// PayloadDigest is the digest a journal records of a payload a manual
// replay pushes: 24 hex digits of its SHA-256.
func PayloadDigest(payload []byte) string {
	h := sha256.Sum256(payload)
	return hex.EncodeToString(h[:12])
}

// NewOwner names this process as a claim owner: host, pid, a nonce and,
// where the system says them, the process's start time (a pid can be
// taken again by another process) and where its pid means something
// (Where: the pid namespace and the boot).
func NewOwner(nonce string) string {
	h, _ := os.Hostname()
	owner := fmt.Sprintf("%s:%d:%s", h, os.Getpid(), nonce)
	if start := processStart(); start != "" {
		owner += ":" + start
		if where := Where(); where != "" {
			owner += ":" + where
		}
	}
	return owner
}

// OwnerAlive reports whether a claim owner may still be working. Only a
// process this one can see is judged by looking: one on this host, in
// this pid namespace, since this boot, must be running (not ended and
// waiting to be reaped) and be the one that started when the owner says.
// Any other (another host; a container or a CI job with this hostname
// in another pid namespace, where its pid names another process here) is
// presumed alive: its lease decides.
func OwnerAlive(owner string) bool {
	if owner == "" {
		return false
	}
	parts := strings.Split(owner, ":")
	if len(parts) < 3 {
		return true
	}
	host, _ := os.Hostname()
	if parts[0] != host {
		return true
	}
	if len(parts) >= 5 && parts[4] != Where() {
		return true
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		return true
	}
	started := ""
	if len(parts) >= 4 {
		started = parts[3]
	}
	return processAlive(pid, started)
}
