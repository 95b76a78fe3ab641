// Package testutil runs dlqctl command lines in process for the command
// tests: a CLI with its own config, ledger and clock, and golden files.
// What every package's tests share lives in internal/testkit.
package testutil

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/iostreams"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Now is the fixed clock of command tests and golden files.
var Now = testkit.Now

// CLI runs dlqctl command lines in-process against a server, with a
// ledger and a config of the test's own.
type CLI struct {
	T      testing.TB
	Env    map[string]string
	TTY    bool
	Width  int
	Stdin  string
	Run    func(ctx context.Context, f *cmdutil.Factory, args []string) int
	Config string
	// Clock is the time commands see; zero means Now.
	Clock time.Time
	// Tune, when set, adjusts each command's factory.
	Tune func(*cmdutil.Factory)
	// Ctx, when set, is the commands' context (cancel it to interrupt
	// one, as SIGINT does).
	Ctx context.Context
}

// NewCLI prepares a CLI for server; run is root.Run (passed in to avoid
// an import cycle).
func NewCLI(t testing.TB, server string, run func(context.Context, *cmdutil.Factory, []string) int) *CLI {
	dir := t.TempDir()
	return &CLI{T: t, Run: run, Width: 200, Config: filepath.Join(dir, "config.yaml"), Env: map[string]string{
		"DLQCTL_SERVER": server,
		"DLQCTL_LEDGER": "sqlite://" + filepath.Join(dir, "ledger.db"),
		"DLQCTL_CONFIG": filepath.Join(dir, "config.yaml"),
		"DLQCTL_USER":   "oncall",
	}}
}

// Broker is the ledger's identity of the broker the CLI talks to.
func (c *CLI) Broker() string {
	id, err := deadletter.Identity(c.Env["DLQCTL_SERVER"])
	if err != nil {
		c.T.Fatal(err)
	}
	return id
}

// WriteConfig writes the config file.
func (c *CLI) WriteConfig(yaml string) {
	if err := os.WriteFile(c.Config, []byte(yaml), 0o600); err != nil {
		c.T.Fatal(err)
	}
}

// Exec runs one command line and returns stdout, stderr and the exit code.
func (c *CLI) Exec(args ...string) (string, string, int) {
	f, in, out, errOut := c.Factory()
	in.WriteString(c.Stdin)
	ctx := c.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	code := c.Run(ctx, f, args)
	return out.String(), errOut.String(), code
}

// Factory is the factory a command line of this CLI gets, with its
// standard streams.
func (c *CLI) Factory() (f *cmdutil.Factory, in, out, errOut *bytes.Buffer) {
	io, in, out, errOut := iostreams.Test()
	io.SetTTY(c.TTY, c.TTY, c.TTY)
	io.SetWidth(c.Width)
	f = cmdutil.NewFactory(io)
	f.Getenv = func(k string) string { return c.Env[k] }
	clock := c.Clock
	if clock.IsZero() {
		clock = Now
	}
	f.Now = func() time.Time { return clock }
	f.Backoff = time.Millisecond
	if c.Tune != nil {
		c.Tune(f)
	}
	return f, in, out, errOut
}

// Golden compares got with testdata/golden/name, rewriting it with -update.
func Golden(t testing.TB, path string, got string, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(want, []byte(got)) {
		t.Fatalf("%s differs (run with -update if the change is intended)\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// ExecTo runs a command line with stdout going to w (benchmarks discard
// it); it returns stderr and the exit code.
func (c *CLI) ExecTo(w io.Writer, args ...string) (string, string, int) {
	ios, _, _, errOut := iostreams.Test()
	ios.Out = w
	f := cmdutil.NewFactory(ios)
	f.Getenv = func(k string) string { return c.Env[k] }
	f.Now = time.Now
	code := c.Run(context.Background(), f, args)
	return "", errOut.String(), code
}
