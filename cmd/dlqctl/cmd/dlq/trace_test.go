package dlq_test

import (
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testutil"
)

func onLine(t *testing.T, line sandbox.Line) (*sandbox.Broker, *testutil.CLI) {
	t.Helper()
	b := sandbox.New(func() time.Time { return testutil.Now })
	b.SetLine(line)
	if err := b.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	return b, testutil.NewCLI(t, srv.URL, root.Run)
}

// Replay lineage in the broker: on a broker that keeps traces, each copy
// gets one trace event naming the batch, its reason, who decided and the
// original; the plan says so, the summary counts them.
func TestReplayTracesEachCopy(t *testing.T) {
	for _, line := range []sandbox.Line{sandbox.Queen15, sandbox.Queen16, sandbox.Queen22} {
		t.Run(line.String(), func(t *testing.T) {
			b, cli := onLine(t, line)
			out, _, _ := cli.Exec("dlq", "replay", "--class", "3ce87dde", "--why", "inventory fixed", "--dry-run")
			if !strings.Contains(out, "trace: each copy gets a trace event") {
				t.Fatalf("the plan does not say the copies will be traced:\n%s", out)
			}
			_, stderr, code := cli.Exec("dlq", "replay", "--class", "3ce87dde", "--why", "inventory fixed", "--yes", "--rate", "0")
			id := regexp.MustCompile(`Batch (\S+): (\d+) replayed`).FindStringSubmatch(stderr)
			if code != 0 || id == nil {
				t.Fatalf("replay: exit %d\n%s", code, stderr)
			}
			traces := b.Traces()
			copies := map[string]bool{}
			for _, m := range b.LiveMessages() {
				copies[m.PartitionID+"/"+m.TransactionID] = true
			}
			if len(traces) != len(copies) || !strings.Contains(stderr, "Traced "+id[2]+" copies in the broker") {
				t.Fatalf("%d traces for %d copies (%s replayed)\n%s", len(traces), len(copies), id[2], stderr)
			}
			for _, tr := range traces {
				var d struct {
					Dlqctl struct{ Batch, Action, Why, By, Original string }
				}
				if !copies[tr.PartitionID+"/"+tr.TransactionID] || json.Unmarshal(tr.Data, &d) != nil ||
					d.Dlqctl.Batch != id[1] || d.Dlqctl.Why != "inventory fixed" || d.Dlqctl.By != "oncall" || d.Dlqctl.Original == "" ||
					!strings.Contains(strings.Join(tr.TraceNames, ","), "dlqctl:batch:"+id[1]) {
					t.Fatalf("trace %+v (%s)", tr, tr.Data)
				}
			}
		})
	}
}

// A restore leaves the same lineage: each copy it publishes gets a trace
// event of action restore, naming the batch, its reason and the archived
// original (no generation: a restore is not a replay's next attempt).
func TestRestoreTracesEachCopy(t *testing.T) {
	for _, line := range []sandbox.Line{sandbox.Queen15, sandbox.Queen16, sandbox.Queen22} {
		t.Run(line.String(), func(t *testing.T) {
			b, cli := onLine(t, line)
			if _, stderr, code := cli.Exec("dlq", "rm", "--class", "3ce87dde", "--why", "looked broken", "--yes", "--rate", "0"); code != 0 {
				t.Fatalf("rm: exit %d\n%s", code, stderr)
			}
			out, _, _ := cli.Exec("dlq", "restore", "--class", "3ce87dde", "--dry-run")
			if !strings.Contains(out, "trace: each copy gets a trace event") {
				t.Fatalf("the restore plan does not say the copies will be traced:\n%s", out)
			}
			_, stderr, code := cli.Exec("dlq", "restore", "--class", "3ce87dde", "--why", "it was fine", "--yes", "--rate", "0")
			id := regexp.MustCompile(`Batch (\S+): (\d+) restored`).FindStringSubmatch(stderr)
			if code != 0 || id == nil {
				t.Fatalf("restore: exit %d\n%s", code, stderr)
			}
			copies := map[string]bool{}
			for _, m := range b.LiveMessages() {
				copies[m.PartitionID+"/"+m.TransactionID] = true
			}
			traces := b.Traces()
			if len(traces) != len(copies) || len(copies) == 0 || !strings.Contains(stderr, "Traced "+id[2]+" copies in the broker") {
				t.Fatalf("%d traces for %d copies (%s restored)\n%s", len(traces), len(copies), id[2], stderr)
			}
			for _, tr := range traces {
				var d struct {
					Dlqctl map[string]any
				}
				if !copies[tr.PartitionID+"/"+tr.TransactionID] || tr.EventType != "restore" || json.Unmarshal(tr.Data, &d) != nil ||
					d.Dlqctl["batch"] != id[1] || d.Dlqctl["action"] != "restore" || d.Dlqctl["why"] != "it was fine" || d.Dlqctl["original"] == "" ||
					d.Dlqctl["generation"] != nil || !strings.Contains(strings.Join(tr.TraceNames, ","), "dlqctl:batch:"+id[1]) {
					t.Fatalf("trace %+v (%s)", tr, tr.Data)
				}
			}
		})
	}
}

// A trace that cannot be written never changes the replay: every copy is
// published once and every dead letter removed, the exit is 0, and the
// summary says how many were not written. --no-trace writes none; a
// broker with no traces (0.x) is never asked.
func TestTraceFailuresDoNotChangeTheReplay(t *testing.T) {
	for _, fault := range []sandbox.Action{sandbox.Refuse, sandbox.Silence} {
		b, cli := onLine(t, sandbox.Queen16)
		cli.Exec("--timeout", "1s", "dlq", "ls") // the release, told before the faults
		b.SetFaults(sandbox.Faults{Script: func(c sandbox.Call) sandbox.Action {
			if c.Route == "POST /api/v1/traces" {
				return fault
			}
			return sandbox.Serve
		}})
		before := b.Depth()
		_, stderr, code := cli.Exec("--timeout", "1s", "dlq", "replay", "--class", "3ce87dde", "--why", "fixed", "--yes", "--rate", "0")
		n := regexp.MustCompile(`(\d+) replayed`).FindStringSubmatch(stderr)
		if code != 0 || n == nil || !strings.Contains(stderr, "trace events not written") || len(b.Traces()) != 0 {
			t.Fatalf("fault %v: exit %d, %d traces\n%s", fault, code, len(b.Traces()), stderr)
		}
		if live := len(b.LiveMessages()); n[1] != strconv.Itoa(live) || b.Depth() >= before {
			t.Fatalf("fault %v: %s replayed, %d live, depth %d of %d", fault, n[1], live, b.Depth(), before)
		}
	}
	b, cli := onLine(t, sandbox.Queen16)
	if _, stderr, code := cli.Exec("dlq", "replay", "--class", "3ce87dde", "--why", "fixed", "--yes", "--rate", "0", "--no-trace"); code != 0 || len(b.Traces()) != 0 || strings.Contains(stderr, "Traced") {
		t.Fatalf("--no-trace: exit %d, %d traces\n%s", code, len(b.Traces()), stderr)
	}
	b, cli = onLine(t, sandbox.Queen015)
	if _, stderr, code := cli.Exec("dlq", "replay", "--class", "3ce87dde", "--why", "fixed", "--yes", "--rate", "0"); code != 0 || b.Calls()["POST /api/v1/traces"] != 0 {
		t.Fatalf("0.x: exit %d, %d trace calls\n%s", code, b.Calls()["POST /api/v1/traces"], stderr)
	}
}

// An unlimited replay does not outrun its traces: with every broker call
// taking a few milliseconds, each copy of about 2,000 still gets its trace
// (the writers once were two, and a run 16 at a time filled their queue
// and dropped the rest).
func TestUnlimitedReplayTracesEveryCopy(t *testing.T) {
	b := sandbox.New(func() time.Time { return testutil.Now })
	b.SetLine(sandbox.Queen15)
	b.Fill(6000, 7)
	b.SetFaults(sandbox.Faults{Latency: 3 * time.Millisecond})
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	_, stderr, code := cli.Exec("dlq", "replay", "--queue", "orders", "--why", "load", "--yes", "--rate", "0", "--order", "none", "--concurrency", "16")
	if code != 0 {
		t.Fatalf("replay: exit %d\n%s", code, stderr)
	}
	copies := len(b.LiveMessages())
	if traces := len(b.Traces()); copies == 0 || traces != copies {
		t.Fatalf("%d traces for %d copies\n%s", traces, copies, stderr)
	}
}

// A resume traces only the copies it published: each copy has one trace
// event in the broker after an interrupted run and its resume, and the
// two runs' "Traced N" add up to the copies; a restore alike.
func TestAResumeTracesEachCopyOnce(t *testing.T) {
	sw := &swappable{}
	b := sw.fresh(t)
	srv := httptest.NewServer(sw)
	t.Cleanup(srv.Close)
	cli := testutil.NewCLI(t, srv.URL, root.Run)
	traced := regexp.MustCompile(`Traced (\d+) cop`)
	sum := func(s string) int {
		if m := traced.FindStringSubmatch(s); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
		return 0
	}
	check := func(what string, total int) {
		t.Helper()
		per := map[string]int{}
		for _, tr := range b.Traces() {
			per[tr.PartitionID+"/"+tr.TransactionID]++
		}
		copies := 0
		for _, m := range b.LiveMessages() {
			copies++
			if n := per[m.PartitionID+"/"+m.TransactionID]; n != 1 {
				t.Errorf("%s: copy %s has %d trace events", what, m.TransactionID, n)
			}
		}
		if total != copies {
			t.Errorf("%s: the runs said Traced %d in all, for %d copies", what, total, copies)
		}
	}
	_, stderr, _ := sw.interrupted(cli, 10, "dlq", "replay", "--queue", "payments", "--why", "x", "--yes", "--rate", "50", "--concurrency", "1")
	id := regexp.MustCompile(`--batch (\S+)`).FindStringSubmatch(stderr)
	if id == nil {
		t.Fatalf("no resume line:\n%s", stderr)
	}
	total := sum(stderr)
	_, stderr, code := cli.Exec("dlq", "replay", "--batch", id[1], "--yes", "--rate", "0")
	if code != 0 || !strings.Contains(stderr, "already done") {
		t.Fatalf("resume: exit %d\n%s", code, stderr)
	}
	total += sum(stderr)
	check("replay", total)
	if _, stderr, code := cli.Exec("dlq", "rm", "--queue", "orders", "--why", "x", "--yes", "--rate", "0"); code != 0 {
		t.Fatalf("rm: exit %d\n%s", code, stderr)
	}
	_, stderr, _ = sw.interrupted(cli, 10, "dlq", "restore", "--queue", "orders", "--why", "x", "--yes", "--rate", "50", "--concurrency", "1")
	id = regexp.MustCompile(`--batch (\S+)`).FindStringSubmatch(stderr)
	if id == nil {
		t.Fatalf("no resume line:\n%s", stderr)
	}
	total += sum(stderr)
	_, stderr, code = cli.Exec("dlq", "restore", "--batch", id[1], "--yes", "--rate", "0")
	if code != 0 || !strings.Contains(stderr, "already done") {
		t.Fatalf("restore's resume: exit %d\n%s", code, stderr)
	}
	check("restore", total+sum(stderr))
}
