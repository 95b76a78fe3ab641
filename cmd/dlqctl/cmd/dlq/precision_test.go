package dlq_test

import (
	"database/sql"
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

// A batch whose journal says it found an address gone, though it is
// dead-lettered (a listing of an earlier dlqctl missed it), acts on it:
// it never did anything to it, so no copy of its own can exist. It is
// not "dead-lettered again after this batch replayed it".
func TestFoundGoneButThereIsActedOn(t *testing.T) {
	b, cli := seeded(t)
	out, stderr, code := cli.Exec("dlq", "decide", "--queue", "payments", "--action", "replay", "--why", "x")
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("decide: exit %d\n%s", code, stderr)
	}
	db, err := sql.Open("sqlite", strings.TrimPrefix(cli.Env["DLQCTL_LEDGER"], "sqlite://"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var gone []string
	for _, r := range b.DeadLetterRows() {
		if r.Queue == "payments" && len(gone) < 3 && !strings.HasPrefix(r.Error, "decryption") {
			gone = append(gone, r.PartitionID+"/"+r.TransactionID)
			if _, err := db.Exec(`INSERT INTO journal (broker, partition_id, transaction_id, state, batch_id, action, outcome, updated_at) VALUES (?, ?, ?, 'removed', ?, 'replay', 'gone', '2026-11-30T02:59:00.000000000Z')`,
				cli.Broker(), r.PartitionID, r.TransactionID, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, stderr, code = cli.Exec("dlq", "replay", "--batch", id, "--yes", "--rate", "0")
	if code != 0 && code != 1 || strings.Contains(stderr, "dead-lettered again") {
		t.Fatalf("resume: exit %d\n%s", code, stderr)
	}
	for _, a := range gone {
		if dead(b, a) {
			t.Errorf("%s, found gone by an earlier run though it was there, is still dead-lettered", a)
		}
	}
}
