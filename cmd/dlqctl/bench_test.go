package main

import (
	"fmt"
	"io"
	"net/http"
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

// BenchmarkLsMemory runs the real binary's `dlq ls -o ndjson` and
// reports its peak RSS (VmHWM, polled from /proc: the rusage of a child
// counts the parent's pages it was forked with), beside the time a bare
// read of the same answers takes (what curl does: bytes, no decoding).
// Paged (the seed contract) and one-body (the released server: the whole
// DLQ in one answer) brokers; streaming keeps memory flat in the DLQ's
// size either way.
func BenchmarkLsMemory(b *testing.B) {
	bin := binary(&testing.T{})
	for _, c := range []struct {
		n   int
		old bool
	}{{10_000, false}, {100_000, false}, {100_000, true}, {1_000_000, true}} {
		sb := sandbox.New(nil)
		sb.Fill(c.n, 4)
		sb.SetFaults(sandbox.Faults{OldServer: c.old})
		srv := httptest.NewServer(sb.Handler())
		mode := "paged"
		if c.old {
			mode = "one-body"
		}
		b.Run(fmt.Sprintf("%s/%d", mode, c.n), func(b *testing.B) {
			bare := func() {
				for off := 0; ; off += 500 {
					resp, err := http.Get(fmt.Sprintf("%s/api/v1/dlq?limit=500&offset=%d", srv.URL, off))
					if err != nil {
						b.Fatal(err)
					}
					n, _ := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if c.old || n < 1000 {
						return
					}
				}
			}
			bare() // warm the sandbox's page cache
			var peak int64
			var tBare, tLs time.Duration
			for i := 0; i < b.N; i++ {
				start := time.Now()
				bare()
				tBare += time.Since(start)
				start = time.Now()
				cmd := exec.Command(bin, "dlq", "ls", "-o", "ndjson")
				cmd.Env = append(os.Environ(), "DLQCTL_SERVER="+srv.URL, "DLQCTL_LEDGER=sqlite://"+filepath.Join(b.TempDir(), "l.db"),
					"DLQCTL_CONFIG="+filepath.Join(b.TempDir(), "c.yaml"))
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
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
				tLs += time.Since(start)
			}
			b.ReportMetric(float64(peak)/1024, "maxrss-MB")
			b.ReportMetric(float64(c.n*b.N)/tLs.Seconds(), "rows/s")
			b.ReportMetric(tLs.Seconds()/tBare.Seconds(), "ls/bare-read")
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

// runLs runs the real binary's dlq ls with args against a broker and
// returns how long it took and its peak RSS in kB (see BenchmarkLsMemory).
func runLs(b *testing.B, bin, server string, args ...string) (time.Duration, int64) {
	start := time.Now()
	cmd := exec.Command(bin, append([]string{"dlq", "ls"}, args...)...)
	cmd.Env = append(os.Environ(), "DLQCTL_SERVER="+server, "DLQCTL_LEDGER=sqlite://"+filepath.Join(b.TempDir(), "l.db"),
		"DLQCTL_CONFIG="+filepath.Join(b.TempDir(), "c.yaml"))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	var peak int64
	for {
		select {
		case err := <-done:
			if err != nil {
				b.Fatal(err)
			}
			return time.Since(start), peak
		case <-time.After(5 * time.Millisecond):
			if kb := vmHWM(status); kb > peak {
				peak = kb
			}
		}
	}
}

// BenchmarkLsWhere puts `ls -o ndjson --where` with a selective
// predicate over the payload beside plain `ls -o ndjson`, interleaved in
// one run, on 200k paged rows: rows/s and peak RSS of each, and their
// ratios (goals: throughput at least half, memory within 10%).
func BenchmarkLsWhere(b *testing.B) {
	bin := binary(&testing.T{})
	const n = 200_000
	sb := sandbox.New(nil)
	sb.Fill(n, 4)
	srv := httptest.NewServer(sb.Handler())
	defer srv.Close()
	runLs(b, bin, srv.URL, "-o", "ndjson") // warm the sandbox's page cache
	var tPlain, tWhere time.Duration
	var mPlain, mWhere int64
	for i := 0; i < b.N; i++ {
		d, m := runLs(b, bin, srv.URL, "-o", "ndjson")
		tPlain, mPlain = tPlain+d, max(mPlain, m)
		d, m = runLs(b, bin, srv.URL, "-o", "ndjson", "--where", `.data.orderId == 10042 or .data.customer == "7"`)
		tWhere, mWhere = tWhere+d, max(mWhere, m)
	}
	b.ReportMetric(float64(n*b.N)/tPlain.Seconds(), "plain-rows/s")
	b.ReportMetric(float64(n*b.N)/tWhere.Seconds(), "where-rows/s")
	b.ReportMetric(tPlain.Seconds()/tWhere.Seconds(), "where/plain-throughput")
	b.ReportMetric(float64(mPlain)/1024, "plain-maxrss-MB")
	b.ReportMetric(float64(mWhere)/1024, "where-maxrss-MB")
	b.ReportMetric(float64(mWhere)/float64(mPlain), "where/plain-memory")
}
