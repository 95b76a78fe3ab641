package dlq_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
)

// A dead letter that failed far in the future (a broker's clock gone
// wrong, or a hostile answer): every reader of ages says what it has and
// exits as it would, none crashes.
func TestFarFutureFailureTime(t *testing.T) {
	b, cli := seeded(t)
	b.AddDeadLetters(sandbox.DeadLetter{Queue: "clocks", Partition: "p-future", TransactionID: "future-1", ConsumerGroup: "billing",
		Error: "clock", FailedAt: time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), Data: json.RawMessage(`{"n":1}`)})
	for _, args := range [][]string{
		{"dlq", "check"}, {"dlq", "check", "-o", "json"}, {"dlq", "check", "--format", "prometheus"}, {"dlq", "check", "--format", "github"},
		{"dlq", "check", "--queue", "clocks", "--triage-slo", "1h"}, {"dlq", "check", "--queue", "clocks", "--max-age", "1h"}, {"dlq", "stats"}, {"dlq", "stats", "-o", "json"},
		{"dlq", "ls", "--limit", "3"}, {"dlq", "ls", "--group-by", "error"}, {"dlq", "ls", "--sort", "oldest", "--limit", "2"},
		{"dlq", "show", "future-1"},
	} {
		out, stderr, code := cli.Exec(args...)
		if code != 0 && code != 1 || strings.Contains(stderr, "goroutine") {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, stderr)
		}
	}
	// It counts as old as it is ahead: a breach, said with a positive span.
	_, stderr, code := cli.Exec("dlq", "check", "--queue", "clocks", "--max-age", "1h")
	if code != 1 || !strings.Contains(stderr, "failed after now, by up to 106751d") {
		t.Fatalf("check: exit %d\n%s", code, stderr)
	}
}
