package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A SQLite ledger removed (the file, its WAL and shared memory, and its
// .history witness) two seconds into a discard: the run stops at its next
// write, writes what the open file held back to the path, and exits 3; the
// archive keeps every row the discard had archived, and the batch resumes
// from it to the end.
func TestLedgerRemovedUnderADiscard(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	w := newWorld(t, 200, 23, "")
	path := filepath.Join(w.dir, "ledger.db")
	depth := w.b.Depth()
	c := w.cmd("dlq", "rm", "--all", "--rate", "50", "--why", "removed ledger", "--yes")
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	for _, p := range []string{path, path + "-wal", path + "-shm", path + ".history"} {
		_ = os.Remove(p)
	}
	removedAt := w.b.Depth()
	err := c.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	after := removedAt - w.b.Depth()
	t.Logf("exit %d; %d rows deleted after the file was removed, %d of %d in all", code, after, depth-w.b.Depth(), depth)
	if code != 3 || !strings.Contains(out.String(), "was removed while this command had it open") || after > 20 {
		t.Fatalf("exit %d, %d deletes after the removal\n%s", code, after, out.String())
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the ledger was not written back: %v", err)
	}
	// Every row the broker no longer holds is in the archive.
	js, code := w.run("dlq", "ls", "--archived", "-o", "ndjson")
	if code != 0 {
		t.Fatalf("ls --archived: exit %d\n%s", code, js)
	}
	archived := strings.Count(js, "\n")
	if archived < depth-w.b.Depth() || archived == 0 {
		t.Fatalf("%d rows archived, %d deleted", archived, depth-w.b.Depth())
	}
	// The batch goes on from the ledger written back.
	id := ""
	for _, b := range w.batches() {
		id = b.ID
	}
	if o, code := w.run("dlq", "rm", "--batch", id, "--yes", "--rate", "0"); code != 0 && code != 1 {
		t.Fatalf("resume: exit %d\n%s", code, o)
	}
	if w.b.Depth() != 0 {
		t.Fatalf("%d rows left after the resume", w.b.Depth())
	}
}
