package dlq_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/config"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/internal/testutil"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/gate"
	"github.com/go-json-experiment/json/jsontext"
)

// heapPeak samples the heap while f runs and returns the peak above the
// heap in use before it started.
func heapPeak(f func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapInuse > base && m.HeapInuse-base > peak.Load() {
					peak.Store(m.HeapInuse - base)
				}
			}
		}
	}()
	f()
	close(done)
	wg.Wait()
	return peak.Load()
}

// BenchmarkPaging reads a 100,000-row DLQ three ways side by side: a bare
// loop of the same page requests (read and discarded), the client's row
// iterator (decoded rows), and `dlq ls -o ndjson` end to end.
func BenchmarkPaging(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		sb := sandbox.New(nil)
		sb.Fill(n, 1)
		srv := httptest.NewServer(sb.Handler())
		const page = 500
		report := func(b *testing.B, start time.Time, rows int, alloc0 uint64, peak uint64) {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			el := time.Since(start)
			b.ReportMetric(float64(rows*b.N)/el.Seconds(), "rows/s")
			b.ReportMetric(float64(ms.TotalAlloc-alloc0)/float64(rows*b.N), "B/row")
			b.ReportMetric(float64(peak)/(1<<20), "peak-MB")
		}
		b.Run(fmt.Sprintf("bare-http/%d", n), func(b *testing.B) {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			start := time.Now()
			peak := heapPeak(func() {
				for i := 0; i < b.N; i++ {
					for off := 0; off < n; off += page {
						resp, err := http.Get(fmt.Sprintf("%s/api/v1/dlq?limit=%d&offset=%d", srv.URL, page, off))
						if err != nil {
							b.Fatal(err)
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			})
			report(b, start, n, ms.TotalAlloc, peak)
		})
		b.Run(fmt.Sprintf("client/%d", n), func(b *testing.B) {
			c := testkit.Client(b, srv.URL)
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			start := time.Now()
			peak := heapPeak(func() {
				for i := 0; i < b.N; i++ {
					got := 0
					for _, err := range c.Rows(context.Background(), client.ListQuery{Limit: page}) {
						if err != nil {
							b.Fatal(err)
						}
						got++
					}
					if got != n {
						b.Fatalf("%d rows", got)
					}
				}
			})
			report(b, start, n, ms.TotalAlloc, peak)
		})
		b.Run(fmt.Sprintf("ls-ndjson/%d", n), func(b *testing.B) {
			cli := testutil.NewCLI(b, srv.URL, root.Run)
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			start := time.Now()
			peak := heapPeak(func() {
				for i := 0; i < b.N; i++ {
					if _, _, code := cli.ExecTo(io.Discard, "dlq", "ls", "-o", "ndjson"); code != 0 {
						b.Fatal(code)
					}
				}
			})
			report(b, start, n, ms.TotalAlloc, peak)
		})
		srv.Close()
	}
}

// BenchmarkCheck finds the oldest dead letter (and the SLO tails) on DLQs
// of growing size, beside reading the whole DLQ.
func BenchmarkCheck(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		sb := sandbox.New(nil)
		sb.Fill(n, 2)
		srv := httptest.NewServer(sb.Handler())
		c := testkit.Client(b, srv.URL)
		cfg := &config.Config{Policies: []config.Policy{{Queue: "*", MaxAge: config.NewDuration(240*time.Hour, "10d"), TriageSLO: config.NewDuration(240*time.Hour, "10d")}}}
		b.Run(fmt.Sprintf("check/%d", n), func(b *testing.B) {
			sb.ResetCalls()
			for i := 0; i < b.N; i++ {
				if _, err := gate.Check(context.Background(), c, gate.Input{Policies: cfg.PolicySet(), Now: time.Now()}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(sb.Calls()["GET /api/v1/dlq"])/float64(b.N), "requests/op")
		})
		b.Run(fmt.Sprintf("read-all/%d", n), func(b *testing.B) {
			sb.ResetCalls()
			for i := 0; i < b.N; i++ {
				for _, err := range c.Rows(context.Background(), client.ListQuery{Limit: 500}) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(sb.Calls()["GET /api/v1/dlq"])/float64(b.N), "requests/op")
		})
		srv.Close()
	}
}

// BenchmarkLsNDJSON puts `dlq ls -o ndjson` beside the least a program
// can do with the same answers: a plain Go loop over the same pages that
// decodes each answer to row boundaries (jsontext) and writes each row as
// a line. Both run in each iteration, so their ratio is taken side by
// side on the same (shared, noisy) machine; the sandbox's pages are
// cached, so it is dlqctl's cost that is measured.
func BenchmarkLsNDJSON(b *testing.B) {
	const n, page = 100_000, 500
	sb := sandbox.New(nil)
	sb.Fill(n, 1)
	srv := httptest.NewServer(sb.Handler())
	defer srv.Close()
	cli := testutil.NewCLI(b, srv.URL, root.Run)
	bare := func() int {
		w := bufio.NewWriterSize(io.Discard, 64<<10)
		rows := 0
		for off := 0; ; off += page {
			resp, err := http.Get(fmt.Sprintf("%s/api/v1/dlq?limit=%d&offset=%d", srv.URL, page, off))
			if err != nil {
				b.Fatal(err)
			}
			dec := jsontext.NewDecoder(resp.Body)
			got := 0
			dec.ReadToken() // {
			for dec.PeekKind() != '}' {
				name, _ := dec.ReadToken()
				if name.String() != "messages" {
					dec.SkipValue()
					continue
				}
				dec.ReadToken() // [
				for dec.PeekKind() != ']' {
					v, err := dec.ReadValue()
					if err != nil {
						b.Fatal(err)
					}
					w.Write(v)
					w.WriteByte('\n')
					got++
				}
				dec.ReadToken()
			}
			resp.Body.Close()
			rows += got
			if got < page {
				break
			}
		}
		w.Flush()
		return rows
	}
	bare() // warm the sandbox's page cache
	var tBare, tLs time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if got := bare(); got != n {
			b.Fatalf("bare loop read %d rows", got)
		}
		tBare += time.Since(start)
		start = time.Now()
		if _, stderr, code := cli.ExecTo(io.Discard, "dlq", "ls", "-o", "ndjson"); code != 0 {
			b.Fatal(stderr)
		}
		tLs += time.Since(start)
	}
	b.ReportMetric(tLs.Seconds()/tBare.Seconds(), "ls/bare")
	b.ReportMetric(float64(n*b.N)/tLs.Seconds(), "ls-rows/s")
	b.ReportMetric(float64(n*b.N)/tBare.Seconds(), "bare-rows/s")
}

// BenchmarkCheckMaxAge is the gate as CI runs it on a deep DLQ:
// `check --max-age 1h` on 100,000 rows over 3 queues (5 consumer-group
// scopes), the oldest 72h old, an empty ledger. Everything breaches, yet
// no row needs reading: requests stay logarithmic per scope.
func BenchmarkCheckMaxAge(b *testing.B) {
	const n = 100_000
	for _, old := range []bool{false, true} {
		sb := sandbox.New(nil)
		sb.AddQueue("orders", false, 3, "billing", "shipping")
		sb.AddQueue("payments", false, 3, "ledger", "fraud")
		sb.AddQueue("notifications", false, 3, "__QUEUE_MODE__")
		now := time.Now()
		groups := [][2]string{{"orders", "billing"}, {"orders", "shipping"}, {"payments", "ledger"}, {"payments", "fraud"}, {"notifications", "__QUEUE_MODE__"}}
		dls := make([]sandbox.DeadLetter, n)
		for i := range dls {
			g := groups[i%len(groups)]
			dls[i] = sandbox.DeadLetter{Queue: g[0], Partition: fmt.Sprint(i % 40), TransactionID: fmt.Sprintf("m-%d", i), ConsumerGroup: g[1],
				Error: "boom", FailedAt: now.Add(-time.Duration(i) * 72 * time.Hour / n), Data: []byte(`{"a":1}`)}
		}
		sb.AddDeadLetters(dls...)
		if old {
			sb.SetLine(sandbox.Queen015)
		}
		srv := httptest.NewServer(sb.Handler())
		c := testkit.Client(b, srv.URL)
		name := "paged"
		if old {
			name = "one-body"
		}
		b.Run(name, func(b *testing.B) {
			var res *gate.Result
			for i := 0; i < b.N; i++ {
				var err error
				if res, err = gate.Check(context.Background(), c, gate.Input{MaxAge: time.Hour, Now: time.Now()}); err != nil {
					b.Fatal(err)
				}
			}
			worst := 0
			for _, s := range res.Scopes {
				worst = max(worst, s.Requests)
			}
			b.ReportMetric(float64(res.Requests), "requests")
			b.ReportMetric(float64(worst), "max-requests/scope")
			b.ReportMetric(float64(len(res.Scopes)), "scopes")
			b.ReportMetric(float64(res.Bytes), "bytes")
		})
		srv.Close()
	}
}
