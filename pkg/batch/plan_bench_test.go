package batch_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// BenchmarkPlan stages and plans a replay of 200k dead letters (four
// consumer groups: about 185k messages), for --all and a failure class
// (which widens each message to its other rows), as a dry run and as a
// run would: rows/s. The sandbox runs
// in the benchmark's process, where its heap makes the collector work
// harder than a command's does; DLQCTL_BENCH_SERVER names a broker in
// another process instead (dlqctl sandbox --seed with 200k rows).
func BenchmarkPlan(b *testing.B) {
	const n = 200_000
	url := os.Getenv("DLQCTL_BENCH_SERVER")
	if url == "" {
		sb := sandbox.New(func() time.Time { return now })
		sb.Fill(n, 4)
		srv := httptest.NewServer(sb.Handler())
		defer srv.Close()
		url = srv.URL
	}
	for _, c := range []struct {
		sel      deadletter.Selection
		planOnly bool // a dry run's plan (its stage keeps no payloads)
	}{
		{deadletter.Selection{All: true}, true},
		{deadletter.Selection{All: true}, false},
		{deadletter.Selection{Class: deadletter.ClassID("timeout calling inventory-service after 5000ms")}, true},
		{deadletter.Selection{Class: deadletter.ClassID("timeout calling inventory-service after 5000ms")}, false},
	} {
		sel, what := c.sel, "run"
		if c.planOnly {
			what = "dry-run"
		}
		b.Run(fmt.Sprintf("%s/%s/rows=%d", sel.String(), what, n), func(b *testing.B) {
			ctx := context.Background()
			env := batch.Env{Client: testkit.Client(b, url), Ledger: testkit.OpenLedger(b, "sqlite://"+b.TempDir()+"/l.db"), Now: func() time.Time { return now }, User: "bench"}
			for b.Loop() {
				s := sel
				if err := s.Compile(); err != nil {
					b.Fatal(err)
				}
				s.Acting = "replay"
				settings := batch.DefaultSettings(deadletter.Replay)
				p, err := batch.Prepare(ctx, env, batch.Request{Action: deadletter.Replay, Selection: &s, Settings: settings, Why: "bench", PlanOnly: c.planOnly})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.MakePlan(ctx); err != nil {
					b.Fatal(err)
				}
				p.Close()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
