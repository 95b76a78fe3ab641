package ledger

import (
	"context"
	"database/sql"
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

// BeatEvery is how often a run says it is alive; StaleAfter, how long
// without a beat makes its batch stale.
const (
	BeatEvery  = 10 * time.Second
	StaleAfter = 6 * BeatEvery
)

// StartRun records that runner runs the batch now.
func (s *Store) StartRun(ctx context.Context, id, runner string) error {
	if err := s.checkFile(ctx); err != nil {
		return err
	}
	_, err := s.exec(ctx, s.db, `UPDATE batches SET runner = ?, beat_at = ? WHERE id = ?`, runner, fmtTime(time.Now()), id)
	return s.wrap("recording the run", err)
}

// Beat says runner still runs the batch.
func (s *Store) Beat(ctx context.Context, id, runner string) error {
	if err := s.checkFile(ctx); err != nil {
		return err
	}
	_, err := s.exec(ctx, s.db, `UPDATE batches SET beat_at = ? WHERE id = ? AND runner = ?`, fmtTime(time.Now()), id, runner)
	return s.wrap("recording the run", err)
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
	if b.Action == ActionHold {
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
