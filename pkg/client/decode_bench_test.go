package client

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/go-json-experiment/json/jsontext"
)

// BenchmarkDecodePage reads one 500-row list answer held in memory: the
// decoder's rows (what every listing pays per row), beside a loop that
// only validates the answer and finds its rows (jsontext), the floor a
// listing is measured against (BenchmarkLsNDJSON's bare loop).
func BenchmarkDecodePage(b *testing.B) {
	const rows = 500
	var body bytes.Buffer
	body.WriteString(`{"messages":[`)
	for i := range rows {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"id":"0198f3a2-7c41-7e7b-9f7e-%012d","transactionId":"order:%d:v2","partitionId":"0198f3a2-0000-7000-8000-%012d",`+
			`"queue":"orders","partition":"%d","consumerGroup":"billing","errorMessage":"card %08x declined: insufficient funds",`+
			`"retryCount":3,"data":{"orderId":%d,"amount":"%d.99","currency":"EUR"},"isEncrypted":false,"producerSub":null,`+
			`"createdAt":"2026-07-30T09:41:02.517Z","failedAt":"2026-07-30T09:41:02.517Z"}`, i, i, i%40, i%40, i*2654435761, i, i%500)
	}
	body.WriteString(`],"pagination":{"limit":500,"offset":0},"total":500}`)
	b.Run("decoder", func(b *testing.B) {
		b.SetBytes(int64(body.Len()))
		b.ReportAllocs()
		for range b.N {
			n := 0
			if _, _, err := decodeList(&limitReader{r: bytes.NewReader(body.Bytes()), max: MaxRow}, false, func(deadletter.Row) bool { n++; return true }); err != nil || n != rows {
				b.Fatal(n, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
	})
	b.Run("validate", func(b *testing.B) {
		b.SetBytes(int64(body.Len()))
		for range b.N {
			dec := jsontext.NewDecoder(bytes.NewReader(body.Bytes()))
			n := 0
			dec.ReadToken()
			for dec.PeekKind() != '}' {
				name, _ := dec.ReadToken()
				if name.String() != "messages" {
					dec.SkipValue()
					continue
				}
				dec.ReadToken()
				for dec.PeekKind() != ']' {
					if _, err := dec.ReadValue(); err != nil {
						b.Fatal(err)
					}
					n++
				}
				dec.ReadToken()
			}
			if n != rows {
				b.Fatal(n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
	})
}
