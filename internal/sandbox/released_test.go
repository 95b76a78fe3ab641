package sandbox

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReleasedModeMatchesTheRealServer holds the released mode to answers
// recorded from a real Queen server (server 1.0.0, the newest open-source
// release) in testdata/released: the same keys at every level the client
// reads, and the same bodies where they are fixed texts.
func TestReleasedModeMatchesTheRealServer(t *testing.T) {
	b := New(func() time.Time { return time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC) })
	b.AddQueue("orders", false, 3, "billing", "shipping")
	b.AddDeadLetters(DeadLetter{Queue: "orders", Partition: "1039", TransactionID: "order:10010:v2", ConsumerGroup: "billing",
		Error: "unknown payload version 4", RetryCount: 0, FailedAt: time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC), Data: json.RawMessage(`{"orderId":10010}`)})
	b.SetLine(Queen015)
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	pid := PartitionID("orders", "1039")

	call := func(method, path, body string) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: HTTP %d (the released server answers 200)", method, path, resp.StatusCode)
		}
		out, _ := io.ReadAll(resp.Body)
		return out
	}
	recorded := func(name string) []byte {
		raw, err := os.ReadFile(filepath.Join("testdata", "released", name))
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	for _, c := range []struct {
		name, method, path, body string
		// at are the objects whose keys are compared, as paths from the top.
		at [][]any
	}{
		{"queues.json", "GET", "/api/v1/resources/queues", "", [][]any{{}, {"queues", 0}, {"queues", 0, "messages"}}},
		{"consumer-groups.json", "GET", "/api/v1/consumer-groups", "", [][]any{{0}}},
		{"dlq.json", "GET", "/api/v1/dlq?queue=orders&limit=1", "", [][]any{{}, {"messages", 0}, {"pagination"}}},
		{"message.json", "GET", "/api/v1/messages/" + pid + "/order:10010:v2", "", [][]any{{}, {"queueConfig"}, {"mode"}, {"consumerGroups", 0}}},
		{"push.json", "POST", "/api/v1/push", `{"items":[{"queue":"orders","partition":"fixture","payload":{"a":1},"transactionId":"fixture-1"}]}`, [][]any{{0}}},
		{"delete-missing.json", "DELETE", "/api/v1/messages/00000000-0000-0000-0000-000000000000/nope", "", [][]any{{}}},
	} {
		var want, got any
		if err := json.Unmarshal(recorded(c.name), &want); err != nil {
			t.Fatal(c.name, err)
		}
		if err := json.Unmarshal(call(c.method, c.path, c.body), &got); err != nil {
			t.Fatal(c.name, err)
		}
		for _, p := range c.at {
			if k, w := keys(walk(got, p)), keys(walk(want, p)); !slices.Equal(k, w) {
				t.Errorf("%s at %v: keys %v, the real server's %v", c.name, p, k, w)
			}
		}
	}
	for _, c := range []struct{ name, path string }{
		{"dlq-offset.json", "/api/v1/dlq?offset=1"},
		{"message-missing.json", "/api/v1/messages/00000000-0000-0000-0000-000000000000/nope"},
	} {
		if got, want := bytes.TrimSpace(call("GET", c.path, "")), bytes.TrimSpace(recorded(c.name)); !bytes.Equal(got, want) {
			t.Errorf("%s: %s, the real server's %s", c.path, got, want)
		}
	}
}

func walk(v any, path []any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func keys(v any) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
