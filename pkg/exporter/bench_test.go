package exporter_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/exporter"
	"github.com/dlqctl/dlqctl/pkg/gate"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/policy"
)

// filled is a sandbox of n generated dead letters that counts the
// requests it answers, and an exporter on it.
func filled(b *testing.B, n int, released bool) (*exporter.Exporter, *atomic.Int64) {
	sb := sandbox.New(nil)
	sb.Fill(n, 7)
	if released {
		sb.SetLine(sandbox.Queen015)
	}
	var requests atomic.Int64
	h := sb.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		h.ServeHTTP(w, r)
	}))
	b.Cleanup(srv.Close)
	cl, err := client.New(client.Options{Server: srv.URL, Backoff: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	dsn := "sqlite://" + filepath.Join(b.TempDir(), "l.db")
	e := exporter.New(exporter.Config{
		Client:     cl,
		Ledger:     func(ctx context.Context) (*ledger.Store, error) { return ledger.Open(ctx, dsn) },
		Policies:   policy.Set{{Queue: "*", Policy: policy.Policy{MaxAge: time.Hour, TriageSLO: 4 * time.Hour}}},
		Interval:   time.Minute,
		MaxClasses: 10,
	})
	b.Cleanup(e.Close)
	return e, &requests
}

// BenchmarkPass reports the broker requests and bytes of one exporter
// pass, and the requests of one scrape (goal: 0), at 1k, 100k and 1M
// dead letters, on a broker that pages (O(log N) requests a scope) and on
// one that answers a queue in one body (the released server: one body a
// pass). ns/op is a pass.
func BenchmarkPass(b *testing.B) {
	for _, released := range []bool{false, true} {
		for _, n := range []int{1_000, 100_000, 1_000_000} {
			mode := "paging"
			if released {
				mode = "one-body"
			}
			b.Run(fmt.Sprintf("%s/rows=%d", mode, n), func(b *testing.B) {
				e, requests := filled(b, n, released)
				ctx := context.Background()
				if err := e.Pass(ctx); err != nil { // the ledger's schema, the client's dialect
					b.Fatal(err)
				}
				before := requests.Load()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := e.Pass(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				passReqs := float64(requests.Load()-before) / float64(b.N)
				bytes := float64(e.Snapshot().Check.Bytes)
				before = requests.Load()
				const scrapes = 100
				for range scrapes {
					gather(b, e)
				}
				b.ReportMetric(passReqs, "requests/pass")
				b.ReportMetric(bytes, "bytes/pass")
				b.ReportMetric(float64(requests.Load()-before)/scrapes, "requests/scrape")
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}

// BenchmarkRSSOver10kPasses runs 10,000 passes against 1,000 dead letters
// and reports the process's resident memory after the first 1,000 and
// after all 10,000 (goal: flat, a ratio near 1).
func BenchmarkRSSOver10kPasses(b *testing.B) {
	for i := 0; i < b.N; i++ {
		e, _ := filled(b, 1_000, true)
		ctx := context.Background()
		var at1k float64
		for p := 1; p <= 10_000; p++ {
			if err := e.Pass(ctx); err != nil {
				b.Fatal(err)
			}
			if p%100 == 0 {
				gather(b, e)
			}
			if p == 1_000 {
				at1k = rss(b)
			}
		}
		at10k := rss(b)
		b.ReportMetric(at1k/(1<<20), "MiB-RSS@1k")
		b.ReportMetric(at10k/(1<<20), "MiB-RSS@10k")
		b.ReportMetric(at10k/at1k, "RSS10k/1k")
	}
}

// rss is the process's resident set size in bytes (Linux).
func rss(b *testing.B) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb * 1024
		}
	}
	b.Skip("no VmRSS")
	return 0
}

// BenchmarkGateCost puts what the gate costs the broker beside reading
// the whole DLQ, at 300, 3k, 100k and 1M dead letters on a broker that
// pages: list requests and bytes of one dlq check (gate.Check, as the
// command runs it) and of one exporter pass, and of a plain read of every
// row (without payloads, as the gate's whole read; with them, as ls).
// Goal: the gate's list requests at most a plain read's plus three, the
// O(log N) search only where it costs fewer requests and bytes.
func BenchmarkGateCost(b *testing.B) {
	for _, n := range []int{300, 3_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			sb := sandbox.New(nil)
			sb.Fill(n, 7)
			srv := httptest.NewServer(sb.Handler())
			b.Cleanup(srv.Close)
			cl, err := client.New(client.Options{Server: srv.URL, Backoff: time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			pol := policy.Set{{Queue: "*", Policy: policy.Policy{MaxAge: time.Hour, TriageSLO: 4 * time.Hour}}}
			dsn := "sqlite://" + filepath.Join(b.TempDir(), "l.db")
			e := exporter.New(exporter.Config{Client: cl, Ledger: func(ctx context.Context) (*ledger.Store, error) { return ledger.Open(ctx, dsn) },
				Policies: pol, Interval: time.Minute, MaxClasses: 10})
			b.Cleanup(e.Close)
			ctx := context.Background()
			if err := e.Pass(ctx); err != nil { // the ledger's schema, the client's dialect
				b.Fatal(err)
			}
			lists := func() int { return sb.Calls()["GET /api/v1/dlq"] }
			var checkReq, passReq, readReq, lsReq int
			var checkBytes, passBytes, readBytes, lsBytes int64
			for i := 0; i < b.N; i++ {
				before := lists()
				res, err := gate.Check(ctx, cl, gate.Input{Policies: pol, Now: time.Now()})
				if err != nil {
					b.Fatal(err)
				}
				checkReq, checkBytes = lists()-before, res.Bytes
				before = lists()
				if err := e.Pass(ctx); err != nil {
					b.Fatal(err)
				}
				passReq, passBytes = lists()-before, e.Snapshot().Check.Bytes
				for _, noData := range []bool{true, false} {
					before = lists()
					m := &client.Meter{}
					for _, err := range cl.Rows(client.WithMeter(ctx, m), client.ListQuery{Limit: client.MaxPage, NoData: noData}) {
						if err != nil {
							b.Fatal(err)
						}
					}
					if noData {
						readReq, readBytes = lists()-before, m.Bytes()
					} else {
						lsReq, lsBytes = lists()-before, m.Bytes()
					}
				}
			}
			b.ReportMetric(float64(checkReq), "check-lists")
			b.ReportMetric(float64(checkBytes), "check-bytes")
			b.ReportMetric(float64(passReq), "pass-lists")
			b.ReportMetric(float64(passBytes), "pass-bytes")
			b.ReportMetric(float64(readReq), "read-lists")
			b.ReportMetric(float64(readBytes), "read-bytes")
			b.ReportMetric(float64(lsReq), "ls-lists")
			b.ReportMetric(float64(lsBytes), "ls-bytes")
		})
	}
}
