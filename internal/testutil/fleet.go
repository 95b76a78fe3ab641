package testutil

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/sandbox"
)

// Fleet is a CLI whose config has three contexts, each with its own
// seeded sandbox and SQLite ledger: calm (its own policy lets its dead
// letters wait 1000 days), busy (no policy: max-age 0, it breaches) and
// gone (a port nothing listens on). No DLQCTL_SERVER or DLQCTL_LEDGER is
// set: each context names its own.
func Fleet(t *testing.T, run func(context.Context, *cmdutil.Factory, []string) int) *CLI {
	t.Helper()
	url := func() string {
		b := sandbox.New(func() time.Time { return Now })
		if err := b.Load(dlqctl.SandboxSeed); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(b.Handler())
		t.Cleanup(srv.Close)
		return srv.URL
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cli := NewCLI(t, "", run)
	delete(cli.Env, "DLQCTL_SERVER")
	delete(cli.Env, "DLQCTL_LEDGER")
	cli.WriteConfig(fmt.Sprintf(`contexts:
  calm:
    server: %s
    ledger: sqlite://%s
    policies:
      - queue: "*"
        max-age: 1000d
  busy:
    server: %s
    ledger: sqlite://%s
  gone:
    server: %s
    ledger: sqlite://%s
`, url(), filepath.Join(dir, "calm.db"), url(), filepath.Join(dir, "busy.db"), gone, filepath.Join(dir, "gone.db")))
	return cli
}
