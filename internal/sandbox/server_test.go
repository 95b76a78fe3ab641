package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A page over 1 MiB is written in pieces as it is encoded; asked for
// again, it must come back whole (it is kept for the next ask).
func TestLargePageIsServedWholeTwice(t *testing.T) {
	b := New(nil)
	big := strings.Repeat("x", 600<<10)
	for i := 0; i < 3; i++ {
		b.AddDeadLetters(DeadLetter{Queue: "q", Partition: "p", TransactionID: fmt.Sprintf("t%d", i), ConsumerGroup: "g",
			Error: "e", FailedAt: time.Now().Add(-time.Duration(i) * time.Minute), Data: json.RawMessage(`"` + big + `"`)})
	}
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	var bodies [][]byte
	for i := 0; i < 2; i++ {
		resp, err := http.Get(srv.URL + "/api/v1/dlq?limit=10")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var page struct{ Messages []json.RawMessage }
		if err := json.Unmarshal(body, &page); err != nil || len(page.Messages) != 3 {
			t.Fatalf("answer %d: %d bytes, %v, %d rows", i+1, len(body), err, len(page.Messages))
		}
		bodies = append(bodies, body)
	}
	if !bytes.Equal(bodies[0], bodies[1]) {
		t.Fatal("the second answer differs from the first")
	}
}
