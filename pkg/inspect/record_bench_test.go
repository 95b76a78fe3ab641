package inspect_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/testkit"
)

// BenchmarkRecordAppendJSON is the writing half of `ls -o ndjson`: one
// row's JSON, for rows as the list scanner reads them from the sandbox's
// seed (error texts carry ids, as real ones do, so the failure-class
// memo mostly misses).
func BenchmarkRecordAppendJSON(b *testing.B) {
	sb, url := testkit.Sandbox(b)
	sb.Fill(10_000, 1)
	var rows []client.Row
	for r, err := range testkit.Client(b, url).Rows(context.Background(), client.ListQuery{Limit: inspect.PageSize}) {
		if err != nil {
			b.Fatal(err)
		}
		rows = append(rows, r)
	}
	now := time.Now()
	var buf []byte
	b.ResetTimer()
	for i := range b.N {
		buf = inspect.Record{R: rows[i%len(rows)], Now: now}.AppendJSON(buf[:0])
	}
}
