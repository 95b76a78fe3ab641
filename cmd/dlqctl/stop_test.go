package main

import (
	"bufio"
	"bytes"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/testkit"
)

// A batch watched and stopped from another process on one ledger, on
// SQLite and PostgreSQL: decisions ls --running and show give its
// progress while it runs, a second process's decisions stop ends it
// within a few seconds with exit 130, who stopped it and its resume line,
// the stop is in the audit, and the resume finishes it: each message live
// once, judged by the broker.
func TestStopARunningBatchFromAnotherProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			dsn := ""
			if engine == "postgres" {
				dsn = testkit.PostgresDSN(t)
			}
			w := newWorld(t, 150, 71, dsn)
			a := w.cmd("dlq", "replay", "--all", "--why", "a long replay", "--yes", "--rate", "15", "--order", "none")
			stderr, err := a.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Start(); err != nil {
				t.Fatal(err)
			}
			var aOut bytes.Buffer
			id := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					aOut.WriteString(sc.Text() + "\n")
					if rest, ok := strings.CutPrefix(sc.Text(), "Recorded batch "); ok {
						id <- strings.TrimSuffix(rest, ".")
					}
				}
				io.Copy(io.Discard, stderr)
			}()
			var batchID string
			select {
			case batchID = <-id:
			case <-time.After(30 * time.Second):
				t.Fatal("the replay recorded no batch")
			}
			time.Sleep(3 * time.Second) // a beat or two: the run says how far it got
			out, code := w.run("decisions", "ls", "--running")
			if code != 0 || !strings.Contains(out, batchID) || !regexp.MustCompile(`running +\d+/\d+`).MatchString(out) || !strings.Contains(out, "/s") {
				t.Fatalf("decisions ls --running: exit %d\n%s", code, out)
			}
			out, _ = w.run("decisions", "show", batchID)
			if !regexp.MustCompile(`Progress: +\d+ of \d+ done, \d+ failed, \d+ left(, \d+ skipped)?; [0-9.]+/s, ends in about .*; run by pid \d+ on `).MatchString(out) {
				t.Fatalf("decisions show of the running batch:\n%s", out)
			}
			asked := time.Now()
			if out, code := w.run("decisions", "stop", batchID, "--why", "consumers falling over"); code != 0 || !strings.Contains(out, "to stop") {
				t.Fatalf("decisions stop: exit %d\n%s", code, out)
			}
			err = a.Wait()
			took := time.Since(asked)
			if code := exitCode(err); code != 130 || took > 10*time.Second || !regexp.MustCompile(`Stopped by crash-test( \(.*\))? with decisions stop`).MatchString(aOut.String()) ||
				!strings.Contains(aOut.String(), "consumers falling over") || !strings.Contains(aOut.String(), "--batch "+batchID) {
				t.Fatalf("the stopped run: exit %d after %s\n%s", code, took.Round(100*time.Millisecond), aOut.String())
			}
			t.Logf("stopped %s after the ask; %d of %d live", took.Round(100*time.Millisecond), len(w.b.LiveMessages()), len(w.orig)-len(w.undec))
			w.books(false)
			if out, _ := w.run("decisions", "show", batchID); !strings.Contains(out, "stop-requested") || !strings.Contains(out, "interrupted") {
				t.Fatalf("decisions show after the stop:\n%s", out)
			}
			if out, code := w.run("dlq", "replay", "--batch", batchID, "--yes", "--rate", "0"); code != 0 && code != 1 {
				t.Fatalf("resume: exit %d\n%s", code, out)
			}
			w.books(true)
			if out, code := w.run("decisions", "stop", batchID, "--why", "again"); code != 2 || !strings.Contains(out, "not running") {
				t.Fatalf("stopping a batch that is not running: exit %d\n%s", code, out)
			}
		})
	}
}

// decisions show --watch, on a terminal, draws the running batch's
// progress again every beat and says how it ended.
func TestWatchARunningBatchOnATerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	w := newWorld(t, 120, 73, "")
	out, err := w.cmd("dlq", "decide", "--all", "--action", "replay", "--why", "watched").Output()
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(string(out))
	a := w.cmd("dlq", "replay", "--batch", id, "--yes", "--rate", "25", "--order", "none")
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	env := []string{"DLQCTL_SERVER=" + w.url, "DLQCTL_LEDGER=" + w.ledger, "DLQCTL_CONFIG=" + filepath.Join(w.dir, "config.yaml"), "NO_COLOR=1"}
	tm := newTerminal(t, env, "decisions", "show", id, "--watch")
	first := tm.waitFor(" done, ", 10*time.Second)
	screen := tm.waitFor("EXIT:0", 30*time.Second)
	// Its two undecryptable envelopes are skipped: the batch ends failed.
	if !regexp.MustCompile(`\d+ of \d+ done`).MatchString(first) || !regexp.MustCompile(`Batch `+id+` (done|failed): \d+ of \d+ done`).MatchString(screen) {
		t.Fatalf("--watch while it ran:\n%s\nand when it ended:\n%s", first, screen)
	}
	if err := a.Wait(); exitCode(err) > 1 {
		t.Fatalf("the watched run: %v", err)
	}
	w.books(true)
}
