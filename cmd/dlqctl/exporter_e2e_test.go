package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
)

// lockedLog is a process's output, written by one goroutine and read
// by the test.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(line + "\n")
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startExporter runs the real binary's exporter on a free port and waits
// for it to serve; it returns the base URL, the process and its output.
func startExporter(t *testing.T, env []string, args ...string) (string, *exec.Cmd, *lockedLog) {
	t.Helper()
	addr := freeAddr(t)
	c := exec.Command(binary(t), append([]string{"exporter", "--web.listen-address", addr}, args...)...)
	c.Env = env
	log := &lockedLog{}
	pr, pw := io.Pipe()
	c.Stdout, c.Stderr = pw, pw
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			log.add(sc.Text())
			if !once && strings.HasPrefix(sc.Text(), "Serving metrics on") {
				once = true
				close(serving)
			}
		}
	}()
	t.Cleanup(func() { _ = c.Process.Kill(); pw.Close() })
	select {
	case <-serving:
	case <-time.After(30 * time.Second):
		t.Fatalf("the exporter did not start:\n%s", log.String())
	}
	return "http://" + addr, c, log
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// SIGTERM stops the exporter at once, even in the middle of a pass that
// waits on a broker that does not answer.
func TestExporterStopsOnSIGTERM(t *testing.T) {
	stalled := make(chan struct{})
	broker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case stalled <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	}))
	defer broker.Close()
	dir := t.TempDir()
	env := append(os.Environ(), "DLQCTL_SERVER="+broker.URL, "DLQCTL_LEDGER=sqlite://"+filepath.Join(dir, "l.db"), "DLQCTL_CONFIG="+filepath.Join(dir, "c.yaml"))
	url, c, log := startExporter(t, env, "--interval", "1s")
	<-stalled // a pass is waiting on the broker
	if body := get(t, url+"/metrics"); !strings.Contains(body, "dlqctl_broker_up 0") {
		t.Fatalf("/metrics during the first pass:\n%s", body)
	}
	sent := time.Now()
	if err := c.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		t.Logf("SIGTERM to exit: %s", time.Since(sent).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, log.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10s after SIGTERM\n%s", log.String())
	}
}

// The README says SIGTERM stops the exporter within a second, whatever
// its clients do: a connection that was opened and never sent a request
// (which http.Server.Shutdown waits on) and a scrape in the middle of a
// slow body do not hold it up, nor does a pass waiting on the broker.
func TestExporterStopsWithinASecondWhateverItsClientsDo(t *testing.T) {
	b, burl := testkit.Sandbox(t)
	b.Fill(2000, 3)
	dir := t.TempDir()
	env := append(os.Environ(), "DLQCTL_SERVER="+burl, "DLQCTL_LEDGER=sqlite://"+filepath.Join(dir, "l.db"), "DLQCTL_CONFIG="+filepath.Join(dir, "c.yaml"))
	url, c, log := startExporter(t, env, "--interval", "1s", "--sync")
	get(t, url+"/metrics")
	silent, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	half, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	fmt.Fprintf(half, "GET /metrics HTTP/1.1\r\nHost: x\r\n") // the request's end never comes
	time.Sleep(300 * time.Millisecond)
	sent := time.Now()
	if err := c.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		took := time.Since(sent)
		t.Logf("SIGTERM to exit: %s", took.Round(time.Millisecond))
		if err != nil || took > time.Second {
			t.Fatalf("exit %v after %s, want 0 within 1s\n%s", err, took.Round(time.Millisecond), log.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10s after SIGTERM\n%s", log.String())
	}
}

// The token reaches no output of the exporter: not its log, not
// /metrics, not /healthz, whether the broker refuses it or accepts it.
func TestExporterNeverShowsTheToken(t *testing.T) {
	// Letters only: the failure-class normaliser keeps it, so only
	// redaction keeps it out of the pattern label.
	const token = "tokABCdefGHIjklMNOpqrSTUvwxYZabcdEFG"
	for _, accepted := range []bool{false, true} {
		b := sandbox.New(nil)
		b.AddQueue("payments", false, 3, "ledger")
		b.AddDeadLetters(sandbox.DeadLetter{Queue: "payments", Partition: "p0", TransactionID: "t-1", ConsumerGroup: "ledger",
			Error: "rejected: Authorization Bearer " + token, FailedAt: time.Now().Add(-time.Hour)})
		required := "another-token-entirely-0000000000"
		if accepted {
			required = token
		}
		// The released server answers in one body: failure classes, and
		// their patterns, are exported too.
		b.SetLine(sandbox.Queen015)
		b.SetFaults(sandbox.Faults{Token: required})
		srv := httptest.NewServer(b.Handler())
		dir := t.TempDir()
		env := append(os.Environ(), "DLQCTL_SERVER="+srv.URL, "DLQCTL_TOKEN="+token,
			"DLQCTL_LEDGER=sqlite://"+filepath.Join(dir, "l.db"), "DLQCTL_CONFIG="+filepath.Join(dir, "c.yaml"))
		url, c, log := startExporter(t, env, "--interval", "1s", "--log.level", "debug")
		deadline := time.Now().Add(20 * time.Second)
		var metrics, health string
		for time.Now().Before(deadline) {
			metrics, health = get(t, url+"/metrics"), get(t, url+"/healthz")
			if strings.Contains(metrics, "dlqctl_passes_total") && !strings.Contains(metrics, `dlqctl_passes_total{result="failure"} 0`+"\n"+`dlqctl_passes_total{result="success"} 0`) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = c.Process.Signal(syscall.SIGTERM)
		_ = c.Wait()
		srv.Close()
		up := strings.Contains(metrics, "\ndlqctl_broker_up 1\n")
		if up != accepted {
			t.Fatalf("accepted=%v but broker_up says %v:\n%s\n%s\n%s", accepted, up, health, log.String(), metrics)
		}
		for name, out := range map[string]string{"log": log.String(), "/metrics": metrics, "/healthz": health} {
			if strings.Contains(out, token) || strings.Contains(out, token[:12]) {
				t.Fatalf("accepted=%v: the token is in %s:\n%s", accepted, name, out)
			}
			if accepted && !strings.Contains(metrics, "dlqctl_dlq_class_depth{") {
				t.Fatalf("no class series, so the pattern label went untested:\n%s", metrics)
			}
		}
	}
}
