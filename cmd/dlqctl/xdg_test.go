package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The XDG base directory spec says a relative XDG_CONFIG_HOME or
// XDG_STATE_HOME is invalid and to be ignored: the config and the ledger
// stay under the home directory, never under wherever a command runs.
func TestRelativeXDGDirectoriesAreIgnored(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the real binary")
	}
	home, cwd := t.TempDir(), t.TempDir()
	c := exec.Command(binary(t), "config", "view")
	c.Dir = cwd
	c.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=conf", "XDG_STATE_HOME=state", "PATH=" + os.Getenv("PATH")}
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := []string{filepath.Join(home, ".config", "dlqctl", "config.yaml"), "sqlite://" + filepath.Join(home, ".local", "state", "dlqctl", "ledger.db")}
	for _, w := range want {
		if !strings.Contains(string(out), w) {
			t.Fatalf("want %s in:\n%s", w, out)
		}
	}
	if entries, _ := os.ReadDir(cwd); len(entries) != 0 {
		t.Fatalf("something was made in the working directory: %v", entries)
	}
}
