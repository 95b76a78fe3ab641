package main

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/rogpeppe/go-internal/testscript"
)

// TestREADMECommands runs the dlqctl lines of the README's Install, Quick
// start and workflow code blocks, in order, against the sandbox those
// sections start: the README's set-up stays true as written. `dlqctl
// sandbox` itself is the sandbox this test starts; `dlq check` may exit 1
// (that is the gate working); every other line must exit 0.
func TestREADMECommands(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	n := 0
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
				line = strings.TrimSpace(trailingComment.ReplaceAllString(line, ""))
				if !strings.HasPrefix(line, "dlqctl ") || line == "dlqctl sandbox" {
					continue
				}
				args, err := shellWords(line)
				if err != nil {
					t.Fatalf("README line %q: %v", line, err)
				}
				want := "0"
				if len(args) > 2 && args[1] == "dlq" && args[2] == "check" {
					want = "[01]"
				}
				quoted := make([]string, len(args))
				for k, a := range args {
					quoted[k] = "'" + strings.ReplaceAll(a, "'", "''") + "'"
				}
				fmt.Fprintf(&script, "# %s\nexitin %s %s\n", line, want, strings.Join(quoted, " "))
				if strings.Contains(line, "--where") {
					// Each example selects something, and reads no field
					// the rows lack.
					fmt.Fprintf(&script, "! stderr 'no row has'\n")
					if args[2] == "ls" {
						fmt.Fprintf(&script, "stdout .\n")
					} else {
						fmt.Fprintf(&script, "! stderr 'Nothing to'\n")
					}
				}
				n++
			}
		}
	}
	if n < 8 {
		t.Fatalf("only %d dlqctl lines found in the README", n)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "readme.txtar"), []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runScriptsIn(t, dir, "contract", func(env *testscript.Env) (string, error) {
		b := sandbox.New(nil)
		if err := b.Load(dlqctl.SandboxSeed); err != nil {
			return "", err
		}
		srv := httptest.NewServer(b.Handler())
		env.Defer(srv.Close)
		return srv.URL, nil
	}, sandbox.Queen15)
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
