package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// A SQLite ledger is one file, and a file can be deleted, or renamed and
// replaced, under a process that holds it open. Two things follow:
//
//   - A process that stays up (the exporter) asks Replaced before each
//     pass and opens the ledger again when the file at the path is not the
//     one it holds: otherwise it judges a file nobody else reads.
//   - A ledger deleted between commands takes its archive with it, and so
//     what `dlq check` knows of rows that vanished with no decision: a
//     gate that failed goes quiet. Beside the file dlqctl keeps a witness
//     (<file>.history) written the first time the ledger is opened
//     holding history (a batch, or an archived row). A ledger created where a witness stands records the loss in
//     its audit (kind "history-lost"); HistoryLost says it to every check.

// witness is what <file>.history says of the ledger that was there.
type witness struct {
	Ledger string    `json:"ledger"`
	Seen   time.Time `json:"seen"`
}

// HistoryLost is a ledger's record that it replaced one with history.
type HistoryLost struct {
	// At is when this ledger was created in the place of the other; Seen,
	// when a ledger there was first seen holding history.
	At, Seen time.Time
	Path     string
}

// String says what was lost, for a check's notes and a command's warning.
func (h HistoryLost) String() string {
	return fmt.Sprintf("the ledger %s was created anew at %s: the one before it there (it held history on %s) is gone, and with it its archive; rows that vanished with no decision before %s are not known",
		h.Path, h.At.UTC().Format(time.RFC3339), h.Seen.UTC().Format(time.RFC3339), h.At.UTC().Format(time.RFC3339))
}

const kindHistoryLost = "history-lost"

func witnessPath(file string) string { return file + ".history" }

// fileState is what open learnt of a SQLite ledger's file.
type fileState struct {
	path    string
	created bool         // open created the file
	info    os.FileInfo  // the file as opened
	lost    *HistoryLost // this open found the history gone
	gone    *gone        // the file left its path under this command (checkFile)
}

// LostOnOpen is the loss this open found and recorded, or nil: a command
// says it as a warning once; a check says HistoryLost every time.
func (s *Store) LostOnOpen() *HistoryLost {
	if s.file == nil {
		return nil
	}
	return s.file.lost
}

// Replaced says whether the SQLite file at the ledger's path is no longer
// the one this Store holds: "removed" or "replaced", or "" when it is (and
// always for PostgreSQL).
func (s *Store) Replaced() string {
	if s.file == nil || s.file.info == nil {
		return ""
	}
	fi, err := os.Stat(s.file.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "removed"
	case err != nil:
		return ""
	case !os.SameFile(fi, s.file.info):
		return "replaced"
	}
	return ""
}

// HistoryLost is the record of the ledger this one replaced, if it did.
func (s *Store) HistoryLost(ctx context.Context) (*HistoryLost, error) {
	if s.engine != SQLite {
		return nil, nil
	}
	var at, detail string
	err := s.db.QueryRowContext(ctx, `SELECT at, detail FROM audit WHERE kind = ? ORDER BY at DESC LIMIT 1`, kindHistoryLost).Scan(&at, &detail)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		return nil, s.wrap("reading the ledger's lineage", err)
	}
	var w witness
	if err := json.Unmarshal([]byte(detail), &w); err != nil {
		return nil, nil
	}
	h := &HistoryLost{At: parseTime(sql.NullString{String: at, Valid: true}), Seen: w.Seen, Path: w.Ledger}
	return h, nil
}

// keepLineage runs once the ledger is open and migrated: a new file where
// a witness stands records the loss; a file holding history gets a
// witness if it has none. Neither step fails the open: the witness is a courtesy to
// the next command, and a read-only folder must not stop a read.
func (s *Store) keepLineage(ctx context.Context, now time.Time) {
	if s.file == nil {
		return
	}
	wp := witnessPath(s.file.path)
	if s.file.created {
		if b, err := os.ReadFile(wp); err == nil {
			var w witness
			if json.Unmarshal(b, &w) == nil && !w.Seen.IsZero() {
				w.Ledger = s.file.path
				detail, _ := json.Marshal(w)
				if s.auditTx(ctx, s.db, now, "", "", kindHistoryLost, "", string(detail)) == nil {
					s.file.lost = &HistoryLost{At: now, Seen: w.Seen, Path: w.Ledger}
				}
			}
		}
		return
	}
	s.witness(ctx, now)
}

// witness writes <file>.history when there is none and the ledger holds
// history: at open, and again at Close for the history a command wrote.
func (s *Store) witness(ctx context.Context, now time.Time) {
	if s.file == nil {
		return
	}
	wp := witnessPath(s.file.path)
	if _, err := os.Stat(wp); err == nil {
		return
	}
	var held int
	if err := s.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM archive) + EXISTS (SELECT 1 FROM batches)`).Scan(&held); err != nil || held == 0 {
		return
	}
	b, _ := json.Marshal(witness{Ledger: s.file.path, Seen: now.UTC().Truncate(time.Second)})
	f, err := os.CreateTemp(filepath.Dir(wp), filepath.Base(wp)+".*")
	if err != nil {
		return
	}
	_, werr := f.Write(b)
	if cerr := f.Close(); werr != nil || cerr != nil {
		os.Remove(f.Name())
		return
	}
	if os.Rename(f.Name(), wp) != nil {
		os.Remove(f.Name())
	}
}

// A SQLite ledger removed (or replaced) under a running command keeps
// taking its writes, into a file nobody can open again: a discard that
// archives its rows and then deletes them would leave no archive, and a
// replay no journal. Every write of a run (a claim, a journal
// transaction, a batch, the archive, a heartbeat) first asks whether the
// file at the path is still this one (a stat). The first time it is not,
// what the open file holds is written back (VACUUM INTO): to the path if
// nothing stands there, else beside it; and every write from then on is
// refused, so the command stops and says where its ledger went.

// ErrLedgerGone: the ledger's file was removed or replaced under the
// command (exit 3).
var ErrLedgerGone = fmt.Errorf("%w: its file was removed under this command", ErrUnavailable)

// gone is what became of a ledger whose file left its path: the error
// every write returns from then on.
type gone struct {
	once sync.Once
	err  error
}

// checkFile returns nil while the ledger's file is the one at its path
// (always, for PostgreSQL); else it rescues what the file holds, once,
// and returns why nothing more is written.
func (s *Store) checkFile(ctx context.Context) error {
	if s.file == nil {
		return nil
	}
	how := s.Replaced()
	if how == "" && s.file.gone == nil {
		return nil
	}
	s.fileMu.Lock()
	if s.file.gone == nil {
		s.file.gone = &gone{}
	}
	g := s.file.gone
	s.fileMu.Unlock()
	g.once.Do(func() { g.err = s.rescue(context.WithoutCancel(ctx), how) })
	return g.err
}

// rescue writes what the open file holds back where it can be found, and
// says what happened.
func (s *Store) rescue(ctx context.Context, how string) error {
	path := s.file.path
	to := path
	if how == "replaced" {
		to = fmt.Sprintf("%s.rescued-%s", path, time.Now().UTC().Format("20060102T150405"))
	}
	if _, err := s.db.ExecContext(ctx, `VACUUM INTO ?`, to); err != nil {
		return fmt.Errorf("%w: %s was %s while this command had it open, and what it holds could not be written back (%v): what this command recorded is lost with it; nothing more is sent", ErrLedgerGone, path, how, firstLine(err))
	}
	if how == "removed" {
		if fi, err := os.Stat(to); err == nil {
			s.witnessAt(to, fi.ModTime())
		}
		return fmt.Errorf("%w: %s was removed while this command had it open; what it held, and what this command recorded, is written back there, and the command stops: run it again to go on", ErrLedgerGone, path)
	}
	return fmt.Errorf("%w: %s was replaced by another file while this command had it open; what this command's ledger held is written to %s, and the command stops: put that file back at %s to go on with it", ErrLedgerGone, path, to, path)
}

// witnessAt writes the witness of a ledger file written back at path.
func (s *Store) witnessAt(path string, seen time.Time) {
	b, _ := json.Marshal(witness{Ledger: path, Seen: seen.UTC().Truncate(time.Second)})
	_ = os.WriteFile(witnessPath(path), b, 0o600)
}
