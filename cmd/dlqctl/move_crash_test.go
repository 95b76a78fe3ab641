package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// killWhen starts a command and SIGKILLs it once ready says so (a call
// is hanging in the broker, applied): the moment the test means, not a
// guess of time.
func (w *world) killWhen(ready func() bool, args ...string) {
	w.t.Helper()
	c := w.cmd(args...)
	if err := c.Start(); err != nil {
		w.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !ready() {
		if time.Now().After(deadline) {
			_ = c.Process.Signal(syscall.SIGKILL)
			_ = c.Wait()
			w.t.Fatal("the moment to kill never came")
		}
		time.Sleep(2 * time.Millisecond)
	}
	_ = c.Process.Signal(syscall.SIGKILL)
	_ = c.Wait()
}

// Each verdict of Queen 1.6's move, with the real binary SIGKILLed while
// a call hangs in the broker after it was applied: once on the call
// whose verdict is the case's (its journal entry cannot have been
// written), once several calls later (it has been). Then the batch is
// resumed: every message exactly once in the sandbox's books.
func TestMoveVerdictsKillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	const route = "POST /api/v1/dlq/{id}/replay"
	// hanging is set once the call the binary is killed on hangs.
	var hanging atomic.Bool
	hangOn := func(route string, nth int, also func(sandbox.Call), verdicts ...sandbox.Action) func(sandbox.Call) sandbox.Action {
		return func(call sandbox.Call) sandbox.Action {
			if call.Route != route {
				return sandbox.Serve
			}
			if also != nil {
				also(call)
			}
			switch {
			case call.N == nth:
				hanging.Store(true)
				return sandbox.HangAfterApply
			case call.N > nth || len(verdicts) == 0:
				return sandbox.Serve
			}
			return verdicts[call.N%len(verdicts)]
		}
	}
	for _, c := range []struct {
		name string
		// set arms the case's faults on w, the nth call of its route
		// hanging.
		set func(w *world, hangAt int)
	}{
		{"moved", func(w *world, hangAt int) {
			w.b.SetFaults(sandbox.Faults{Script: hangOn(route, hangAt, nil)})
		}},
		{"duplicate: another hand pushed the copy", func(w *world, hangAt int) {
			// Another tool pushed the broker's copy of each message's
			// newest row: each move is a duplicate, each leftover row
			// deleted.
			seen := map[string]bool{}
			for _, r := range w.b.DeadLetterRows() {
				if a := r.PartitionID + "/" + r.TransactionID; !seen[a] && !w.undec[string(r.Payload)] {
					seen[a] = true
					if _, err := pushed(w, r); err != nil {
						w.t.Fatal(err)
					}
				}
			}
			w.b.SetFaults(sandbox.Faults{Script: hangOn("DELETE /api/v1/messages/{pid}/{txid}", hangAt, nil)})
		}},
		{"gone: the console moved rows", func(w *world, hangAt int) {
			var ids []string
			for i, r := range w.b.DeadLetterRows() {
				if i%3 == 0 {
					ids = append(ids, r.ID)
				}
			}
			once := false
			w.b.SetFaults(sandbox.Faults{Script: hangOn(route, hangAt, func(call sandbox.Call) {
				if !once {
					once = true
					w.b.ConsoleReplay(ids...)
				}
			})})
		}},
		{"500 dlqRowRemoved null", func(w *world, hangAt int) {
			w.b.SetFaults(sandbox.Faults{Script: hangOn(route, hangAt, nil, sandbox.UnknownAfterApply, sandbox.UnknownNotApplied)})
		}},
		{"503 maintenance", func(w *world, hangAt int) {
			w.b.SetFaults(sandbox.Faults{Script: hangOn(route, hangAt, nil, sandbox.Maintenance)})
		}},
	} {
		for _, later := range []int{0, 6} {
			name := c.name + ": killed on its call"
			if later > 0 {
				name = c.name + ": killed after its journal entry"
			}
			t.Run(name, func(t *testing.T) {
				w := newWorldOn(t, sandbox.Queen16, 24, 77, "")
				hanging.Store(false)
				c.set(w, 3+later)
				w.killWhen(hanging.Load,
					"dlq", "replay", "--all", "--rate", "0", "--concurrency", "1", "--why", "crash test", "--yes", "--timeout", "30s")
				w.books(false)
				w.b.SetFaults(sandbox.Faults{})
				w.finish()
				w.books(true)
			})
		}
	}
}

// pushed pushes the broker's copy of a row, as another tool would.
func pushed(w *world, r sandbox.Row) ([]client.PushResult, error) {
	c, err := client.New(client.Options{Server: w.url})
	if err != nil {
		return nil, err
	}
	return c.Push(context.Background(), []client.PushItem{{Queue: r.Queue, Partition: r.Partition, Payload: r.Payload, TransactionID: client.CopyID(r.ID)}})
}

// twoRowWorld is a sandbox of a line that moves holding n messages two
// groups dead-lettered: billing's row newer than shipping's, so a
// replay's copy of each goes under billing's row id and the console, in
// the tests, moves shipping's.
func twoRowWorld(t *testing.T, line sandbox.Line, n int) *world {
	b, url := testkit.Sandbox(t)
	b.SetLine(line)
	now := time.Now()
	var dls []sandbox.DeadLetter
	for i := range n {
		for k, g := range []string{"shipping", "billing"} {
			dls = append(dls, sandbox.DeadLetter{Queue: "orders", Partition: fmt.Sprintf("p%d", i%3), TransactionID: fmt.Sprintf("order-%d", i),
				ConsumerGroup: g, Error: "boom", FailedAt: now.Add(-time.Duration(100-i)*time.Second + time.Duration(k)*time.Second),
				Data: json.RawMessage(fmt.Sprintf(`{"order":%d}`, i))})
		}
	}
	b.AddDeadLetters(dls...)
	w := &world{t: t, b: b, url: url, dir: t.TempDir(), orig: map[string]deadletter.Address{}, undec: map[string]bool{}}
	w.ledger = "sqlite://" + filepath.Join(w.dir, "ledger.db")
	for _, r := range b.DeadLetterRows() {
		w.orig[string(r.Payload)] = deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}
	}
	return w
}

// killAfterLine starts a command, waits for a line of its stderr that
// starts with prefix, SIGKILLs it d later and returns that line.
func (w *world) killAfterLine(prefix string, d time.Duration, args ...string) string {
	w.t.Helper()
	c := w.cmd(args...)
	stderr, err := c.StderrPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		w.t.Fatal(err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), prefix) {
				found <- sc.Text()
				break
			}
		}
		io.Copy(io.Discard, stderr)
		close(found)
	}()
	var line string
	select {
	case line = <-found:
	case <-time.After(30 * time.Second):
	}
	if line == "" {
		_ = c.Process.Kill()
		_ = c.Wait()
		w.t.Fatalf("%q never came", prefix)
	}
	time.Sleep(d)
	_ = c.Process.Signal(syscall.SIGKILL)
	_ = c.Wait()
	return line
}

// A replay killed once its claim journaled each message's intent (the
// copy id of its newest row); the console then moves every remaining
// message's other row; the resume finds the console's copies and
// publishes no second one: each message once in the broker.
func TestResumeAfterTheConsoleMovedAnotherRow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	for _, line := range []sandbox.Line{sandbox.Queen16, sandbox.Queen22} {
		t.Run(line.String(), func(t *testing.T) {
			w := twoRowWorld(t, line, 12)
			rec := w.killAfterLine("Recorded batch", 250*time.Millisecond,
				"dlq", "replay", "--all", "--rate", "6", "--order", "none", "--why", "crash test", "--yes")
			id := strings.TrimSuffix(strings.TrimPrefix(rec, "Recorded batch "), ".")
			moved := 0
			for _, r := range w.b.DeadLetterRows() {
				if r.ConsumerGroup == "shipping" {
					moved += w.b.ConsoleReplay(r.ID)
				}
			}
			if moved == 0 {
				t.Fatal("the killed run left nothing for the console to move")
			}
			out, code := w.run("dlq", "replay", "--batch", id, "--yes", "--rate", "0")
			w.books(false)
			if code != 0 || !strings.Contains(out, "moved elsewhere") {
				t.Fatalf("resume: exit %d\n%s", code, out)
			}
			w.finish()
			w.books(true)
		})
	}
}

// A message two groups dead-lettered, one row of which the console moved
// after a sync saw both: a replay of it to a recovery queue publishes
// nothing more, since the console's copy in the message's own queue
// reached every group.
func TestToQueueAfterTheConsoleMovedARow(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	for _, line := range []sandbox.Line{sandbox.Queen16, sandbox.Queen22} {
		t.Run(line.String(), func(t *testing.T) {
			w := twoRowWorld(t, line, 3)
			if out, code := w.run("dlq", "sync"); code != 0 {
				t.Fatalf("sync: exit %d\n%s", code, out)
			}
			var addr string
			for _, r := range w.b.DeadLetterRows() {
				if r.ConsumerGroup == "shipping" {
					addr = r.PartitionID + "/" + r.TransactionID
					w.b.ConsoleReplay(r.ID)
					break
				}
			}
			out, code := w.run("dlq", "replay", addr, "--to-queue", "recovery", "--why", "recover", "--yes", "--rate", "0")
			if code != 0 || !strings.Contains(out, "moved elsewhere") {
				t.Fatalf("replay to recovery: exit %d\n%s", code, out)
			}
			w.books(false)
			for _, m := range w.b.LiveMessages() {
				if m.Queue == "recovery" {
					t.Fatalf("a copy in the recovery queue beside the console's: %s", m.TransactionID)
				}
			}
		})
	}
}
