package exporter_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/exporter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/policy"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// broker is a seeded sandbox behind a switch: down, it hangs up on every
// request; stalled, it holds requests until released.
type broker struct {
	*sandbox.Broker
	URL      string
	down     atomic.Bool
	mu       sync.Mutex
	stall    chan struct{} // non-nil: requests wait on it
	arrived  chan struct{} // one send per stalled request
	requests atomic.Int64
}

func newBroker(t *testing.T, released bool) *broker {
	t.Helper()
	b := &broker{Broker: sandbox.New(func() time.Time { return testkit.Now })}
	if err := b.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	if released {
		b.SetLine(sandbox.Queen015)
	}
	h := b.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.requests.Add(1)
		if b.down.Load() {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		b.mu.Lock()
		stall, arrived := b.stall, b.arrived
		b.mu.Unlock()
		if stall != nil {
			arrived <- struct{}{}
			<-stall
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	b.URL = srv.URL
	return b
}

func (b *broker) stallRequests() (arrived chan struct{}, release func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stall, b.arrived = make(chan struct{}), make(chan struct{}, 64)
	stall, arrived := b.stall, b.arrived
	return arrived, func() {
		b.mu.Lock()
		b.stall = nil
		b.mu.Unlock()
		close(stall)
	}
}

func newExporter(t *testing.T, b *broker, dsn string, tune func(*exporter.Config)) *exporter.Exporter {
	t.Helper()
	cl, err := client.New(client.Options{Server: b.URL, Backoff: time.Millisecond, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := exporter.Config{
		Client:     cl,
		Ledger:     func(ctx context.Context) (*ledger.Store, error) { return ledger.Open(ctx, dsn) },
		Policies:   policy.Set{{Queue: "orders", Policy: policy.Policy{MaxAge: 2400 * time.Hour, Owner: "team-orders"}}},
		Now:        func() time.Time { return testkit.Now },
		Interval:   time.Minute,
		MaxClasses: 2,
	}
	if tune != nil {
		tune(&cfg)
	}
	e := exporter.New(cfg)
	t.Cleanup(e.Close)
	return e
}

// gather collects the exporter's metrics as a scrape would.
func gather(t testing.TB, e *exporter.Exporter) map[string][]*dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*dto.Metric{}
	for _, f := range fams {
		out[f.GetName()] = f.GetMetric()
	}
	return out
}

func value(t *testing.T, m map[string][]*dto.Metric, name string, labels ...string) float64 {
	t.Helper()
	v, ok := lookup(m, name, labels...)
	if !ok {
		t.Fatalf("no %s%v", name, labels)
	}
	return v
}

func lookup(m map[string][]*dto.Metric, name string, labels ...string) (float64, bool) {
next:
	for _, x := range m[name] {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range x.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		if x.GetGauge() != nil {
			return x.GetGauge().GetValue(), true
		}
		return x.GetCounter().GetValue(), true
	}
	return 0, false
}

// A broker that goes away leaves the last values in place, says so with
// dlqctl_broker_up 0 and an unchanged success time, and the exporter
// recovers on its own once the broker is back. Scrapes never reach it.
func TestBrokerDownKeepsTheLastValues(t *testing.T) {
	b := newBroker(t, false)
	e := newExporter(t, b, "sqlite://"+t.TempDir()+"/l.db", nil)
	ctx := context.Background()
	if err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	m := gather(t, e)
	depth := value(t, m, "dlqctl_dlq_depth", "queue", "orders", "consumer_group", "billing")
	success := value(t, m, "dlqctl_last_pass_success_timestamp_seconds")
	if depth == 0 || value(t, m, "dlqctl_broker_up") != 1 || value(t, m, "dlqctl_ledger_up") != 1 {
		t.Fatalf("first pass: depth %v, up %v/%v", depth, value(t, m, "dlqctl_broker_up"), value(t, m, "dlqctl_ledger_up"))
	}
	before := b.requests.Load()
	for range 5 {
		gather(t, e)
	}
	if n := b.requests.Load() - before; n != 0 {
		t.Fatalf("5 scrapes made %d broker requests, want 0", n)
	}

	b.down.Store(true)
	if err := e.Pass(ctx); err == nil {
		t.Fatal("a pass against a broker that hangs up succeeded")
	}
	m = gather(t, e)
	if value(t, m, "dlqctl_broker_up") != 0 || value(t, m, "dlqctl_ledger_up") != 1 {
		t.Fatalf("broker down: up %v, ledger %v", value(t, m, "dlqctl_broker_up"), value(t, m, "dlqctl_ledger_up"))
	}
	if got := value(t, m, "dlqctl_dlq_depth", "queue", "orders", "consumer_group", "billing"); got != depth {
		t.Fatalf("the last known depth went: %v, want %v", got, depth)
	}
	if value(t, m, "dlqctl_last_pass_success_timestamp_seconds") != success || value(t, m, "dlqctl_passes_total", "result", "failure") != 1 {
		t.Fatal("a failed pass moved the success time or was not counted")
	}

	b.down.Store(false)
	if err := e.Pass(ctx); err != nil {
		t.Fatalf("the broker is back, the pass is not: %v", err)
	}
	if m = gather(t, e); value(t, m, "dlqctl_broker_up") != 1 {
		t.Fatal("not recovered")
	}
}

// While a pass waits on a stalled broker, a scrape answers with the last
// pass's values: the scrape never waits for the pass.
func TestScrapesDoNotWaitForAPass(t *testing.T) {
	b := newBroker(t, false)
	e := newExporter(t, b, "sqlite://"+t.TempDir()+"/l.db", nil)
	ctx := context.Background()
	if err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	arrived, release := b.stallRequests()
	done := make(chan error)
	go func() { done <- e.Pass(ctx) }()
	<-arrived // the pass is inside a broker request
	m := gather(t, e)
	if value(t, m, "dlqctl_passes_total", "result", "success") != 1 || value(t, m, "dlqctl_broker_up") != 1 {
		t.Fatal("the scrape did not answer with the last pass")
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m = gather(t, e); value(t, m, "dlqctl_passes_total", "result", "success") != 2 {
		t.Fatal("the second pass was not swapped in")
	}
}

// A ledger that cannot be opened is reported, the broker is still asked
// whether it is up, and the ledger is picked up when it comes back.
func TestLedgerDownAtStart(t *testing.T) {
	b := newBroker(t, false)
	dsn := "sqlite://" + t.TempDir() + "/l.db"
	var opens atomic.Int64
	e := newExporter(t, b, dsn, func(c *exporter.Config) {
		c.Ledger = func(ctx context.Context) (*ledger.Store, error) {
			if opens.Add(1) == 1 {
				return nil, errors.New("ledger unavailable: postgres://xxxxx@db/ledger: connection refused")
			}
			return ledger.Open(ctx, dsn)
		}
	})
	ctx := context.Background()
	if err := e.Pass(ctx); err == nil {
		t.Fatal("a pass with no ledger succeeded")
	}
	m := gather(t, e)
	if value(t, m, "dlqctl_ledger_up") != 0 || value(t, m, "dlqctl_broker_up") != 1 {
		t.Fatalf("ledger down: ledger_up %v broker_up %v", value(t, m, "dlqctl_ledger_up"), value(t, m, "dlqctl_broker_up"))
	}
	if _, ok := lookup(m, "dlqctl_last_pass_success_timestamp_seconds"); ok {
		t.Fatal("a success time before any success")
	}
	if _, ok := lookup(m, "dlqctl_dlq_depth"); ok {
		t.Fatal("values before any successful pass")
	}
	if err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if m = gather(t, e); value(t, m, "dlqctl_ledger_up") != 1 {
		t.Fatal("the ledger was not picked up")
	}
}

// Failure classes are bounded: the top --max-classes (queue, class) pairs
// one by one, the rest summed per queue, adding up to the DLQ's rows; on
// a broker that answers in one body, and on one that pages whose DLQ is
// cheaper read whole than probed (the seed's, in one request). A DLQ
// probed has none (TestPagingBrokerProbedHasNoClasses).
func TestClassesAreBounded(t *testing.T) {
	for _, released := range []bool{true, false} {
		b := newBroker(t, released)
		e := newExporter(t, b, "sqlite://"+t.TempDir()+"/l.db", nil)
		if err := e.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
		classes := gather(t, e)["dlqctl_dlq_class_depth"]
		queues := map[string]bool{}
		named, sum := 0, 0.0
		for _, m := range classes {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" {
					queues[l.GetValue()] = true
				}
				if l.GetName() == "class" && l.GetValue() != exporter.OtherClass {
					named++
				}
			}
			sum += m.GetGauge().GetValue()
		}
		if named != 2 || len(classes) > 2+len(queues) || int(sum) != b.Depth() {
			t.Fatalf("%d named classes, %d series over %d queues, %v rows of %d", named, len(classes), len(queues), sum, b.Depth())
		}
	}
}

// A paging broker's DLQ too deep to read whole each pass is probed: its
// classes are not known, and not exported.
func TestPagingBrokerProbedHasNoClasses(t *testing.T) {
	b := newBroker(t, false)
	b.Fill(100_000, 9)
	e := newExporter(t, b, "sqlite://"+t.TempDir()+"/l.db", nil)
	if err := e.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if classes := gather(t, e)["dlqctl_dlq_class_depth"]; len(classes) != 0 {
		t.Fatalf("a probed DLQ's classes: %d series", len(classes))
	}
}

// A scope that leaves check's answer leaves /metrics: its series are not
// kept with a stale value.
func TestAScopeThatGoesGoesFromMetrics(t *testing.T) {
	b := newBroker(t, false)
	e := newExporter(t, b, "sqlite://"+t.TempDir()+"/l.db", nil)
	ctx := context.Background()
	if err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := lookup(gather(t, e), "dlqctl_dlq_depth", "queue", "notifications"); !ok {
		t.Fatal("no notifications scope")
	}
	for _, r := range b.DeadLetterRows() {
		if r.Queue == "notifications" {
			b.RemoveDeadLetters(r.PartitionID, r.TransactionID)
		}
	}
	if err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	for name, ms := range gather(t, e) {
		for _, m := range ms {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" && l.GetValue() == "notifications" {
					t.Fatalf("%s still has the emptied queue (no policy names it)", name)
				}
			}
		}
	}
}

// A running replay's progress comes from the journal; its replays back in
// the DLQ are counted when the pass read every row.
func TestBatchProgress(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, ld *ledger.Store, dsn string) {
		b := newBroker(t, true)
		e := newExporter(t, b, dsn, nil)
		ctx := context.Background()
		cl := testkit.Client(t, b.URL)
		broker := cl.Broker()
		var items []ledger.ManifestItem
		var addrs []deadletter.Address
		for _, r := range b.DeadLetterRows()[:5] {
			a := deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}
			items = append(items, ledger.ManifestItem{Address: a, Queue: r.Queue, Partition: r.Partition, FailedAt: r.FailedAt})
			addrs = append(addrs, a)
		}
		bt := &ledger.Batch{Broker: broker, Action: ledger.ActionReplay, By: "ann", At: testkit.Now, Why: "fixed", Status: ledger.StatusRunning}
		if err := ld.CreateBatch(ctx, bt, items); err != nil {
			t.Fatal(err)
		}
		if _, err := ld.Acquire(ctx, broker, bt.ID, ledger.ActionReplay, addrs, ledger.PlainEnrolments(1, 1, 1, 1, 1), "run", testkit.Now, time.Minute); err != nil {
			t.Fatal(err)
		}
		settle := func(a deadletter.Address, state, replayTxID string) {
			en, err := ld.Claim(ctx, broker, a, "run", testkit.Now, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			en.State, en.BatchID, en.ReplayTxID = state, bt.ID, replayTxID
			if state == ledger.Removed {
				en.Outcome = "replayed"
			}
			if err := ld.Save(ctx, en, "run", testkit.Now, true); err != nil {
				t.Fatal(err)
			}
		}
		settle(addrs[0], ledger.Removed, "replayed-0")
		settle(addrs[1], ledger.Removed, "replayed-1")
		settle(addrs[2], ledger.Failed, "")
		// replayed-1 failed again: it is back in the DLQ.
		b.AddDeadLetters(sandbox.DeadLetter{Queue: items[1].Queue, Partition: items[1].Partition, TransactionID: "replayed-1",
			ConsumerGroup: "__QUEUE_MODE__", Error: "still broken", FailedAt: testkit.Now.Add(-time.Minute)})

		// Its run says, at its beat, how far it got: the pace and the
		// estimated end are exported with the last beat.
		owner := ledger.NewOwner("x")
		if err := ld.StartRun(ctx, bt.ID, owner, 5); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if _, err := ld.Beat(ctx, bt.ID, owner, 2); err != nil {
			t.Fatal(err)
		}
		if err := e.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		m := gather(t, e)
		id := []string{"batch_id", bt.ID}
		if value(t, m, "dlqctl_batch_rate_messages_per_second", id...) <= 0 || value(t, m, "dlqctl_batch_estimated_end_timestamp_seconds", id...) < float64(time.Now().Add(-time.Minute).Unix()) ||
			value(t, m, "dlqctl_batch_last_beat_timestamp_seconds", id...) < float64(time.Now().Add(-time.Minute).Unix()) {
			t.Fatalf("pace %v, end %v, beat %v", value(t, m, "dlqctl_batch_rate_messages_per_second", id...),
				value(t, m, "dlqctl_batch_estimated_end_timestamp_seconds", id...), value(t, m, "dlqctl_batch_last_beat_timestamp_seconds", id...))
		}
		st := func(s string) float64 { return value(t, m, "dlqctl_batch_messages", append(id, "state", s)...) }
		if value(t, m, "dlqctl_batch_size", id...) != 5 || st("done") != 2 || st("failed") != 1 || st("pending") != 2 || st("skipped") != 0 {
			t.Fatalf("progress: size %v done %v failed %v pending %v", value(t, m, "dlqctl_batch_size", id...), st("done"), st("failed"), st("pending"))
		}
		if value(t, m, "dlqctl_batch_refailed", id...) != 1 {
			t.Fatalf("refailed %v, want 1", value(t, m, "dlqctl_batch_refailed", id...))
		}
		if err := ld.SetBatchStatus(ctx, bt.ID, ledger.StatusFailed, testkit.Now, testkit.Now, nil); err != nil {
			t.Fatal(err)
		}
		if err := e.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := lookup(gather(t, e), "dlqctl_batch_size", id...); ok {
			t.Fatal("a finished batch is still exported")
		}
	})
}

// A pass's errors reach the snapshot without the token, and the broker
// address in them is the redacted one.
func TestNoCredentialInErrors(t *testing.T) {
	const token = "s3cr3t-bearer-token-0123456789"
	b := newBroker(t, false)
	b.SetFaults(sandbox.Faults{Token: "another-token"})
	u := strings.Replace(b.URL, "http://", "http://ann:hunter2@", 1)
	cl, err := client.New(client.Options{Server: u, Token: token, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e := newExporter(t, b, "sqlite://"+t.TempDir()+"/l.db", func(c *exporter.Config) { c.Client = cl })
	err = e.Pass(context.Background())
	if err == nil {
		t.Fatal("a pass with the wrong token succeeded")
	}
	s := e.Snapshot().LastError
	for _, secret := range []string{token, token[:12], "hunter2"} {
		if strings.Contains(s, secret) || strings.Contains(err.Error(), secret) {
			t.Fatalf("the error carries a credential: %s", s)
		}
	}
}

// Run passes at its interval and stops when its context ends.
func TestRunStopsOnCancel(t *testing.T) {
	b := newBroker(t, false)
	e := newExporter(t, b, "sqlite://"+t.TempDir()+"/l.db", func(c *exporter.Config) { c.Interval = 10 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for e.Snapshot().LastPass.IsZero() {
		if time.Now().After(deadline) {
			t.Fatal("no pass in 10s at an interval of 10ms")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10s after its context was cancelled")
	}
	last := e.Snapshot().LastPass
	time.Sleep(50 * time.Millisecond) // five intervals
	if got := e.Snapshot().LastPass; !got.Equal(last) {
		t.Fatalf("a pass ran after Run returned: %v, then %v", last, got)
	}
}

// A dead letter that failed far in the future: a pass evaluates it (it
// counts as old as it is ahead) and a scrape serves it; nothing crashes.
func TestFarFutureFailureTimeIsAPass(t *testing.T) {
	b := newBroker(t, false)
	b.AddDeadLetters(sandbox.DeadLetter{Queue: "clocks", Partition: "p", TransactionID: "future-1", ConsumerGroup: "billing",
		Error: "clock", FailedAt: time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), Data: []byte(`{}`)})
	e := newExporter(t, b, "sqlite://"+t.TempDir()+"/l.db", nil)
	if err := e.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := gather(t, e)
	if value(t, m, "dlqctl_dlq_depth", "queue", "clocks") != 1 || value(t, m, "dlqctl_dlq_breach", "queue", "clocks") != 1 {
		t.Fatal("the far-future dead letter is not a breach")
	}
}
