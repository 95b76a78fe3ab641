package dlq_test

// What a new user met in round 6: a replayed original shown as pending,
// exit codes a script misreads, words that said less than they meant.

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/testutil"
)

// show of an original a batch replayed says what became of it: replayed
// as which copy, by which batch, when; the broker's own status of the
// original (pending on a line that keeps it) is said as not to be
// delivered again.
func TestShowSaysWhatBecameOfAReplayedOriginal(t *testing.T) {
	b, cli := seeded(t)
	addr, _ := oneAddress(t, b)
	if _, stderr, code := cli.Exec("dlq", "replay", addr, "--why", "fixed", "--yes", "--rate", "0"); code != 0 {
		t.Fatalf("replay: exit %d\n%s", code, stderr)
	}
	out, _, _ := cli.Exec("dlq", "show", addr)
	if !regexp.MustCompile(`Status: +replayed as dlqr-\S+ by batch \S+, .*; the broker keeps the original as pending, not to be delivered again`).MatchString(out) {
		t.Fatalf("show of the replayed original:\n%s", out)
	}
}

// A script that tries the plan first learns what the run would do: a dry
// run that the run would refuse (a held class) exits 2 after the plan,
// naming both ways on (--skip-held only for a new selection: a recorded
// batch keeps its messages); with --override-hold it exits 0.
func TestADryRunExitsAsTheRunWould(t *testing.T) {
	b, cli := seeded(t)
	decided, stderr, code := cli.Exec("dlq", "decide", "--class", orderNotFound, "--action", "replay", "--why", "INC-1 fixed")
	if code != 0 {
		t.Fatalf("decide: exit %d\n%s", code, stderr)
	}
	cli.Clock = testutil.Now.Add(time.Minute) // the hold comes after
	if _, stderr, code := cli.Exec("dlq", "decide", "--class", orderNotFound, "--action", "hold", "--until", "4h", "--why", "INC-1"); code != 0 {
		t.Fatalf("hold: exit %d\n%s", code, stderr)
	}
	out, stderr, code := cli.Exec("dlq", "replay", "--class", orderNotFound, "--dry-run")
	if code != 2 || !strings.Contains(out, "Replay plan:") || !strings.Contains(stderr, "pass --override-hold to replay them anyway, or --skip-held to replay the rest") {
		t.Fatalf("dry run of a held class: exit %d\n%s%s", code, out, stderr)
	}
	_, stderr, code = cli.Exec("dlq", "replay", "--batch", strings.TrimSpace(decided), "--dry-run")
	if code != 2 || !strings.Contains(stderr, "pass --override-hold to replay them anyway\n") {
		t.Fatalf("dry run of a recorded batch now held: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := cli.Exec("dlq", "replay", "--class", orderNotFound, "--dry-run", "--override-hold"); code != 0 {
		t.Fatalf("dry run with --override-hold: exit %d\n%s", code, stderr)
	}
	if mutating(b) != 0 {
		t.Fatal("a dry run wrote to the broker")
	}
}

// rm of what dlq decide --action discard just decided is that batch's to
// run: it is refused with the batch's command, nothing is recorded again
// and nothing deleted; --batch then carries it out.
func TestRmAfterDecideRunsTheDecidedBatch(t *testing.T) {
	b, cli := seeded(t)
	out, stderr, code := cli.Exec("dlq", "decide", "--queue", "payments", "--action", "discard", "--why", "test data")
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("decide: exit %d\n%s", code, stderr)
	}
	depth := b.Depth()
	_, stderr, code = cli.Exec("dlq", "rm", "--queue", "payments", "--why", "test data", "--yes", "--rate", "0")
	if code != 2 || !strings.Contains(stderr, "batch "+id+"'s") || !strings.Contains(stderr, "dlqctl dlq rm --batch "+id+" --yes") || b.Depth() != depth {
		t.Fatalf("rm of a decided selection: exit %d, depth %d of %d\n%s", code, b.Depth(), depth, stderr)
	}
	if out, _, _ := cli.Exec("decisions", "ls", "--action", "discard"); strings.Count(out, "discard") != 1 {
		t.Fatalf("a second batch was recorded:\n%s", out)
	}
	if _, stderr, code := cli.Exec("dlq", "rm", "--batch", id, "--yes", "--rate", "0"); code != 0 || b.Depth() >= depth {
		t.Fatalf("rm --batch: exit %d\n%s", code, stderr)
	}
}
