package dlq_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A predicate that is valid jq and wrong is refused before anything is
// planned: an update (= for ==), a result that is not true or false.
func TestPredicatesMeanWhatTheySay(t *testing.T) {
	b, cli := seeded(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "rm", "--where", ".data.amount = 300", "--dry-run"}, "did you mean ==?"},
		{[]string{"dlq", "rm", "--where", ".data.orderId = 8001", "--why", "x", "--yes"}, "did you mean ==?"},
		{[]string{"dlq", "ls", "--where", ".data.orderId"}, "gave the number"},
		{[]string{"dlq", "ls", "--where", ".data"}, "gave an object"},
		{[]string{"dlq", "ls", "--where", ".data.nosuchfield"}, "gave null"},
		{[]string{"dlq", "replay", "--all", "--where", `.queue | ascii_upcase`, "--dry-run"}, "gave the string"},
		{[]string{"dlq", "decide", "--where", "select(.retryCount > 1)", "--action", "hold", "--until", "1h", "--why", "x"}, "gave an object"},
	} {
		before := mutating(b)
		out, stderr, code := cli.Exec(c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) || mutating(b) != before {
			t.Errorf("%v: exit %d, want 2 and %q\n%s%s", c.args, code, c.want, out, stderr)
		}
	}
	if out, _, _ := cli.Exec("decisions", "ls", "-o", "json"); strings.Contains(out, `"id"`) {
		t.Fatalf("something was recorded:\n%s", out)
	}
}

// A field no row has is named, with what its comparison made of every
// row: the README's .data.version < 4 on data without a version.
func TestAbsentFieldIsNamed(t *testing.T) {
	_, cli := seeded(t)
	_, stderr, code := cli.Exec("dlq", "ls", "--where", ".data.version < 4", "-o", "ndjson")
	if code != 0 || !strings.Contains(stderr, "no row has .data.version") || !strings.Contains(stderr, "null < 4 is true") {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	_, stderr, _ = cli.Exec("dlq", "ls", "--where", ".data.orderId > 0", "-o", "ndjson")
	if strings.Contains(stderr, "no row has") {
		t.Fatalf("a field rows have was called absent:\n%s", stderr)
	}
}

// An endless or exploding expression stops at jq's budget (exit 2,
// naming the row), on ls, replay, rm, decide and --transform; nothing is
// recorded or sent. Interrupted, it ends at once (exit 130).
func TestEndlessJQStops(t *testing.T) {
	b, cli := seeded(t)
	for _, args := range [][]string{
		{"dlq", "ls", "--where", "def f: f; f"},
		{"dlq", "ls", "--group-by", "error", "--where", "last(range(1e12)) > 0"},
		{"dlq", "replay", "--queue", "orders", "--where", "[range(1e12)] | length > 0", "--why", "x", "--yes"},
		{"dlq", "rm", "--queue", "orders", "--where", "until(false; .) == 1", "--why", "x", "--yes"},
		{"dlq", "decide", "--queue", "orders", "--where", "def f: f; f", "--action", "discard", "--why", "x"},
		{"dlq", "replay", "--queue", "payments", "--transform", "def f: f; f", "--why", "x", "--yes"},
	} {
		before := mutating(b)
		start := time.Now()
		_, stderr, code := cli.Exec(args...)
		if code != 2 || !strings.Contains(stderr, "stopped on") || mutating(b) != before || time.Since(start) > 10*time.Second {
			t.Errorf("%v: exit %d after %s\n%s", args, code, time.Since(start), stderr)
		}
	}
	if out, _, _ := cli.Exec("decisions", "ls", "-o", "json"); strings.Contains(out, `"id"`) {
		t.Fatalf("something was recorded:\n%s", out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cli.Ctx = ctx
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	if _, stderr, code := cli.Exec("dlq", "ls", "--where", "def f: f; f"); code != 130 || time.Since(start) > time.Second {
		t.Fatalf("interrupted: exit %d after %s\n%s", code, time.Since(start), stderr)
	}
}

// A destructive selection whose filters select every dead letter in its
// scope needs --all, as a bare command does: rm --where true deletes
// nothing without it.
func TestFiltersThatSelectEverythingNeedAll(t *testing.T) {
	b, cli := seeded(t)
	depth := b.Depth()
	for _, args := range [][]string{
		{"dlq", "rm", "--where", "true", "--why", "x", "--yes"},
		{"dlq", "rm", "--where", ".retryCount >= 0", "--why", "x", "--yes", "--dry-run"},
		{"dlq", "replay", "--queue", "orders", "--error", ".", "--why", "x", "--yes"},
		{"dlq", "decide", "--where", "true", "--action", "discard", "--why", "x"},
	} {
		_, stderr, code := cli.Exec(args...)
		if code != 2 || !strings.Contains(stderr, "pass --all") || b.Depth() != depth {
			t.Errorf("%v: exit %d, depth %d of %d\n%s", args, code, b.Depth(), depth, stderr)
		}
	}
	// Part of a scope is fine; --all says the whole is meant.
	if _, stderr, code := cli.Exec("dlq", "rm", "--queue", "orders", "--where", ".retryCount >= 0", "--all", "--why", "x", "--yes", "--dry-run"); code != 0 {
		t.Fatalf("with --all: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := cli.Exec("dlq", "rm", "--where", `.queue == "payments"`, "--why", "x", "--yes", "--dry-run"); code != 0 {
		t.Fatalf("part of the DLQ: exit %d\n%s", code, stderr)
	}
}
