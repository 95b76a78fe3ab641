package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// fixture is a sandbox of n plain dead letters (no envelopes) and a fresh
// SQLite ledger, closed when the benchmark ends.
func fixture(b *testing.B, n int) (*sandbox.Broker, *client.Client, *ledger.Store, []replay.Item) {
	sb, c, st, items, done := freshFixture(b, n)
	b.Cleanup(done)
	return sb, c, st, items
}

// BenchmarkRate measures the achieved rate at --rate 10, 100 and 1000
// against the requested one (goal: within 5%), over two seconds of
// replay each.
func BenchmarkRate(b *testing.B) {
	for _, r := range []float64{10, 100, 1000} {
		b.Run(fmt.Sprintf("rate=%g", r), func(b *testing.B) {
			n := int(2 * r)
			var ratio float64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				_, c, st, items := fixture(b, n)
				b.StartTimer()
				o := replay.Options{Order: replay.OrderNone, Action: deadletter.Replay, Broker: c.Server(), BatchID: "bench", Owner: "bench:1:x",
					Rate: r, Burst: 1, Concurrency: 8, Via: replay.ViaManual}
				start := time.Now()
				rep, err := replay.NewEngine(c, st, o).Run(context.Background(), items)
				el := time.Since(start)
				if err != nil || rep.Replayed != n {
					b.Fatalf("%v %+v", err, rep)
				}
				// n starts at rate r span (n-1)/r seconds: the first is free.
				ratio = float64(n-1) / el.Seconds() / r
			}
			b.ReportMetric(ratio, "achieved/requested")
		})
	}
}

// BenchmarkUnlimited replays 10,000 messages with --rate 0 --concurrency
// 16 beside a bare loop making the same HTTP calls (push then delete, 16
// at a time), each on a fresh broker and ledger, the modes taking turns in
// every iteration so that a noisy machine slows all of them alike. Goal:
// the default path and order (auto: the manual path, each partition in
// order) at 0.9 of the bare loop or better. It reports the medians, and
// beside them the endpoint path (--via endpoint, in order) and the
// manual path unordered (--order none).
func BenchmarkUnlimited(b *testing.B) {
	const n = 10_000
	bare := func(c *client.Client, _ *ledger.Store, items []replay.Item) {
		testkit.Concurrently(16, items, func(it replay.Item) {
			if _, err := c.Push(context.Background(), []client.PushItem{{Queue: it.Queue, Partition: it.Partition,
				Payload: it.Newest().Data, TransactionID: replay.ReplayTxID(it.Address, 1)}}); err != nil {
				b.Error(err)
			}
			if err := c.Delete(context.Background(), it.Address); err != nil {
				b.Error(err)
			}
		})
	}
	engine := func(o replay.Options) func(c *client.Client, st *ledger.Store, items []replay.Item) {
		return func(c *client.Client, st *ledger.Store, items []replay.Item) {
			o.Action, o.Broker, o.BatchID, o.Owner, o.Concurrency = deadletter.Replay, c.Server(), "bench", "bench:1:x", 16
			if o.Order == "" {
				items, _ = testkit.Arrange(items, replay.OrderPartition, "")
			}
			rep, err := replay.NewEngine(c, st, o).Run(context.Background(), items)
			if err != nil || rep.Replayed != n {
				b.Fatalf("%v %+v", err, rep)
			}
		}
	}
	modes := []struct {
		name string
		run  func(*client.Client, *ledger.Store, []replay.Item)
	}{
		{"bare-loop", bare},
		{"default", engine(replay.Options{})},
		{"endpoint", engine(replay.Options{Via: replay.ViaEndpoint})},
		{"unordered", engine(replay.Options{Order: replay.OrderNone})},
	}
	rates := make([][]float64, len(modes))
	for i := 0; i < b.N; i++ {
		for k, m := range modes {
			b.StopTimer()
			sb, c, st, items, done := freshFixture(b, n)
			runtime.GC()
			b.StartTimer()
			start := time.Now()
			m.run(c, st, items)
			rates[k] = append(rates[k], n/time.Since(start).Seconds())
			b.StopTimer()
			if got := len(sb.LiveMessages()); got != n {
				b.Fatalf("%s: %d live messages, want %d", m.name, got, n)
			}
			done()
			b.StartTimer()
		}
	}
	med := make([]float64, len(modes))
	for k, m := range modes {
		med[k] = median(rates[k])
		b.ReportMetric(med[k], m.name+"-msgs/s")
	}
	for k := 1; k < len(modes); k++ {
		b.ReportMetric(med[k]/med[0], modes[k].name+"/bare")
	}
}

// BenchmarkMoveBesideManual is an unlimited replay of 10,000 messages
// one group dead-lettered, at concurrency 16, on a Queen 1.6 broker: the
// default path (the broker's move) beside --via manual (a push under the
// broker's copy id, then a delete) and a bare loop of each (16 at a
// time), the modes taking turns in every iteration. It reports the
// medians' messages a second and the broker calls a message each made
// (calls that change the broker, and reads).
func BenchmarkMoveBesideManual(b *testing.B) {
	const n = 10_000
	loop := func(each func(c *client.Client, it replay.Item)) func(*client.Client, *ledger.Store, []replay.Item) {
		return func(c *client.Client, _ *ledger.Store, items []replay.Item) {
			testkit.Concurrently(16, items, func(it replay.Item) { each(c, it) })
		}
	}
	bareMove := loop(func(c *client.Client, it replay.Item) {
		if _, err := c.Move(context.Background(), it.Rows[0].ID, nil); err != nil {
			b.Error(err)
		}
	})
	barePushDelete := loop(func(c *client.Client, it replay.Item) {
		if _, err := c.Push(context.Background(), []client.PushItem{{Queue: it.Queue, Partition: it.Partition,
			Payload: it.Newest().Data, TransactionID: client.CopyID(it.Rows[0].ID)}}); err != nil {
			b.Error(err)
		}
		if err := c.Delete(context.Background(), it.Address); err != nil {
			b.Error(err)
		}
	})
	engine := func(via string) func(*client.Client, *ledger.Store, []replay.Item) {
		return func(c *client.Client, st *ledger.Store, items []replay.Item) {
			rel, err := c.Release(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			o := replay.Options{Action: deadletter.Replay, Broker: c.Broker(), BatchID: "bench", Owner: "bench:1:x", Concurrency: 16,
				Via: via, Release: rel, Order: replay.OrderNone}
			rep, err := replay.NewEngine(c, st, o).Run(context.Background(), items)
			if err != nil || rep.Replayed != n {
				b.Fatalf("%v %+v", err, rep.Outcome())
			}
		}
	}
	modes := []struct {
		name string
		run  func(*client.Client, *ledger.Store, []replay.Item)
	}{
		{"bare-move", bareMove},
		{"move", engine(replay.ViaAuto)},
		{"bare-push-delete", barePushDelete},
		{"manual", engine(replay.ViaManual)},
	}
	rates := make([][]float64, len(modes))
	writes := make([]float64, len(modes))
	reads := make([]float64, len(modes))
	for i := 0; i < b.N; i++ {
		for k, m := range modes {
			b.StopTimer()
			sb, c, st, items, done := fixtureOn(b, sandbox.Queen16, n)
			sb.ResetCalls()
			runtime.GC()
			b.StartTimer()
			start := time.Now()
			m.run(c, st, items)
			rates[k] = append(rates[k], n/time.Since(start).Seconds())
			b.StopTimer()
			if got := len(sb.LiveMessages()); got != n || sb.Depth() != 0 {
				b.Fatalf("%s: %d live messages, %d rows left, want %d and 0", m.name, got, sb.Depth(), n)
			}
			var w, r int
			for route, calls := range sb.Calls() {
				if strings.HasPrefix(route, "GET") {
					r += calls
				} else {
					w += calls
				}
			}
			writes[k], reads[k] = float64(w)/n, float64(r)/n
			done()
			b.StartTimer()
		}
	}
	for k, m := range modes {
		b.ReportMetric(median(rates[k]), m.name+"-msgs/s")
		b.ReportMetric(writes[k], m.name+"-calls/msg")
		b.ReportMetric(reads[k], m.name+"-reads/msg")
	}
	b.ReportMetric(median(rates[1])/median(rates[0]), "move/bare-move")
	b.ReportMetric(median(rates[3])/median(rates[2]), "manual/bare-push-delete")
	b.ReportMetric(median(rates[1])/median(rates[3]), "move/manual")
}

// freshFixture is a sandbox of n plain dead letters (no envelopes), a
// fresh SQLite ledger and the snapshot of the whole DLQ; done closes the
// broker and the ledger, so that a benchmark's iterations need not pile
// them up until it ends.
func freshFixture(b *testing.B, n int) (*sandbox.Broker, *client.Client, *ledger.Store, []replay.Item, func()) {
	return fixtureOn(b, sandbox.Queen15, n)
}

// fixtureOn is freshFixture on a broker of a release line.
func fixtureOn(b *testing.B, line sandbox.Line, n int) (*sandbox.Broker, *client.Client, *ledger.Store, []replay.Item, func()) {
	return fixtureParts(b, line, n, 16)
}

// fixtureParts is fixtureOn with the messages spread over parts partitions.
func fixtureParts(b *testing.B, line sandbox.Line, n, parts int) (*sandbox.Broker, *client.Client, *ledger.Store, []replay.Item, func()) {
	sb := sandbox.New(nil)
	sb.SetLine(line)
	now := time.Now()
	dls := make([]sandbox.DeadLetter, n)
	for i := range dls {
		dls[i] = sandbox.DeadLetter{Queue: "orders", Partition: fmt.Sprint(i % parts), TransactionID: fmt.Sprintf("order:%d", i),
			ConsumerGroup: "billing", Error: "boom", RetryCount: 3, FailedAt: now.Add(-time.Duration(i) * time.Second),
			Data: json.RawMessage(fmt.Sprintf(`{"orderId":%d}`, i))}
	}
	sb.AddDeadLetters(dls...)
	srv := httptest.NewServer(sb.Handler())
	c := testkit.Client(b, srv.URL)
	st, err := ledger.Open(context.Background(), "sqlite://"+filepath.Join(b.TempDir(), "l.db"))
	if err != nil {
		b.Fatal(err)
	}
	sel := &deadletter.Selection{All: true}
	sel.Compile()
	items, err := testkit.Snapshot(context.Background(), c, sel, 500)
	if err != nil {
		b.Fatal(err)
	}
	return sb, c, st, items, func() { st.Close(); srv.Close() }
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// BenchmarkOrdered puts ordered replay (each partition one at a time, in
// enqueue order) beside --order none, unlimited at concurrency 16, on
// 10,000 messages over 1, 16 and 1,000 partitions: with one partition
// order means one message in flight; with many it costs little.
func BenchmarkOrdered(b *testing.B) {
	const n = 10_000
	for _, parts := range []int{1, 16, 1000} {
		var rates [2]float64
		for k, mode := range []string{replay.OrderPartition, replay.OrderNone} {
			b.Run(fmt.Sprintf("partitions=%d/%s", parts, mode), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					sb := sandbox.New(nil)
					sb.FillChains(parts, n/parts, uint64(i))
					srv := httptest.NewServer(sb.Handler())
					c := testkit.Client(b, srv.URL)
					st := testkit.OpenLedger(b, "sqlite://"+filepath.Join(b.TempDir(), "l.db"))
					sel := &deadletter.Selection{All: true}
					sel.Compile()
					items, err := testkit.Snapshot(context.Background(), c, sel, 500)
					if err != nil {
						b.Fatal(err)
					}
					items, _ = testkit.Arrange(items, mode, "")
					b.StartTimer()
					start := time.Now()
					o := replay.Options{Action: deadletter.Replay, Broker: c.Server(), BatchID: "bench", Owner: "bench:1:x",
						Concurrency: 16, Via: replay.ViaManual, Order: mode}
					rep, err := replay.NewEngine(c, st, o).Run(context.Background(), items)
					if err != nil || rep.Replayed != n {
						b.Fatalf("%v %+v", err, rep)
					}
					rates[k] = n / time.Since(start).Seconds()
					b.ReportMetric(rates[k], "msgs/s")
					srv.Close()
				}
			})
		}
		if rates[1] > 0 {
			b.Logf("%d partitions: ordered %.0f msgs/s, none %.0f msgs/s (%.2f)", parts, rates[0], rates[1], rates[0]/rates[1])
		}
	}
}

// BenchmarkClassID classifies 100,000 error texts as a listing meets
// them: a quarter repeat one text (memoised), the rest carry ids, as
// real errors do (an order number, a card, a charge id), so most are
// normalised and hashed.
func BenchmarkClassID(b *testing.B) {
	texts := make([]string, 100_000)
	for i := range texts {
		switch i % 4 {
		case 0:
			texts[i] = fmt.Sprintf("order %d not found", 1000+i%9000)
		case 1:
			texts[i] = fmt.Sprintf("card %08x declined: insufficient funds", uint32(i*2654435761))
		case 2:
			texts[i] = fmt.Sprintf("duplicate charge id %q", fmt.Sprintf("ch_%06d", i*7919%1000000))
		default:
			texts[i] = "timeout calling inventory-service after 5000ms"
		}
	}
	b.ResetTimer()
	for i := range b.N {
		deadletter.ClassID(texts[i%len(texts)])
	}
}

// BenchmarkPace replays against a broker that costs what a real one does
// (a push 6 ms, a delete 1 ms: the sandbox's RouteLatency) beside a bare
// loop making the same calls with as many in flight, at --concurrency 4
// and 16, in partition order (64 partitions: more than workers) and with
// --order none, the modes taking turns. It reports each mode's time
// against the bare loop's (goal: at most 1.15) and the writes the broker
// had in flight on average (goal: at least 0.8 × concurrency).
func BenchmarkPace(b *testing.B) {
	n := 1500
	lat := map[string]time.Duration{"POST /api/v1/push": 6 * time.Millisecond, "DELETE /api/v1/messages/{pid}/{txid}": time.Millisecond}
	for _, conc := range []int{4, 16} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			bare := func(c *client.Client, _ *ledger.Store, items []replay.Item) {
				testkit.Concurrently(conc, items, func(it replay.Item) {
					if _, err := c.Push(context.Background(), []client.PushItem{{Queue: it.Queue, Partition: it.Partition,
						Payload: it.Newest().Data, TransactionID: replay.ReplayTxID(it.Address, 1)}}); err != nil {
						b.Error(err)
					}
					if err := c.Delete(context.Background(), it.Address); err != nil {
						b.Error(err)
					}
				})
			}
			engine := func(order string) func(c *client.Client, st *ledger.Store, items []replay.Item) {
				return func(c *client.Client, st *ledger.Store, items []replay.Item) {
					o := replay.Options{Action: deadletter.Replay, Broker: c.Server(), BatchID: "bench", Owner: "bench:1:x", Concurrency: conc,
						Via: replay.ViaManual, Order: order}
					if order == replay.OrderPartition {
						items, _ = testkit.Arrange(items, replay.OrderPartition, "")
					}
					rep, err := replay.NewEngine(c, st, o).Run(context.Background(), items)
					if err != nil || rep.Replayed != n {
						b.Fatalf("%v %+v", err, rep.Outcome())
					}
				}
			}
			modes := []struct {
				name string
				run  func(*client.Client, *ledger.Store, []replay.Item)
			}{{"bare", bare}, {"partition-order", engine(replay.OrderPartition)}, {"order-none", engine(replay.OrderNone)}}
			took := make([][]float64, len(modes))
			flight := make([][]float64, len(modes))
			for i := 0; i < b.N; i++ {
				for k, m := range modes {
					b.StopTimer()
					sb, c, st, items, done := fixtureParts(b, sandbox.Queen15, n, 64)
					sb.SetFaults(sandbox.Faults{RouteLatency: lat})
					sb.ResetCalls()
					runtime.GC()
					b.StartTimer()
					start := time.Now()
					m.run(c, st, items)
					took[k] = append(took[k], time.Since(start).Seconds())
					b.StopTimer()
					mean, _ := sb.WritesInFlight()
					flight[k] = append(flight[k], mean)
					if got := len(sb.LiveMessages()); got != n {
						b.Fatalf("%s: %d live messages, want %d", m.name, got, n)
					}
					done()
					b.StartTimer()
				}
			}
			for k, m := range modes {
				b.ReportMetric(median(flight[k]), m.name+"-writes-in-flight")
				if k > 0 {
					b.ReportMetric(median(took[k])/median(took[0]), m.name+"/bare")
				}
			}
		})
	}
}
