package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binary builds the real dlqctl once per test run.
func binary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "dlqctl-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "dlqctl")
		// As releases are built (.goreleaser.yaml): CGO off, one static
		// binary; what the benchmarks measure is what users run.
		build := exec.Command("go", "build", "-o", binPath, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := build.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// world is a sandbox, a ledger and the books to check them against.
type world struct {
	t      *testing.T
	b      *sandbox.Broker
	url    string
	ledger string
	dir    string
	orig   map[string]deadletter.Address
	undec  map[string]bool
}

func newWorld(t *testing.T, n int, seed uint64, ledgerDSN string) *world {
	return newWorldOn(t, sandbox.Queen15, n, seed, ledgerDSN)
}

// newWorldOn is newWorld on a sandbox speaking a release line.
func newWorldOn(t *testing.T, line sandbox.Line, n int, seed uint64, ledgerDSN string) *world {
	b, url := testkit.Sandbox(t)
	b.SetLine(line)
	b.Fill(n, seed)
	w := &world{t: t, b: b, url: url, dir: t.TempDir(), orig: map[string]deadletter.Address{}, undec: map[string]bool{}}
	w.ledger = ledgerDSN
	if w.ledger == "" {
		w.ledger = "sqlite://" + filepath.Join(w.dir, "ledger.db")
	}
	for _, r := range b.DeadLetterRows() {
		w.orig[string(r.Payload)] = deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}
		if strings.HasPrefix(r.Error, "decryption failed") {
			w.undec[string(r.Payload)] = true
		}
	}
	return w
}

func (w *world) cmd(args ...string) *exec.Cmd {
	c := exec.Command(binary(w.t), args...)
	c.Env = append(os.Environ(), "DLQCTL_SERVER="+w.url, "DLQCTL_LEDGER="+w.ledger,
		"DLQCTL_CONFIG="+filepath.Join(w.dir, "config.yaml"), "NO_COLOR=1", "DLQCTL_USER=crash-test")
	return c
}

func (w *world) run(args ...string) (string, int) {
	c := w.cmd(args...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		w.t.Fatal(err)
	}
	return out.String(), code
}

// killAfter starts a command and SIGKILLs it after d (if still running).
func (w *world) killAfter(d time.Duration, args ...string) {
	c := w.cmd(args...)
	if err := c.Start(); err != nil {
		w.t.Fatal(err)
	}
	time.Sleep(d)
	_ = c.Process.Signal(syscall.SIGKILL)
	_ = c.Wait()
}

func (w *world) batches() []ledger.Batch {
	s, err := ledger.Open(context.Background(), w.ledger)
	if err != nil {
		w.t.Fatal(err)
	}
	defer s.Close()
	bs, err := s.Batches(context.Background(), ledger.BatchFilter{})
	if err != nil {
		w.t.Fatal(err)
	}
	return bs
}

// books checks what the broker holds: each replayable original exists at
// most once live (exactly once when complete), and none is lost: it is
// either live or still dead-lettered.
func (w *world) books(complete bool) {
	w.t.Helper()
	live := map[string]int{}
	for _, m := range w.b.LiveMessages() {
		if _, ok := w.orig[string(m.Payload)]; !ok {
			w.t.Fatalf("live message with a payload no dead letter had: %s", m.Payload)
		}
		live[string(m.Payload)]++
	}
	dead := map[string]bool{}
	for _, r := range w.b.DeadLetterRows() {
		dead[string(r.Payload)] = true
	}
	for p, a := range w.orig {
		switch {
		case w.undec[p]:
			if live[p] != 0 || !dead[p] {
				w.t.Errorf("undecryptable %s: live %d, dead %v", a, live[p], dead[p])
			}
		case live[p] > 1:
			w.t.Errorf("%s published %d times", a, live[p])
		case live[p] == 0 && !dead[p]:
			w.t.Errorf("%s lost: neither live nor dead-lettered", a)
		case complete && (live[p] != 1 || dead[p]):
			w.t.Errorf("%s: live %d, still dead-lettered %v", a, live[p], dead[p])
		}
	}
}

// finish resumes whatever the kill left until the DLQ holds only what
// cannot be replayed. Addresses left unknown get the runbook's human step:
// one whose message is already live (the operator checked the queue) is
// discarded, the rest re-attempted with --retry-unknown.
func (w *world) finish(extra ...string) {
	w.t.Helper()
	for i := 0; i < 6; i++ {
		for _, b := range w.batches() {
			if b.Status != ledger.StatusDone && b.Action == ledger.ActionReplay {
				w.run(append([]string{"dlq", "replay", "--batch", b.ID, "--yes", "--rate", "0"}, extra...)...)
			}
		}
		// A kill before the batch was recorded leaves a fresh selection.
		w.run(append([]string{"dlq", "replay", "--all", "--why", "finish", "--yes", "--rate", "0"}, extra...)...)
		if w.allDone() {
			return
		}
		w.books(false)
		live := map[string]bool{}
		for _, m := range w.b.LiveMessages() {
			live[string(m.Payload)] = true
		}
		// Once an address: its delete takes every row it has (another
		// consumer group's too), and a second rm would find none.
		removed := map[string]bool{}
		for _, r := range w.b.DeadLetterRows() {
			a := r.PartitionID + "/" + r.TransactionID
			if live[string(r.Payload)] && !removed[a] {
				removed[a] = true
				if out, code := w.run("dlq", "rm", a, "--why", "already replayed: seen in the live queue", "--yes", "--rate", "0"); code != 0 {
					w.t.Fatalf("rm: %s", out)
				}
			}
		}
		w.run(append([]string{"dlq", "replay", "--all", "--why", "unknowns checked", "--yes", "--rate", "0", "--retry-unknown"}, extra...)...)
		if w.allDone() {
			return
		}
	}
	w.t.Fatalf("did not converge; DLQ depth %d", w.b.Depth())
}

func (w *world) allDone() bool {
	for _, r := range w.b.DeadLetterRows() {
		if !w.undec[string(r.Payload)] {
			return false
		}
	}
	return true
}

// TestKillAndResume kills the real binary at random moments of a replay,
// then resumes: afterwards every dead letter exists exactly once as a live
// message, none is lost, and the DLQ holds only undecryptable envelopes.
func TestKillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	type variant struct {
		name   string
		line   sandbox.Line
		faults sandbox.Faults
		via    string
	}
	variants := []variant{
		{"manual", sandbox.Queen15, sandbox.Faults{}, "manual"},
		{"auto (manual, intents journaled with the claims)", sandbox.Queen15, sandbox.Faults{}, "auto"},
		{"endpoint", sandbox.Queen15, sandbox.Faults{}, "endpoint"},
		{"manual with 503s and cut connections", sandbox.Queen15, sandbox.Faults{Fail503Every: 5, CutEvery: 7}, "manual"},
		{"endpoint with dlqRowRemoved false", sandbox.Queen15, sandbox.Faults{RowKeptEvery: 3}, "endpoint"},
		{"older server", sandbox.Queen015, sandbox.Faults{CutEvery: 6}, "auto"},
		{"1.6, the broker's move, with 503s and cut connections", sandbox.Queen16, sandbox.Faults{Fail503Every: 5, CutEvery: 7}, "auto"},
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	trials := 0
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			for i := 0; i < 5; i++ {
				trials++
				w := newWorldOn(t, v.line, 50, uint64(100+trials), "")
				w.b.SetFaults(v.faults)
				kill := time.Duration(rng.IntN(400)) * time.Millisecond
				w.killAfter(kill, "dlq", "replay", "--all", "--via", v.via, "--rate", "150", "--concurrency", "4", "--why", "crash test", "--yes", "--order", "none")
				w.books(false)
				t.Logf("trial %d: killed after %s with %d of %d published", i, kill, len(w.b.LiveMessages()), len(w.orig)-len(w.undec))
				w.finish("--via", v.via, "--order", "none")
				w.books(true)
				if t.Failed() {
					t.Fatalf("trial %d (killed after %s)", i, kill)
				}
			}
		})
	}
	if trials < 20 {
		t.Fatalf("only %d trials", trials)
	}
}

// TestInterruptPrintsResume sends SIGINT: in-flight calls finish, the
// resume command is printed, the exit code is 130, and resuming finishes.
func TestInterruptPrintsResume(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	w := newWorld(t, 40, 7, "")
	c := w.cmd("dlq", "replay", "--all", "--rate", "20", "--why", "sigint", "--yes", "--order", "none")
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	c.Process.Signal(os.Interrupt)
	err := c.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 130 || !strings.Contains(out.String(), "Resume with: dlqctl dlq replay --batch ") {
		t.Fatalf("SIGINT: %v\n%s", err, out.String())
	}
	w.books(false)
	w.finish("--order", "none")
	w.books(true)
}

// TestKilledBatchShowsInterrupted kills a replay with SIGKILL mid-run:
// the ledger still says running, and nothing settles it. decisions ls and
// show say interrupted (its process is gone), show gives the resume line,
// and the outcome counts add up to the batch's size, before and after
// the resume.
func TestKilledBatchShowsInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	w := newWorld(t, 60, 13, "")
	w.killWhen(func() bool { return len(w.b.LiveMessages()) >= 10 }, "dlq", "replay", "--all", "--rate", "40", "--why", "kill -9", "--yes")
	bs := w.batches()
	if len(bs) != 1 || bs[0].Status != ledger.StatusRunning {
		t.Fatalf("after SIGKILL the ledger should still say running: %+v", bs)
	}
	id := bs[0].ID
	addsUp := func(when string) {
		t.Helper()
		out, code := w.run("decisions", "ls", "-o", "json")
		var got []struct {
			Status  string         `json:"status"`
			Stale   bool           `json:"stale"`
			Size    int            `json:"size"`
			Outcome map[string]int `json:"outcome"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got) != 1 {
			t.Fatalf("%s: decisions ls -o json: exit %d\n%s", when, code, out)
		}
		n := 0
		for _, v := range got[0].Outcome {
			n += v
		}
		if n != got[0].Size {
			t.Fatalf("%s: outcome %v adds up to %d, the batch holds %d", when, got[0].Outcome, n, got[0].Size)
		}
		if when == "killed" && (got[0].Status != "interrupted" || !got[0].Stale || got[0].Outcome[ledger.NotStarted] == 0) {
			t.Fatalf("killed: %+v, want interrupted, stale, some not started", got[0])
		}
	}
	addsUp("killed")
	out, _ := w.run("decisions", "ls")
	if !strings.Contains(out, "interrupted") || strings.Contains(out, "running") {
		t.Fatalf("decisions ls after SIGKILL:\n%s", out)
	}
	out, _ = w.run("decisions", "show", id)
	if !strings.Contains(out, "Status:      interrupted") || !strings.Contains(out, "Resume with: dlqctl dlq replay --batch "+id+" --yes") {
		t.Fatalf("decisions show after SIGKILL:\n%s", out)
	}
	// The batch holds undecryptable messages (and one behind them in its
	// partition): the resume ends failed, exit 1, with every count said.
	if out, code := w.run("dlq", "replay", "--batch", id, "--yes", "--rate", "0"); code != 1 || !strings.Contains(out, "Batch "+id+": ") {
		t.Fatalf("resume: exit %d\n%s", code, out)
	}
	addsUp("resumed")
	w.books(false)
}

// TestSignalsEndSpinningJQ sends SIGINT and SIGTERM to the real binary
// while each command's jq expression spins (under its budget, which is
// longer than the wait): every one ends within a second of the signal,
// exit 130, with nothing recorded.
func TestSignalsEndSpinningJQ(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	w := newWorld(t, 40, 11, "")
	spin := "[limit(1e12; repeat(1))] | length > 0" // bounded by time, not by memory
	for _, args := range [][]string{
		{"dlq", "ls", "--where", spin},
		{"dlq", "ls", "--group-by", "error", "--where", spin},
		{"dlq", "ls", "-o", "ndjson", "--where", spin},
		{"dlq", "replay", "--all", "--where", spin, "--why", "x", "--yes"},
		{"dlq", "rm", "--all", "--where", spin, "--why", "x", "--yes"},
		{"dlq", "decide", "--all", "--where", spin, "--action", "discard", "--why", "x"},
		{"dlq", "replay", "--all", "--transform", "[limit(1e12; repeat(1))] | length", "--why", "x", "--yes"},
	} {
		for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
			c := w.cmd(args...)
			c.Env = append(c.Env, "DLQCTL_JQ_BUDGET=30s")
			var out bytes.Buffer
			c.Stdout, c.Stderr = &out, &out
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			sent := time.Now()
			c.Process.Signal(sig)
			err := c.Wait()
			took := time.Since(sent)
			const want = 130 // PRODUCT.md: interrupted, by either signal
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != want || took > time.Second {
				t.Errorf("%v, %v: %v after %s (want exit %d within 1s)\n%s", args, sig, err, took.Round(time.Millisecond), want, out.String())
			}
		}
	}
	if out, _ := w.run("decisions", "ls", "-o", "json"); strings.Contains(out, `"id"`) {
		t.Fatalf("an interrupted command recorded a batch:\n%s", out)
	}
	w.books(false)
}

// TestTwoProcessesOneBatchOnPostgres runs one recorded batch from two
// processes at once against one PostgreSQL ledger.
func TestTwoProcessesOneBatchOnPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	dsn := testkit.PostgresDSN(t)
	for round := 0; round < 5; round++ {
		w := newWorld(t, 60, uint64(500+round), dsn)
		// Rows stay after /retry: two processes that both took an address
		// would both publish it; only the ledger's claims prevent that.
		w.b.SetFaults(sandbox.Faults{RowKeptEvery: 1})
		out, err := w.cmd("dlq", "decide", "--all", "--action", "replay", "--why", "two operators").Output()
		if err != nil {
			t.Fatalf("decide: %v", err)
		}
		id := strings.TrimSpace(string(out))
		via := []string{"manual", "endpoint"}[round%2]
		var wg sync.WaitGroup
		for p := 0; p < 2; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.run("dlq", "replay", "--batch", id, "--yes", "--rate", "0", "--concurrency", "4", "--via", via, "--order", "none")
			}()
		}
		wg.Wait()
		// No resume: between them, the two runs finished the batch.
		w.books(true)
		if t.Failed() {
			t.Fatalf("round %d", round)
		}
	}
}

// TestOrderedKillAndResume kills the real binary at random moments of an
// ordered replay (the default), under broker faults and on the released
// server, then resumes it as the runbook says. From the broker's books:
// in every partition the copies were accepted in enqueue order, no
// message was published past one that was not, and each exactly once.
func TestOrderedKillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	const parts, per = 6, 8
	variants := []struct {
		name   string
		line   sandbox.Line
		faults sandbox.Faults
		via    string
	}{
		{"manual with 503s and cut connections", sandbox.Queen15, sandbox.Faults{Fail503Every: 5, CutEvery: 7}, "manual"},
		{"endpoint with dlqRowRemoved false", sandbox.Queen15, sandbox.Faults{RowKeptEvery: 3}, "endpoint"},
		{"released server with cuts", sandbox.Queen015, sandbox.Faults{CutEvery: 6}, "auto"},
		{"1.6, the broker's move, with cuts", sandbox.Queen16, sandbox.Faults{CutEvery: 6}, "auto"},
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	for vi, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			for trial := 0; trial < 4; trial++ {
				b, url := testkit.Sandbox(t)
				b.SetLine(v.line)
				if v.line == sandbox.Queen16 {
					// 1.6 says nothing of the enqueue order: the first
					// failure is the order kept (and the plan says so).
					b.FillChainsFailedInOrder(parts, per, uint64(100*vi+trial))
				} else {
					b.FillChains(parts, per, uint64(100*vi+trial))
				}
				w := &world{t: t, b: b, url: url, dir: t.TempDir(), orig: map[string]deadletter.Address{}, undec: map[string]bool{}}
				w.ledger = "sqlite://" + filepath.Join(w.dir, "ledger.db")
				for _, r := range b.DeadLetterRows() {
					w.orig[string(r.Payload)] = deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}
				}
				b.SetFaults(v.faults)
				kill := time.Duration(rng.IntN(500)) * time.Millisecond
				w.killAfter(kill, "dlq", "replay", "--all", "--via", v.via, "--rate", "100", "--concurrency", "3", "--why", "ordered crash test", "--yes")
				orderBooks(t, b, parts, per, false)
				w.finish("--via", v.via)
				orderBooks(t, b, parts, per, true)
				w.books(true)
				if t.Failed() {
					t.Fatalf("trial %d (killed after %s)", trial, kill)
				}
			}
		})
	}
}

// orderBooks checks per-partition order on the broker's books: copies of
// one partition accepted in enqueue order, none twice, none published
// past a message that is still dead-lettered; with complete, all once.
func orderBooks(t *testing.T, b *sandbox.Broker, parts, per int, complete bool) {
	t.Helper()
	type place struct{ P, I int }
	of := func(p []byte) place {
		var x place
		json.Unmarshal(p, &x)
		return x
	}
	last := map[int]int{}
	seen := map[place]int{}
	for _, m := range b.LiveMessages() {
		x := of(m.Payload)
		seen[x]++
		if l, ok := last[x.P]; ok && x.I < l {
			t.Fatalf("partition p%d: message %d accepted after message %d", x.P, x.I, l)
		}
		last[x.P] = x.I
	}
	dead := map[place]bool{}
	for _, r := range b.DeadLetterRows() {
		dead[of(r.Payload)] = true
	}
	for p := 0; p < parts; p++ {
		gap := -1
		for i := 0; i < per; i++ {
			x := place{p, i}
			switch {
			case seen[x] > 1:
				t.Fatalf("%v published %d times", x, seen[x])
			case seen[x] == 0 && !dead[x]:
				t.Fatalf("%v lost", x)
			case complete && seen[x] != 1:
				t.Fatalf("%v published %d times at the end", x, seen[x])
			case seen[x] == 0 && gap < 0:
				gap = i
			case seen[x] == 1 && gap >= 0:
				t.Fatalf("partition p%d: message %d published past %d, which was not", p, i, gap)
			}
		}
	}
}

// TestKillBetweenManualPushAndJournal kills the real binary while its
// manual push has been applied and the answer is still on its way (the
// journal cannot have recorded it), then runs the plain command again:
// the address must stay on the manual path, its derived id answered
// duplicate, not published a second time through /retry.
func TestKillBetweenManualPushAndJournal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	w := newWorld(t, 5, 11, "")
	var addr deadletter.Address
	var payload string
	for p, a := range w.orig {
		if !w.undec[p] {
			addr, payload = a, p
			break
		}
	}
	w.b.SetFaults(sandbox.Faults{Script: func(c sandbox.Call) sandbox.Action {
		if c.Route == "POST /api/v1/push" {
			return sandbox.HangAfterApply
		}
		return sandbox.Serve
	}})
	c := w.cmd("dlq", "replay", addr.String(), "--via", "manual", "--why", "kill", "--yes", "--rate", "0")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for w.livePayloads()[payload] == 0 {
		if time.Now().After(deadline) {
			c.Process.Kill()
			t.Fatal("the push never arrived")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = c.Process.Signal(syscall.SIGKILL)
	_ = c.Wait()
	w.b.SetFaults(sandbox.Faults{})
	out, code := w.run("dlq", "replay", addr.String(), "--why", "kill", "--yes", "--rate", "0")
	if n := w.livePayloads()[payload]; n != 1 || code != 0 {
		t.Fatalf("after the kill and a plain re-run: %d copies, exit %d\n%s", n, code, out)
	}
}

func (w *world) livePayloads() map[string]int {
	live := map[string]int{}
	for _, m := range w.b.LiveMessages() {
		live[string(m.Payload)]++
	}
	return live
}

// BenchmarkKillResumeTrials is the long form of the kill tests, run on
// demand (go test -run '^$' -bench KillResumeTrials -benchtime 50x
// ./cmd/dlqctl): each trial SIGKILLs a replay at a random moment under
// 503s, cut connections and dlqRowRemoved:false, then resumes with the
// path alternating between runs (auto, manual, endpoint) and the broker
// spelled as 127.0.0.1, localhost, a port with a leading zero or
// 0.0.0.0, and checks the broker's books. On
// Queen 1.6 the broker's move meets its own faults (maintenance 503s,
// 500s with dlqRowRemoved null or false, lost answers) while the console
// replays rows beside the batch. It reports the doubles and losses it saw.
func BenchmarkKillResumeTrials(b *testing.B) {
	for _, line := range []sandbox.Line{sandbox.Queen15, sandbox.Queen16, sandbox.Queen22} {
		b.Run(line.String(), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
			profiles := []sandbox.Faults{
				{Fail503Every: 5, CutEvery: 7},
				{RowKeptEvery: 3, CutEvery: 5},
				{Fail503Every: 4, CutEvery: 6, RowKeptEvery: 4},
			}
			if line == sandbox.Queen16 {
				profiles = []sandbox.Faults{
					{Fail503Every: 5, CutEvery: 7, Script: moveFaults(5, sandbox.Maintenance, sandbox.UnknownAfterApply)},
					{CutEvery: 5, Script: moveFaults(3, sandbox.UnknownNotApplied, sandbox.FailNotApplied, sandbox.UnknownAfterApply)},
					{Fail503Every: 4, CutEvery: 6, Script: moveFaults(4, sandbox.Maintenance, sandbox.FailNotApplied)},
				}
			}
			if line == sandbox.Queen22 {
				// 2.x: no maintenance and no dlqRowRemoved null; 503 is no
				// leader (with Retry-After), 409 a refusal.
				profiles = []sandbox.Faults{
					{CutEvery: 7, Script: moveFaults(5, sandbox.NoLeader, sandbox.FailNotApplied)},
					{CutEvery: 5, Script: moveFaults(3, sandbox.NoLeader)},
					{Fail503Every: 6, CutEvery: 6, Script: moveFaults(4, sandbox.FailNotApplied, sandbox.NoLeader)},
				}
			}
			vias := []string{"auto", "manual", "endpoint"}
			var doubles, lost, trials, bad int
			for i := 0; i < b.N; i++ {
				trials++
				r := trialOnce(b, rng, line, profiles[i%len(profiles)], vias, uint64(9000+i))
				doubles += r.doubles
				lost += r.lost
				if r.doubles+r.lost > 0 {
					bad++
				}
			}
			b.ReportMetric(float64(trials), "trials")
			b.ReportMetric(float64(bad), "trials-with-doubles-or-losses")
			b.ReportMetric(float64(doubles), "doubles")
			b.ReportMetric(float64(lost), "lost")
		})
	}
}

// moveFaults is a script answering every nth move with the next of
// verdicts in turn.
func moveFaults(nth int, verdicts ...sandbox.Action) func(sandbox.Call) sandbox.Action {
	return func(c sandbox.Call) sandbox.Action {
		if c.Route == "POST /api/v1/dlq/{id}/replay" && c.N%nth == 0 {
			return verdicts[(c.N/nth)%len(verdicts)]
		}
		return sandbox.Serve
	}
}

type trialResult struct{ doubles, lost int }

// trialOnce runs one kill-and-resume trial and counts, from the books,
// messages live more than once and messages neither live nor
// dead-lettered. On a broker that moves, the console replays rows, a
// few at a time, for as long as the first run lives.
func trialOnce(b *testing.B, rng *rand.Rand, line sandbox.Line, faults sandbox.Faults, vias []string, seed uint64) trialResult {
	br, url := testkit.Sandbox(b)
	br.SetLine(line)
	br.Fill(40, seed)
	dir := b.TempDir()
	ledgerDSN := "sqlite://" + filepath.Join(dir, "ledger.db")
	// A message is known by its payload, or, for a copy a move published
	// under its row's id, by that row's: on 2.x the console moves a row the
	// broker cannot decrypt, the envelope as the copy's payload.
	orig := map[string]bool{}
	rowPayload := map[string]string{}
	for _, r := range br.DeadLetterRows() {
		orig[string(r.Payload)] = true
		rowPayload["dlq:"+r.ID] = string(r.Payload)
	}
	original := func(m sandbox.Live) string {
		if p, ok := rowPayload[m.TransactionID]; ok {
			return p
		}
		return string(m.Payload)
	}
	// One broker, four spellings: 127.0.0.1, localhost, a port with a
	// leading zero, 0.0.0.0.
	spell := func(k int) string {
		switch k % 4 {
		case 1:
			return strings.Replace(url, "127.0.0.1", "localhost", 1)
		case 2:
			return strings.Replace(url, "127.0.0.1:", "127.0.0.1:0", 1)
		case 3:
			return strings.Replace(url, "127.0.0.1", "0.0.0.0", 1)
		}
		return url
	}
	runAt := func(k int, args ...string) {
		c := exec.Command(binary(b), append([]string{"--server", spell(k)}, args...)...)
		c.Env = append(os.Environ(), "DLQCTL_LEDGER="+ledgerDSN, "DLQCTL_CONFIG="+filepath.Join(dir, "config.yaml"), "NO_COLOR=1", "DLQCTL_USER=trial")
		_ = c.Run()
	}
	// The console starts once the batch publishes (it is recorded and
	// archived by then): a row someone moved before dlqctl ever saw its
	// message cannot be known (docs/broker.md).
	var publishing atomic.Bool
	script := faults.Script
	faults.Script = func(c sandbox.Call) sandbox.Action {
		if strings.HasPrefix(c.Route, "POST /api/v1/dlq/") || c.Route == "POST /api/v1/push" {
			publishing.Store(true)
		}
		if script != nil {
			return script(c)
		}
		return sandbox.Serve
	}
	br.SetFaults(faults)
	first := vias[rng.IntN(len(vias))]
	c := exec.Command(binary(b), "--server", spell(0), "dlq", "replay", "--all", "--via", first, "--rate", "150", "--concurrency", "4",
		"--why", "trial", "--yes", "--order", "none")
	c.Env = append(os.Environ(), "DLQCTL_LEDGER="+ledgerDSN, "DLQCTL_CONFIG="+filepath.Join(dir, "config.yaml"), "NO_COLOR=1", "DLQCTL_USER=trial")
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	consoled := make(chan struct{})
	go func() {
		defer close(consoled)
		if line != sandbox.Queen16 && line != sandbox.Queen22 {
			return
		}
		// Rows of messages one group dead-lettered: a console move of one
		// row of a message dlqctl is publishing under another of its
		// rows, between that push and its delete, publishes it again, and
		// no call of the broker closes that window (docs/broker.md).
		crng := rand.New(rand.NewPCG(seed, 7))
		moved := map[string]bool{}
		rowsOf := map[string]int{}
		for _, r := range br.DeadLetterRows() {
			rowsOf[r.PartitionID+"/"+r.TransactionID]++
		}
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(5+crng.IntN(30)) * time.Millisecond):
			}
			if rows := br.DeadLetterRows(); len(rows) > 0 && publishing.Load() {
				r := rows[crng.IntN(len(rows))]
				if a := r.PartitionID + "/" + r.TransactionID; !moved[a] && rowsOf[a] == 1 {
					moved[a] = true
					br.ConsoleReplay(r.ID)
				}
			}
		}
	}()
	time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
	_ = c.Process.Signal(syscall.SIGKILL)
	_ = c.Wait()
	close(stop)
	<-consoled
	// Resume runs alternate the path and the spelling, the faults still on
	// for the first few; then the runbook's human step for unknowns.
	for k := 1; k <= 6; k++ {
		if k == 4 {
			br.SetFaults(sandbox.Faults{})
		}
		runAt(k, "dlq", "replay", "--all", "--via", vias[k%len(vias)], "--why", "resume", "--yes", "--rate", "0", "--order", "none")
	}
	live := map[string]int{}
	for _, m := range br.LiveMessages() {
		live[original(m)]++
	}
	for _, r := range br.DeadLetterRows() {
		if live[string(r.Payload)] > 0 {
			runAt(0, "dlq", "rm", r.PartitionID+"/"+r.TransactionID, "--why", "seen live", "--yes", "--rate", "0")
		}
	}
	runAt(1, "dlq", "replay", "--all", "--why", "unknowns checked", "--yes", "--rate", "0", "--retry-unknown", "--order", "none")
	live = map[string]int{}
	for _, m := range br.LiveMessages() {
		live[original(m)]++
	}
	deadSet := map[string]bool{}
	for _, r := range br.DeadLetterRows() {
		deadSet[string(r.Payload)] = true
	}
	var res trialResult
	for p := range orig {
		switch {
		case live[p] > 1:
			res.doubles++
			var ids []string
			for _, m := range br.LiveMessages() {
				if original(m) == p {
					ids = append(ids, m.TransactionID)
				}
			}
			b.Logf("published %d times: %s", live[p], strings.Join(ids, ", "))
		case live[p] == 0 && !deadSet[p]:
			res.lost++
			b.Logf("lost (the trial's data seed %d, first path %s): %.120s", seed, first, p)
		}
	}
	return res
}

// A batch killed twice and resumed to the end: decisions verify counts
// and asks about every copy the broker holds of it, those a killed run
// published (the resume's push then came back a duplicate) included.
func TestVerifyCountsTheCopiesOfKilledRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	w := newWorld(t, 150, 61, "")
	w.b.SetFaults(sandbox.Faults{CutEvery: 9})
	out, err := w.cmd("dlq", "decide", "--all", "--action", "replay", "--why", "verify after kills").Output()
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(string(out))
	args := []string{"dlq", "replay", "--batch", id, "--yes", "--rate", "200", "--via", "manual", "--order", "none"}
	w.killAfter(400*time.Millisecond, args...)
	w.killAfter(300*time.Millisecond, args...)
	w.b.SetFaults(sandbox.Faults{})
	for i := 0; i < 3; i++ {
		w.run("dlq", "replay", "--batch", id, "--yes", "--rate", "0", "--via", "manual", "--order", "none")
	}
	w.books(false)
	js, _ := w.run("decisions", "verify", id, "-o", "json")
	var v struct{ Copies, Unchecked int }
	if err := json.Unmarshal([]byte(js[strings.Index(js, "{"):]), &v); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	if live := len(w.b.LiveMessages()); v.Copies != live || v.Unchecked != 0 {
		t.Fatalf("verify counts %d copies (%d unchecked), the broker holds %d", v.Copies, v.Unchecked, live)
	}
}

// A replay SIGKILLed and resumed at once on the same host, before anyone
// reaped the killed process (a zombie, as it is until its parent waits
// for it): the resume takes over the dead run's claims at once rather
// than waiting out their lease, and finishes the batch exactly once.
func TestResumeAtOnceAfterAKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	w := newWorld(t, 150, 29, "")
	c := w.cmd("dlq", "replay", "--all", "--rate", "40", "--order", "none", "--why", "resume at once", "--yes")
	stderr, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	id := ""
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Recorded batch "); ok {
			id = strings.TrimSuffix(rest, ".")
			break
		}
	}
	go io.Copy(io.Discard, stderr)
	time.Sleep(700 * time.Millisecond)
	_ = c.Process.Signal(syscall.SIGKILL)
	time.Sleep(100 * time.Millisecond) // dead, and not reaped yet
	start := time.Now()
	out, code := w.run("dlq", "replay", "--batch", id, "--yes", "--rate", "0", "--order", "none")
	took := time.Since(start)
	_ = c.Wait()
	if code != 0 && code != 1 || strings.Contains(out, "claimed by another run") || took > 20*time.Second {
		t.Fatalf("resume at once: exit %d after %s\n%s", code, took.Round(time.Millisecond), out)
	}
	w.books(true)
}
