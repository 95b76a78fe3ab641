package inspect

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
)

// BenchmarkRecordAppendJSON is the writing half of `ls -o ndjson`: one
// row's JSON, its failure class computed from texts that vary (a card
// number in each, as real errors carry ids), so the class memo misses.
func BenchmarkRecordAppendJSON(b *testing.B) {
	now := time.Now()
	rows := make([]client.Row, 10000)
	for i := range rows {
		rows[i] = client.Row{ID: fmt.Sprintf("0198f3a2-7c41-7e7b-9f7e-%012d", i), TransactionID: fmt.Sprintf("order:%d:v2", i),
			PartitionID: fmt.Sprintf("0198f3a2-0000-7000-8000-%012d", i%40), Queue: "orders", Partition: fmt.Sprint(i % 40),
			ConsumerGroup: "billing", ErrorMessage: fmt.Sprintf("card %08x declined: insufficient funds", uint32(i*2654435761)),
			RetryCount: 3, Data: json.RawMessage(fmt.Sprintf(`{"orderId":%d,"amount":"%d.99","currency":"EUR"}`, i, i%500)),
			FailedAt: now.Add(-time.Duration(i) * time.Second)}
	}
	var buf []byte
	b.ResetTimer()
	for i := range b.N {
		buf = Record{R: rows[i%len(rows)], Now: now}.AppendJSON(buf[:0])
	}
}
