package main

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/testkit"
)

// mute is a TCP proxy on a loopback port in front of another address;
// silenced, it keeps every connection open and accepts new ones, and
// passes nothing either way: a ledger behind a network that stopped
// answering.
type mute struct {
	ln     net.Listener
	to     string
	silent atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newMute(t *testing.T, to string) *mute {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &mute{ln: ln, to: to}
	t.Cleanup(m.close)
	go m.serve()
	return m
}

func (m *mute) serve() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		m.keep(c)
		if m.silent.Load() {
			continue // accepted, never answered
		}
		up, err := net.Dial("tcp", m.to)
		if err != nil {
			c.Close()
			continue
		}
		m.keep(up)
		go m.pipe(up, c)
		go m.pipe(c, up)
	}
}

// pipe copies from src to dst while the proxy speaks; silenced, what
// comes is read and dropped.
func (m *mute) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !m.silent.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (m *mute) keep(c net.Conn) {
	m.mu.Lock()
	m.conns = append(m.conns, c)
	m.mu.Unlock()
}

func (m *mute) close() {
	m.ln.Close()
	m.mu.Lock()
	for _, c := range m.conns {
		c.Close()
	}
	m.mu.Unlock()
}

// A PostgreSQL ledger that goes silent a second into a replay: the run
// stops within --timeout of it and says the ledger stopped answering
// (exit 3); SIGINT, then SIGTERM, end it as promptly. With the ledger
// back, the batch resumes and every message is in the broker once.
func TestSilentLedgerEndsTheRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	for _, signals := range [][]syscall.Signal{nil, {syscall.SIGINT}, {syscall.SIGINT, syscall.SIGTERM}} {
		name := "no signal"
		if len(signals) > 0 {
			name = fmt.Sprint(signals)
		}
		t.Run(name, func(t *testing.T) {
			direct := testkit.PostgresDSN(t)
			u, err := url.Parse(direct)
			if err != nil {
				t.Fatal(err)
			}
			m := newMute(t, u.Host)
			u.Host = m.ln.Addr().String()
			w := newWorld(t, 300, 91, u.String())
			c := w.cmd("--timeout", "3s", "dlq", "replay", "--all", "--rate", "100", "--order", "none", "--why", "silent ledger", "--yes")
			var out bytes.Buffer
			c.Stdout, c.Stderr = &out, &out
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			m.silent.Store(true)
			silentAt := time.Now()
			for _, s := range signals {
				time.Sleep(500 * time.Millisecond)
				_ = c.Process.Signal(s)
			}
			done := make(chan error, 1)
			go func() { done <- c.Wait() }()
			var err2 error
			select {
			case err2 = <-done:
			case <-time.After(45 * time.Second):
				_ = c.Process.Kill()
				<-done
				t.Fatalf("still running 45 s after the ledger went silent\n%s", out.String())
			}
			took := time.Since(silentAt)
			code := 0
			if ee, ok := err2.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			t.Logf("ended %s after the ledger went silent, exit %d", took.Round(100*time.Millisecond), code)
			if took > 20*time.Second {
				t.Fatalf("ended %s after the ledger went silent (--timeout 3s)\n%s", took, out.String())
			}
			if len(signals) == 0 && (code != 3 || !strings.Contains(out.String(), "not answering")) {
				t.Fatalf("exit %d\n%s", code, out.String())
			}
			w.books(false)
			// The ledger answers again: the batch finishes, once each.
			m.close()
			w.ledger = direct
			w.finish("--order", "none")
			w.books(true)
		})
	}
}
