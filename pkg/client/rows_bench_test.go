package client_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/dlqctl/dlqctl/pkg/client"
)

// BenchmarkRowsAllocate reads 20,000 rows in pages of 500 from a server
// that answers from memory: the bytes allocated a row read (B/row) are
// the row's texts (one string, about 110 bytes here), its payload (about
// 16), and what the decoder and the server's side of each request add.
// The chunks handed to the caller and the key sets that drop a page's
// repeats are reused: made again for every chunk and page they cost 330
// bytes a row more.
func BenchmarkRowsAllocate(b *testing.B) {
	const page, pages = 500, 40
	bodies := make([][]byte, pages+1)
	for p := range bodies {
		var buf bytes.Buffer
		buf.WriteString(`{"messages":[`)
		for i := 0; p < pages && i < page; i++ {
			if i > 0 {
				buf.WriteByte(',')
			}
			n := p*page + i
			fmt.Fprintf(&buf, `{"id":"m-%d","transactionId":"t-%d","partitionId":"p-%d","queue":"orders","partition":"%d","consumerGroup":"billing",`+
				`"errorMessage":"order %d not found","retryCount":3,"failedAt":"2026-07-30T09:41:02.517Z","data":{"orderId":%d}}`, n, n, n%16, n%16, n, n)
		}
		buf.WriteString(`]}`)
		bodies[p] = buf.Bytes()
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var off int
		fmt.Sscan(r.URL.Query().Get("offset"), &off)
		w.Write(bodies[min(off/page, pages)])
	}))
	defer srv.Close()
	c := newClient(b, srv.URL)
	read := func() int {
		n := 0
		for _, err := range c.Rows(context.Background(), client.ListQuery{Limit: page}) {
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		return n
	}
	read() // warm the connection
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	rows := 0
	for range b.N {
		rows += read()
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	if rows != b.N*page*pages {
		b.Fatalf("read %d rows, want %d", rows, b.N*page*pages)
	}
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(rows), "B/row")
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}
