//go:build linux

package ledger_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// A claim's owner on this host is alive while its process runs: not once
// it was killed, even before its parent reaped it (a zombie), and not
// when its pid names a process that started at another time.
func TestOwnerAliveIsTheRunningProcess(t *testing.T) {
	me := ledger.NewOwner("n")
	if !ledger.OwnerAlive(me) {
		t.Fatalf("this process (%s) is not alive", me)
	}
	parts := strings.Split(me, ":")
	if len(parts) != 4 {
		t.Fatalf("owner %q: want host:pid:nonce:start", me)
	}
	if ledger.OwnerAlive(strings.Join(append(parts[:3:3], parts[3]+"1"), ":")) {
		t.Fatal("this pid with another start time is alive")
	}
	c := exec.Command("sleep", "30")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	owner := fmt.Sprintf("%s:%d:n", host, c.Process.Pid)
	if !ledger.OwnerAlive(owner) {
		t.Fatal("a running child is not alive")
	}
	_ = c.Process.Signal(syscall.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for ledger.OwnerAlive(owner) {
		if time.Now().After(deadline) {
			t.Fatal("a killed child, not yet reaped, is alive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = c.Wait()
}
