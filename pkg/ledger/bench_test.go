package ledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// BenchmarkManifest records a batch of 10,000 addresses, on each engine.
func BenchmarkManifest(b *testing.B) {
	for _, l := range testkit.Ledgers(b) {
		b.Run(l.Name, func(b *testing.B) {
			s := testkit.OpenLedger(b, l.DSN)
			its := items(10_000)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				bt := &ledger.Batch{Broker: "http://bench", Action: ledger.ActionReplay, By: "b", At: time.Now(), Why: "bench"}
				if err := s.CreateBatch(context.Background(), bt, its); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(10_000*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkSync archives a 100,000-row DLQ and marks what left, on each
// engine: the first pass inserts, the next ones update last_seen.
func BenchmarkSync(b *testing.B) {
	const n = 100_000
	rows := make([]deadletter.Row, n)
	t0 := time.Now()
	for i := range rows {
		rows[i] = deadletter.Row{ID: fmt.Sprint(i), PartitionID: "p", TransactionID: fmt.Sprintf("t%d", i), Queue: "orders", Partition: "1",
			ConsumerGroup: "billing", ErrorMessage: "order 1 not found", RetryCount: 3, FailedAt: t0.Add(-time.Duration(i) * time.Second),
			Data: json.RawMessage(fmt.Sprintf(`{"orderId":%d,"amount":12.5,"currency":"EUR"}`, i))}
	}
	for _, l := range testkit.Ledgers(b) {
		b.Run(l.Name, func(b *testing.B) {
			s := testkit.OpenLedger(b, l.DSN)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				at := time.Now()
				a := s.NewArchiver("http://bench", at)
				for _, r := range rows {
					if err := a.Add(ctx, r); err != nil {
						b.Fatal(err)
					}
				}
				if err := a.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				if _, err := s.MarkGone(ctx, "http://bench", "", at, at); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkLatestDecisions looks up the current decision of 30,000
// addresses, each under a hold renewed 8 times (240k batch items), 500 a
// call as a listing does, on each engine, and keeps what it found as ls
// does: µs/address, and the heap the found decisions hold (B/address).
func BenchmarkLatestDecisions(b *testing.B) {
	const n, renewals = 30_000, 8
	its := items(n)
	addrs := make([]deadletter.Address, n)
	for i, it := range its {
		addrs[i] = it.Address
	}
	for _, l := range testkit.Ledgers(b) {
		b.Run(l.Name, func(b *testing.B) {
			s := testkit.OpenLedger(b, l.DSN)
			ctx := context.Background()
			at := time.Now().Add(-renewals * 24 * time.Hour)
			for day := range renewals {
				t := at.Add(time.Duration(day) * 24 * time.Hour)
				if err := s.CreateBatch(ctx, &ledger.Batch{Broker: "http://bench", Action: ledger.ActionHold, By: "oncall", At: t,
					Why: "waiting on the fix, renewed", Until: t.Add(36 * time.Hour)}, its); err != nil {
					b.Fatal(err)
				}
			}
			var held uint64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				var kept []map[deadletter.Address]ledger.Decision
				for start := 0; start < n; start += 500 {
					m, err := s.LatestDecisionsFor(ctx, "http://bench", addrs[start:start+500])
					if err != nil || len(m) != 500 {
						b.Fatalf("%d decisions, %v", len(m), err)
					}
					kept = append(kept, m)
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				held += after.HeapAlloc - before.HeapAlloc
				runtime.KeepAlive(kept)
				b.StartTimer()
			}
			b.ReportMetric(b.Elapsed().Seconds()*1e6/float64(n*b.N), "µs/address")
			b.ReportMetric(float64(held)/float64(n*b.N), "B/address")
		})
	}
}
