package exporter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/exporter"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/crypto/bcrypt"
)

// policies gives groups of one queue different owners and thresholds, a
// queue a triage SLO, and leaves a queue with no policy (held to max-age 0).
const policies = `policies:
  - queue: orders
    owner: team-orders
    max-age: 2400h
    triage-slo: 2400h
  - queue: orders
    consumer-group: billing
    owner: team-billing
    max-age: 1h
  - queue: payments
    owner: team-payments
    max-age: 2400h
    triage-slo: 1h
`

// world is a sandbox broker (paging, or the released server's one-body
// mode) with the seed, and a CLI on it with the policies.
func world(t *testing.T, released bool) (*sandbox.Broker, *testutil.CLI) {
	t.Helper()
	b := sandbox.New(func() time.Time { return testutil.Now })
	if err := b.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	if released {
		b.SetLine(sandbox.Queen015)
	}
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	cli.WriteConfig(policies)
	return b, cli
}

func run(t *testing.T, cli *testutil.CLI, args ...string) string {
	t.Helper()
	out, errOut, code := cli.Exec(args...)
	if code != 0 && code != 1 {
		t.Fatalf("%s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// history records what makes the verdicts interesting: a hold on the
// oldest dead letter of one scope, a replay decision left undone past the
// triage SLO, and a row that left the broker with no decision.
func history(t *testing.T, b *sandbox.Broker, cli *testutil.CLI) {
	t.Helper()
	cli.Clock = testutil.Now.Add(-time.Hour) // an earlier sync: what it saw and the next does not has vanished
	run(t, cli, "dlq", "sync")
	cli.Clock = time.Time{}
	var rows []sandbox.Row
	for _, r := range b.DeadLetterRows() {
		if r.Queue == "orders" && r.ConsumerGroup == "billing" {
			rows = append(rows, r)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].FailedAt.Before(rows[j].FailedAt) })
	oldest := rows[0].PartitionID + "/" + rows[0].TransactionID
	run(t, cli, "dlq", "decide", oldest, "--action", "hold", "--why", "INC-7", "--until", "48h", "--owner", "team-billing")

	cli.Clock = testutil.Now.Add(-3 * time.Hour)
	run(t, cli, "dlq", "decide", "--queue", "payments", "--cg", "fraud", "--action", "replay", "--why", "after the fix")
	cli.Clock = time.Time{}

	var gone sandbox.Row
	for _, r := range b.DeadLetterRows() {
		if r.Queue == "notifications" {
			gone = r
			break
		}
	}
	if b.RemoveDeadLetters(gone.PartitionID, gone.TransactionID) == 0 {
		t.Fatal("no row removed")
	}
}

type verdict struct {
	Depth, Undecided, NotCarriedOut, Vanished int
	Breach                                    bool
	Owner                                     string
	// OldestAge is the oldest dead letter's age in whole seconds;
	// OldestHeld, whether the oldest unheld one is another.
	OldestAge  int64
	OldestHeld bool
}

func fromCheck(t *testing.T, out string) map[string]verdict {
	t.Helper()
	var res present.CheckDocument
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	v := map[string]verdict{}
	for _, s := range res.Scopes {
		v[s.Queue+"/"+s.ConsumerGroup] = verdict{Depth: s.Depth, Undecided: s.UndecidedPastSLO, NotCarriedOut: s.DecidedNotCarriedOut,
			Vanished: s.VanishedUndecided, Breach: len(s.Breaches) > 0, Owner: s.Owner, OldestAge: int64(s.OldestAgeSeconds), OldestHeld: s.OldestHeld}
	}
	return v
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func fromMetrics(fams map[string]*dto.MetricFamily) map[string]verdict {
	v := map[string]verdict{}
	each := func(name string, set func(*verdict, float64)) {
		for _, m := range fams[name].GetMetric() {
			k := label(m, "queue") + "/" + label(m, "consumer_group")
			x := v[k]
			x.Owner = label(m, "owner")
			set(&x, m.GetGauge().GetValue())
			v[k] = x
		}
	}
	each("dlqctl_dlq_depth", func(x *verdict, f float64) { x.Depth = int(f) })
	each("dlqctl_dlq_undecided_past_slo", func(x *verdict, f float64) { x.Undecided = int(f) })
	each("dlqctl_dlq_decided_not_carried_out", func(x *verdict, f float64) { x.NotCarriedOut = int(f) })
	each("dlqctl_dlq_vanished_undecided", func(x *verdict, f float64) { x.Vanished = int(f) })
	each("dlqctl_dlq_breach", func(x *verdict, f float64) { x.Breach = f == 1 })
	each("dlqctl_dlq_oldest_failed_timestamp_seconds", func(x *verdict, f float64) {
		x.OldestAge = int64(float64(testutil.Now.UnixMilli())/1000 - f)
	})
	each("dlqctl_dlq_oldest_unheld_failed_timestamp_seconds", func(x *verdict, f float64) {
		x.OldestHeld = float64(testutil.Now.UnixMilli())/1000-f < float64(x.OldestAge)
	})
	return v
}

// The exporter's verdict for each scope is dlq check's, on both broker
// modes, with and without --sync: same scopes, owners, depths, undecided
// and vanished counts, and breaches.
func TestBreachesAreChecks(t *testing.T) {
	for _, released := range []bool{false, true} {
		for _, sync := range []bool{false, true} {
			t.Run(fmt.Sprintf("released=%v/sync=%v", released, sync), func(t *testing.T) {
				b, cli := world(t, released)
				history(t, b, cli)
				args := []string{"--web.listen-address", "127.0.0.1:0", "--interval", "1h"}
				if sync {
					args = append(args, "--sync")
				} else {
					run(t, cli, "dlq", "sync")
				}
				s, errOut := serve(t, cli, args...)
				got := fromMetrics(scrape(t, "http://"+s.Addr+"/metrics"))
				want := fromCheck(t, run(t, cli, "dlq", "check", "-o", "json"))
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("exporter and check disagree\nexporter: %v\ncheck:    %v\nlog: %s", got, want, errOut)
				}
				// The history shows in the verdicts, or the comparison says little.
				billing, fraud, notif := want["orders/billing"], want["payments/fraud"], want["notifications/__QUEUE_MODE__"]
				if !billing.Breach || !billing.OldestHeld || billing.Owner != "team-billing" || fraud.NotCarriedOut == 0 || notif.Vanished != 1 || want["orders/shipping"].Breach {
					t.Fatalf("the history is not in the verdicts: %v", want)
				}
			})
		}
	}
}

// serve starts the exporter of a command line on cli's factory, serves
// it until the test ends, and waits for its first pass; it returns the
// exporter and its log.
func serve(t *testing.T, cli *testutil.CLI, args ...string) (*exporter.Started, fmt.Stringer) {
	t.Helper()
	f, _, _, errOut := cli.Factory()
	s, err := exporter.Start(f, args...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitPass(t, s)
	return s, errOut
}

func waitPass(t *testing.T, s *exporter.Started) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.Exp.Snapshot().LastPass.IsZero() {
		if time.Now().After(deadline) {
			t.Fatal("no pass in 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if e := s.Exp.Snapshot().LastError; e != "" {
		t.Fatalf("the pass failed: %s", e)
	}
}

// --web.config.file is the exporter-toolkit's: with basic auth in it,
// /metrics needs the password.
func TestWebConfigBasicAuth(t *testing.T) {
	_, cli := world(t, false)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(webCfg, []byte("basic_auth_users:\n  prometheus: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, _ := serve(t, cli, "--web.listen-address", "127.0.0.1:0", "--interval", "1h", "--web.config.file", webCfg)
	status := func(user, pass string) int {
		req, _ := http.NewRequest("GET", "http://"+s.Addr+"/metrics", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("", ""); got != http.StatusUnauthorized {
		t.Fatalf("no credentials: %d", got)
	}
	if got := status("prometheus", "wrong"); got != http.StatusUnauthorized {
		t.Fatalf("a wrong password: %d", got)
	}
	if got := status("prometheus", "s3cret"); got != http.StatusOK {
		t.Fatalf("the right password: %d", got)
	}
}

// Bad flags are one line and exit 2, before anything listens.
func TestBadFlags(t *testing.T) {
	_, cli := world(t, false)
	bad := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(bad, []byte("tls_server_config:\n  cert_file: /nonexistent.crt\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--interval", "100ms"}, "--interval 100ms: want at least 1s"},
		{[]string{"--interval", "soon"}, "--interval"},
		{[]string{"--max-classes", "-1"}, "--max-classes -1"},
		{[]string{"--web.telemetry-path", "metrics"}, "--web.telemetry-path"},
		{[]string{"--log.level", "loud"}, "--log.level"},
		{[]string{"--web.config.file", bad}, "--web.config.file"},
		{[]string{"--web.listen-address", "256.0.0.1:1"}, "cannot listen on 256.0.0.1:1"},
	} {
		_, errOut, code := cli.Exec(append([]string{"exporter"}, c.args...)...)
		first := strings.SplitN(errOut, "\n", 2)[0]
		if code != 2 || !strings.Contains(first, c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}
