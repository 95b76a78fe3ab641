package exporter_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/exporter"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/testutil"
	dto "github.com/prometheus/client_model/go"
)

// One exporter over the fleet: each context is evaluated on its own, and
// every series carries its context; a context whose broker is down for
// pass after pass has broker_up 0 and blanks, stalls or changes no other.
func TestExporterOverContexts(t *testing.T) {
	cli := testutil.Fleet(t, root.Run)
	f, _, _, _ := cli.Factory()
	f.Globals.Timeout = time.Second
	s, err := exporter.Start(f, "--web.listen-address", "127.0.0.1:0", "--interval", "1h", "--all-contexts")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Exps) != 3 {
		t.Fatalf("%d exporters for 3 contexts", len(s.Exps))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for round := 0; round < 3; round++ {
		for name, e := range s.Exps {
			if err := e.Pass(ctx); (err != nil) != (name == "gone") {
				t.Fatalf("round %d, %s: pass error %v", round, name, err)
			}
		}
		fams := scrape(t, "http://"+s.Addr+"/metrics")
		up := map[string]float64{}
		for _, m := range fams["dlqctl_broker_up"].GetMetric() {
			up[label(m, "context")] = m.GetGauge().GetValue()
		}
		if up["calm"] != 1 || up["busy"] != 1 || up["gone"] != 0 || len(up) != 3 {
			t.Fatalf("round %d: broker_up by context %v", round, up)
		}
		breach := map[string]bool{}
		for _, m := range fams["dlqctl_dlq_breach"].GetMetric() {
			if label(m, "context") == "" {
				t.Fatalf("a series without its context: %v", m)
			}
			breach[label(m, "context")] = breach[label(m, "context")] || m.GetGauge().GetValue() == 1
		}
		if breach["calm"] || !breach["busy"] {
			t.Fatalf("round %d: breaches by context %v (calm's own policy lets its dead letters wait)", round, breach)
		}
		if depth(fams, "gone") != 0 || depth(fams, "busy") == 0 || depth(fams, "busy") != depth(fams, "calm") {
			t.Fatalf("round %d: depths gone %v, busy %v, calm %v", round, depth(fams, "gone"), depth(fams, "busy"), depth(fams, "calm"))
		}
	}
	health := get(t, "http://"+s.Addr+"/healthz")
	if !strings.Contains(health, `"gone":{"status":"broker-down","brokerUp":false`) || !strings.Contains(health, `"calm":{"status":"ok","brokerUp":true`) ||
		!strings.HasPrefix(health, `{"status":"degraded"`) {
		t.Fatalf("/healthz: %s", health)
	}
}

func depth(fams map[string]*dto.MetricFamily, context string) float64 {
	n := 0.0
	for _, m := range fams["dlqctl_dlq_depth"].GetMetric() {
		if label(m, "context") == context {
			n += m.GetGauge().GetValue()
		}
	}
	return n
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

// /readyz is for a probe that reads the status code alone: 503 before
// the first pass and while no context's broker and ledger are reached,
// 200 once one's are; /healthz stays 200 throughout.
func TestReadyzFollowsTheBrokers(t *testing.T) {
	cli := testutil.Fleet(t, root.Run)
	status := func(url string) int {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		context string
		args    []string
		ready   int
	}{
		{"gone", nil, http.StatusServiceUnavailable},
		{"", []string{"--all-contexts"}, http.StatusOK},
	} {
		cli.Env["DLQCTL_CONTEXT"] = c.context
		f, _, _, _ := cli.Factory()
		f.Globals.Timeout = time.Second
		s, err := exporter.Start(f, append([]string{"--web.listen-address", "127.0.0.1:0", "--interval", "1h"}, c.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- s.Serve(ctx) }()
		if got := status("http://" + s.Addr + "/readyz"); got != http.StatusServiceUnavailable {
			t.Errorf("%v: /readyz before any pass: %d", c.args, got)
		}
		for _, e := range s.Exps {
			_ = e.Pass(ctx)
		}
		if got := status("http://" + s.Addr + "/readyz"); got != c.ready {
			t.Errorf("%v: /readyz after a pass: %d, want %d", c.args, got, c.ready)
		}
		if got := status("http://" + s.Addr + "/healthz"); got != http.StatusOK {
			t.Errorf("%v: /healthz: %d", c.args, got)
		}
		cancel()
		<-done
	}
}
