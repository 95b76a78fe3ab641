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
// (which widens each message to its other rows): rows/s. The sandbox runs
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
	for _, sel := range []deadletter.Selection{{All: true}, {Class: deadletter.ClassID("timeout calling inventory-service after 5000ms")}} {
		b.Run(fmt.Sprintf("%s/rows=%d", sel.String(), n), func(b *testing.B) {
			ctx := context.Background()
			env := batch.Env{Client: testkit.Client(b, url), Ledger: testkit.OpenLedger(b, "sqlite://"+b.TempDir()+"/l.db"), Now: func() time.Time { return now }, User: "bench"}
			for b.Loop() {
				s := sel
				if err := s.Compile(); err != nil {
					b.Fatal(err)
				}
				s.Acting = "replay"
				settings := batch.DefaultSettings(deadletter.Replay)
				p, err := batch.Prepare(ctx, env, batch.Request{Action: deadletter.Replay, Selection: &s, Settings: settings, Why: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				if err := p.MakePlan(ctx); err != nil {
					b.Fatal(err)
				}
				p.Close()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
