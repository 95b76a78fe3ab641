package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/e2e"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	testscript.Main(removingBinary{m}, map[string]func(){"dlqctl": func() { os.Exit(root.Main()) }})
}

// removingBinary runs the tests, then removes the binary the crash
// tests and benchmarks built (42 MB a run, left in the temp dir before).
type removingBinary struct{ m *testing.M }

func (r removingBinary) Run() int {
	code := r.m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	return code
}

// TestScripts runs testdata/script/*.txtar the way a user types them,
// against every kind of broker dlqctl meets:
//
//   - contract: the sandbox as the seed contract describes the broker
//     (Queen 1.0-1.5), loaded with the built-in seed (ages up to 8 days,
//     envelopes);
//   - released: the sandbox as the C++ 0.x server behaves;
//   - released-api: an empty 0.x sandbox seeded through the broker's own
//     API (internal/e2e), exactly as a real server is;
//   - 1.6, 2.2: the sandbox as those lines behave (the broker's move),
//     with the built-in seed; 1.6-api: seeded through the API.
//
// With DLQCTL_E2E_SERVER set, the scripts run against that broker (a real
// Queen server) instead, each seeded through its API under queue names of
// its own, so they can run again and again on one server. Scripts name
// queues by $ORDERS, $PAYMENTS and $NOTIFICATIONS; lines marked [seed]
// need the built-in seed (ages, undecryptable envelopes), [released] and
// [contract] one kind of broker ([released] the C++ 0.x server's
// quirks), [move] a broker that replays by its move.
func TestScripts(t *testing.T) {
	if real := os.Getenv("DLQCTL_E2E_SERVER"); real != "" {
		runScripts(t, "real", func(env *testscript.Env) (string, error) {
			return real, seedThroughAPI(env, real, os.Getenv("DLQCTL_E2E_TOKEN"))
		}, sandbox.Queen015)
		return
	}
	for _, m := range []struct {
		mode string
		line sandbox.Line
	}{
		{"contract", sandbox.Queen15}, {"released", sandbox.Queen015}, {"released-api", sandbox.Queen015},
		{"1.6", sandbox.Queen16}, {"1.6-api", sandbox.Queen16}, {"2.2", sandbox.Queen22},
	} {
		t.Run(m.mode, func(t *testing.T) {
			runScripts(t, m.mode, func(env *testscript.Env) (string, error) {
				b := sandbox.New(nil)
				b.SetLine(m.line)
				srv := httptest.NewServer(b.Handler())
				env.Defer(srv.Close)
				if strings.HasSuffix(m.mode, "-api") {
					return srv.URL, seedThroughAPI(env, srv.URL, "")
				}
				if err := b.Load(dlqctl.SandboxSeed); err != nil {
					return "", err
				}
				for _, q := range []string{"ORDERS", "PAYMENTS", "NOTIFICATIONS"} {
					env.Setenv(q, map[string]string{"ORDERS": "orders", "PAYMENTS": "payments", "NOTIFICATIONS": "notifications"}[q])
				}
				return srv.URL, nil
			}, m.line)
		})
	}
}

// seedThroughAPI seeds a broker with the built-in seed under queue names
// of this script's own, and names them in $ORDERS, $PAYMENTS, ….
func seedThroughAPI(env *testscript.Env, server, token string) error {
	var seed sandbox.Seed
	if err := json.Unmarshal(dlqctl.SandboxSeed, &seed); err != nil {
		return err
	}
	prefix := fmt.Sprintf("e2e-%d-%s-", time.Now().UnixNano()%1e9, filepath.Base(env.WorkDir))
	l := &e2e.Loader{Server: server, Token: token}
	got, err := l.Seed(context.Background(), seed, prefix)
	if err != nil {
		return err
	}
	env.Setenv("ORDERS", got.Queues["orders"])
	env.Setenv("PAYMENTS", got.Queues["payments"])
	env.Setenv("NOTIFICATIONS", got.Queues["notifications"])
	return nil
}

func runScripts(t *testing.T, mode string, broker func(*testscript.Env) (string, error), line sandbox.Line) {
	runScriptsIn(t, filepath.Join("..", "..", "testdata", "script"), mode, broker, line)
}

func runScriptsIn(t *testing.T, dir, mode string, broker func(*testscript.Env) (string, error), line sandbox.Line) {
	builtin := mode != "real" && !strings.HasSuffix(mode, "-api")
	released := line == sandbox.Queen015
	testscript.Run(t, testscript.Params{
		Dir: dir,
		Setup: func(env *testscript.Env) error {
			server, err := broker(env)
			if err != nil {
				return err
			}
			env.Setenv("DLQCTL_SERVER", server)
			if tok := os.Getenv("DLQCTL_E2E_TOKEN"); tok != "" && mode == "real" {
				env.Setenv("DLQCTL_TOKEN", tok)
			}
			env.Setenv("DLQCTL_LEDGER", "sqlite://"+filepath.Join(env.WorkDir, "ledger.db"))
			env.Setenv("DLQCTL_CONFIG", filepath.Join(env.WorkDir, "config.yaml"))
			env.Setenv("DLQCTL_USER", "oncall")
			env.Setenv("NO_COLOR", "1")
			return nil
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "released":
				return released, nil
			case "contract":
				return line == sandbox.Queen15, nil
			case "move":
				return line == sandbox.Queen16 || line == sandbox.Queen22, nil
			case "seed":
				return builtin, nil
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
			// exitin RE cmd args...: run a command; its exit code must match RE.
			"exitin": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) < 2 {
					ts.Fatalf("usage: exitin REGEXP command [args...]")
				}
				err := ts.Exec(args[1], args[2:]...)
				got := 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					got = ee.ExitCode()
				} else if err != nil {
					ts.Fatalf("exitin: %v", err)
				}
				if !regexp.MustCompile("^(" + args[0] + ")$").MatchString(strconv.Itoa(got)) {
					ts.Fatalf("exit code %d, want %s", got, args[0])
				}
			},
			// setenvfrom VAR REGEXP: set VAR to the first group of REGEXP in
			// the last command's stdout (a batch id, say).
			"setenvfrom": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 2 {
					ts.Fatalf("usage: setenvfrom VAR REGEXP")
				}
				m := regexp.MustCompile("(?m)" + args[1]).FindStringSubmatch(ts.ReadFile("stdout"))
				if len(m) < 2 {
					ts.Fatalf("setenvfrom: %s matches nothing in stdout", args[1])
				}
				ts.Setenv(args[0], m[1])
			},
			// console QUEUE N: replay the N newest rows of QUEUE as Queen
			// 1.6's console does (the sandbox's console route).
			"console": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 2 {
					ts.Fatalf("usage: console QUEUE N")
				}
				resp, err := http.Post(ts.Getenv("DLQCTL_SERVER")+sandbox.ConsoleReplayPath+"?queue="+args[0]+"&limit="+args[1], "application/json", nil)
				if err != nil {
					ts.Fatalf("console: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					ts.Fatalf("console: HTTP %d", resp.StatusCode)
				}
			},
			// subst FROM TO: copy a file with $VARS expanded.
			"subst": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 2 {
					ts.Fatalf("usage: subst FROM TO")
				}
				out := os.Expand(ts.ReadFile(args[0]), ts.Getenv)
				if err := os.WriteFile(ts.MkAbs(args[1]), []byte(out), 0o600); err != nil {
					ts.Fatalf("subst: %v", err)
				}
			},
		},
	})
}
