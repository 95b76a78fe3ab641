package dlq_test

// Restores beside everything else that may act on the same messages:
// a replay, a second restore, a queue made anew, another broker on a
// shared ledger, faults. Judged by what the broker holds.

import (
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/internal/testutil"
)

// discarded discards the seed's payments and returns the batch and a row
// of each message it discarded, by address.
func discarded(t *testing.T, b *sandbox.Broker, cli *testutil.CLI) (string, map[string]sandbox.Row) {
	t.Helper()
	rows := map[string]sandbox.Row{}
	for _, r := range b.DeadLetterRows() {
		if r.Queue == "payments" {
			rows[r.PartitionID+"/"+r.TransactionID] = r
		}
	}
	out, stderr, code := cli.Exec("dlq", "rm", "--queue", "payments", "--why", "a bad deploy", "--yes", "--rate", "0")
	if code != 0 {
		t.Fatalf("rm: exit %d\n%s", code, stderr)
	}
	id := regexp.MustCompile(`Batch (\S+):`).FindStringSubmatch(out + stderr)
	if id == nil {
		t.Fatalf("rm printed no batch:\n%s%s", out, stderr)
	}
	return id[1], rows
}

// live counts, for each payload, the live messages carrying it.
func live(b *sandbox.Broker) map[string]int {
	n := map[string]int{}
	for _, m := range b.LiveMessages() {
		n[compact(m.Payload)]++
	}
	return n
}

// onceEach fails the test for each discarded message not live exactly once.
func onceEach(t *testing.T, b *sandbox.Broker, rows map[string]sandbox.Row) {
	t.Helper()
	n := live(b)
	for a, r := range rows {
		if k := n[compact(r.Payload)]; k != 1 {
			t.Errorf("%s: live %d times", a, k)
		}
	}
}

// failedAgain dead-letters the message of r once more: its producer sent
// it again, and it failed again.
func failedAgain(b *sandbox.Broker, r sandbox.Row) {
	b.AddDeadLetters(sandbox.DeadLetter{Queue: r.Queue, Partition: r.Partition, TransactionID: r.TransactionID, ConsumerGroup: r.ConsumerGroup,
		Error: "failed again", RetryCount: 3, FailedAt: testutil.Now, Data: r.Payload})
}

// A message replayed after its discard (it was dead-lettered again, and
// a replay took it), or dead-lettered again and waiting, is not restored
// beside it: the broker holds it once.
func TestRestoreBesideAReplayOfTheSameMessage(t *testing.T) {
	b, cli := seeded(t)
	id, rows := discarded(t, b, cli)
	var replayed, waiting string
	for a := range rows {
		if replayed == "" {
			replayed = a
		} else if waiting == "" {
			waiting = a
		}
	}
	failedAgain(b, rows[replayed])
	failedAgain(b, rows[waiting])
	if _, stderr, code := cli.Exec("dlq", "replay", replayed, "--why", "sent again, failed again", "--yes", "--rate", "0"); code != 0 {
		t.Fatalf("replay: exit %d\n%s", code, stderr)
	}
	_, stderr, code := cli.Exec("dlq", "restore", "--batch", id, "--why", "undo", "--yes", "--rate", "0")
	if code != 1 || !strings.Contains(stderr, "dead-lettered again since the discard") {
		t.Fatalf("restore: exit %d\n%s", code, stderr)
	}
	delete(rows, waiting)
	onceEach(t, b, rows)
	// The waiting one, replayed now, is live once: the restore left it.
	if _, stderr, code := cli.Exec("dlq", "replay", waiting, "--why", "its turn", "--yes", "--rate", "0"); code != 0 {
		t.Fatalf("replay of the waiting one: exit %d\n%s", code, stderr)
	}
	if n := live(b)[compact(rows[replayed].Payload)]; n != 1 {
		t.Errorf("%s: live %d times", replayed, n)
	}
}

// Two restores of one discard at once, as two people would: between
// them every message is restored once.
func TestTwoRestoresOfOneBatchAtOnce(t *testing.T) {
	b, cli := seeded(t)
	id, rows := discarded(t, b, cli)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli.Exec("dlq", "restore", "--batch", id, "--why", "undo", "--yes", "--rate", "200", "--concurrency", "4")
		}()
	}
	wg.Wait()
	cli.Exec("dlq", "restore", "--batch", id, "--why", "finish", "--yes", "--rate", "0")
	onceEach(t, b, rows)
}

// The destination deleted and made anew: a restore publishes into the
// queue that exists now, each message once; deleted and not made anew,
// it publishes nothing and says so.
func TestRestoreAfterTheQueueWasMadeAnew(t *testing.T) {
	b, cli := seeded(t)
	id, rows := discarded(t, b, cli)
	b.DeleteQueue("payments")
	if _, stderr, code := cli.Exec("dlq", "restore", "--batch", id, "--why", "undo", "--yes", "--rate", "0"); code != 1 || !strings.Contains(stderr, "does not exist") || len(b.LiveMessages()) != 0 {
		t.Fatalf("restore into a deleted queue: exit %d, %d live\n%s", code, len(b.LiveMessages()), stderr)
	}
	b.AddQueue("payments", false, 3, "fraud", "ledger")
	if _, stderr, code := cli.Exec("dlq", "restore", "--batch", id, "--why", "the queue is back", "--yes", "--rate", "0"); code != 0 {
		t.Fatalf("restore into the queue made anew: exit %d\n%s", code, stderr)
	}
	onceEach(t, b, rows)
	for _, m := range b.LiveMessages() {
		if m.Queue != "payments" {
			t.Errorf("restored into %s", m.Queue)
		}
	}
}

// A discard made on one broker, a restore asked of another through the
// ledger they share: never into the other broker.
func TestRestoreOfAnotherBrokersDiscard(t *testing.T) {
	b, cli := seeded(t)
	id, _ := discarded(t, b, cli)
	other, url := testkit.Seeded(t, testutil.Now)
	cli.Env["DLQCTL_SERVER"] = url
	before := mutating(other)
	for _, args := range [][]string{
		{"dlq", "restore", "--batch", id, "--why", "undo", "--yes", "--rate", "0"},
		{"dlq", "restore", "--all", "--why", "undo", "--yes", "--rate", "0"},
		{"dlq", "restore", "--queue", "payments", "--why", "undo", "--yes", "--rate", "0"},
	} {
		_, stderr, code := cli.Exec(args...)
		if code == 0 && !strings.Contains(stderr, "Nothing to restore") || mutating(other) != before {
			t.Errorf("%v against another broker: exit %d, %d writes to it\n%s", args, code, mutating(other)-before, stderr)
		}
	}
	if len(other.LiveMessages()) != 0 || len(b.LiveMessages()) != 0 {
		t.Fatalf("restored: %d live on the other broker, %d on the discard's", len(other.LiveMessages()), len(b.LiveMessages()))
	}
}

// A restore to a recovery queue under faults, interrupted, resumed with
// --batch alone: the recorded destination holds, each message once.
func TestRestoreToAnotherQueueUnderFaultsThenResumed(t *testing.T) {
	b, cli := seeded(t)
	id, rows := discarded(t, b, cli)
	b.AddQueue("payments-recovery", false, 3, "ledger")
	b.SetFaults(sandbox.Faults{Fail503Every: 3, CutEvery: 4})
	_, stderr, _ := cli.Exec("dlq", "restore", "--batch", id, "--to-queue", "payments-recovery", "--why", "to recovery", "--yes", "--rate", "0")
	m := regexp.MustCompile(`dlq restore --batch (\S+)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no resume line:\n%s", stderr)
	}
	for range 5 {
		cli.Exec("dlq", "restore", "--batch", m[1], "--yes", "--rate", "0")
	}
	b.SetFaults(sandbox.Faults{})
	if _, stderr, code := cli.Exec("dlq", "restore", "--batch", m[1], "--yes", "--rate", "0"); code != 0 {
		t.Fatalf("last resume: exit %d\n%s", code, stderr)
	}
	onceEach(t, b, rows)
	for _, m := range b.LiveMessages() {
		if m.Queue != "payments-recovery" {
			t.Errorf("a copy in %s", m.Queue)
		}
	}
}

// --batch last is this broker's newest batch the command runs: for a
// restore, the discard just made (the 3am undo of a wrong rm); for a
// replay with no replay batch, a usage error that says which batch it
// looked for.
func TestBatchLastIsTheNewestTheCommandRuns(t *testing.T) {
	b, cli := seeded(t)
	_, stderr, code := cli.Exec("dlq", "replay", "--batch", "last", "--yes")
	if code != 2 || !strings.Contains(stderr, "no replay batch of this broker in the ledger") {
		t.Fatalf("replay --batch last with no replay: exit %d\n%s", code, stderr)
	}
	// A hold recorded after the discard is not what restore takes.
	_, rows := discarded(t, b, cli)
	if _, stderr, code := cli.Exec("dlq", "decide", "--queue", "orders", "--action", "hold", "--until", "1h", "--why", "looking"); code != 0 {
		t.Fatalf("hold: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := cli.Exec("dlq", "restore", "--batch", "last", "--why", "the rm was a mistake", "--yes", "--rate", "0"); code != 0 {
		t.Fatalf("restore --batch last: exit %d\n%s", code, stderr)
	}
	onceEach(t, b, rows)
}
