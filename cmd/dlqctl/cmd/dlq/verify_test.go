package dlq_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/internal/testutil"
)

// A queue read by queue mode and two consumer groups: once queue mode
// consumed the replay's copies, the 0.x server calls each completed
// whatever the groups did. Verify asks each group: 0 completed, the
// groups named with their counts, in the table and in JSON; once every
// group consumed them, every copy is completed at the next verify.
func TestVerifyAsksEveryConsumerGroup(t *testing.T) {
	for _, line := range []sandbox.Line{sandbox.Queen015, sandbox.Queen16} {
		t.Run(line.String(), func(t *testing.T) {
			b, url := testkit.Sandbox(t)
			b.SetLine(line)
			b.AddQueue("orders", false, 3, "__QUEUE_MODE__", "billing", "shipping")
			now := time.Now()
			for i := range 12 {
				b.AddDeadLetters(sandbox.DeadLetter{Queue: "orders", Partition: fmt.Sprintf("p%d", i%3), TransactionID: fmt.Sprintf("o-%d", i),
					ConsumerGroup: "__QUEUE_MODE__", Error: "boom", FailedAt: now.Add(-time.Duration(i+1) * time.Minute), Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
			}
			cli := testutil.NewCLI(t, url, root.Run)
			cli.Clock = now
			out, stderr, code := cli.Exec("dlq", "replay", "--all", "--why", "fixed", "--yes", "--rate", "0", "-o", "json")
			if code != 0 {
				t.Fatalf("replay: exit %d\n%s", code, stderr)
			}
			var rep struct{ BatchID string }
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			live := b.LiveMessages()
			for _, m := range live {
				b.Consume(m.PartitionID, m.TransactionID, "__QUEUE_MODE__")
			}
			out, _, code = cli.Exec("decisions", "verify", rep.BatchID)
			if code != 0 || !strings.Contains(out, "0 completed, 12 pending") || !strings.Contains(out, "billing: 0 of 12 consumed") ||
				!strings.Contains(out, "shipping: 0 of 12 consumed") || !strings.Contains(out, "(queue mode): 12 of 12 consumed") {
				t.Fatalf("queue mode alone consumed them: exit %d\n%s", code, out)
			}
			js, _, _ := cli.Exec("decisions", "verify", rep.BatchID, "-o", "json")
			var v struct {
				Completed int
				ByQueue   []struct {
					Groups []struct {
						Name         string
						Consumed, Of int
					}
				}
			}
			if err := json.Unmarshal([]byte(js), &v); err != nil || v.Completed != 0 || len(v.ByQueue) != 1 || len(v.ByQueue[0].Groups) != 3 {
				t.Fatalf("json: %v\n%s", err, js)
			}
			for _, m := range live {
				b.Consume(m.PartitionID, m.TransactionID, "billing", "shipping")
			}
			out, _, code = cli.Exec("decisions", "verify", rep.BatchID)
			if code != 0 || !strings.Contains(out, "12 completed, 0 pending") || !strings.Contains(out, "the batch is verified") {
				t.Fatalf("every group consumed them: exit %d\n%s", code, out)
			}
		})
	}
}

// The console of a 2.x broker moved a row the broker cannot decrypt
// while a batch held it: the copy is the envelope as it was. The batch
// says moved elsewhere; verify and show say the copy is an envelope.
func TestAnEnvelopeCopyIsSaid(t *testing.T) {
	b, url := testkit.Sandbox(t)
	b.SetLine(sandbox.Queen22)
	b.AddQueue("secrets", true, 3, "billing")
	now := time.Now()
	b.AddDeadLetters(sandbox.DeadLetter{Queue: "secrets", Partition: "p", TransactionID: "s-1", ConsumerGroup: "billing", Error: "decryption failed",
		FailedAt: now.Add(-time.Minute), Data: json.RawMessage(`{"card":1}`), Undecryptable: true})
	moved := false
	b.SetFaults(sandbox.Faults{Script: func(c sandbox.Call) sandbox.Action {
		if !moved && c.Route == "GET /api/v1/messages/{pid}/{txid}" {
			moved = true
			b.ConsoleReplayNewest("secrets", "", 1)
		}
		return sandbox.Serve
	}})
	cli := testutil.NewCLI(t, url, root.Run)
	cli.Clock = now
	out, stderr, code := cli.Exec("dlq", "replay", "--all", "--why", "x", "--yes", "--rate", "0", "-o", "json")
	if code != 0 || !strings.Contains(out, `"movedElsewhere": 1`) {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out, stderr)
	}
	var rep struct{ BatchID string }
	_ = json.Unmarshal([]byte(out), &rep)
	if out, _, _ := cli.Exec("decisions", "verify", rep.BatchID); !strings.Contains(out, "1 copy is the encryption envelope") {
		t.Fatalf("verify:\n%s", out)
	}
	if out, _, _ := cli.Exec("dlq", "show", "s-1"); !strings.Contains(out, "the copy is the encryption envelope") {
		t.Fatalf("show:\n%s", out)
	}
}

// A batch belongs to the broker it was recorded against: resumed or
// verified against another, it is refused (exit 2), the refusal naming
// both brokers and the flags that reach the batch's own.
func TestAnotherBrokersBatchIsRefused(t *testing.T) {
	_, url := testkit.Seeded(t, testutil.Now)
	_, other := testkit.Seeded(t, testutil.Now)
	cli := testutil.NewCLI(t, url, root.Run)
	out, stderr, code := cli.Exec("dlq", "replay", "--queue", "orders", "--why", "fixed", "--yes", "--rate", "0", "-o", "json")
	var rep struct{ BatchID string }
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("replay: exit %d\n%s", code, stderr)
	}
	cli.Env["DLQCTL_SERVER"] = other
	// The brokers are named as the ledger keys them (localhost for
	// 127.0.0.1): by their ports here.
	port := func(u string) string { return u[strings.LastIndex(u, ":"):] }
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"dlq", "replay", "--batch", rep.BatchID, "--yes"}, []string{"belongs to broker http://", port(url) + ", not http://", port(other) + " (use --server or --context)"}},
		{[]string{"decisions", "verify", rep.BatchID}, []string{"was run against http://", port(url) + ", not http://", port(other) + ": to verify it, use --server or --context"}},
	} {
		_, stderr, code := cli.Exec(c.args...)
		ok := code == 2 && strings.Count(strings.TrimSpace(stderr), "\n") == 0
		for _, w := range c.want {
			ok = ok && strings.Contains(stderr, w)
		}
		if !ok {
			t.Errorf("%v: exit %d, want 2 and %q:\n%s", c.args, code, c.want, stderr)
		}
	}
}
