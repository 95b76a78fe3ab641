package dlq_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"sort"
	"strings"
	"testing"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/internal/testutil"
	"github.com/dlqctl/dlqctl/pkg/replay"
	"github.com/itchyny/gojq"
)

// whereCLIs are a CLI on each sandbox mode, with the seed and a hold.
func whereCLIs(t *testing.T) map[string]*testutil.CLI {
	t.Helper()
	_, rel, _ := released(t)
	b, url := testkit.Sandbox(t)
	if err := b.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	clis := map[string]*testutil.CLI{"contract": testutil.NewCLI(t, url, root.Run), "released": rel}
	for _, c := range clis {
		if _, errOut, code := c.Exec("dlq", "decide", "--class", "f47c6181", "--action", "hold", "--why", "INC-9", "--until", "24h"); code != 0 {
			t.Fatal(errOut)
		}
	}
	return clis
}

func rowsOf(t *testing.T, ndjson string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(ndjson))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%v: %s", err, sc.Text())
		}
		out = append(out, m)
	}
	return out
}

func key(m map[string]any) string { return m["address"].(string) + " " + m["consumerGroup"].(string) }

// --where selects exactly what the same jq program selects when it is run
// over ls -o ndjson's own rows, on both broker modes, for ls and for a
// replay's plan; rows it fails on are left out and counted.
func TestWhereSelectsWhatJqSelects(t *testing.T) {
	exprs := []string{
		`.data.orderId == 10002`,
		`.data.customer == "1022"`,
		`.queue == "payments" and .data.cents > 10000`,
		`.errorClass == "f47c6181" and .retryCount >= 3`,
		`.data | type == "object" and has("template")`,
		`.decision == "hold"`,
		`.ageSeconds > 86400`,
		`.data.to | startswith("user1")`, // fails on rows without .data.to
	}
	for mode, cli := range whereCLIs(t) {
		all, errOut, code := cli.Exec("dlq", "ls", "-o", "ndjson")
		if code != 0 {
			t.Fatal(errOut)
		}
		rows := rowsOf(t, all)
		for _, expr := range exprs {
			q, _ := gojq.Parse(expr)
			code, _ := gojq.Compile(q)
			want := map[string]bool{}
			addrs := map[string]bool{}
			errored := 0
			for _, r := range rows {
				v, _ := code.Run(map[string]any(r)).Next()
				if _, isErr := v.(error); isErr {
					errored++
					continue
				}
				if v != nil && v != false {
					want[key(r)] = true
					addrs[r["address"].(string)] = true
				}
			}
			out, errOut, exit := cli.Exec("dlq", "ls", "--where", expr, "-o", "ndjson")
			if exit != 0 {
				t.Fatalf("%s %s: exit %d %s", mode, expr, exit, errOut)
			}
			got := map[string]bool{}
			for _, r := range rowsOf(t, out) {
				got[key(r)] = true
			}
			if len(got) != len(want) || !subset(got, want) {
				t.Errorf("%s: ls --where %s: %d rows, want %d\n got  %v\n want %v", mode, expr, len(got), len(want), sorted(got), sorted(want))
			}
			if errored > 0 && !strings.Contains(errOut, "--where failed on") {
				t.Errorf("%s: %s failed on %d rows, unsaid: %q", mode, expr, errored, errOut)
			}
			if len(want) == 0 {
				continue
			}
			out, errOut, exit = cli.Exec("dlq", "replay", "--where", expr, "--dry-run", "-o", "json", "--override-hold")
			var plan batch.Plan
			if err := json.Unmarshal([]byte(out), &plan); err != nil || exit != 0 {
				t.Fatalf("%s %s: %v exit %d %s", mode, expr, err, exit, errOut)
			}
			if plan.Messages != len(addrs) {
				t.Errorf("%s: replay --where %s plans %d messages, want %d", mode, expr, plan.Messages, len(addrs))
			}
		}
	}
}

func subset(a, b map[string]bool) bool {
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func sorted(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// A broken expression is exit 2 with its jq error and where, in at most
// three lines; --where-decrypt without a narrowing selection is refused.
func TestWhereBadInput(t *testing.T) {
	cli := whereCLIs(t)["released"]
	_, errOut, code := cli.Exec("dlq", "ls", "--where", ".data.orderId == ")
	if code != 2 || strings.Count(strings.TrimRight(errOut, "\n"), "\n") > 2 || !strings.Contains(errOut, "position") || !strings.Contains(errOut, "^") {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	if _, errOut, code := cli.Exec("dlq", "ls", "--where", ".queue", "--where-decrypt"); code != 2 || !strings.Contains(errOut, "narrow the selection") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, errOut, code := cli.Exec("dlq", "ls", "--where-decrypt"); code != 2 || !strings.Contains(errOut, "goes with --where") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// On the released server an encrypted queue's rows carry their envelope
// in the list: --where says so, and --where-decrypt sees the payloads
// (one GET a message), with the count said.
func TestWhereOnEnvelopes(t *testing.T) {
	cli := whereCLIs(t)["released"]
	out, errOut, code := cli.Exec("dlq", "ls", "--queue", "notifications", "--where", ".data.template != null", "-o", "ndjson")
	if code != 0 || !strings.Contains(errOut, "encryption envelope") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	plain := len(rowsOf(t, out))
	out, errOut, code = cli.Exec("dlq", "ls", "--queue", "notifications", "--where", ".data.template != null", "--where-decrypt", "-o", "ndjson")
	if code != 0 || !strings.Contains(errOut, "--where-decrypt fetched") || len(rowsOf(t, out)) <= plain {
		t.Fatalf("exit %d, %d rows (without decrypt %d): %s", code, len(rowsOf(t, out)), plain, errOut)
	}
}

// "What happened to order N?" After a replay and a discard, the archive
// answers with what each batch did, found by the payload.
func TestArchivedSearch(t *testing.T) {
	for mode, cli := range whereCLIs(t) {
		out, errOut, code := cli.Exec("dlq", "ls", "--class", "3ce87dde", "-o", "ndjson", "--limit", "1")
		if code != 0 {
			t.Fatal(errOut)
		}
		replayed := rowsOf(t, out)[0]
		out, _, _ = cli.Exec("dlq", "ls", "--class", "ad8e8ffc", "-o", "ndjson", "--limit", "1")
		discarded := rowsOf(t, out)[0]
		order := func(r map[string]any) string {
			return fmt.Sprint(r["data"].(map[string]any)["orderId"])
		}
		var rep, rm replay.Report
		out, errOut, code = cli.Exec("dlq", "replay", "--where", ".data.orderId == "+order(replayed), "--queue", "orders", "--why", "fixed", "--yes", "--rate", "0", "-o", "json", "--override-hold")
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
			t.Fatalf("%s: replay: %v %d %s", mode, err, code, errOut)
		}
		out, errOut, code = cli.Exec("dlq", "rm", discarded["address"].(string), "--why", "test data", "--yes", "-o", "json", "--override-hold")
		if err := json.Unmarshal([]byte(out), &rm); err != nil || code != 0 {
			t.Fatalf("%s: rm: %v %d %s", mode, err, code, errOut)
		}
		for _, c := range []struct {
			row     map[string]any
			outcome string
			batch   string
		}{{replayed, "replayed", rep.BatchID}, {discarded, "discarded", rm.BatchID}} {
			out, errOut, code := cli.Exec("dlq", "ls", "--archived", "--where", ".data.orderId == "+order(c.row)+" and .address == \""+c.row["address"].(string)+"\"", "-o", "ndjson")
			if code != 0 {
				t.Fatalf("%s: exit %d %s", mode, code, errOut)
			}
			found := rowsOf(t, out)
			if len(found) == 0 {
				t.Fatalf("%s: %s not found in the archive", mode, c.row["address"])
			}
			arch := found[0]["archive"].(map[string]any)
			if arch["outcome"] != c.outcome || arch["batchId"] != c.batch || found[0]["errorClass"] != c.row["errorClass"] {
				t.Fatalf("%s: %s: %v", mode, c.row["address"], found[0])
			}
			if c.outcome == "replayed" && arch["replayTransactionId"] == nil {
				t.Fatalf("%s: no replay id: %v", mode, arch)
			}
		}
		// The table says it in words; --where can ask the outcome.
		out, _, _ = cli.Exec("dlq", "ls", "--archived", "--where", `.archive.outcome == "discarded"`)
		if !strings.Contains(out, "discarded by batch "+rm.BatchID) {
			t.Fatalf("%s: table:\n%s", mode, out)
		}
	}
}
