package inspect_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// BenchmarkRowJSON is the writing half of `ls -o ndjson`: one row's
// JSON, for rows as the list decoder reads them from the sandbox's seed
// (error texts carry ids, as real ones do, so the failure-class memo
// mostly misses).
func BenchmarkRowJSON(b *testing.B) {
	sb, url := testkit.Sandbox(b)
	sb.Fill(10_000, 1)
	var rows []deadletter.Row
	for r, err := range testkit.Client(b, url).Rows(context.Background(), client.ListQuery{Limit: inspect.PageSize}) {
		if err != nil {
			b.Fatal(err)
		}
		rows = append(rows, r)
	}
	now := time.Now()
	st := render.NewStream(io.Discard, render.NDJSON)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		row := inspect.ToRow(rows[i%len(rows)], now, nil, 0)
		if err := st.Write(&row); err != nil {
			b.Fatal(err)
		}
	}
}
