package exporter_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/exporter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/policy"
)

// holdQueue records a hold on every dead letter of queue in the ledger at
// dsn, as `dlq decide --action hold` would.
func holdQueue(t *testing.T, b *broker, dsn, queue string) {
	t.Helper()
	ctx := context.Background()
	ld, err := ledger.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	var items []ledger.ManifestItem
	seen := map[deadletter.Address]bool{}
	for _, r := range b.DeadLetterRows() {
		a := deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}
		if r.Queue != queue || seen[a] {
			continue
		}
		seen[a] = true
		items = append(items, ledger.ManifestItem{Address: a, Queue: r.Queue, FailedAt: r.FailedAt})
	}
	cl, _ := client.New(client.Options{Server: b.URL})
	now := testkit.Now
	if err := ld.CreateBatch(ctx, &ledger.Batch{Broker: cl.Broker(), Action: ledger.ActionHold, By: "ann", At: now, Why: "looking", Until: now.Add(time.Hour)}, items); err != nil {
		t.Fatal(err)
	}
}

// A ledger file renamed away and recreated (a new hold in it) is the one
// every other command reads: the exporter opens it again before its next
// pass and judges what it says, and its log says why.
func TestExporterFollowsAReplacedLedgerFile(t *testing.T) {
	b := newBroker(t, false)
	dir := t.TempDir()
	path := dir + "/l.db"
	var log bytes.Buffer
	e := newExporter(t, b, "sqlite://"+path, func(c *exporter.Config) {
		c.Policies = policy.Set{{Queue: "orders", Policy: policy.Policy{MaxAge: time.Minute}}}
		c.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	ctx := context.Background()
	if err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if got := value(t, gather(t, e), "dlqctl_dlq_breach", "queue", "orders", "consumer_group", "billing"); got != 1 {
		t.Fatalf("orders past a one-minute max age: breach %v, want 1", got)
	}

	if err := os.Rename(path, dir+"/l.old.db"); err != nil {
		t.Fatal(err)
	}
	holdQueue(t, b, "sqlite://"+path, "orders")
	if err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	m := gather(t, e)
	if got := value(t, m, "dlqctl_dlq_breach", "queue", "orders", "consumer_group", "billing"); got != 0 {
		t.Fatalf("orders is held in the ledger at the path: breach %v, want 0", got)
	}
	if value(t, m, "dlqctl_ledger_up") != 1 {
		t.Fatal("ledger_up 0 after reopening")
	}
	if !strings.Contains(log.String(), "ledger file replaced since it was opened; opening it again") {
		t.Fatalf("the log does not say the ledger was reopened:\n%s", log.String())
	}
}

// A ledger file removed under the exporter is opened afresh, and the loss
// of its history is logged: the new ledger knows no vanished row.
func TestExporterSaysARemovedLedgerLostItsHistory(t *testing.T) {
	b := newBroker(t, false)
	path := t.TempDir() + "/l.db"
	var log bytes.Buffer
	e := newExporter(t, b, "sqlite://"+path, func(c *exporter.Config) {
		c.Sync = true
		c.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	ctx := context.Background()
	if err := e.Pass(ctx); err != nil { // the sync archives every row: history
		t.Fatal(err)
	}
	e.Close()
	if err := e.Pass(ctx); err != nil { // reopened holding history: the witness is written
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ledger file removed since it was opened", "was created anew", "are not known"} {
		if !strings.Contains(log.String(), want) {
			t.Fatalf("the log does not say %q:\n%s", want, log.String())
		}
	}
	// The pass is dlq check's (gate.Evaluate): its notes say the loss too,
	// as check's do on every run.
	if notes := strings.Join(e.Snapshot().Check.Notes, "\n"); !strings.Contains(notes, "was created anew") {
		t.Fatalf("the pass's notes do not say the history was lost: %q", notes)
	}
}

// A broker that stops answering is down once the pass overruns its
// interval, not once the pass times out (five intervals): the error names
// the broker and the call the pass is waiting on.
func TestOverrunMarksTheBrokerDown(t *testing.T) {
	b := newBroker(t, false)
	e := newExporter(t, b, "sqlite://"+t.TempDir()+"/l.db", func(c *exporter.Config) {
		c.Interval = 200 * time.Millisecond
		c.PassTimeout = time.Minute
	})
	ctx := context.Background()
	if err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	arrived, unstall := b.stallRequests()
	var once sync.Once
	release := func() { once.Do(unstall) }
	defer release() // a failing test must not leave the server's Close waiting
	done := make(chan error, 1)
	go func() { done <- e.Pass(ctx) }()
	<-arrived
	deadline := time.Now().Add(30 * time.Second)
	for e.Snapshot().BrokerUp {
		if time.Now().After(deadline) {
			t.Fatal("the broker is still up 30 s into a pass whose interval is 200 ms")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s := e.Snapshot()
	if value(t, gather(t, e), "dlqctl_broker_up") != 0 {
		t.Fatal("broker_up is not 0 while the pass overruns")
	}
	if !strings.Contains(s.LastError, b.URL) || !strings.Contains(s.LastError, "GET ") || !strings.Contains(s.LastError, "interval") {
		t.Fatalf("the overrun's error does not name the broker and the call: %q", s.LastError)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !e.Snapshot().BrokerUp || e.Snapshot().LastError != "" {
		t.Fatalf("the pass that finished did not set the broker up again: %+v", e.Snapshot())
	}
}
