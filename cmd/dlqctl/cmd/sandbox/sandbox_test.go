package sandbox_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
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
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	f.Getenv = func(k string) string { return map[string]string{"DLQCTL_CONFIG": cfg}[k] }
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
	// The hint says which context points at it, and how to pass the
	// token, without printing it; the context names its address.
	if !strings.Contains(errOut.String(), "export DLQCTL_CONTEXT=sandbox") || !strings.Contains(errOut.String(), "export DLQCTL_TOKEN=") ||
		strings.Contains(errOut.String(), "sandbox-s3cret-token") {
		t.Fatalf("the hint to point dlqctl at it: %q", errOut.String())
	}
	if raw, err := os.ReadFile(cfg); err != nil || !strings.Contains(string(raw), "server: "+url) || !strings.Contains(string(raw), "sandbox.db") {
		t.Fatalf("the sandbox context: %v\n%s", err, raw)
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

// A command under the sandbox's context talks to that sandbox alone:
// another program answering at its address (the sandbox stopped, the
// port taken) is refused before anything is read from it, and so is a
// DLQCTL_SERVER that points the command elsewhere.
func TestTheSandboxContextReachesTheSandboxAlone(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	var hits atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, `{"status":"healthy","version":"1.0.0","server":"C++ Queen Server","messages":[]}`)
	}))
	t.Cleanup(other.Close)
	if err := os.WriteFile(cfg, []byte("contexts:\n  sandbox:\n    server: "+other.URL+"\n    ledger: sqlite://"+filepath.Join(dir, "sb.db")+"\n    sandbox: 0badc0ffee00\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(env map[string]string, args ...string) (string, int) {
		ios, _, _, errOut := iostreams.Test()
		f := cmdutil.NewFactory(ios)
		env["DLQCTL_CONFIG"] = cfg
		f.Getenv = func(k string) string { return env[k] }
		code := root.Run(context.Background(), f, args)
		return errOut.String(), code
	}
	stderr, code := run(map[string]string{"DLQCTL_CONTEXT": "sandbox"}, "dlq", "ls")
	if code != 3 || !strings.Contains(stderr, "another broker answers there") || hits.Load() != 1 {
		t.Fatalf("under the sandbox context, another program at its address: exit %d, %d requests\n%s", code, hits.Load(), stderr)
	}
	// A program that answers, but not as a broker (a web page, a 404):
	// said as something answering, not as nothing.
	page := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(page.Close)
	if err := os.WriteFile(cfg, []byte("contexts:\n  sandbox:\n    server: "+page.URL+"\n    ledger: sqlite://"+filepath.Join(dir, "sb.db")+"\n    sandbox: 0badc0ffee00\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if stderr, code := run(map[string]string{"DLQCTL_CONTEXT": "sandbox"}, "dlq", "ls"); code != 3 || !strings.Contains(stderr, "something that is not a Queen broker answers there") {
		t.Fatalf("under the sandbox context, a web server at its address: exit %d\n%s", code, stderr)
	}
	stderr, code = run(map[string]string{"DLQCTL_CONTEXT": "sandbox", "DLQCTL_SERVER": "http://127.0.0.1:1"}, "dlq", "ls")
	if code != 2 || !strings.Contains(stderr, "DLQCTL_SERVER points this command at") {
		t.Fatalf("the sandbox context with DLQCTL_SERVER elsewhere: exit %d\n%s", code, stderr)
	}
}
