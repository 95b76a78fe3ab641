package sandbox_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/iostreams"
)

// syncBuffer is a bytes buffer safe to read while the command writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSandboxCommand starts `dlqctl sandbox` on a free port, reads the
// address it prints, lists its DLQ over HTTP, and stops it.
func TestSandboxCommand(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	errOut := &syncBuffer{}
	ios.ErrOut = errOut
	f := cmdutil.NewFactory(ios)
	f.Getenv = func(string) string { return "" }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- root.Run(ctx, f, []string{"sandbox", "--addr", "127.0.0.1:0", "--old-server", "--require-token", "sandbox-s3cret-token"})
	}()
	re := regexp.MustCompile(`Sandbox broker \(Queen 0\.15\) on (http://127\.0\.0\.1:\d+) with 240 dead letters`)
	var url string
	for deadline := time.Now().Add(10 * time.Second); url == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(errOut.String()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		cancel()
		t.Fatalf("no address printed: %q", errOut.String())
	}
	// The hint says how to pass the token, without printing it.
	if !strings.Contains(errOut.String(), "export DLQCTL_SERVER="+url) || !strings.Contains(errOut.String(), "export DLQCTL_TOKEN=") ||
		strings.Contains(errOut.String(), "sandbox-s3cret-token") {
		t.Fatalf("the hint to point dlqctl at it: %q", errOut.String())
	}
	req, _ := http.NewRequest(http.MethodGet, url+"/api/v1/dlq?limit=1", nil)
	req.Header.Set("Authorization", "Bearer sandbox-s3cret-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// --old-server ignores limit: the whole seed comes back.
	if n := strings.Count(string(body), `"transactionId"`); n != 240 {
		t.Fatalf("%d rows with limit=1 from an older server", n)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after stop", code)
	}
}
