package dlq_test

import (
	"encoding/json"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"regexp"
	"strings"
	"testing"

	"github.com/dlqctl/dlqctl/pkg/replay"
)

// Ordered replay at the command level: the seed's undecryptable messages
// hold back the later messages of their partitions; the report, the exit
// code and decisions show say which and by what; skip-gaps goes on.
func TestOrderedReplayCommand(t *testing.T) {
	_, cli := seeded(t)
	out, _, _ := cli.Exec("dlq", "replay", "--queue", "notifications", "--dry-run", "-o", "json")
	var plan batch.Plan
	if err := json.Unmarshal([]byte(out), &plan); err != nil || plan.Order == nil || plan.Order.Mode != replay.OrderPartition || plan.Order.Partitions == 0 {
		t.Fatalf("plan order: %v %+v", err, plan.Order)
	}
	_, stderr, code := cli.Exec("dlq", "replay", "--queue", "notifications", "--why", "fixed", "--yes", "--rate", "0")
	m := regexp.MustCompile(`(\d+) held back behind a message not replayed`).FindStringSubmatch(stderr)
	if code != 1 || m == nil || !strings.Contains(stderr, "partition notifications/") || !strings.Contains(stderr, "skipped (undecryptable)") {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	id := regexp.MustCompile(`Recorded batch (\S+)\.`).FindStringSubmatch(stderr)[1]
	show, _, _ := cli.Exec("decisions", "show", id)
	if !strings.Contains(show, "Held back (ordered replay):") || !strings.Contains(show, "wait behind") {
		t.Fatalf("decisions show:\n%s", show)
	}
	// skip-gaps replays the held-back messages past the envelopes.
	_, stderr, code = cli.Exec("dlq", "replay", "--batch", id, "--yes", "--order", "skip-gaps")
	if !strings.Contains(stderr, "replayed") || strings.Contains(stderr, "held back") {
		t.Fatalf("skip-gaps: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := cli.Exec("dlq", "replay", "--queue", "orders", "--order", "sideways", "--dry-run"); code != 2 || !strings.Contains(stderr, "invalid --order") {
		t.Fatalf("bad --order: %d %s", code, stderr)
	}
}
