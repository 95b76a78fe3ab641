package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/internal/sandbox"
)

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion float64 `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name, Type string
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		GridPos struct {
			X, Y, W, H int
		} `json:"gridPos"`
		Datasource *struct {
			Type, UID string
		} `json:"datasource"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// The shipped Grafana dashboard (deploy/grafana/dlqctl.json) is a
// dashboard of Grafana's schema, and every query of every panel returns
// series when a real Prometheus scrapes a real exporter over a sandbox
// with policies, a hold and a batch running: no panel is empty for want
// of a metric the exporter does not write.
func TestGrafanaDashboardQueriesReturnSeries(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary and Prometheus")
	}
	raw, err := os.ReadFile("../../deploy/grafana/dlqctl.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("deploy/grafana/dlqctl.json is not JSON: %v", err)
	}
	checkDashboard(t, d)
	prom := tool(t, "prometheus")
	dir := t.TempDir()

	b := sandbox.New(nil)
	if err := b.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	brokerSrv := httptest.NewServer(b.Handler())
	defer brokerSrv.Close()
	cfg := filepath.Join(dir, "config.yaml")
	write(t, cfg, `policies:
  - queue: orders
    owner: team-orders
    max-age: 1h
    triage-slo: 30m
  - queue: "*"
    owner: platform
    max-age: 240h
    triage-slo: 1h
`)
	env := append(os.Environ(), "DLQCTL_SERVER="+brokerSrv.URL, "DLQCTL_LEDGER=sqlite://"+filepath.Join(dir, "ledger.db"),
		"DLQCTL_CONFIG="+cfg, "DLQCTL_USER=oncall", "NO_COLOR=1")
	run := func(args ...string) {
		c := exec.Command(binary(t), args...)
		c.Env = env
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run("dlq", "decide", "--queue", "orders", "--limit", "10", "--action", "hold", "--until", "4h", "--why", "INC-1")
	// A batch that runs for the length of the test.
	replay := exec.Command(binary(t), "dlq", "replay", "--queue", "payments", "--why", "slow and steady", "--yes", "--rate", "2", "--order", "none")
	replay.Env = env
	start(t, replay, filepath.Join(dir, "replay.log"))

	expAddr, promAddr := freeAddr(t), freeAddr(t)
	exporter := exec.Command(binary(t), "exporter", "--web.listen-address", expAddr, "--interval", "1s")
	exporter.Env = env
	start(t, exporter, filepath.Join(dir, "exporter.log"))
	write(t, filepath.Join(dir, "prometheus.yml"), fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: dlqctl
    static_configs: [{targets: [%q]}]
`, expAddr))
	start(t, exec.Command(prom, "--config.file", filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path", filepath.Join(dir, "tsdb"),
		"--web.listen-address", promAddr), filepath.Join(dir, "prometheus.log"))
	waitUp(t, "http://"+promAddr+"/-/ready", dir)

	query := func(expr string) (int, error) {
		resp, err := http.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(expr))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var r struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return 0, err
		}
		if r.Status != "success" {
			return 0, fmt.Errorf("%s", r.Error)
		}
		return len(r.Data.Result), nil
	}
	// Until the running batch's pace is known (two beats) and a rate of
	// the request counter has two scrapes to go on.
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := query("dlqctl_batch_estimated_end_timestamp_seconds")
		if err == nil && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no running batch in Prometheus after 60s (%v)\n%s", err, logs(dir))
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	vars := strings.NewReplacer("$context", ".*", "$__rate_interval", "30s")
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			expr := vars.Replace(tg.Expr)
			n, err := query(expr)
			switch {
			case err != nil:
				t.Errorf("panel %q, query %s: %v", p.Title, tg.RefID, err)
			case n == 0:
				t.Errorf("panel %q, query %s returns no series: %s", p.Title, tg.RefID, expr)
			}
		}
	}
}

// checkDashboard holds the dashboard to what Grafana's schema (version
// 39, Grafana 11) needs of it: a uid and a title, a datasource variable
// every panel's queries use, panels with unique ids on the 24-column grid,
// each query with a refId unique in its panel and an expression.
func checkDashboard(t *testing.T, d dashboard) {
	t.Helper()
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Fatalf("uid %q, title %q, schemaVersion %v", d.UID, d.Title, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" {
		t.Fatalf("no datasource variable: %v", vars)
	}
	kinds := map[string]bool{"row": true, "timeseries": true, "stat": true, "bargauge": true, "table": true}
	ids := map[int]bool{}
	queries := 0
	for _, p := range d.Panels {
		if !kinds[p.Type] || ids[p.ID] || p.ID == 0 || p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H <= 0 {
			t.Errorf("panel %d %q (%s) at %+v", p.ID, p.Title, p.Type, p.GridPos)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %v, %d queries", p.Title, p.Datasource, len(p.Targets))
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] || strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q: query %q %q", p.Title, tg.RefID, tg.Expr)
			}
			refs[tg.RefID] = true
			queries++
		}
	}
	if queries < 10 {
		t.Fatalf("%d queries in the dashboard", queries)
	}
}
