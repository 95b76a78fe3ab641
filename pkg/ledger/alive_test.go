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
	if len(parts) != 5 {
		t.Fatalf("owner %q: want host:pid:nonce:start:where", me)
	}
	if ledger.OwnerAlive(strings.Join(append(parts[:3:3], parts[3]+"1", parts[4]), ":")) {
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

// An owner whose pid means something in another pid namespace, or since
// another boot, is not looked up here: a pid that no process of this
// namespace has is still presumed alive there (its lease decides).
func TestOwnerInAnotherNamespaceIsPresumedAlive(t *testing.T) {
	where := ledger.Where()
	if where == "" {
		t.Skip("no pid namespace to name here")
	}
	me := strings.Split(ledger.NewOwner("n"), ":")
	if len(me) != 5 || me[4] != where {
		t.Fatalf("owner %v: want host:pid:nonce:start:where", me)
	}
	// A pid above pid_max is no process of this namespace.
	dead := strings.Join([]string{me[0], "4194305", "n", "1", where}, ":")
	if ledger.OwnerAlive(dead) {
		t.Fatal("a pid no process has, in this namespace, is alive")
	}
	for _, other := range []string{"4026530000." + where[strings.IndexByte(where, '.')+1:], where[:strings.IndexByte(where, '.')] + ".000000000000"} {
		if !ledger.OwnerAlive(strings.Join([]string{me[0], "4194305", "n", "1", other}, ":")) {
			t.Errorf("an owner in %s (this is %s) is taken for dead", other, where)
		}
	}
}
