package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// BenchmarkLsMemory runs the real binary's `dlq ls -o ndjson` and
// reports its peak RSS (VmHWM, polled from /proc: the rusage of a child
// counts the parent's pages it was forked with), beside the time a bare
// read of the same answers takes (what curl does: bytes, no decoding).
// Paged (the seed contract) and one-body (the released server: the whole
// DLQ in one answer) brokers; streaming keeps memory flat in the DLQ's
// size either way. Last, `ls --group-by error` over 1M paged rows, which
// holds 8 bytes a message to count messages per class.
func BenchmarkLsMemory(b *testing.B) {
	bin := binary(b)
	for _, c := range []struct {
		n     int
		old   bool
		group bool // ls --group-by error instead of -o ndjson (goal: under 48 MB at 1M)
	}{{10_000, false, false}, {100_000, false, false}, {100_000, true, false}, {1_000_000, true, false}, {1_000_000, false, true}} {
		sb := sandbox.New(nil)
		sb.Fill(c.n, 4)
		if c.old {
			sb.SetLine(sandbox.Queen015)
		}
		srv := httptest.NewServer(sb.Handler())
		mode, args := "paged", []string{"-o", "ndjson"}
		if c.old {
			mode = "one-body"
		}
		if c.group {
			mode, args = "paged-group-by-error", []string{"--group-by", "error"}
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
				d, kb := runLs(b, bin, srv.URL, args...)
				peak = max(peak, kb)
				tLs += d
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

// runLs runs the real binary's dlq ls with args against a broker, with
// a fresh ledger, and returns how long it took and its peak RSS in kB.
func runLs(b *testing.B, bin, server string, args ...string) (time.Duration, int64) {
	return runDlq(b, bin, server, "sqlite://"+filepath.Join(b.TempDir(), "l.db"), append([]string{"dlq", "ls"}, args...)...)
}

// BenchmarkLsWhere puts `ls -o ndjson --where` with a selective
// predicate over the payload beside plain `ls -o ndjson`, interleaved in
// one run, on 200k paged rows: rows/s and peak RSS of each, and their
// ratios (goals: throughput at least half, memory within 10%).
func BenchmarkLsWhere(b *testing.B) {
	bin := binary(b)
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

// runDlq runs the real binary with a ledger and returns its time and
// peak RSS in kB (VmHWM polled from /proc: the rusage of a child counts
// the parent's pages it was forked with). Exit 1 (a breach) is an answer.
func runDlq(b *testing.B, bin, server, ledgerDSN string, args ...string) (time.Duration, int64) {
	start := time.Now()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DLQCTL_SERVER="+server, "DLQCTL_LEDGER="+ledgerDSN, "DLQCTL_CONFIG="+filepath.Join(b.TempDir(), "c.yaml"))
	cmd.Stdout = io.Discard
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
			if ee, ok := err.(*exec.ExitError); err != nil && !(ok && ee.ExitCode() == 1) {
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

// decide records n decided items under broker, in batches of 10,000:
// addresses the DLQ no longer has (a year of history: each also has its
// journal entry and its archived row), plus a hold on the first 500 rows
// the DLQ does have.
func decide(b *testing.B, dsn, broker string, n int, live []deadletter.Address) {
	ctx := context.Background()
	ld, err := ledger.Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer ld.Close()
	at := time.Now().Add(-365 * 24 * time.Hour)
	for done := 0; done < n; done += 10_000 {
		items := make([]ledger.ManifestItem, 0, 10_000)
		for i := done; i < min(done+10_000, n); i++ {
			items = append(items, ledger.ManifestItem{Address: deadletter.Address{PartitionID: fmt.Sprintf("p-%d", i%97), TransactionID: fmt.Sprintf("old-%d", i)},
				Queue: "orders", Partition: "1", FailedAt: at})
		}
		bt := &ledger.Batch{Broker: broker, Action: ledger.ActionReplay, By: "history", At: at.Add(time.Duration(done) * time.Second), Why: "a year ago", Status: ledger.StatusDone}
		if err := ld.CreateBatch(ctx, bt, items); err != nil {
			b.Fatal(err)
		}
	}
	if n > 0 {
		// What the year's runs left: a journal entry for every address
		// (replayed), and its row in the archive, gone since.
		q := strings.ReplaceAll(broker, "'", "''")
		for _, stmt := range []string{
			`INSERT INTO journal (broker, partition_id, transaction_id, state, batch_id, action, generation, outcome, updated_at)
			SELECT broker, partition_id, transaction_id, 'removed', batch_id, 'replay', 1, 'replayed', failed_at FROM batch_items WHERE broker = '` + q + `'`,
			`INSERT INTO archive (broker, partition_id, transaction_id, consumer_group, failed_at, queue, partition_name, error, retry_count, first_seen, last_seen, gone_at)
			SELECT broker, partition_id, transaction_id, 'billing', failed_at, queue, partition_name, error, retry_count, failed_at, failed_at, failed_at FROM batch_items WHERE broker = '` + q + `'`,
		} {
			if _, err := ld.DB().ExecContext(ctx, stmt); err != nil {
				b.Fatal(err)
			}
		}
		var items []ledger.ManifestItem
		for _, a := range live[:min(500, len(live))] {
			items = append(items, ledger.ManifestItem{Address: a, Queue: "orders", FailedAt: time.Now()})
		}
		hold := &ledger.Batch{Broker: broker, Action: ledger.ActionHold, By: "oncall", At: time.Now(), Why: "INC", Until: time.Now().Add(time.Hour)}
		if err := ld.CreateBatch(ctx, hold, items); err != nil {
			b.Fatal(err)
		}
	}
	if strings.HasPrefix(dsn, "postgres") && os.Getenv("DLQCTL_BENCH_ANALYZE") != "" {
		// A year-old ledger has been analyzed by autovacuum; one filled a
		// moment ago may not have been.
		if _, err := ld.DB().ExecContext(ctx, "ANALYZE"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLedgerHistory runs ls --limit 100, ls -o ndjson and check
// (the real binary, 20k dead letters, a broker that pages) against a
// ledger with 0, 100k and 1M decided items, on SQLite and PostgreSQL:
// the time and peak RSS of each beside the empty ledger's (goal: at most
// 1.5x the time and 12 MB more at 1M).
func BenchmarkLedgerHistory(b *testing.B) {
	bin := binary(b)
	sb := sandbox.New(nil)
	sb.Fill(20_000, 3)
	srv := httptest.NewServer(sb.Handler())
	defer srv.Close()
	broker, _ := deadletter.Identity(srv.URL)
	var live []deadletter.Address
	seen := map[deadletter.Address]bool{}
	for _, r := range sb.DeadLetterRows() {
		if a := (deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}); !seen[a] {
			seen[a] = true
			live = append(live, a)
		}
	}
	engines := []struct {
		name string
		dsn  func(n int) string
	}{{"sqlite", func(n int) string { return "sqlite://" + filepath.Join(b.TempDir(), fmt.Sprintf("l%d.db", n)) }}}
	if os.Getenv(testkit.PostgresEnv) != "" {
		engines = append(engines, struct {
			name string
			dsn  func(n int) string
		}{"postgres", func(int) string { return testkit.PostgresDSN(b) }})
	}
	commands := [][]string{{"dlq", "ls", "--limit", "100"}, {"dlq", "ls", "-o", "ndjson"}, {"dlq", "check"}, {"dlq", "stats"}}
	for _, e := range engines {
		base := map[string][2]float64{}
		for _, n := range []int{0, 100_000, 1_000_000} {
			dsn := e.dsn(n)
			decide(b, dsn, broker, n, live)
			for _, c := range commands {
				name := strings.Join(c[1:], " ")
				b.Run(fmt.Sprintf("%s/items=%d/%s", e.name, n, name), func(b *testing.B) {
					runDlq(b, bin, srv.URL, dsn, c...) // warm: migrations, the sandbox's pages
					var t time.Duration
					var peak int64
					for i := 0; i < b.N; i++ {
						d, m := runDlq(b, bin, srv.URL, dsn, c...)
						t, peak = t+d, max(peak, m)
					}
					secs, mb := t.Seconds()/float64(b.N), float64(peak)/1024
					b.ReportMetric(secs, "s/cmd")
					b.ReportMetric(mb, "maxrss-MB")
					if n == 0 {
						base[name] = [2]float64{secs, mb}
					} else if x := base[name]; x[0] > 0 {
						b.ReportMetric(secs/x[0], "time/empty-ledger")
						b.ReportMetric(mb-x[1], "MB-over-empty-ledger")
					}
				})
			}
		}
	}
}

// BenchmarkTriageMemory opens the real binary's triage screen on a
// terminal (a pty) over 100k, 200k and 1M paged dead letters, waits for
// every row to load, quits, and reports the peak RSS (goals: under 100 MB
// at 200k, under 300 MB at 1M) and how soon the first classes were drawn
// (goal: under 100 ms). DLQCTL_BENCH_TRIAGE_SERVER=URL measures against
// that broker instead (a real server, by hand).
func BenchmarkTriageMemory(b *testing.B) {
	bin := binary(b)
	if url := os.Getenv("DLQCTL_BENCH_TRIAGE_SERVER"); url != "" {
		b.Run("server", func(b *testing.B) {
			var peak int64
			var first, load time.Duration
			for i := 0; i < b.N; i++ {
				f, l, kb := runTriage(b, bin, url, 0)
				peak, first, load = max(peak, kb), first+f, load+l
			}
			b.ReportMetric(float64(peak)/1024, "maxrss-MB")
			b.ReportMetric(float64(first.Milliseconds())/float64(b.N), "ms-to-first-classes")
			b.ReportMetric(load.Seconds()/float64(b.N), "s-to-loaded")
		})
		return
	}
	for _, n := range []int{100_000, 200_000, 1_000_000} {
		sb := sandbox.New(nil)
		sb.Fill(n, 4)
		srv := httptest.NewServer(sb.Handler())
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			var peak int64
			var first, load time.Duration
			for i := 0; i < b.N; i++ {
				f, l, kb := runTriage(b, bin, srv.URL, n)
				peak, first, load = max(peak, kb), first+f, load+l
			}
			b.ReportMetric(float64(peak)/1024, "maxrss-MB")
			b.ReportMetric(float64(first.Milliseconds())/float64(b.N), "ms-to-first-classes")
			b.ReportMetric(float64(n*b.N)/load.Seconds(), "rows/s")
		})
		srv.Close()
	}
}

// runTriage runs `dlqctl triage` on a pty until the load has ended (the
// title counts the rows as they come, so the screen is still once they
// are all in: the renderer writes only what changed, so the title's text
// cannot be waited for), then presses q. It returns when the first
// classes were drawn, when the load ended, and the peak RSS in kB.
func runTriage(b *testing.B, bin, server string, n int) (first, loaded time.Duration, peak int64) {
	cmd := exec.Command(bin, "triage")
	cmd.Env = append(os.Environ(), "DLQCTL_SERVER="+server, "DLQCTL_LEDGER=sqlite://"+filepath.Join(b.TempDir(), "l.db"),
		"DLQCTL_CONFIG="+filepath.Join(b.TempDir(), "c.yaml"), "TERM=xterm-256color")
	start := time.Now()
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 140})
	if err != nil {
		b.Fatal(err)
	}
	defer tty.Close()
	classes := regexp.MustCompile(`[1-9][0-9,]* class`)
	var mu sync.Mutex
	var last time.Time // the screen's last change
	firstAt := make(chan time.Duration, 1)
	go func() {
		var screen []byte // what was drawn until the first classes
		found := false
		buf := make([]byte, 64<<10)
		for {
			k, err := tty.Read(buf)
			if err != nil {
				return
			}
			mu.Lock()
			last = time.Now()
			mu.Unlock()
			if !found {
				if screen = append(screen, buf[:k]...); classes.Match(screen) {
					found, screen = true, nil
					firstAt <- time.Since(start)
				}
			}
		}
	}()
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	deadline := time.After(5 * time.Minute)
	for loaded == 0 {
		select {
		case f := <-firstAt:
			first = f
		case <-deadline:
			cmd.Process.Kill()
			b.Fatalf("triage was still drawing after 5 minutes (%d rows)", n)
		case <-time.After(5 * time.Millisecond):
			peak = max(peak, vmHWM(status))
			mu.Lock()
			idle := !last.IsZero() && time.Since(last) > 1500*time.Millisecond
			at := last
			mu.Unlock()
			if idle && first > 0 {
				loaded = at.Sub(start)
			}
		}
	}
	peak = max(peak, vmHWM(status))
	tty.Write([]byte("q"))
	if err := cmd.Wait(); err != nil {
		b.Fatal(err)
	}
	return first, loaded, peak
}

// BenchmarkBatchMemory runs the real binary's replay over n paged dead
// letters (200k rows, four consumer groups: about 185k messages;
// DLQCTL_BENCH_BATCH_ROWS sets n), once as a dry run and once for real
// at --rate 0, for each kind of selection: --all, a failure class, an
// --error with a time filter, 10k explicit addresses from a file, and the
// resume of a batch dlq decide recorded (its decide measured too). It
// reports the peak RSS of each (goal: every selection within 10% of
// --all's, and under 128 MB at 1M rows) and the bytes it held a row. A
// fresh broker and ledger each time: a replay empties its DLQ.
// DLQCTL_BENCH_BATCH_CASES keeps the cases whose names contain one of
// its comma-separated words.
func BenchmarkBatchMemory(b *testing.B) {
	bin := binary(b)
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("DLQCTL_BENCH_BATCH_ROWS")); err == nil && v > 0 {
		n = v
	}
	class := deadletter.ClassID("timeout calling inventory-service after 5000ms")
	type kase struct {
		name string
		args func(b *testing.B, dir, url, dsn string) []string // the selection
	}
	cases := []kase{
		{"all", func(*testing.B, string, string, string) []string { return []string{"--all"} }},
		{"class", func(*testing.B, string, string, string) []string { return []string{"--class", class} }},
		{"error-since", func(*testing.B, string, string, string) []string {
			return []string{"--error", "timeout|declined|refused", "--failed-after", "4d"}
		}},
		{"addresses", func(b *testing.B, dir, url, _ string) []string {
			return []string{"--from-file", addressFile(b, dir, url, 10_000)}
		}},
		{"resume", func(b *testing.B, _, url, dsn string) []string {
			id := decideAll(b, bin, url, dsn)
			return []string{"--batch", id}
		}},
	}
	keep := func(name string) bool {
		words := os.Getenv("DLQCTL_BENCH_BATCH_CASES")
		if words == "" {
			return true
		}
		for _, w := range strings.Split(words, ",") {
			if strings.Contains(name, w) {
				return true
			}
		}
		return false
	}
	for _, c := range cases {
		for _, mode := range []string{"dry-run", "replay"} {
			name := fmt.Sprintf("%s/%s/rows=%d", c.name, mode, n)
			if !keep(name) {
				continue
			}
			b.Run(name, func(b *testing.B) {
				var peak int64
				var t time.Duration
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					sb := sandbox.New(nil)
					sb.Fill(n, 4)
					srv := httptest.NewServer(sb.Handler())
					dir := b.TempDir()
					dsn := "sqlite://" + filepath.Join(dir, "l.db")
					args := append([]string{"dlq", "replay"}, c.args(b, dir, srv.URL, dsn)...)
					if mode == "dry-run" {
						args = append(args, "--dry-run")
					} else {
						args = append(args, "--why", "bench", "--yes", "--rate", "0")
					}
					depth := sb.Depth()
					b.StartTimer()
					d, kb := runDlq(b, bin, srv.URL, dsn, args...)
					b.StopTimer()
					if mode == "replay" && sb.Depth() == depth {
						b.Fatalf("%s: nothing was replayed", name)
					}
					srv.Close()
					peak, t = max(peak, kb), t+d
					b.StartTimer()
				}
				b.ReportMetric(float64(peak)/1024, "maxrss-MB")
				b.ReportMetric(float64(peak)*1024/float64(n), "peak-bytes/row")
				b.ReportMetric(float64(n*b.N)/t.Seconds(), "rows/s")
			})
		}
	}
}

// addressFile writes k addresses of the DLQ at url, spread over it, one a
// line, to a file in dir and returns its path.
func addressFile(b *testing.B, dir, url string, k int) string {
	cl := testkit.Client(b, url)
	var all []string
	seen := map[deadletter.Address]bool{}
	for r, err := range cl.Rows(context.Background(), client.ListQuery{Limit: 1000, NoData: true}) {
		if err != nil {
			b.Fatal(err)
		}
		if a := r.Address(); !seen[a] {
			seen[a] = true
			all = append(all, a.String())
		}
	}
	if len(all) < k {
		b.Fatalf("the DLQ has %d addresses, fewer than %d", len(all), k)
	}
	var lines []string
	for i := 0; i < k; i++ {
		lines = append(lines, all[i*len(all)/k])
	}
	path := filepath.Join(dir, "addresses.txt")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// decideAll records a replay of the whole DLQ with dlq decide (its peak
// RSS reported as decide-maxrss-MB) and returns the batch's id.
func decideAll(b *testing.B, bin, url, dsn string) string {
	_, kb := runDlq(b, bin, url, dsn, "dlq", "decide", "--all", "--action", "replay", "--why", "bench")
	b.ReportMetric(float64(kb)/1024, "decide-maxrss-MB")
	ld, err := ledger.Open(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer ld.Close()
	bs, err := ld.Batches(context.Background(), ledger.BatchFilter{Limit: 1})
	if err != nil || len(bs) != 1 {
		b.Fatalf("the decided batch: %v %v", bs, err)
	}
	return bs[0].ID
}

// BenchmarkDecisionsPerRow: 30,000 dead letters, each under a hold
// renewed 8 times (240k batch items: a team renewing a hold daily for a
// week), against the same DLQ with an empty ledger: check, ls -o ndjson
// and ls --limit 100 through the real binary, on SQLite (and PostgreSQL
// with DLQCTL_TEST_POSTGRES). Goal: within 1.5× the time and +12 MB.
func BenchmarkDecisionsPerRow(b *testing.B) {
	bin := binary(b)
	sb := sandbox.New(nil)
	sb.Fill(30_000, 5)
	srv := httptest.NewServer(sb.Handler())
	defer srv.Close()
	broker, _ := deadletter.Identity(srv.URL)
	var items []ledger.ManifestItem
	seen := map[deadletter.Address]bool{}
	for _, r := range sb.DeadLetterRows() {
		a := deadletter.Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}
		if !seen[a] {
			seen[a] = true
			items = append(items, ledger.ManifestItem{Address: a, Queue: r.Queue, Partition: r.Partition, FailedAt: r.FailedAt})
		}
	}
	renew := func(dsn string) {
		ctx := context.Background()
		ld, err := ledger.Open(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		defer ld.Close()
		at := time.Now().Add(-8 * 24 * time.Hour)
		for day := 0; day < 8; day++ {
			t := at.Add(time.Duration(day) * 24 * time.Hour)
			if err := ld.CreateBatch(ctx, &ledger.Batch{Broker: broker, Action: ledger.ActionHold, By: "oncall", At: t, Why: "waiting on the fix, renewed", Until: t.Add(36 * time.Hour)}, items); err != nil {
				b.Fatal(err)
			}
		}
	}
	engines := []struct {
		name string
		dsn  func(n int) string
	}{{"sqlite", func(n int) string { return "sqlite://" + filepath.Join(b.TempDir(), fmt.Sprintf("d%d.db", n)) }}}
	if os.Getenv(testkit.PostgresEnv) != "" {
		engines = append(engines, struct {
			name string
			dsn  func(n int) string
		}{"postgres", func(int) string { return testkit.PostgresDSN(b) }})
	}
	commands := [][]string{{"dlq", "check"}, {"dlq", "ls", "-o", "ndjson"}, {"dlq", "ls", "--limit", "100"}}
	for _, e := range engines {
		empty, renewed := e.dsn(0), e.dsn(8)
		renew(renewed)
		for _, c := range commands {
			name := strings.Join(c[1:], " ")
			b.Run(e.name+"/"+name, func(b *testing.B) {
				runDlq(b, bin, srv.URL, empty, c...) // warm: migrations, the sandbox's pages
				runDlq(b, bin, srv.URL, renewed, c...)
				var te, tr time.Duration
				var me, mr int64
				for i := 0; i < b.N; i++ { // side by side, in turns
					d, m := runDlq(b, bin, srv.URL, empty, c...)
					te, me = te+d, max(me, m)
					d, m = runDlq(b, bin, srv.URL, renewed, c...)
					tr, mr = tr+d, max(mr, m)
				}
				b.ReportMetric(tr.Seconds()/float64(b.N), "s/cmd")
				b.ReportMetric(float64(tr)/float64(te), "time/empty-ledger")
				b.ReportMetric(float64(mr-me)/1024, "MB-over-empty-ledger")
			})
		}
	}
}

// BenchmarkVerifyMemory replays n dead letters (one consumer group, so
// n copies) with the real binary, then runs `decisions verify BATCH -o
// json` over them, every copy still pending so every one is listed, and
// reports verify's peak RSS and the bytes it held a copy (goal: under
// 64 MB at 1M copies; DLQCTL_BENCH_VERIFY_COPIES sets n, 100k by default).
func BenchmarkVerifyMemory(b *testing.B) {
	bin := binary(b)
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("DLQCTL_BENCH_VERIFY_COPIES")); err == nil && v > 0 {
		n = v
	}
	sb := sandbox.New(nil)
	sb.Fill(n, 1)
	srv := httptest.NewServer(sb.Handler())
	defer srv.Close()
	dsn := "sqlite://" + filepath.Join(b.TempDir(), "l.db")
	runDlq(b, bin, srv.URL, dsn, "dlq", "replay", "--all", "--why", "bench", "--yes", "--rate", "0", "--order", "none")
	ld, err := ledger.Open(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	bs, err := ld.Batches(context.Background(), ledger.BatchFilter{Action: ledger.ActionReplay, Limit: 1})
	ld.Close()
	if err != nil || len(bs) != 1 {
		b.Fatalf("the replay's batch: %v %v", bs, err)
	}
	copies := len(sb.LiveMessages())
	if copies < n*8/10 {
		b.Fatalf("%d copies live after replaying %d rows", copies, n)
	}
	b.Run(fmt.Sprintf("copies=%d", n), func(b *testing.B) {
		var peak int64
		var t time.Duration
		for i := 0; i < b.N; i++ {
			d, kb := runDlq(b, bin, srv.URL, dsn, "decisions", "verify", bs[0].ID, "-o", "json", "--concurrency", "16")
			peak, t = max(peak, kb), t+d
		}
		b.ReportMetric(float64(peak)/1024, "maxrss-MB")
		b.ReportMetric(float64(peak)*1024/float64(copies), "peak-bytes/copy")
		b.ReportMetric(float64(copies*b.N)/t.Seconds(), "copies/s")
	})
}

// BenchmarkReplayEndToEnd: `dlq replay --all --rate 0 --order none` of
// 8,000 dead letters (one consumer group) by the real binary, the
// sandbox in its own process, beside a bare loop that pushes and deletes
// the same messages 16 at a time (what the replay's calls cost, with
// nothing recorded), and the replay with --no-trace (a 1.5 broker takes
// a lineage trace a copy, calls the bare loop does not make), taking
// turns on a fresh broker each.
// It reports the medians' ratio (goal: within 1.25x) and each phase's
// share of the replay, from its -o json phases (goal: recording within
// 15% of the run). DLQCTL_BENCH_REPLAY_ROWS sets the size.
func BenchmarkReplayEndToEnd(b *testing.B) {
	bin := binary(b)
	n := 8_000
	if v, err := strconv.Atoi(os.Getenv("DLQCTL_BENCH_REPLAY_ROWS")); err == nil && v > 0 {
		n = v
	}
	seed := sandbox.Seed{Queues: []sandbox.SeedQueue{{Name: "orders", RetryLimit: 3, ConsumerGroups: []string{"billing"}}}}
	for i := 0; i < n; i++ {
		seed.DeadLetters = append(seed.DeadLetters, sandbox.SeedDeadLetter{Queue: "orders", Partition: strconv.Itoa(i % 16), TransactionID: fmt.Sprintf("order:%d", i),
			ConsumerGroup: "billing", Error: "boom", RetryCount: 3, Age: fmt.Sprintf("%ds", n-i), Data: json.RawMessage(fmt.Sprintf(`{"orderId":%d}`, i))})
	}
	seedFile := filepath.Join(b.TempDir(), "seed.json")
	raw, _ := json.Marshal(seed)
	if err := os.WriteFile(seedFile, raw, 0o600); err != nil {
		b.Fatal(err)
	}
	broker := func() (url string, stop func()) {
		addr := freeAddr(b)
		cmd := exec.Command(bin, "sandbox", "--addr", addr, "--seed", seedFile)
		cmd.Env = append(os.Environ(), "DLQCTL_CONFIG="+filepath.Join(b.TempDir(), "c.yaml"))
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		url = "http://" + addr
		waitHealthy(b, url)
		return url, func() { cmd.Process.Kill(); cmd.Wait() }
	}
	bare := func(url string) time.Duration {
		c := testkit.Client(b, url)
		sel := &deadletter.Selection{All: true}
		sel.Compile()
		items, err := testkit.Snapshot(context.Background(), c, sel, 500)
		if err != nil || len(items) != n {
			b.Fatalf("%d items, %v", len(items), err)
		}
		start := time.Now()
		testkit.Concurrently(16, items, func(it replay.Item) {
			if _, err := c.Push(context.Background(), []client.PushItem{{Queue: it.Queue, Partition: it.Partition, Payload: it.Newest().Data, TransactionID: client.CopyID(it.Rows[0].ID)}}); err != nil {
				b.Error(err)
			}
			if err := c.Delete(context.Background(), it.Address); err != nil {
				b.Error(err)
			}
		})
		return time.Since(start)
	}
	replayOnce := func(extra ...string) (float64, replay.Phases) {
		url, stop := broker()
		defer stop()
		start := time.Now()
		cmd := exec.Command(bin, append([]string{"dlq", "replay", "--all", "--why", "bench", "--yes", "--rate", "0", "--order", "none", "--concurrency", "16", "-o", "json"}, extra...)...)
		cmd.Env = append(os.Environ(), "DLQCTL_SERVER="+url, "DLQCTL_LEDGER=sqlite://"+filepath.Join(b.TempDir(), "l.db"), "DLQCTL_CONFIG="+filepath.Join(b.TempDir(), "c.yaml"))
		out, err := cmd.Output()
		took := time.Since(start).Seconds()
		var rep replay.Report
		if err != nil || json.Unmarshal(out, &rep) != nil || rep.Replayed != n || rep.Phases == nil {
			b.Fatalf("replay: %v %+v", err, rep.Outcome())
		}
		return took, *rep.Phases
	}
	var tBare, tReplay, tNoTrace []float64
	var phases []replay.Phases
	for i := 0; i < b.N; i++ {
		url, stop := broker()
		tBare = append(tBare, bare(url).Seconds())
		stop()
		t, ph := replayOnce()
		tReplay, phases = append(tReplay, t), append(phases, ph)
		t, _ = replayOnce("--no-trace") // the lineage traces are calls the bare loop does not make
		tNoTrace = append(tNoTrace, t)
	}
	mid := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	pick := func(f func(p replay.Phases) float64) float64 {
		var xs []float64
		for _, p := range phases {
			xs = append(xs, f(p))
		}
		return mid(xs)
	}
	run := pick(func(p replay.Phases) float64 { return p.Run })
	b.ReportMetric(mid(tReplay), "replay-s")
	b.ReportMetric(mid(tBare), "bare-s")
	b.ReportMetric(mid(tReplay)/mid(tBare), "replay/bare")
	b.ReportMetric(mid(tNoTrace)/mid(tBare), "no-trace/bare")
	b.ReportMetric(run/mid(tBare), "run/bare")
	b.ReportMetric(pick(func(p replay.Phases) float64 { return p.Plan }), "plan-s")
	b.ReportMetric(pick(func(p replay.Phases) float64 { return p.Record + p.Start }), "record+start-s")
	b.ReportMetric(pick(func(p replay.Phases) float64 { return (p.Record + p.Start) / p.Run }), "record/run")
	b.ReportMetric(pick(func(p replay.Phases) float64 { return p.Settle }), "settle-s")
}

// BenchmarkWholeCommandPace is the whole command a user waits for, plan
// and recording included: `dlq replay --all --rate 0 --order none` by the
// real binary, against a sandbox in its own process that costs what a
// real broker does (a push 6 ms, a delete 1 ms), beside a bare loop that
// pushes and deletes the same messages as many at a time, taking turns on
// a fresh broker each; at 3,000 and 30,000 messages, --concurrency 4 and
// 16. It reports the medians' ratio (goal: 1.15x at most) and the writes
// in flight over the replay's run (the broker's busy time over the run's
// time; goal: 0.8x the concurrency at least). DLQCTL_BENCH_PACE_ROWS
// narrows the sizes (one of them).
func BenchmarkWholeCommandPace(b *testing.B) {
	bin := binary(b)
	sizes := []int{3_000, 30_000}
	if v, err := strconv.Atoi(os.Getenv("DLQCTL_BENCH_PACE_ROWS")); err == nil && v > 0 {
		sizes = []int{v}
	}
	const push, del = 6 * time.Millisecond, time.Millisecond
	for _, n := range sizes {
		seedFile := writeSeed(b, paceSeed(n))
		broker := func() (url string, stop func()) { return startPaced(b, bin, seedFile, push, del) }
		for _, conc := range []int{4, 16} {
			b.Run(fmt.Sprintf("messages=%d/concurrency=%d", n, conc), func(b *testing.B) {
				bare := func() float64 {
					url, stop := broker()
					defer stop()
					c := testkit.Client(b, url)
					sel := &deadletter.Selection{All: true}
					sel.Compile()
					items, err := testkit.Snapshot(context.Background(), c, sel, 1000)
					if err != nil || len(items) != n {
						b.Fatalf("%d items, %v", len(items), err)
					}
					start := time.Now()
					testkit.Concurrently(conc, items, func(it replay.Item) {
						if _, err := c.Push(context.Background(), []client.PushItem{{Queue: it.Queue, Partition: it.Partition, Payload: it.Newest().Data, TransactionID: client.CopyID(it.Rows[0].ID)}}); err != nil {
							b.Error(err)
						}
						if err := c.Delete(context.Background(), it.Address); err != nil {
							b.Error(err)
						}
					})
					return time.Since(start).Seconds()
				}
				var phases []replay.Phases
				whole := func() (float64, float64) {
					url, stop := broker()
					defer stop()
					start := time.Now()
					cmd := exec.Command(bin, "dlq", "replay", "--all", "--why", "bench", "--yes", "--rate", "0", "--order", "none", "--no-trace",
						"--concurrency", strconv.Itoa(conc), "-o", "json")
					cmd.Env = append(os.Environ(), "DLQCTL_SERVER="+url, "DLQCTL_LEDGER=sqlite://"+filepath.Join(b.TempDir(), "l.db"), "DLQCTL_CONFIG="+filepath.Join(b.TempDir(), "c.yaml"))
					out, err := cmd.Output()
					took := time.Since(start).Seconds()
					var rep replay.Report
					if err != nil || json.Unmarshal(out, &rep) != nil || rep.Replayed != n || rep.Phases == nil {
						b.Fatalf("replay: %v %+v", err, rep.Outcome())
					}
					busy := float64(n) * (push + del).Seconds()
					phases = append(phases, *rep.Phases)
					return took, busy / rep.Phases.Run
				}
				var tBare, tWhole, inFlight []float64
				for i := 0; i < b.N; i++ {
					tBare = append(tBare, bare())
					t, f := whole()
					tWhole, inFlight = append(tWhole, t), append(inFlight, f)
				}
				mid := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
				b.ReportMetric(mid(tWhole), "command-s")
				b.ReportMetric(mid(tBare), "bare-s")
				b.ReportMetric(mid(tWhole)/mid(tBare), "command/bare")
				b.ReportMetric(mid(inFlight), "writes-in-flight")
				pick := func(f func(p replay.Phases) float64) float64 {
					var xs []float64
					for _, p := range phases {
						xs = append(xs, f(p))
					}
					return mid(xs)
				}
				b.ReportMetric(pick(func(p replay.Phases) float64 { return p.Plan }), "plan-s")
				b.ReportMetric(pick(func(p replay.Phases) float64 { return p.Record + p.Start }), "record-s")
				b.ReportMetric(pick(func(p replay.Phases) float64 { return p.Run }), "run-s")
				b.ReportMetric(pick(func(p replay.Phases) float64 { return p.Settle }), "settle-s")
			})
		}
	}
}

// BenchmarkReplayIntoPace: `dlq replay --all --to-server DST --rate 0`
// (the whole command: the read, the staged file, the import batch there,
// the discard batch here) beside a bare loop that pushes each message into
// the destination and deletes it from the source, as many at a time, on
// two sandboxes in their own processes that cost what a real broker does
// (push 6 ms, delete 1 ms). DLQCTL_BENCH_PACE_ROWS sets the messages
// (default 3,000).
func BenchmarkReplayIntoPace(b *testing.B) {
	bin := binary(b)
	n := 3_000
	if v, err := strconv.Atoi(os.Getenv("DLQCTL_BENCH_PACE_ROWS")); err == nil && v > 0 {
		n = v
	}
	const push, del = 6 * time.Millisecond, time.Millisecond
	full, none := writeSeed(b, paceSeed(n)), writeSeed(b, paceSeed(0))
	broker := func(seedFile string) (url string, stop func()) {
		return startPaced(b, bin, seedFile, push, del, "--server-version", "2.2")
	}
	for _, conc := range []int{4, 16} {
		b.Run(fmt.Sprintf("messages=%d/concurrency=%d", n, conc), func(b *testing.B) {
			bare := func() float64 {
				srcURL, stopSrc := broker(full)
				defer stopSrc()
				dstURL, stopDst := broker(none)
				defer stopDst()
				src, dst := testkit.Client(b, srcURL), testkit.Client(b, dstURL)
				sel := &deadletter.Selection{All: true}
				sel.Compile()
				items, err := testkit.Snapshot(context.Background(), src, sel, 1000)
				if err != nil || len(items) != n {
					b.Fatalf("%d items, %v", len(items), err)
				}
				start := time.Now()
				testkit.Concurrently(conc, items, func(it replay.Item) {
					if _, err := dst.Push(context.Background(), []client.PushItem{{Queue: it.Queue, Partition: it.Partition, Payload: it.Newest().Data, TransactionID: deadletter.ImportTxID(it.Address)}}); err != nil {
						b.Error(err)
					}
					if err := src.Delete(context.Background(), it.Address); err != nil {
						b.Error(err)
					}
				})
				return time.Since(start).Seconds()
			}
			whole := func() float64 {
				srcURL, stopSrc := broker(full)
				defer stopSrc()
				dstURL, stopDst := broker(none)
				defer stopDst()
				start := time.Now()
				cmd := exec.Command(bin, "dlq", "replay", "--all", "--to-server", dstURL, "--why", "bench", "--yes", "--rate", "0", "--no-trace",
					"--concurrency", strconv.Itoa(conc))
				cmd.Env = append(os.Environ(), "DLQCTL_SERVER="+srcURL, "DLQCTL_LEDGER=sqlite://"+filepath.Join(b.TempDir(), "l.db"), "DLQCTL_CONFIG="+filepath.Join(b.TempDir(), "c.yaml"))
				out, err := cmd.CombinedOutput()
				took := time.Since(start).Seconds()
				if err != nil || !strings.Contains(string(out), fmt.Sprintf("%d imported", n)) || !strings.Contains(string(out), fmt.Sprintf("%d discarded", n)) {
					b.Fatalf("replay into: %v\n%s", err, out)
				}
				return took
			}
			var tBare, tWhole []float64
			for i := 0; i < b.N; i++ {
				tBare = append(tBare, bare())
				tWhole = append(tWhole, whole())
			}
			mid := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
			b.ReportMetric(mid(tWhole), "command-s")
			b.ReportMetric(mid(tBare), "bare-s")
			b.ReportMetric(mid(tWhole)/mid(tBare), "command/bare")
		})
	}
}

// paceSeed is n dead letters of one queue over 16 partitions, one
// consumer group, the oldest first: the pace benchmarks' DLQ.
func paceSeed(n int) sandbox.Seed {
	seed := sandbox.Seed{Queues: []sandbox.SeedQueue{{Name: "orders", RetryLimit: 3, ConsumerGroups: []string{"billing"}}}}
	for i := 0; i < n; i++ {
		seed.DeadLetters = append(seed.DeadLetters, sandbox.SeedDeadLetter{Queue: "orders", Partition: strconv.Itoa(i % 16), TransactionID: fmt.Sprintf("order:%d", i),
			ConsumerGroup: "billing", Error: "boom", RetryCount: 3, Age: fmt.Sprintf("%ds", n-i), Data: json.RawMessage(fmt.Sprintf(`{"orderId":%d}`, i))})
	}
	return seed
}

// writeSeed writes a seed file for dlqctl sandbox --seed.
func writeSeed(b *testing.B, seed sandbox.Seed) string {
	f := filepath.Join(b.TempDir(), "seed.json")
	raw, _ := json.Marshal(seed)
	if err := os.WriteFile(f, raw, 0o600); err != nil {
		b.Fatal(err)
	}
	return f
}

// startPaced runs dlqctl sandbox in its own process on a free port with
// seedFile, its consumers idle, each push costing push and each delete
// del (extra flags after), until stop; it returns once /health answers.
func startPaced(b *testing.B, bin, seedFile string, push, del time.Duration, extra ...string) (url string, stop func()) {
	addr := freeAddr(b)
	cmd := exec.Command(bin, append([]string{"sandbox", "--addr", addr, "--seed", seedFile, "--no-context", "--consume-rate", "0",
		"--push-latency", push.String(), "--delete-latency", del.String()}, extra...)...)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	url = "http://" + addr
	waitHealthy(b, url)
	return url, func() { cmd.Process.Kill(); cmd.Wait() }
}

// waitHealthy returns once a sandbox started in its own process answers
// /health at url, and fails the benchmark after 20 s.
func waitHealthy(b *testing.B, url string) {
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(url + "/health"); err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			b.Fatal("the sandbox did not start")
		}
	}
}

// BenchmarkPlanBesideLs times the plan a person waits for beside the
// read it is built on: `dlq replay SEL --dry-run` and `dlq ls -o ndjson
// SEL` of the same selection, taken in turns against one broker in its
// own process (dlqctl sandbox --seed, GenerateSeed's mix of queues,
// groups, classes and encrypted envelopes), for --all, a failure class,
// --error with a time filter, 2,000 addresses from a file, and the resume
// of a batch dlq decide recorded (beside ls of the whole DLQ it covers).
// It reports the medians of wall time and of CPU (the child's user and
// system time) and their ratios, dry run over ls (goal: 1.3× at most).
// Rows: 3k and 200k; DLQCTL_BENCH_PLAN_ROWS sets one size (1M).
func BenchmarkPlanBesideLs(b *testing.B) {
	bin := binary(b)
	sizes := []int{3_000, 200_000}
	if v, err := strconv.Atoi(os.Getenv("DLQCTL_BENCH_PLAN_ROWS")); err == nil && v > 0 {
		sizes = []int{v}
	}
	class := deadletter.ClassID("timeout calling inventory-service after 5000ms")
	for _, n := range sizes {
		url, stop := startPaced(b, bin, writeSeed(b, sandbox.GenerateSeed(n, 1)), 0, 0)
		dir := b.TempDir()
		// The resume's batch in a ledger of its own: in the other, a fresh
		// selection of what it decides would be refused as its to run.
		dsn, decided := "sqlite://"+filepath.Join(dir, "l.db"), "sqlite://"+filepath.Join(dir, "decided.db")
		cases := []struct {
			name    string
			sel, ls []string // the selection; ls's, when it is another
			dsn     string
		}{
			{name: "all", sel: []string{"--all"}, ls: []string{}, dsn: dsn},
			{name: "class", sel: []string{"--class", class}, dsn: dsn},
			{name: "error-since", sel: []string{"--error", "timeout|declined|refused", "--failed-after", "4d"}, dsn: dsn},
			{name: "addresses", sel: []string{"--from-file", addressFile(b, dir, url, min(2_000, n/2))}, dsn: dsn},
			{name: "resume", sel: []string{"--batch", decideAll(b, bin, url, decided)}, ls: []string{}, dsn: decided},
		}
		for _, c := range cases {
			b.Run(fmt.Sprintf("%s/rows=%d", c.name, n), func(b *testing.B) {
				ls := []string{"dlq", "ls", "-o", "ndjson"}
				if c.ls == nil {
					c.ls = c.sel
				}
				ls = append(ls, c.ls...)
				dry := append(append([]string{"dlq", "replay"}, c.sel...), "--dry-run")
				var wall, cpu [2][]float64
				for b.Loop() {
					for i, args := range [][]string{ls, dry} {
						w, u := timeDlq(b, bin, url, c.dsn, args...)
						wall[i], cpu[i] = append(wall[i], w), append(cpu[i], u)
					}
				}
				mid := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
				b.ReportMetric(mid(wall[0]), "ls-s")
				b.ReportMetric(mid(wall[1]), "dry-run-s")
				b.ReportMetric(mid(cpu[0]), "ls-cpu-s")
				b.ReportMetric(mid(cpu[1]), "dry-run-cpu-s")
				b.ReportMetric(mid(wall[1])/mid(wall[0]), "dry/ls-wall")
				b.ReportMetric(mid(cpu[1])/mid(cpu[0]), "dry/ls-cpu")
			})
		}
		stop()
	}
}

// timeDlq runs the binary against server and ledgerDSN, and returns its
// wall time and CPU time (user and system), in seconds.
func timeDlq(b *testing.B, bin, server, ledgerDSN string, args ...string) (wall, cpu float64) {
	start := time.Now()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DLQCTL_SERVER="+server, "DLQCTL_LEDGER="+ledgerDSN, "DLQCTL_CONFIG="+filepath.Join(b.TempDir(), "c.yaml"))
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("%v: %v\n%s", args, err, stderr.String())
	}
	st := cmd.ProcessState
	return time.Since(start).Seconds(), (st.UserTime() + st.SystemTime()).Seconds()
}
