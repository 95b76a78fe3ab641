package dlq_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/internal/testutil"
)

// A hold holds the rows it was recorded over, whatever precision the
// broker gives their failure times: 2.x lists microseconds, the older
// lines milliseconds of the same stored microseconds. The ledger keeps
// what the broker sent and compares at that precision.
func TestAHoldHoldsAtTheBrokersPrecision(t *testing.T) {
	for _, line := range []sandbox.Line{sandbox.Queen22, sandbox.Queen16, sandbox.Queen015} {
		t.Run(line.Does().Name, func(t *testing.T) {
			// Every seeded row fails at .073957 past some second.
			now := testutil.Now.Add(73957 * time.Microsecond)
			b, url := testkit.Seeded(t, now, func(b *sandbox.Broker) { b.SetLine(line) })
			cli := testutil.NewCLI(t, url, root.Run)
			cli.Clock = now.Add(time.Second)
			depth := b.Depth()
			if _, stderr, code := cli.Exec("dlq", "decide", "--queue", "orders", "--limit", "5", "--action", "hold", "--until", "24h", "--why", "INC-7"); code != 0 {
				t.Fatalf("decide: exit %d\n%s", code, stderr)
			}
			_, stderr, code := cli.Exec("dlq", "rm", "--queue", "orders", "--limit", "5", "--why", "x", "--yes")
			if code != 2 || !strings.Contains(stderr, "--override-hold") {
				t.Errorf("rm of held rows: exit %d, want 2 naming --override-hold\n%s", code, stderr)
			}
			if got := b.Depth(); got != depth {
				t.Errorf("rm discarded %d held dead letters", depth-got)
			}
			out, _, _ := cli.Exec("dlq", "ls", "--queue", "orders", "--limit", "5", "-o", "ndjson")
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				var r struct {
					Address  string `json:"address"`
					Decision string `json:"decision"`
				}
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					t.Fatalf("%v: %s", err, l)
				}
				if r.Decision != "hold" {
					t.Errorf("%s: decision %q, want hold", r.Address, r.Decision)
				}
			}
		})
	}
}
