//go:build unix

package ledger

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// processAlive reports whether pid is a process that has not ended, and
// (started != "") the one that started then: a process that exited and
// that its parent has not reaped yet (a zombie, as a SIGKILLed run is
// until its shell or supervisor waits for it) has ended, and a pid taken
// since by another process is not the owner's.
func processAlive(pid int, started string) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	state, start, ok := procStat(pid)
	if !ok {
		return true // no /proc here: existing is all that can be told
	}
	return state != 'Z' && state != 'X' && (started == "" || started == start)
}

// Where names where this process's pid means what it says: its pid
// namespace (the inode /proc/self/ns/pid links to) and the boot (the
// kernel's boot id), as "pidns.boot"; "" where the system does not say.
// Two processes of one host in other pid namespaces (containers, CI jobs
// under unshare) or of two machines with one hostname have two; a pid of
// the one cannot be looked up from the other.
func Where() string {
	where.once.Do(func() {
		link, err := os.Readlink("/proc/self/ns/pid")
		boot, berr := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if err != nil || berr != nil {
			return
		}
		ns := strings.TrimSuffix(strings.TrimPrefix(link, "pid:["), "]")
		id := strings.ReplaceAll(strings.TrimSpace(string(boot)), "-", "")
		if ns == "" || len(id) < 12 {
			return
		}
		where.s = ns + "." + id[:12]
	})
	return where.s
}

var where struct {
	once sync.Once
	s    string
}

// processStart is this process's start time as /proc says it ("" where
// there is no /proc): with the pid, it names the process across pid reuse.
func processStart() string {
	_, start, _ := procStat(os.Getpid())
	return start
}

// procStat reads a process's state and start time (in clock ticks since
// boot) from /proc/PID/stat, whose second field, the command name, may
// hold spaces and parentheses: the fields are counted from the last ")".
func procStat(pid int) (state byte, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, "", false
	}
	fields := bytes.Fields(b[i+1:])
	// fields[0] is the state (field 3); the start time is field 22.
	if len(fields) < 20 || len(fields[0]) != 1 {
		return 0, "", false
	}
	return fields[0][0], string(fields[19]), true
}
