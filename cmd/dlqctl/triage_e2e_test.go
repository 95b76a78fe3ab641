package main

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// terminal is the real dlqctl binary in a tmux pane of 80×24: the test
// reads the screen as a person sees it and types as one does.
type terminal struct {
	t    *testing.T
	tmux string
	sock string
}

func newTerminal(t *testing.T, env []string, args ...string) *terminal {
	t.Helper()
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tmux is not installed: CI must run the terminal test (.ci/run installs it)")
		}
		t.Skip("tmux is not installed")
	}
	tm := &terminal{t: t, tmux: tmux, sock: filepath.Join(t.TempDir(), "tmux.sock")}
	// The pane's shell prints the exit code and stays, so the test can
	// read it after dlqctl has left the screen.
	// (tmux runs the line with sh; the values hold no spaces or quotes.)
	line := "env " + strings.Join(env, " ") + " " + binary(t) + " " + strings.Join(args, " ") + "; echo EXIT:$?; sleep 600"
	tm.run("new-session", "-d", "-x", "80", "-y", "24", "-s", "t", line)
	t.Cleanup(func() { _ = exec.Command(tmux, "-S", tm.sock, "kill-server").Run() })
	return tm
}

func (tm *terminal) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command(tm.tmux, append([]string{"-S", tm.sock}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %v: %v: %s", args, err, out)
	}
	return string(out)
}

// screen is the pane as text; with escapes, its colours and attributes.
func (tm *terminal) screen(escapes bool) string {
	if escapes {
		return tm.run("capture-pane", "-p", "-e", "-t", "t")
	}
	return tm.run("capture-pane", "-p", "-t", "t")
}

// waitFor waits until the screen shows text.
func (tm *terminal) waitFor(text string, within time.Duration) string {
	tm.t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := tm.screen(false)
		if strings.Contains(s, text) {
			return s
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("the screen did not show %q in %s:\n%s", text, within, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// keys sends key names (Enter, Escape, Down) as tmux knows them.
func (tm *terminal) keys(k ...string) { tm.run(append([]string{"send-keys", "-t", "t"}, k...)...) }

// typ types text literally.
func (tm *terminal) typ(s string) { tm.run("send-keys", "-t", "t", "-l", s) }

// triageWorld is the seeded sandbox and the environment dlqctl runs in
// against it, with a ledger of the test's own.
func triageWorld(t *testing.T) (*sandbox.Broker, []string, string) {
	b := sandbox.New(nil)
	if err := b.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ledgerDSN := "sqlite://" + filepath.Join(dir, "ledger.db")
	return b, []string{"DLQCTL_SERVER=" + srv.URL, "DLQCTL_LEDGER=" + ledgerDSN, "DLQCTL_CONFIG=" + filepath.Join(dir, "config.yaml"),
		"DLQCTL_USER=oncall", "TERM=xterm-256color"}, ledgerDSN
}

var cursorClass = regexp.MustCompile(`(?m)^› ([0-9a-f]{8}) `)

// The scenario on the real binary in a terminal: open, drill into
// a class, hold it, replay another with confirmation, quit; then the
// ledger and the broker's books.
func TestTriageInATerminal(t *testing.T) {
	b, env, ledgerDSN := triageWorld(t)
	tm := newTerminal(t, append(env, "NO_COLOR=1"), "triage")

	s := tm.waitFor("CHECK:", 20*time.Second)
	tm.waitFor("9 classes", 10*time.Second)
	m := cursorClass.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no class under the cursor:\n%s", s)
	}
	held := m[1]

	// Drill in and back.
	tm.keys("Enter")
	tm.waitFor("class "+held+" · ", 5*time.Second)
	tm.keys("Enter")
	tm.waitFor("Payload:", 5*time.Second)
	tm.keys("Escape")
	tm.waitFor("AGE    QUEUE", 5*time.Second)
	tm.keys("Escape")
	tm.waitFor("CHECK:", 5*time.Second)

	// Hold the first class.
	tm.keys("h")
	tm.waitFor("Hold class "+held, 5*time.Second)
	tm.keys("Enter")
	tm.typ("waiting on the parser fix")
	tm.keys("Enter")
	tm.waitFor("Held ", 10*time.Second)

	// Replay the class of another queue, with confirmation.
	tm.keys("Down")
	replayed := ""
	for deadline := time.Now().Add(5 * time.Second); replayed == ""; time.Sleep(50 * time.Millisecond) {
		if m = cursorClass.FindStringSubmatch(tm.screen(false)); m != nil && m[1] != held {
			replayed = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("the cursor did not move to another class:\n%s", tm.screen(false))
		}
	}
	tm.keys("r")
	tm.waitFor("Replay plan:", 10*time.Second)
	// The form opens on the rate; tab goes to the reason.
	tm.keys("Tab")
	tm.typ("notifier fixed")
	tm.keys("Enter")
	done := tm.waitFor("replayed, 0 failed", 30*time.Second)
	if !strings.Contains(done, "Batch ") {
		t.Fatalf("no batch line:\n%s", done)
	}
	if colourful(tm.screen(true)) {
		t.Fatalf("colour on the screen under NO_COLOR:\n%q", tm.screen(true))
	}
	tm.keys("Enter")
	tm.waitFor("8 classes", 10*time.Second)
	tm.keys("q")
	tm.waitFor("EXIT:0", 10*time.Second)

	st, err := ledger.Open(context.Background(), ledgerDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	bs, err := st.Batches(context.Background(), ledger.BatchFilter{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ledger.Batch{}
	for _, x := range bs {
		got[x.Action] = x
	}
	if h := got[ledger.ActionHold]; len(bs) != 2 || h.Selection != "--class "+held || h.Why != "waiting on the parser fix" || h.By != "oncall" {
		t.Fatalf("batches: %+v", bs)
	}
	if r := got[ledger.ActionReplay]; r.Selection != "--class "+replayed || r.Status != ledger.StatusDone || r.Why != "notifier fixed" {
		t.Fatalf("replay batch: %+v", r)
	}

	// The books: the replayed class's messages are live once each and out
	// of the DLQ; nothing else went live; the held class is all there.
	live := map[string]int{}
	for _, l := range b.LiveMessages() {
		live[string(l.Payload)]++
	}
	heldRows, replayedLeft := 0, 0
	for _, r := range b.DeadLetterRows() {
		switch deadletter.ClassID(r.Error) {
		case held:
			heldRows++
		case replayed:
			replayedLeft++
		}
		if live[string(r.Payload)] > 0 {
			t.Errorf("%s/%s is live and still dead-lettered", r.PartitionID, r.TransactionID)
		}
	}
	if replayedLeft != 0 {
		t.Errorf("%d rows of the replayed class still dead-lettered", replayedLeft)
	}
	for p, n := range live {
		if n != 1 {
			t.Errorf("%s published %d times", p, n)
		}
	}
	if heldRows == 0 || len(live) == 0 {
		t.Fatalf("held rows %d, live messages %d", heldRows, len(live))
	}
}

// A colour terminal gets colour; without a terminal, a clear error.
func TestTriageColourAndNoTerminal(t *testing.T) {
	_, env, _ := triageWorld(t)
	tm := newTerminal(t, env, "triage")
	tm.waitFor("CHECK:", 20*time.Second)
	if !colourful(tm.screen(true)) {
		t.Fatalf("no colour on a colour terminal:\n%q", tm.screen(true))
	}
	tm.keys("q")
	tm.waitFor("EXIT:0", 10*time.Second)

	c := exec.Command(binary(t), "triage")
	c.Env = append(os.Environ(), env...)
	out, err := c.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "dlq ls") || strings.Count(string(out), "\n") != 1 {
		t.Fatalf("triage without a terminal: %v: %q", err, out)
	}
}

var sgrColour = regexp.MustCompile(`\x1b\[[0-9;:]*m`)

// colourful reports whether text sets a foreground or background colour.
func colourful(s string) bool {
	for _, seq := range sgrColour.FindAllString(s, -1) {
		for _, p := range strings.FieldsFunc(seq[2:len(seq)-1], func(r rune) bool { return r == ';' || r == ':' }) {
			if len(p) == 2 && (p[0] == '3' || p[0] == '4' || p[0] == '9') && p != "39" && p != "49" {
				return true
			}
		}
	}
	return false
}
