package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
)

// A broker whose list answer never ends, every row of it valid, new and
// fast: the gate stops with an unreadable answer (exit 3) at the row cap
// (10 million rows, about 32 s here), never runs on; the answer's time
// alone does not end it (an honest deep DLQ over a slow link is read:
// TestHonestSlowAnswerIsRead). ls and replay's plan meet the same cap,
// lowered, in process (TestEndlessAnswerEndsAtTheRowCap).
func TestEndlessListOfValidRows(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the real binary")
	}
	b := sandbox.New(nil)
	h := b.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/dlq" {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"messages":[`)
		for i := 0; r.Context().Err() == nil; i++ {
			if i > 0 {
				fmt.Fprint(w, ",")
			}
			fmt.Fprintf(w, `{"id":"m-%d","transactionId":"t-%d","partitionId":"p","queue":"orders","partition":"0","consumerGroup":"billing","errorMessage":"boom","retryCount":3,"data":{"n":%d},"failedAt":"2026-11-30T02:00:00.000Z"}`, i, i, i)
			if i%1000 == 0 {
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	for _, args := range [][]string{{"dlq", "check"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
		c := exec.CommandContext(ctx, binary(t), append([]string{"--timeout", "1s"}, args...)...)
		c.Env = append(os.Environ(), "DLQCTL_SERVER="+srv.URL, "DLQCTL_LEDGER=sqlite://"+filepath.Join(dir, "l.db"), "DLQCTL_CONFIG="+filepath.Join(dir, "c.yaml"))
		var out, stderr bytes.Buffer
		c.Stdout, c.Stderr = &out, &stderr
		start := time.Now()
		err := c.Run()
		cancel()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 3 || !strings.Contains(stderr.String(), "goes on past 10000000 rows") {
			t.Fatalf("%v: exit %d after %s, %d bytes out\n%s", args, code, time.Since(start).Round(time.Second), out.Len(), stderr.String())
		}
		t.Logf("%v: exit 3 after %s, %d bytes out", args, time.Since(start).Round(100*time.Millisecond), out.Len())
	}
}
