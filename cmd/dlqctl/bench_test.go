package main

import (
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/pkg/sandbox"
)

// BenchmarkLsMemory runs the real binary's `dlq ls -o ndjson` over DLQs of
// 10,000 and 100,000 rows and reports its peak RSS (VmHWM, polled from
// /proc: the rusage of a child counts the parent's pages it was forked
// with): streaming keeps it flat in the DLQ's size.
func BenchmarkLsMemory(b *testing.B) {
	bin := binary(&testing.T{})
	for _, n := range []int{10_000, 100_000} {
		sb := sandbox.New(nil)
		sb.Fill(n, 4)
		srv := httptest.NewServer(sb.Handler())
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var peak int64
			for i := 0; i < b.N; i++ {
				c := exec.Command(bin, "dlq", "ls", "-o", "ndjson")
				c.Env = append(os.Environ(), "DLQCTL_SERVER="+srv.URL, "DLQCTL_LEDGER=sqlite://"+filepath.Join(b.TempDir(), "l.db"),
					"DLQCTL_CONFIG="+filepath.Join(b.TempDir(), "c.yaml"))
				if err := c.Start(); err != nil {
					b.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- c.Wait() }()
				status := fmt.Sprintf("/proc/%d/status", c.Process.Pid)
			poll:
				for {
					select {
					case err := <-done:
						if err != nil {
							b.Fatal(err)
						}
						break poll
					case <-time.After(5 * time.Millisecond):
						if kb := vmHWM(status); kb > peak {
							peak = kb
						}
					}
				}
			}
			b.ReportMetric(float64(peak)/1024, "maxrss-MB")
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
		srv.Close()
	}
}

// vmHWM reads a process's peak resident set in kB (0 if unreadable).
func vmHWM(path string) int64 {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
