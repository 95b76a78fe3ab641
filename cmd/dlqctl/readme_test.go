package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestREADMECommands follows the README's Install, Quick start and
// workflow code blocks, in order, with the real binary: it starts
// `dlqctl sandbox` as the README says, with the sandbox's default port
// taken by another program (a recorder, where the port is free to take),
// takes the README's `export DLQCTL_CONTEXT=sandbox`, and runs every
// dlqctl line. `dlq check` may exit 1 (that is the gate working); every
// other line must exit 0; nothing reaches the program on the default
// port.
func TestREADMECommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, section := range []string{"## Install", "## Quick start", "## The workflow"} {
		body := string(raw)
		i := strings.Index(body, section)
		if i < 0 {
			t.Fatalf("README has no %q section", section)
		}
		body = body[i+len(section):]
		if j := strings.Index(body, "\n## "); j >= 0 {
			body = body[:j]
		}
		for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(body, -1) {
			for _, line := range strings.Split(block[1], "\n") {
				if line = strings.TrimSpace(trailingComment.ReplaceAllString(line, "")); line != "" {
					lines = append(lines, line)
				}
			}
		}
	}
	// Another program on the sandbox's default port.
	var other atomic.Int64
	if ln, err := net.Listen("tcp", "127.0.0.1:6632"); err == nil {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			other.Add(1)
			io.WriteString(w, `{"status":"healthy","version":"9.9.9","messages":[]}`)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	home := t.TempDir()
	env := append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "XDG_STATE_HOME="+filepath.Join(home, ".local", "state"),
		"NO_COLOR=1", "DLQCTL_USER=oncall")
	env = slices.DeleteFunc(env, func(kv string) bool {
		for _, k := range []string{"DLQCTL_SERVER=", "QUEEN_SERVER=", "DLQCTL_CONTEXT=", "DLQCTL_LEDGER=", "DLQCTL_CONFIG=", "DLQCTL_TOKEN="} {
			if strings.HasPrefix(kv, k) {
				return true
			}
		}
		return false
	})
	// Files the README's lines write (an export) land here, not in the
	// repository.
	work := t.TempDir()
	// A README port another program holds here is replaced, in that line
	// and every one after, by a free one.
	moved := map[string]string{}
	ran, sandboxed := 0, false
	for _, line := range lines {
		for from, to := range moved {
			line = strings.ReplaceAll(line, from, to)
		}
		switch {
		case line == "dlqctl sandbox":
			sandboxed = true
			startSandbox(t, env)
			continue
		case strings.HasPrefix(line, "dlqctl sandbox ") && strings.HasSuffix(line, " &"):
			args, err := shellWords(strings.TrimSuffix(line, " &"))
			if err != nil {
				t.Fatalf("README line %q: %v", line, err)
			}
			for i, a := range args {
				if i > 0 && args[i-1] == "--addr" {
					if free := addrOrFree(t, a); free != a {
						moved[a] = free
						args[i] = free
					}
				}
			}
			startSandboxAt(t, env, args[1:])
			continue
		case strings.HasPrefix(line, "unset "):
			name := strings.TrimPrefix(line, "unset ") + "="
			env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name) })
			continue
		case strings.HasPrefix(line, "export "):
			kv := strings.TrimPrefix(line, "export ")
			if !strings.HasPrefix(kv, "DLQCTL_CONTEXT=") {
				continue // PATH and the like: the test runs the binary it built
			}
			env = append(env, kv)
			continue
		case !strings.HasPrefix(line, "dlqctl "):
			continue
		}
		args, err := shellWords(line)
		if err != nil {
			t.Fatalf("README line %q: %v", line, err)
		}
		c := exec.Command(binary(t), args[1:]...)
		c.Env, c.Dir = env, work
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		err = c.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		// check breaching and verify finding a copy failed again is each
		// working; the sandbox's consumers fail every 10th delivery.
		sub := subcommand(args)
		gate := len(sub) > 1 && (sub[0] == "dlq" && sub[1] == "check" || sub[0] == "decisions" && sub[1] == "verify")
		if code != 0 && !(gate && code == 1) {
			t.Fatalf("README line %q: exit %d\n%s%s", line, code, stdout.String(), stderr.String())
		}
		if len(sub) > 1 && sub[0] == "decisions" && sub[1] == "verify" {
			// The copies reached every consumer group: completed (or
			// failed again), none pending, said per group.
			out := stdout.String()
			if !regexp.MustCompile(`: \d+ completed, 0 pending`).MatchString(out) || !regexp.MustCompile(`billing: \d+ of \d+ consumed; shipping: \d+ of \d+ consumed`).MatchString(out) {
				t.Fatalf("README line %q did not reach completed per group:\n%s%s", line, out, stderr.String())
			}
			t.Logf("%s:\n%s", line, out)
		}
		if len(sub) > 1 && sub[0] == "dlq" && sub[1] == "import" && strings.Contains(line, "once more") {
			// The second import of a file publishes nothing, and says so.
			if !strings.Contains(stderr.String()+stdout.String(), "Nothing to import") || !strings.Contains(stderr.String()+stdout.String(), "already imported") {
				t.Fatalf("README line %q: a second import did not say it had nothing to import:\n%s%s", line, stdout.String(), stderr.String())
			}
		}
		if strings.Contains(line, "--where") {
			// Each example selects something, and reads no field the rows
			// lack.
			if strings.Contains(stderr.String(), "no row has") || sub[1] == "ls" && stdout.Len() == 0 || sub[1] != "ls" && strings.Contains(stderr.String(), "Nothing to") {
				t.Fatalf("README line %q selects nothing, or reads a field no row has:\n%s%s", line, stdout.String(), stderr.String())
			}
		}
		ran++
	}
	if !sandboxed || ran < 8 {
		t.Fatalf("the README starts no sandbox, or has only %d dlqctl lines", ran)
	}
	if n := other.Load(); n != 0 {
		t.Fatalf("%d requests reached the other program on 127.0.0.1:6632", n)
	}
}

// startSandbox runs `dlqctl sandbox` as the README does, until the test
// ends, and waits until it says which context points at it.
func startSandbox(t *testing.T, env []string) {
	t.Helper()
	c := exec.Command(binary(t), "sandbox")
	c.Env = env
	stderr, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Process.Signal(os.Interrupt)
		_ = c.Wait()
	})
	ready := make(chan string, 1)
	go func() {
		var said strings.Builder
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			said.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "export DLQCTL_CONTEXT=sandbox") {
				ready <- said.String()
			}
		}
		close(ready)
	}()
	select {
	case said, ok := <-ready:
		if !ok {
			t.Fatal("the sandbox ended before it said where it listens")
		}
		t.Logf("the sandbox said:\n%s", said)
	case <-time.After(30 * time.Second):
		t.Fatal("the sandbox did not say where it listens")
	}
}

// startSandboxAt runs a README line `dlqctl sandbox … --addr A &` until
// the test ends, and waits until the broker answers /health at A.
func startSandboxAt(t *testing.T, env []string, args []string) {
	t.Helper()
	addr := ""
	for i, a := range args {
		if a == "--addr" && i+1 < len(args) {
			addr = args[i+1]
		}
	}
	if addr == "" {
		t.Fatalf("README line dlqctl %s: a sandbox started in the background needs --addr, so the lines after it can name it", strings.Join(args, " "))
	}
	c := exec.Command(binary(t), args...)
	c.Env = env
	said := new(lockedBuffer)
	c.Stdout, c.Stderr = said, said
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Process.Signal(os.Interrupt)
		_ = c.Wait()
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		if resp, err := http.Get("http://" + addr + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox of README line dlqctl %s did not answer on %s: %s", strings.Join(args, " "), addr, said.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// addrOrFree is addr when nothing listens there, else a free port of
// 127.0.0.1.
func addrOrFree(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		ln.Close()
		return addr
	}
	free := freeAddr(t)
	t.Logf("%s is taken here: the README's lines use %s for it", addr, free)
	return free
}

// subcommand is a dlqctl line's words after the program and its leading
// connection flags: ["dlq", "import", …] of "dlqctl --server URL dlq import …".
func subcommand(args []string) []string {
	rest := args[1:]
	for len(rest) > 1 && (rest[0] == "--server" || rest[0] == "--context") {
		rest = rest[2:]
	}
	return rest
}

// lockedBuffer is what a background process has said, safe to read while
// it still writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// trailingComment is a "  # what it does" after a README line.
var trailingComment = regexp.MustCompile(`\s{2,}#\s.*$`)

// shellWords splits a command line as sh would for the quoting the README
// uses: single and double quotes, no expansions.
func shellWords(line string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		case r == '$' || r == '|' || r == '`' || r == ';' || r == '&' || r == '<' || r == '>':
			return nil, fmt.Errorf("shell syntax %q is not run by this test: keep README lines to plain commands", r)
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote")
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}
