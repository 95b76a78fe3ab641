// Package ledger is dlqctl's durable store: batches and their frozen
// manifests, the per-address replay journal, the archive of every dead
// letter seen, and an append-only audit. One schema and one code path run
// on SQLite (modernc.org/sqlite, the embedded default) and PostgreSQL
// (pgx), which is how a team shares one ledger.
package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/pkg/secret"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib" // also registers "pgx"
	_ "modernc.org/sqlite"           // registers "sqlite"
)

// Errors the exit-code mapper switches on.
var (
	// ErrBadDSN: the ledger DSN cannot be used as written (exit 2).
	ErrBadDSN = errors.New("invalid ledger")
	// ErrUnavailable: the ledger cannot be reached (exit 3).
	ErrUnavailable = errors.New("ledger unavailable")
	// ErrNotFound: no such batch (exit 5).
	ErrNotFound = errors.New("not found in the ledger")
)

// Engine names the database behind a Store.
type Engine string

// The engines.
const (
	SQLite   Engine = "sqlite"
	Postgres Engine = "postgres"
)

// Store is an open ledger.
type Store struct {
	db     *sql.DB
	engine Engine
	shown  string // the DSN with any password removed

	// Statements the journal's hot path runs for every address, prepared
	// once: preparing was a third of a group commit's cost.
	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt

	file   *fileState // a SQLite ledger's file; nil for PostgreSQL
	fileMu sync.Mutex
	// quiet bounds a PostgreSQL ledger's silence (quiet.go); nil for SQLite.
	quiet *quiet
	// schema is the version the store was migrated to: the latest, but
	// for tests that build a ledger as an older dlqctl left it.
	schema int
}

// prepared returns q prepared once for the store.
func (s *Store) prepared(ctx context.Context, q string) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if st := s.stmts[q]; st != nil {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, s.rebind(q))
	if err != nil {
		return nil, err
	}
	if s.stmts == nil {
		s.stmts = map[string]*sql.Stmt{}
	}
	s.stmts[q] = st
	return st, nil
}

// String is the DSN without its password.
func (s *Store) String() string { return s.shown }

// Close closes the database.
func (s *Store) Close() error {
	if s.Replaced() == "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.witness(ctx, time.Now())
		cancel()
	}
	s.stmtMu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = nil
	s.stmtMu.Unlock()
	return s.db.Close()
}

// DB exposes the database for tests and benchmarks.
func (s *Store) DB() *sql.DB { return s.db }

// dsnForms is what a ledger DSN may be, for error messages.
const dsnForms = "sqlite:///ABSOLUTE/PATH.db, an absolute path, or postgres://USER:PASSWORD@HOST/DB"

// ParseDSN tells the engine and the driver's data source from a ledger
// DSN: sqlite:///absolute/path, an absolute path, or postgres(ql)://...
// Anything else is refused, a relative path included: a ledger that
// depends on the directory a command runs in breaks resume and
// idempotence, quietly.
func ParseDSN(dsn string) (Engine, string, string, error) {
	bad := func(why string) (Engine, string, string, error) {
		return "", "", "", fmt.Errorf("%w: %s; a ledger is %s", ErrBadDSN, why, dsnForms)
	}
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		u, err := url.Parse(dsn)
		if err != nil || u.Host == "" {
			return bad(fmt.Sprintf("cannot read the PostgreSQL DSN %s", secret.DSN(dsn)))
		}
		return Postgres, dsn, secret.DSN(dsn), nil
	case strings.HasPrefix(dsn, "sqlite://"):
		p := strings.TrimPrefix(dsn, "sqlite://")
		if i := strings.IndexByte(p, '?'); i >= 0 {
			p = p[:i]
		}
		if p == "" || !filepath.IsAbs(p) {
			return bad(fmt.Sprintf("%q names no absolute path (sqlite:// is followed by the path: sqlite:///var/lib/dlqctl/ledger.db)", dsn))
		}
		return SQLite, p, "sqlite://" + p, nil
	case strings.Contains(dsn, "://"):
		scheme, _, _ := strings.Cut(dsn, "://")
		return bad(fmt.Sprintf("unknown ledger scheme %q", secret.DSN(scheme)))
	case strings.TrimSpace(dsn) == "":
		return bad("the ledger DSN is empty")
	case strings.Contains(dsn, "="):
		return bad(fmt.Sprintf("%q looks like a libpq keyword DSN, which dlqctl does not read: write it as a URL", secret.DSN(dsn)))
	case !filepath.IsAbs(dsn):
		return bad(fmt.Sprintf("%q is not an absolute path", secret.DSN(dsn)))
	}
	return SQLite, dsn, "sqlite://" + dsn, nil
}

// Options are how a ledger is opened.
type Options struct {
	// Silence bounds how long a PostgreSQL ledger may send nothing while
	// a statement waits on it (quiet.go): the command's --timeout. Zero
	// is DefaultSilence.
	Silence time.Duration
}

// DefaultSilence is the bound on a PostgreSQL ledger's silence when none
// is given: --timeout's default.
const DefaultSilence = 30 * time.Second

// Open opens (creating and migrating as needed) the ledger at dsn.
func Open(ctx context.Context, dsn string) (*Store, error) { return OpenWith(ctx, dsn, Options{}) }

// OpenWith is Open with options.
func OpenWith(ctx context.Context, dsn string, o Options) (*Store, error) {
	return open(ctx, dsn, len(migrations), o)
}

func open(ctx context.Context, dsn string, schema int, o ...Options) (*Store, error) {
	engine, source, shown, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	s := &Store{engine: engine, shown: shown, schema: schema}
	silence := DefaultSilence
	if len(o) > 0 && o[0].Silence > 0 {
		silence = o[0].Silence
	}
	switch engine {
	case SQLite:
		if err := os.MkdirAll(filepath.Dir(source), 0o700); err != nil {
			return nil, fmt.Errorf("%w: %s: creating its folder: %v", ErrUnavailable, shown, err)
		}
		_, statErr := os.Stat(source)
		s.file = &fileState{path: source, created: errors.Is(statErr, os.ErrNotExist)}
		// SQLite says only "unable to open (14)": ask the OS why first.
		fh, err := os.OpenFile(source, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, fmt.Errorf("%w: cannot open %s: %v", ErrUnavailable, shown, err)
		}
		s.file.info, _ = fh.Stat()
		fh.Close()
		q := url.Values{}
		q.Add("_pragma", "busy_timeout(15000)")
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Add("_pragma", "foreign_keys(ON)")
		// Checkpoint every 10,000 pages (40 MB of log) rather than 1,000:
		// a replay rewrites the same few pages commit after commit, and a
		// checkpoint copies each once however often it changed.
		q.Add("_pragma", "wal_autocheckpoint(10000)")
		q.Set("_txlock", "immediate")
		s.db, err = sql.Open("sqlite", "file:"+source+"?"+q.Encode())
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadDSN, shown, err)
		}
		// SQLite has one writer. One connection makes this process's
		// writers queue in Go instead of sleeping in SQLite's busy
		// handler; other processes still wait on busy_timeout.
		s.db.SetMaxOpenConns(1)
	case Postgres:
		cfg, err := pgx.ParseConfig(source)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadDSN, shown, scrub(err, source))
		}
		// Opening may migrate, silent until done: bounded loosely until
		// the store is open, then by the command's --timeout.
		s.quiet = &quiet{}
		s.quiet.after.Store(int64(openSilence))
		cfg.AfterNetConnect = s.quiet.wrap
		if cfg.ConnectTimeout == 0 {
			cfg.ConnectTimeout = silence
		}
		s.db = stdlib.OpenDB(*cfg)
		s.db.SetMaxOpenConns(8)
		defer func() { s.quiet.after.Store(int64(silence)) }()
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := s.db.PingContext(pctx); err != nil {
		s.db.Close()
		if ctx.Err() != nil { // interrupted while opening: not a bad ledger
			return nil, fmt.Errorf("opening %s: %w", shown, context.Cause(ctx))
		}
		if engine == SQLite {
			return nil, s.notLedger(fmt.Errorf("%w: cannot open %s: %v", ErrBadDSN, shown, firstLine(err)), err)
		}
		return nil, fmt.Errorf("%w: cannot reach %s: %v", ErrUnavailable, shown, scrub(err, source))
	}
	if err := s.migrateTo(ctx, schema); err != nil {
		s.db.Close()
		return nil, err
	}
	s.keepLineage(ctx, time.Now())
	return s, nil
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// scrub keeps the password out of driver errors, which sometimes quote
// the connection string, and keeps the cause: pgx puts it on the lines
// after "failed to connect to …:".
func scrub(err error, dsn string) string {
	var parts []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	msg := strings.Join(parts, " ")
	if u, perr := url.Parse(dsn); perr == nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, secret.Mask)
		}
		for _, k := range []string{"password", "sslpassword"} {
			if pw := u.Query().Get(k); pw != "" {
				msg = strings.ReplaceAll(msg, pw, secret.Mask)
			}
		}
	}
	return msg
}

// rebind turns ? placeholders into $1, $2, … for PostgreSQL.
func (s *Store) rebind(q string) string {
	if s.engine != Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

func (s *Store) exec(ctx context.Context, q execer, query string, args ...any) (sql.Result, error) {
	return q.ExecContext(ctx, s.rebind(query), args...)
}

type execer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// each runs a query and calls f on each of its rows.
func (s *Store) each(ctx context.Context, q string, f func(*sql.Rows) error, args ...any) error {
	rows, err := s.db.QueryContext(ctx, s.rebind(q), args...)
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

// wrap turns a driver error into a ledger error that names the store.
func (s *Store) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if s.quiet != nil && errors.Is(err, pgconn.ErrConnClosed) && s.quiet.gaveUp() != nil {
		// A statement whose connection was closed under it as the ledger
		// went silent (another statement's wait ran out): the silence is
		// what happened.
		err = s.quiet.silent()
	}
	if r := refused(err); r != nil {
		return fmt.Errorf("%s: %w", op, r)
	}
	msg := firstLine(err)
	if strings.Contains(msg, "readonly") || strings.Contains(msg, "read-only") || strings.Contains(msg, "read only") || strings.Contains(msg, "permission denied") {
		return fmt.Errorf("%w: %s: %s: writing is not permitted (a read-only file or role; check permissions, or point --ledger elsewhere)", ErrBadDSN, s.shown, op)
	}
	return fmt.Errorf("%w: %s: %s: %s", ErrUnavailable, s.shown, op, msg)
}

// ts is the one timestamp format in the ledger: fixed-width UTC with
// nanoseconds, so text order is time order on both engines, and a time a
// broker sent is kept as it was sent (2.x lists microseconds, the older
// lines milliseconds): a row compared with what the ledger kept of it is
// compared at the precision it has. Ledgers written before migration 22
// kept milliseconds (tsMillis); the migration widened them.
const (
	ts       = "2006-01-02T15:04:05.000000000Z"
	tsMillis = "2006-01-02T15:04:05.000Z"
)

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(ts)
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return fmtTime(t)
}

func parseTime(s sql.NullString) time.Time {
	if !s.Valid || s.String == "" {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339Nano, s.String)
	return t
}

// insertRows inserts n rows: on PostgreSQL one multi-row INSERT per chunk
// (a round trip per chunk, not per row: there the round trip is the cost). head is the
// statement up to VALUES, tail what follows the rows (ON CONFLICT …);
// each row supplies cols values.
func (s *Store) insertRows(ctx context.Context, q execer, head, tail string, cols, n int, row func(i int) []any) error {
	place := "(" + strings.TrimSuffix(strings.Repeat("?, ", cols), ", ") + ")"
	if s.engine == SQLite {
		// In-process: no round trip to save, and one prepared single-row
		// statement beats building and parsing large ones.
		stmt, err := q.PrepareContext(ctx, head+place+tail)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i := 0; i < n; i++ {
			if _, err := stmt.ExecContext(ctx, row(i)...); err != nil {
				return err
			}
		}
		return nil
	}
	const perStmt = 400 // 400 × 16 columns stays far below PostgreSQL's 65,535 parameters
	for start := 0; start < n; start += perStmt {
		end := min(start+perStmt, n)
		var b strings.Builder
		b.WriteString(head)
		args := make([]any, 0, (end-start)*cols)
		for i := start; i < end; i++ {
			if i > start {
				b.WriteString(", ")
			}
			b.WriteString(place)
			args = append(args, row(i)...)
		}
		b.WriteString(tail)
		if _, err := q.ExecContext(ctx, s.rebind(b.String()), args...); err != nil {
			return err
		}
	}
	return nil
}
