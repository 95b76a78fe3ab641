package main

import (
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/pkg/sandbox"
	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"dlqctl": func() { os.Exit(root.Main()) }})
}

// TestScripts runs testdata/script/*.txtar the way a user types them. With
// DLQCTL_E2E_SERVER set, the same scripts run against that broker (a real
// Queen) instead of a fresh sandbox; lines marked [sandbox] depend on the
// sandbox's seed and are skipped there.
func TestScripts(t *testing.T) {
	e2e := os.Getenv("DLQCTL_E2E_SERVER")
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("..", "..", "testdata", "script"),
		Setup: func(env *testscript.Env) error {
			server := e2e
			if server == "" {
				b := sandbox.New(nil)
				if err := b.Load(dlqctl.SandboxSeed); err != nil {
					return err
				}
				srv := httptest.NewServer(b.Handler())
				env.Defer(srv.Close)
				server = srv.URL
			}
			env.Setenv("DLQCTL_SERVER", server)
			env.Setenv("DLQCTL_LEDGER", "sqlite://"+filepath.Join(env.WorkDir, "ledger.db"))
			env.Setenv("DLQCTL_CONFIG", filepath.Join(env.WorkDir, "config.yaml"))
			env.Setenv("DLQCTL_USER", "oncall")
			env.Setenv("NO_COLOR", "1")
			return nil
		},
		Condition: func(cond string) (bool, error) {
			if cond == "sandbox" {
				return e2e == "", nil
			}
			return false, errors.New("unknown condition " + cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// exit N cmd args...: run a command and expect exit code N.
			"exit": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) < 2 {
					ts.Fatalf("usage: exit CODE command [args...]")
				}
				want, err := strconv.Atoi(args[0])
				if err != nil {
					ts.Fatalf("exit: bad code %q", args[0])
				}
				err = ts.Exec(args[1], args[2:]...)
				got := 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					got = ee.ExitCode()
				} else if err != nil {
					ts.Fatalf("exit: %v", err)
				}
				if got != want {
					ts.Fatalf("exit code %d, want %d", got, want)
				}
			},
		},
	})
}
