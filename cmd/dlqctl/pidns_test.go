//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Two runs of one batch on one ledger, each in a pid namespace of its
// own on one host (two containers, two CI jobs under one hostname): in
// each the other's pid names another process, or none. The second run
// must presume the first alive, leave its claims to it, and the first
// must finish; each message is live once, judged by the broker.
func TestRunsInAnotherPidNamespaceKeepTheirClaims(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 || exec.Command(unshare, "--pid", "--fork", "--mount-proc", "true").Run() != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI runs as root with unshare: %v", err)
		}
		t.Skip("needs root and unshare --pid")
	}
	w := newWorld(t, 120, 41, "")
	out, err := w.cmd("dlq", "decide", "--all", "--action", "replay", "--why", "two namespaces").Output()
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	id := strings.TrimSpace(string(out))
	inNamespace := func(args ...string) *exec.Cmd {
		c := w.cmd(args...)
		c.Args = append([]string{unshare, "--pid", "--fork", "--mount-proc", c.Path}, c.Args[1:]...)
		c.Path = unshare
		return c
	}
	// A: slow enough (120 at 30/s) to be at work when B starts.
	a := inNamespace("dlq", "replay", "--batch", id, "--yes", "--rate", "30", "--order", "none")
	var aOut bytes.Buffer
	a.Stdout, a.Stderr = &aOut, &aOut
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	b := inNamespace("dlq", "replay", "--batch", id, "--yes", "--rate", "0", "--order", "none")
	bOut, _ := b.CombinedOutput()
	errA := a.Wait()
	// Exit 1 is the two undecryptable envelopes left in place; a robbed
	// run stops with exit 3, "claim lost to another run".
	if code := exitCode(errA); code != 0 && code != 1 || strings.Contains(aOut.String(), "claim lost") {
		t.Fatalf("the first run was robbed of its claims (exit %d):\n%s\nthe second:\n%s", exitCode(errA), aOut.String(), bOut)
	}
	if !strings.Contains(string(bOut), "claimed by another run") {
		t.Errorf("the second run did not leave the first's claims to it:\n%s", bOut)
	}
	w.books(true)
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
