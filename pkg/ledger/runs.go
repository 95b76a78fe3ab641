package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A batch is "running" from its run's start to its settling. A run that
// is killed (kill -9, a lost host) never settles, and its status would
// say "running" until someone resumes it. So a run records who it is
// (runner: host, pid and nonce, as claims name their owner) and beats
// every BeatEvery; a running batch whose runner is a process of this host
// that is gone, or that has not beaten for StaleAfter, shows as
// interrupted (Batch.Stale). The clock here is the wall clock, whatever
// clock a command judges dead letters by: it is about processes.

// BeatEvery is how often a run says it is alive, how far it got, and
// learns whether it was asked to stop; StaleAfter, how long without a
// beat makes its batch stale.
const (
	BeatEvery  = 2 * time.Second
	StaleAfter = time.Minute
)

// runSchema is the migration that recorded a run's progress and stops.
const runSchema = 24

// StartRun records that runner runs the batch now, setting out to do
// total addresses. A stop asked of an earlier run is forgotten: it was
// that run's.
func (s *Store) StartRun(ctx context.Context, id, runner string, total int) error {
	if err := s.checkFile(ctx); err != nil {
		return err
	}
	now := fmtTime(time.Now())
	q, args := `UPDATE batches SET runner = ?, beat_at = ? WHERE id = ?`, []any{runner, now, id}
	if s.schema >= runSchema {
		q, args = `UPDATE batches SET runner = ?, beat_at = ?, run_started_at = ?, run_total = ?, run_done = 0, stop_at = NULL, stop_by = '', stop_role = '', stop_why = '' WHERE id = ?`,
			[]any{runner, now, now, total, id}
	}
	_, err := s.exec(ctx, s.db, q, args...)
	return s.wrap("recording the run", err)
}

// Stop is a stop asked of a running batch (decisions stop): by whom (the
// name given, and who the ledger knows them as), when and why.
type Stop struct {
	At   time.Time `json:"at"`
	By   string    `json:"by"`
	Role string    `json:"role,omitempty"`
	Why  string    `json:"why"`
}

// Beat says runner still runs the batch and has done done of its
// addresses, and returns the stop asked of it, if any.
func (s *Store) Beat(ctx context.Context, id, runner string, done int) (*Stop, error) {
	if err := s.checkFile(ctx); err != nil {
		return nil, err
	}
	if s.schema < runSchema {
		_, err := s.exec(ctx, s.db, `UPDATE batches SET beat_at = ? WHERE id = ? AND runner = ?`, fmtTime(time.Now()), id, runner)
		return nil, s.wrap("recording the run", err)
	}
	var at sql.NullString
	var st Stop
	err := s.db.QueryRowContext(ctx, s.rebind(`UPDATE batches SET beat_at = ?, run_done = ? WHERE id = ? AND runner = ? RETURNING stop_at, stop_by, stop_role, stop_why`),
		fmtTime(time.Now()), done, id, runner).Scan(&at, &st.By, &st.Role, &st.Why)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !at.Valid {
		return nil, nil
	}
	if err != nil {
		return nil, s.wrap("recording the run", err)
	}
	st.At = parseTime(at)
	return &st, nil
}

// ErrNotRunning: the batch has no run to stop.
var ErrNotRunning = errors.New("the batch is not running")

// RequestStop asks the run of a running batch to stop (at its next beat,
// within BeatEvery): nothing more is claimed, what is in flight finishes
// and is journaled, and the run says who stopped it and how to resume.
// Who and why go to the audit.
func (s *Store) RequestStop(ctx context.Context, id, by, why string, now time.Time) (*Batch, error) {
	b, err := s.Batch(ctx, id)
	if err != nil {
		return nil, err
	}
	if b.Status != StatusRunning || b.Stale {
		return nil, fmt.Errorf("%w: batch %s is %s", ErrNotRunning, b.ID, b.Shown())
	}
	if s.schema < runSchema {
		return nil, fmt.Errorf("%w: this ledger's schema is older than the runs that can be stopped", ErrNotRunning)
	}
	who, err := s.Identity(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, s.wrap("asking the run to stop", err)
	}
	defer tx.Rollback()
	res, err := s.exec(ctx, tx, `UPDATE batches SET stop_at = ?, stop_by = ?, stop_role = ?, stop_why = ? WHERE id = ? AND status = ?`,
		fmtTime(now), by, who, why, b.ID, StatusRunning)
	if err != nil {
		return nil, s.wrap("asking the run to stop", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil, fmt.Errorf("%w: batch %s ended meanwhile", ErrNotRunning, b.ID)
	}
	if err := s.auditTx(ctx, tx, now, b.Broker, b.ID, "stop-requested", by, why); err != nil {
		return nil, err
	}
	return b, s.wrap("asking the run to stop", tx.Commit())
}

// Run is what a running batch's run says of itself: who runs it (the
// claim owner: host, pid), since when, how far it got at its last beat,
// and a stop asked of it.
type Run struct {
	Runner   string    `json:"runner,omitempty"`
	Host     string    `json:"host,omitempty"`
	PID      int       `json:"pid,omitempty"`
	Started  time.Time `json:"started,omitzero"`
	LastBeat time.Time `json:"lastBeat,omitzero"`
	Total    int       `json:"total"`
	Done     int       `json:"done"`
	Stop     *Stop     `json:"stop,omitempty"`
}

// RunOf reads what a batch's latest run said of itself.
func (s *Store) RunOf(ctx context.Context, id string) (Run, error) {
	var r Run
	var beat, started, stopAt sql.NullString
	var stop Stop
	var err error
	if s.schema < runSchema {
		err = s.db.QueryRowContext(ctx, s.rebind(`SELECT runner, beat_at FROM batches WHERE id = ?`), id).Scan(&r.Runner, &beat)
	} else {
		err = s.db.QueryRowContext(ctx, s.rebind(`SELECT runner, beat_at, run_started_at, run_total, run_done, stop_at, stop_by, stop_role, stop_why FROM batches WHERE id = ?`), id).
			Scan(&r.Runner, &beat, &started, &r.Total, &r.Done, &stopAt, &stop.By, &stop.Role, &stop.Why)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("%w: batch %s", ErrNotFound, id)
	}
	if err != nil {
		return r, s.wrap("reading the run", err)
	}
	r.LastBeat, r.Started = parseTime(beat), parseTime(started)
	if stopAt.Valid && stopAt.String != "" {
		stop.At = parseTime(stopAt)
		r.Stop = &stop
	}
	if parts := strings.Split(r.Runner, ":"); len(parts) >= 2 {
		r.Host = parts[0]
		r.PID, _ = strconv.Atoi(parts[1])
	}
	return r, nil
}

// RunGone reports whether a running batch's run is known to be gone:
// its process on this host has exited, or it has not beaten for
// StaleAfter. A batch with no runner recorded (an older dlqctl's) is not
// judged.
func RunGone(runner string, beat time.Time) bool {
	if runner == "" {
		return false
	}
	return !OwnerAlive(runner) || (!beat.IsZero() && time.Since(beat) > StaleAfter)
}

// judge marks a running batch whose run is gone as stale.
func (b *Batch) judge(runner string, beat sql.NullString) {
	b.runner, b.beat = runner, parseTime(beat)
	b.Stale = b.Status == StatusRunning && RunGone(runner, b.beat)
}

// Shown is the status to show: "interrupted" for a running batch whose
// run is gone (the ledger still says running; a resume carries on).
func (b *Batch) Shown() string {
	if b.Stale {
		return StatusInterrupted
	}
	return b.Status
}

// LastBeat is when the batch's run last said it was alive (zero before
// its first run, or for an older dlqctl's).
func (b *Batch) LastBeat() time.Time { return b.beat }

// NotStarted is the outcome key of a batch's addresses its runs have not
// reached (never claimed, or claimed since by a later batch): with it, a
// batch's outcome counts add up to its size.
const NotStarted = "not started"

// Tally fills in what a listing shows of a batch: a running batch's
// outcome read from its journal now (its stored outcome is its last
// settled run's), and the addresses no run reached, so that the counts
// add up to the size. Holds have no outcome.
func (s *Store) Tally(ctx context.Context, b *Batch) error {
	if IsHold(b.Action) {
		return nil
	}
	if b.Status == StatusRunning {
		out, err := s.BatchOutcome(ctx, b.ID)
		if err != nil {
			return err
		}
		b.Outcome = out
	}
	n := 0
	for k, v := range b.Outcome {
		if k != NotStarted {
			n += v
		}
	}
	if n < b.Size {
		if b.Outcome == nil {
			b.Outcome = map[string]int{}
		}
		b.Outcome[NotStarted] = b.Size - n
	} else {
		delete(b.Outcome, NotStarted)
	}
	return nil
}
