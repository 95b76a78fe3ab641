package dlq_test

// Exactly once between runs: the path an address took, the URL a broker
// is reached by, outages that sent nothing, silent brokers, and a resume
// line pasted as printed.

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testutil"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// oneAddress is a replayable dead letter of the seed: its address and
// payload.
func oneAddress(t *testing.T, b *sandbox.Broker) (string, string) {
	t.Helper()
	for _, r := range b.DeadLetterRows() {
		if r.Queue == "orders" {
			return r.PartitionID + "/" + r.TransactionID, compact(r.Payload)
		}
	}
	t.Fatal("no orders dead letter in the seed")
	return "", ""
}

// copies counts the live messages carrying payload.
func copies(b *sandbox.Broker, payload string) int {
	n := 0
	for _, m := range b.LiveMessages() {
		if compact(m.Payload) == payload {
			n++
		}
	}
	return n
}

func compact(p []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, p) != nil {
		return string(p)
	}
	return b.String()
}

func dead(b *sandbox.Broker, addr string) bool {
	for _, r := range b.DeadLetterRows() {
		if r.PartitionID+"/"+r.TransactionID == addr {
			return true
		}
	}
	return false
}

// The manual path's push is applied and its answer lost; the next run,
// without flags, takes --via auto. It must keep the manual path and its
// derived transaction id (the broker answers duplicate), not mint a
// second copy through /retry.
func TestManualThenAutoPublishesOnce(t *testing.T) {
	b, cli := seeded(t)
	addr, payload := oneAddress(t, b)
	// Every push of the first run is applied and its answer lost (the
	// run tries a few times, with the same id).
	b.SetFaults(sandbox.Faults{CutEvery: 1})
	_, stderr, code := cli.Exec("dlq", "replay", addr, "--via", "manual", "--why", "fixed", "--yes", "--rate", "0")
	if code != 1 || copies(b, payload) != 1 {
		t.Fatalf("first run: exit %d, %d copies\n%s", code, copies(b, payload), stderr)
	}
	b.SetFaults(sandbox.Faults{})
	out, stderr, code := cli.Exec("dlq", "replay", addr, "--why", "fixed", "--yes", "--rate", "0", "-o", "json")
	if code != 0 || copies(b, payload) != 1 || dead(b, addr) {
		t.Fatalf("second run: exit %d, %d copies, dead-lettered %v\n%s%s", code, copies(b, payload), dead(b, addr), out, stderr)
	}
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Duplicate != 1 {
		t.Fatalf("the second run should find its earlier push (duplicate): %v %s", err, out)
	}
	// The journal names the copy that exists.
	js, _, _ := cli.Exec("dlq", "show", addr, "-o", "json")
	var show struct {
		ReplayedAs struct{ TransactionID string } `json:"replayedAs"`
		Journal    struct{ Via string }           `json:"journal"`
	}
	json.Unmarshal([]byte(js), &show)
	live := b.LiveMessages()
	if show.Journal.Via != "manual" || show.ReplayedAs.TransactionID != live[len(live)-1].TransactionID {
		t.Fatalf("show: via %q, copy %q; the broker holds %q", show.Journal.Via, show.ReplayedAs.TransactionID, live[len(live)-1].TransactionID)
	}
}

// A run told --via endpoint meets a 503 on its /retry probe: it stops
// before sending anything (exit 3). The next run, on the default path,
// has its push applied and the answer lost; the one after it must keep
// the derived id: one copy.
func TestProbe503ThenNormalRunsPublishOnce(t *testing.T) {
	b, cli := seeded(t)
	addr, payload := oneAddress(t, b)
	b.SetFaults(sandbox.Faults{Script: func(c sandbox.Call) sandbox.Action {
		switch {
		case c.Route == "POST /api/v1/messages/{pid}/{txid}/retry":
			return sandbox.Refuse
		case c.Route == "POST /api/v1/push":
			return sandbox.CutAfterApply
		}
		return sandbox.Serve
	}})
	if _, stderr, code := cli.Exec("dlq", "replay", addr, "--why", "fixed", "--yes", "--rate", "0", "--via", "endpoint"); code != 3 || copies(b, payload) != 0 {
		t.Fatalf("--via endpoint: exit %d, %d copies\n%s", code, copies(b, payload), stderr)
	}
	if _, stderr, code := cli.Exec("dlq", "replay", addr, "--why", "fixed", "--yes", "--rate", "0"); code != 1 || copies(b, payload) != 1 {
		t.Fatalf("first run: exit %d, %d copies\n%s", code, copies(b, payload), stderr)
	}
	b.SetFaults(sandbox.Faults{})
	if _, stderr, code := cli.Exec("dlq", "replay", addr, "--why", "fixed", "--yes", "--rate", "0"); code != 0 || copies(b, payload) != 1 || dead(b, addr) {
		t.Fatalf("second run: exit %d, %d copies\n%s", code, copies(b, payload), stderr)
	}
}

// One broker reached as 127.0.0.1, localhost, 0.0.0.0 or with a port
// written with leading zeros has one journal: an address left unknown
// under one spelling (by the endpoint path, the one that can leave an
// address unknown) is not published again under another.
func TestTwoSpellingsOfOneBrokerShareTheJournal(t *testing.T) {
	spell := map[string]func(ip string) string{
		"localhost":   func(ip string) string { return strings.Replace(ip, "127.0.0.1", "localhost", 1) },
		"0.0.0.0":     func(ip string) string { return strings.Replace(ip, "127.0.0.1", "0.0.0.0", 1) },
		"leading 0":   func(ip string) string { return strings.Replace(ip, "127.0.0.1:", "127.0.0.1:0", 1) },
		"[::] and 00": func(ip string) string { return strings.Replace(ip, "127.0.0.1:", "[::]:00", 1) },
	}
	for name, other := range spell {
		t.Run(name, func(t *testing.T) {
			b, cli := seeded(t)
			addr, payload := oneAddress(t, b)
			ip := cli.Env["DLQCTL_SERVER"] // http://127.0.0.1:PORT
			b.SetFaults(sandbox.Faults{RowKeptEvery: 1, CutEvery: 1})
			_, stderr, code := cli.Exec("dlq", "replay", addr, "--why", "fixed", "--yes", "--rate", "0", "--via", "endpoint")
			if code != 1 || !strings.Contains(stderr, "1 unknown") {
				t.Fatalf("first run: exit %d\n%s", code, stderr)
			}
			b.SetFaults(sandbox.Faults{})
			cli.Env["DLQCTL_SERVER"] = other(ip)
			_, stderr, code = cli.Exec("dlq", "replay", addr, "--why", "fixed", "--yes", "--rate", "0")
			if copies(b, payload) != 1 || code != 1 || !strings.Contains(stderr, "1 unknown") {
				t.Fatalf("second run at %s: exit %d, %d copies\n%s", cli.Env["DLQCTL_SERVER"], code, copies(b, payload), stderr)
			}
		})
	}
}

// A context names its broker; a URL spelt differently that reaches the
// same host and port keeps the name. Reached with no context at all, the
// broker may be the named one: a replay asks which it is before it acts,
// and the answer is recorded.
func TestNamedBrokerUnderAnotherSpelling(t *testing.T) {
	b, cli := seeded(t)
	addr, payload := oneAddress(t, b)
	ip := cli.Env["DLQCTL_SERVER"]
	cli.WriteConfig("contexts:\n  prod:\n    server: " + ip + "\n    broker: prod\n")
	b.SetFaults(sandbox.Faults{RowKeptEvery: 1, CutEvery: 1})
	delete(cli.Env, "DLQCTL_SERVER")
	if _, stderr, code := cli.Exec("--context", "prod", "dlq", "replay", addr, "--why", "fixed", "--yes", "--rate", "0", "--via", "endpoint"); code != 1 || !strings.Contains(stderr, "1 unknown") {
		t.Fatalf("first run: exit %d\n%s", code, stderr)
	}
	b.SetFaults(sandbox.Faults{})
	// The context, its server spelt otherwise: still broker prod.
	if _, stderr, code := cli.Exec("--context", "prod", "--server", strings.Replace(ip, "127.0.0.1", "localhost", 1), "dlq", "replay", addr, "--why", "fixed", "--yes", "--rate", "0"); copies(b, payload) != 1 || code != 1 || !strings.Contains(stderr, "1 unknown") {
		t.Fatalf("the context under another spelling: exit %d, %d copies\n%s", code, copies(b, payload), stderr)
	}
	// No context: the URL's own identity, which may be prod. Refused,
	// nothing sent, until a person says.
	cli.Env["DLQCTL_SERVER"] = ip
	b.ResetCalls()
	_, stderr, code := cli.Exec("dlq", "replay", addr, "--why", "fixed", "--yes", "--rate", "0")
	if code != 2 || !strings.Contains(stderr, "--same-broker-as prod") || mutating(b) != 0 {
		t.Fatalf("no context: exit %d, %d calls that change the broker\n%s", code, mutating(b), stderr)
	}
	_, stderr, code = cli.Exec("dlq", "replay", addr, "--why", "fixed", "--yes", "--rate", "0", "--same-broker-as", "prod")
	if copies(b, payload) != 1 || code != 1 || !strings.Contains(stderr, "1 unknown") {
		t.Fatalf("answered the same: exit %d, %d copies\n%s", code, copies(b, payload), stderr)
	}
	// Recorded: not asked again, and filed under prod.
	if out, stderr, code := cli.Exec("dlq", "replay", addr, "--dry-run"); code != 0 || strings.Contains(stderr, "same-broker-as") {
		t.Fatalf("asked again: exit %d\n%s%s", code, out, stderr)
	}
	if out, _, _ := cli.Exec("decisions", "ls", "-o", "json"); !strings.Contains(out, `"broker": "prod"`) {
		t.Fatalf("the audit's batches are not prod's:\n%s", out)
	}
}

// portGate serves a handler on a port it can close (new connections are
// refused) and open again at the same address. Keep-alives are off, so
// every call dials: a call is either refused or served whole.
type portGate struct {
	t    *testing.T
	h    http.Handler
	addr string
	ln   net.Listener
	srv  *http.Server
}

func newGate(t *testing.T, h http.Handler) *portGate {
	g := &portGate{t: t, h: h}
	g.open()
	t.Cleanup(func() { g.srv.Close() })
	return g
}

func (g *portGate) open() {
	addr := g.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var err error
	for i := 0; i < 50; i++ {
		if g.ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		g.t.Fatal(err)
	}
	g.addr = g.ln.Addr().String()
	g.srv = &http.Server{Handler: g.h}
	g.srv.SetKeepAlivesEnabled(false)
	go g.srv.Serve(g.ln)
}

// close stops accepting at once (a dial is refused from now on); the
// call being served finishes.
func (g *portGate) close() { g.ln.Close() }

// The broker's port closes in the middle of a batch replayed through
// /retry (the path that can leave an address unknown): the calls refused
// sent nothing, so they are plain failures (retried by the resume), not
// unknowns, and the batch stops instead of walking every address.
func TestRefusedConnectionsAreRetriedNotUnknown(t *testing.T) {
	b := sandbox.New(func() time.Time { return testutil.Now })
	if err := b.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	var g *portGate
	b.SetFaults(sandbox.Faults{Script: func(c sandbox.Call) sandbox.Action {
		if strings.HasSuffix(c.Route, "/retry") && c.N == 20 {
			g.close()
		}
		return sandbox.Serve
	}})
	g = newGate(t, b.Handler())
	cli := testutil.NewCLI(t, "http://"+g.addr, root.Run)
	want := replayable(b)
	// One call at a time: the port closes between two calls, so each one
	// after it is refused before anything is written (with several in
	// flight, one accepted by the kernel but not yet by the server would be
	// reset after it was written: that one may have been seen).
	out, stderr, code := cli.Exec("dlq", "replay", "--all", "--why", "outage", "--yes", "--rate", "0", "--timeout", "2s", "--concurrency", "1", "--order", "none", "--via", "endpoint", "-o", "json")
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s%s", err, out, stderr)
	}
	if code == 0 || rep.Unknown != 0 || rep.Failed == 0 || !strings.Contains(stderr, "Resume with:") {
		t.Fatalf("the outage run: exit %d, %d unknown, %d failed\n%s", code, rep.Unknown, rep.Failed, firstLines(stderr, 30))
	}
	// It stopped: it did not try every address against a closed port.
	if rep.Stopped == "" || rep.Failed > 20 {
		t.Fatalf("the run walked the batch against a closed port: %d failed, stopped %q", rep.Failed, rep.Stopped)
	}
	b.SetFaults(sandbox.Faults{})
	g.open()
	out, stderr, code = cli.Exec("dlq", "replay", "--batch", rep.BatchID, "--yes", "--rate", "0", "-o", "json")
	rep = replay.Report{}
	json.Unmarshal([]byte(out), &rep)
	if rep.Unknown != 0 || replayable(b) != 0 {
		t.Fatalf("resume: exit %d, %d unknown, %d still dead-lettered of %d\n%s\n%+v", code, rep.Unknown, replayable(b), want, lastLines(stderr, 30), rep.BlockedPartitions)
	}
	assertOnce(t, b)
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// replayable counts the dead letters that are not undecryptable.
func replayable(b *sandbox.Broker) int {
	n := 0
	for _, r := range b.DeadLetterRows() {
		if !strings.HasPrefix(r.Error, "decryption failed") {
			n++
		}
	}
	return n
}

// assertOnce checks no payload is live twice.
func assertOnce(t *testing.T, b *sandbox.Broker) {
	t.Helper()
	seen := map[string]int{}
	for _, m := range b.LiveMessages() {
		if seen[compact(m.Payload)]++; seen[compact(m.Payload)] > 1 {
			t.Fatalf("%s published twice", m.Payload)
		}
	}
}

// A broker that goes silent mid-batch (calls parked, no answer): with
// --timeout 2s the run ends in a bounded time with the resume line, and
// stops sending instead of trying every address.
func TestSilentBrokerEndsTheRunInBoundedTime(t *testing.T) {
	b, cli := seeded(t)
	var silentFrom atomic.Int64
	b.SetFaults(sandbox.Faults{Script: func(c sandbox.Call) sandbox.Action {
		if c.Route == "POST /api/v1/push" && c.N == 10 {
			silentFrom.CompareAndSwap(0, int64(c.All))
		}
		if from := silentFrom.Load(); from > 0 && int64(c.All) >= from {
			return sandbox.Silence
		}
		return sandbox.Serve
	}})
	done := make(chan struct{})
	var stderr string
	var code int
	go func() {
		defer close(done)
		_, stderr, code = cli.Exec("dlq", "replay", "--all", "--why", "silence", "--yes", "--rate", "0", "--timeout", "2s", "--concurrency", "4")
	}()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("the replay did not end against a silent broker")
	}
	calls := 0
	for _, n := range b.Calls() {
		calls += n
	}
	if code == 0 || !strings.Contains(stderr, "Resume with:") {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	// Each in-flight call and its checks; not one call per address.
	if sent := calls - int(silentFrom.Load()); sent > 40 {
		t.Fatalf("%d calls sent to a silent broker", sent)
	}
}

// The resume line, pasted as printed, finishes the batch: it carries the
// connection flags the run was given (--server, --ledger, --config).
func TestResumeLineWorksVerbatim(t *testing.T) {
	sw := &swappable{}
	b := sw.fresh(t)
	srv := httptestServer(t, sw)
	cli := testutil.NewCLI(t, "", root.Run)
	dir := t.TempDir()
	ledgerDSN := "sqlite://" + filepath.Join(dir, "elsewhere.db")
	config := filepath.Join(dir, "dlqctl.yaml")
	if err := os.WriteFile(config, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	delete(cli.Env, "DLQCTL_SERVER")
	delete(cli.Env, "DLQCTL_LEDGER")
	delete(cli.Env, "DLQCTL_CONFIG")
	_, stderr, code := sw.interrupted(cli, 15, "--server", srv, "--ledger", ledgerDSN, "--config", config,
		"dlq", "replay", "--queue", "payments", "--why", "x", "--yes", "--rate", "50", "--concurrency", "1")
	m := regexp.MustCompile(`Resume with: (.+)`).FindStringSubmatch(stderr)
	if code != 130 || m == nil {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	args, err := shellWords(m[1])
	if err != nil || args[0] != "dlqctl" {
		t.Fatalf("resume line %q: %v", m[1], err)
	}
	if _, stderr, code := cli.Exec(args[1:]...); code != 0 || payments(b) != 0 {
		t.Fatalf("%s: exit %d, %d payments rows left\n%s", m[1], code, payments(b), stderr)
	}
}

// shellWords splits a line as a POSIX shell would, for single quotes and
// backslash-free words (what dlqctl prints).
func shellWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			cur.WriteByte(c)
		case c == '\'':
			quoted, in = true, true
		case c == ' ':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quoted {
		return nil, errors.New("unterminated quote")
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

func httptestServer(t *testing.T, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// --timeout bounds a whole command against a broker that answers
// nothing: the first call's tries, then nothing more is sent (exit 3).
func TestReadsAgainstASilentBrokerAreBounded(t *testing.T) {
	b, cli := seeded(t)
	for _, args := range [][]string{
		{"dlq", "check"},
		{"dlq", "ls", "--queue", "orders"},
		{"dlq", "stats"},
		{"dlq", "sync"},
		{"dlq", "show", "orders:1"},
	} {
		var calls atomic.Int64
		b.SetFaults(sandbox.Faults{Script: func(sandbox.Call) sandbox.Action {
			calls.Add(1)
			return sandbox.Silence
		}})
		_, stderr, code := cli.Exec(append(args, "--timeout", "200ms")...)
		if code != 3 {
			t.Fatalf("%v: exit %d\n%s", args, code, stderr)
		}
		// One call's four tries, perhaps one more begun before 4 × 200ms.
		if n := calls.Load(); n > 6 {
			t.Fatalf("%v: %d calls sent to a silent broker\n%s", args, n, stderr)
		}
	}
}

// A message whose replays keep failing is refused past --max-generation
// (3 by default), on a broker that has /retry too, on either path: the
// default path's copies carry their generation in the id dlqctl derives
// (dlqr-<gen>-…); --via endpoint's carry one the broker mints, and the
// journal says which replay made each of them.
func TestReplayStopsAtTheGenerationCap(t *testing.T) {
	for _, c := range []struct {
		via  string
		line sandbox.Line
	}{{"auto", sandbox.Queen15}, {"endpoint", sandbox.Queen15}, {"auto", sandbox.Queen16}} {
		via := c.via
		t.Run(via+" on "+c.line.String(), func(t *testing.T) {
			b, cli := seeded(t) // the contract's broker: it has /retry
			b.SetLine(c.line)
			addr, payload := oneAddress(t, b)
			seen := map[string]bool{}
			for _, m := range b.LiveMessages() {
				seen[m.TransactionID] = true
			}
			for gen := 1; gen <= 3; gen++ {
				if _, stderr, code := cli.Exec("dlq", "replay", addr, "--why", "fixed, again", "--yes", "--rate", "0", "--via", via); code != 0 {
					t.Fatalf("replay of generation %d: exit %d: %s", gen, code, stderr)
				}
				var cp *sandbox.Live
				for _, m := range b.LiveMessages() {
					if !seen[m.TransactionID] && compact(m.Payload) == payload {
						cp = &m
					}
					seen[m.TransactionID] = true
				}
				if cp == nil {
					t.Fatalf("replay of generation %d published no copy", gen)
				}
				if got := deadletter.Generation(cp.TransactionID); via == "auto" && c.line == sandbox.Queen15 && got != gen+1 {
					t.Fatalf("the copy of generation %d is %s: its id says generation %d, want %d", gen, cp.TransactionID, got, gen+1)
				}
				// The consumer fails the copy too.
				if !b.FailAgain(cp.Queue, cp.TransactionID, "billing", "still broken") {
					t.Fatal("could not fail the copy again")
				}
				addr = cp.PartitionID + "/" + cp.TransactionID
			}
			// The plan says so, made from the items (an address) or from
			// the rows as they stream (a selection's dry run).
			for _, sel := range [][]string{{addr}, {"--queue", "orders"}} {
				out, _, _ := cli.Exec(append(append([]string{"dlq", "replay"}, sel...), "--dry-run", "--via", via)...)
				if !strings.Contains(out, "1 message is past --max-generation and will be skipped (it keeps failing after replays)") {
					t.Fatalf("the plan of a fourth generation (%v):\n%s", sel, out)
				}
			}
			before := copies(b, payload)
			_, stderr, code := cli.Exec("dlq", "replay", addr, "--why", "fixed, again", "--yes", "--rate", "0", "--via", via)
			if code != 1 || !strings.Contains(stderr, "past the batch's cap of 3 (it keeps failing after replays); --max-generation sets the cap") || copies(b, payload) != before || !dead(b, addr) {
				t.Fatalf("a fourth generation: exit %d, %d copies (was %d), still dead-lettered %v:\n%s", code, copies(b, payload), before, dead(b, addr), stderr)
			}
		})
	}
}

// A push with one --transform lands and its answer is lost; a rerun with
// another --transform would come back a duplicate and be suppressed, the
// correction never published. It is refused instead, saying what was
// pushed, and the dead letter stays.
func TestChangedTransformIsNotSuppressed(t *testing.T) {
	b, cli := seeded(t)
	addr, _ := oneAddress(t, b)
	b.SetFaults(sandbox.Faults{Script: func(c sandbox.Call) sandbox.Action {
		if c.Route == "POST /api/v1/push" {
			return sandbox.CutAfterApply // applied, the answer lost, every time
		}
		return sandbox.Serve
	}})
	if _, stderr, code := cli.Exec("dlq", "replay", addr, "--transform", `.fixed = "v1-WRONG"`, "--why", "fix", "--yes", "--rate", "0"); code != 1 {
		t.Fatalf("first run: exit %d\n%s", code, stderr)
	}
	b.SetFaults(sandbox.Faults{})
	_, stderr, code := cli.Exec("dlq", "replay", addr, "--transform", `.fixed = "v2-right"`, "--why", "fix, again", "--yes", "--rate", "0")
	if code != 1 || !strings.Contains(stderr, "with another payload") || strings.Contains(stderr, "duplicate-suppressed") || !dead(b, addr) {
		t.Fatalf("second run: exit %d, still dead-lettered %v\n%s", code, dead(b, addr), stderr)
	}
	for _, m := range b.LiveMessages() {
		if strings.Contains(string(m.Payload), "v2-right") {
			t.Fatalf("the second payload was published: %s", m.Payload)
		}
	}
}
