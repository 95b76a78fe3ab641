package ledger

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A PostgreSQL ledger reached over a network can go silent: a dead
// proxy, a partition, a server whose disk hangs. Its statements then
// wait for ever, and a run whose journal writes must land waits with
// them, SIGINT or not. Every read and write of a connection to it is
// bounded instead: no byte for Silence (the command's --timeout) is an
// error, the run stops on it as on any ledger error, and for as long
// again no new connection is tried, so what is left of the command ends
// quickly rather than waiting once more a statement. Opening the ledger
// (a migration, which may be long and is silent until done) is bounded
// more loosely (openSilence).

// ErrSilent: the ledger did not answer within the bound (exit 3).
var ErrSilent = errors.New("the ledger is not answering")

// openSilence bounds the silence of the statements that open a ledger:
// a migration over a long history, or one waiting for another process's.
const openSilence = 10 * time.Minute

// quiet is a PostgreSQL ledger's bound on silence.
type quiet struct {
	after atomic.Int64 // the bound, in nanoseconds
	since atomic.Int64 // when the ledger last went silent (Unix ns), 0 for never
}

func (q *quiet) bound() time.Duration { return time.Duration(q.after.Load()) }

// silent is the error of a call the ledger did not answer.
func (q *quiet) silent() error {
	return fmt.Errorf("%w: nothing came from it for %s (--timeout)", ErrSilent, q.bound())
}

// gaveUp is the error of a connection not tried because the ledger went
// silent less than the bound ago, or nil.
func (q *quiet) gaveUp() error {
	s := q.since.Load()
	if s == 0 || time.Since(time.Unix(0, s)) >= q.bound() {
		return nil
	}
	return fmt.Errorf("%w: it stopped answering %s ago; not tried again before %s has passed (--timeout)", ErrSilent,
		time.Since(time.Unix(0, s)).Round(100*time.Millisecond), q.bound())
}

// wrap is pgconn's AfterNetConnect: it bounds the connection's reads and
// writes, and refuses one while the ledger is taken to be silent.
func (q *quiet) wrap(_ context.Context, _ *pgconn.Config, c net.Conn) (net.Conn, error) {
	if err := q.gaveUp(); err != nil {
		return c, err // the driver closes what it is given back
	}
	return &quietConn{Conn: c, q: q}, nil
}

// quietConn is a connection whose every read and write must make
// progress within the bound. Deadlines the driver sets (to interrupt a
// call whose context ended) are kept: the nearer one applies.
type quietConn struct {
	net.Conn
	q     *quiet
	mu    sync.Mutex
	read  time.Time // the driver's read deadline, zero for none
	write time.Time
}

func (c *quietConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	own := time.Now().Add(c.q.bound())
	dl := nearer(own, c.read)
	c.mu.Unlock()
	if err := c.Conn.SetReadDeadline(dl); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	return n, c.judge(err, dl == own)
}

func (c *quietConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	own := time.Now().Add(c.q.bound())
	dl := nearer(own, c.write)
	c.mu.Unlock()
	if err := c.Conn.SetWriteDeadline(dl); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	return n, c.judge(err, dl == own)
}

// judge turns a timeout of the bound (not the driver's own deadline)
// into the ledger's silence.
func (c *quietConn) judge(err error, ours bool) error {
	var ne net.Error
	if err == nil || !ours || !errors.As(err, &ne) || !ne.Timeout() {
		return err
	}
	c.q.since.Store(time.Now().UnixNano())
	return c.q.silent()
}

func (c *quietConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.read, c.write = t, t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *quietConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.read = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *quietConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.write = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// nearer is the nearer of two deadlines, the zero one meaning none.
func nearer(own, driver time.Time) time.Time {
	if !driver.IsZero() && driver.Before(own) {
		return driver
	}
	return own
}
