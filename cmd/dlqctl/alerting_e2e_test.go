package main

import (
	"bytes"
	"encoding/json"
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
)

// The alerting path with the real parts: a sandbox broker, the real
// dlqctl exporter, Debian's Prometheus evaluating the shipped rules
// (deploy/prometheus/dlqctl-rules.yml), Debian's Alertmanager routing by
// owner, and a webhook receiver here. A dead letter that outlives its
// queue's max-age pages the owning team, and only that team; a hold on it
// resolves the page.
func TestAlertReachesTheOwningTeam(t *testing.T) {
	prom, am := tool(t, "prometheus"), tool(t, "prometheus-alertmanager", "alertmanager")
	dir := t.TempDir()
	rules, err := filepath.Abs("../../deploy/prometheus/dlqctl-rules.yml")
	if err != nil {
		t.Fatal(err)
	}

	b := sandbox.New(nil)
	b.AddQueue("payments", false, 3, "ledger")
	b.AddQueue("orders", false, 3, "shipping")
	brokerSrv := httptest.NewServer(b.Handler())
	defer brokerSrv.Close()

	rec := newReceiver()
	recSrv := httptest.NewServer(rec)
	defer recSrv.Close()

	const maxAge = 8 * time.Second
	cfg := filepath.Join(dir, "config.yaml")
	write(t, cfg, fmt.Sprintf(`policies:
  - queue: payments
    owner: team-payments
    max-age: %ds
  - queue: orders
    owner: team-orders
    max-age: 1h
`, int(maxAge.Seconds())))
	env := append(os.Environ(), "DLQCTL_SERVER="+brokerSrv.URL, "DLQCTL_LEDGER=sqlite://"+filepath.Join(dir, "ledger.db"),
		"DLQCTL_CONFIG="+cfg, "DLQCTL_USER=oncall", "NO_COLOR=1")

	expAddr, promAddr, amAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	exporter := exec.Command(binary(t), "exporter", "--web.listen-address", expAddr, "--interval", "1s")
	exporter.Env = env
	start(t, exporter, filepath.Join(dir, "exporter.log"))

	write(t, filepath.Join(dir, "alertmanager.yml"), fmt.Sprintf(`route:
  receiver: platform-oncall
  group_by: [alertname, owner, queue, consumer_group]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
  routes:
    - matchers: ['owner="team-payments"']
      receiver: team-payments
    - matchers: ['owner="team-orders"']
      receiver: team-orders
receivers:
  - name: platform-oncall
    webhook_configs: [{url: "%[1]s/platform", send_resolved: true}]
  - name: team-payments
    webhook_configs: [{url: "%[1]s/team-payments", send_resolved: true}]
  - name: team-orders
    webhook_configs: [{url: "%[1]s/team-orders", send_resolved: true}]
`, recSrv.URL))
	start(t, exec.Command(am, "--config.file", filepath.Join(dir, "alertmanager.yml"), "--storage.path", filepath.Join(dir, "am"),
		"--web.listen-address", amAddr, "--cluster.listen-address", ""), filepath.Join(dir, "alertmanager.log"))

	write(t, filepath.Join(dir, "prometheus.yml"), fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
alerting:
  alertmanagers:
    - static_configs: [{targets: [%q]}]
scrape_configs:
  - job_name: dlqctl
    static_configs: [{targets: [%q]}]
`, rules, amAddr, expAddr))
	start(t, exec.Command(prom, "--config.file", filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path", filepath.Join(dir, "tsdb"),
		"--web.listen-address", promAddr), filepath.Join(dir, "prometheus.log"))
	waitUp(t, "http://"+promAddr+"/-/ready", dir)
	waitUp(t, "http://"+amAddr+"/-/ready", dir)

	// A young dead letter in orders (max-age 1h) and a new one in payments.
	b.AddDeadLetters(sandbox.DeadLetter{Queue: "orders", Partition: "p0", TransactionID: "o-1", ConsumerGroup: "shipping",
		Error: "timeout calling carrier", FailedAt: time.Now()})
	arrived := time.Now()
	b.AddDeadLetters(sandbox.DeadLetter{Queue: "payments", Partition: "p0", TransactionID: "pay-1", ConsumerGroup: "ledger",
		Error: "ledger unavailable", FailedAt: arrived})

	page := rec.wait(t, "team-payments", "firing", maxAge+60*time.Second, dir)
	paged := time.Now()
	if page.Labels["queue"] != "payments" || page.Labels["consumer_group"] != "ledger" || page.Labels["owner"] != "team-payments" {
		t.Fatalf("the page is about %v", page.Labels)
	}
	t.Logf("arrival to the team's receiver: %.1fs (max-age %s: %.1fs after the dead letter crossed it)",
		paged.Sub(arrived).Seconds(), maxAge, paged.Sub(arrived.Add(maxAge)).Seconds())
	if paged.Before(arrived.Add(maxAge)) {
		t.Fatalf("paged %.1fs after arrival, before the max-age of %s", paged.Sub(arrived).Seconds(), maxAge)
	}

	var addr string
	for _, r := range b.DeadLetterRows() {
		if r.TransactionID == "pay-1" {
			addr = r.PartitionID + "/" + r.TransactionID
		}
	}
	hold := exec.Command(binary(t), "dlq", "decide", addr, "--action", "hold", "--why", "INC-1: ledger down, replay after the fix", "--until", "1h")
	hold.Env = env
	if out, err := hold.CombinedOutput(); err != nil {
		t.Fatalf("hold: %v\n%s", err, out)
	}
	held := time.Now()
	rec.wait(t, "team-payments", "resolved", 60*time.Second, dir)
	t.Logf("hold to resolved at the receiver: %.1fs", time.Since(held).Seconds())

	for _, n := range rec.all("team-orders") {
		t.Fatalf("team-orders was paged for a dead letter younger than its max-age: %v", n.Labels)
	}
	for _, n := range rec.all("platform") {
		if n.Labels["alertname"] == "DeadLetterPastMaxAge" {
			t.Fatalf("an owned dead letter reached the default receiver: %v", n.Labels)
		}
	}
}

// tool finds one of the names on PATH; without it the test is skipped,
// except in CI, where .ci/run installs it.
func tool(t *testing.T, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed: CI must run the alerting test (.ci/run installs it)", names[0])
	}
	t.Skipf("%s is not installed (apt-get install prometheus prometheus-alertmanager)", names[0])
	return ""
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs a process for the rest of the test, its output in log; it
// is stopped with SIGTERM at the end.
func start(t *testing.T, c *exec.Cmd, log string) {
	t.Helper()
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	c.Stdout, c.Stderr = f, f
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
		f.Close()
	})
}

func waitUp(t *testing.T, url, dir string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s not ready in 60s\n%s", url, logs(dir))
}

func logs(dir string) string {
	var b strings.Builder
	for _, n := range []string{"exporter.log", "prometheus.log", "alertmanager.log"} {
		data, _ := os.ReadFile(filepath.Join(dir, n))
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		fmt.Fprintf(&b, "--- %s (tail)\n%s\n", n, data)
	}
	return b.String()
}

// notification is one alert of an Alertmanager webhook call.
type notification struct {
	Status string            `json:"status"`
	Labels map[string]string `json:"labels"`
}

// receiver records the alerts each webhook path is sent.
type receiver struct {
	mu   sync.Mutex
	got  map[string][]notification
	cond chan struct{}
}

func newReceiver() *receiver {
	return &receiver{got: map[string][]notification{}, cond: make(chan struct{}, 1)}
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var msg struct {
		Alerts []notification `json:"alerts"`
	}
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	path := strings.TrimPrefix(req.URL.Path, "/")
	r.mu.Lock()
	r.got[path] = append(r.got[path], msg.Alerts...)
	r.mu.Unlock()
	select {
	case r.cond <- struct{}{}:
	default:
	}
}

func (r *receiver) all(path string) []notification {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]notification(nil), r.got[path]...)
}

// wait returns the first DeadLetterPastMaxAge alert with status sent to
// path, failing after d.
func (r *receiver) wait(t *testing.T, path, status string, d time.Duration, dir string) notification {
	t.Helper()
	deadline := time.After(d)
	for {
		for _, n := range r.all(path) {
			if n.Status == status && n.Labels["alertname"] == "DeadLetterPastMaxAge" {
				return n
			}
		}
		select {
		case <-r.cond:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no %s DeadLetterPastMaxAge at /%s in %s; received %v\n%s", status, path, d, r.all(path), logs(dir))
		}
	}
}
