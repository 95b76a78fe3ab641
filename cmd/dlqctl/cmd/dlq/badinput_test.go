package dlq_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/internal/testutil"
)

// Bad input gets one line, the right exit code, and no secret.
func TestBadInputAndSecrets(t *testing.T) {
	_, cli := seeded(t)
	dir := t.TempDir()
	twoLines := filepath.Join(dir, "two-lines.token")
	os.WriteFile(twoLines, []byte("tok-aaaaaaaaaaaa\nsecond-line\n"), 0o600)
	crlf := filepath.Join(dir, "crlf.token")
	os.WriteFile(crlf, []byte("tok-crlf-value-1234\r\n"), 0o600)
	open := filepath.Join(dir, "open.token")
	os.WriteFile(open, []byte("tok-open-value-1234\n"), 0o644)
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		says   string
		secret string
	}{
		{"rate NaN", []string{"dlq", "replay", "--queue", "orders", "--rate", "NaN", "--dry-run"}, 2, "invalid --rate", ""},
		{"rate Inf", []string{"dlq", "replay", "--queue", "orders", "--rate", "+Inf", "--dry-run"}, 2, "invalid --rate", ""},
		{"rate too low", []string{"dlq", "rm", "--queue", "orders", "--rate", "1e-7", "--dry-run"}, 2, "between 0.01 and", ""},
		{"timeout zero", []string{"--timeout", "0s", "dlq", "ls"}, 2, "invalid --timeout", ""},
		{"timeout negative", []string{"--timeout", "-1s", "dlq", "ls"}, 2, "invalid --timeout", ""},
		{"canary-wait negative", []string{"dlq", "replay", "--queue", "orders", "--canary-wait", "-1s", "--dry-run"}, 2, "invalid --canary-wait", ""},
		{"missing --config", []string{"--config", filepath.Join(dir, "nope.yaml"), "dlq", "ls"}, 2, "does not exist", ""},
		{"token file of two lines", []string{"--token-file", twoLines, "dlq", "ls"}, 2, "more than one line", "second-line"},
		{"token with a line break", []string{"--token", "abc\ndef", "dlq", "ls"}, 2, "the token from --token has a space, a line break", "def"},
		{"server with credentials, no scheme", []string{"--server", "user:hunter2@host:1", "dlq", "ls"}, 2, "invalid server URL", "hunter2"},
		{"ledger keyword DSN", []string{"--ledger", "host=db password=hunter2", "dlq", "decide", "--all", "--action", "hold", "--until", "1h", "--why", "x"}, 2, "libpq keyword DSN", "hunter2"},
		{"relative ledger", []string{"--ledger", "sqlite:rel.db", "dlq", "sync"}, 2, "not an absolute path", ""},
		{"unknown class", []string{"dlq", "ls", "--class", "nope"}, 2, "is not a class id", ""},
		{"unknown class, replay", []string{"dlq", "replay", "--class", "nope", "--dry-run"}, 2, `--class "nope" is not a class id`, ""},
		{"unknown class, decide", []string{"dlq", "decide", "--class", "3ce87dd", "--action", "hold", "--until", "1h", "--why", "x"}, 2, `--class "3ce87dd" is not a class id`, ""},
		{"a class with no dead letter, decide", []string{"dlq", "decide", "--class", "00000000", "--action", "hold", "--until", "1h", "--why", "x"}, 2, "no dead letter is in class 00000000 now; nothing recorded", ""},
		{"--by with escapes", []string{"dlq", "decide", "--queue", "orders", "--action", "hold", "--until", "1h", "--why", "x", "--by", "ann\x1b[2J\u202egro"}, 2, `--by ann\x1b[2J\u202egro holds a control`, "\x1b"},
		{"--by blank", []string{"dlq", "decide", "--queue", "orders", "--action", "hold", "--until", "1h", "--why", "x", "--by", "  "}, 2, "--by is blank", ""},
		{"replay --by with a line break", []string{"dlq", "replay", "--queue", "orders", "--why", "x", "--dry-run", "--by", "ann\nRecorded discard by root"}, 2, `ann\nRecorded`, "\n" + "Recorded"},
		{"--until past the longest", []string{"dlq", "decide", "--queue", "orders", "--action", "hold", "--until", "106752d", "--why", "x"}, 2, "longer than the longest dlqctl counts", ""},
		{"--until not a time", []string{"dlq", "decide", "--queue", "orders", "--action", "hold", "--until", "4x", "--why", "x"}, 2, `invalid --until "4x": want RFC 3339 or a duration`, ""},
		{"--until in the past", []string{"dlq", "decide", "--queue", "orders", "--action", "hold", "--until", "2001-01-01T00:00:00Z", "--why", "x"}, 2, `invalid --until "2001-01-01T00:00:00Z": it is in the past`, ""},
		{"--until past the longest, in hours", []string{"dlq", "decide", "--queue", "orders", "--action", "hold", "--until", "2562048h", "--why", "x"}, 2, "longer than the longest dlqctl counts", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := cli.Exec(c.args...)
			if code != c.code || !strings.Contains(stderr, c.says) {
				t.Fatalf("exit %d (want %d), want it to say %q:\n%s", code, c.code, c.says, stderr)
			}
			if c.secret != "" && strings.Contains(stderr, c.secret) {
				t.Fatalf("printed the secret: %s", stderr)
			}
		})
	}
	// A class id no dead letter has is no error: nothing to do, said so.
	for _, verb := range []string{"replay", "rm"} {
		if _, stderr, code := cli.Exec("dlq", verb, "--class", "00000000", "--dry-run"); code != 0 || !strings.Contains(stderr, "Nothing to "+verb+": no dead letter is in class 00000000 now (see dlq ls --group-by error).") {
			t.Fatalf("%s of an absent class: exit %d\n%s", verb, code, stderr)
		}
	}
	// The longest --until is the same however it is written.
	for _, until := range []string{"106751d", "2562047h"} {
		if _, stderr, code := cli.Exec("dlq", "decide", "--queue", "orders", "--action", "hold", "--until", until, "--why", "x"); code != 0 {
			t.Fatalf("--until %s: exit %d\n%s", until, code, stderr)
		}
	}
	// A token file with a CRLF end is one line: fine. One others can read
	// is warned about.
	if _, stderr, code := cli.Exec("--token-file", crlf, "dlq", "ls", "--limit", "1"); code != 0 || strings.Contains(stderr, "warning") {
		t.Fatalf("CRLF token file: %d %s", code, stderr)
	}
	if _, stderr, code := cli.Exec("--token-file", open, "dlq", "ls", "--limit", "1"); code != 0 || !strings.Contains(stderr, "can be read by others (mode 0644)") {
		t.Fatalf("world-readable token file: %d %s", code, stderr)
	}
}

func TestConfigViewShowsNoSecret(t *testing.T) {
	_, cli := seeded(t)
	cli.WriteConfig(`current-context: prod
contexts:
  prod: {server: "http://admin:hunter2@queen.prod:6632", ledger: "postgres://dlq:hunter2@db/dlq?sslpassword=hunter2"}
policies:
  - queue: orders
    max-age: 10d
    triage-slo: 4h
    maxage: 3h
`)
	cli.Env["DLQCTL_SERVER"] = "http://ops:hunter2@127.0.0.1:1"
	for _, f := range []string{"table", "json", "yaml"} {
		out, stderr, code := cli.Exec("config", "view", "-o", f)
		if code != 0 || strings.Contains(out+stderr, "hunter2") {
			t.Fatalf("-o %s: exit %d, printed a password:\n%s%s", f, code, out, stderr)
		}
		if !strings.Contains(stderr, `unknown key "policies[0].maxage" is ignored`) && !strings.Contains(stderr, `unknown key`) {
			t.Fatalf("-o %s: the unknown key is not warned about: %s", f, stderr)
		}
		if f == "table" && !strings.Contains(out, "max-age: 10d") {
			t.Fatalf("durations are shown as written:\n%s", out)
		}
		if f == "json" {
			var doc map[string]any
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatal(err)
			}
			cfg, _ := doc["config"].(map[string]any)
			if _, ok := cfg["currentContext"]; !ok {
				t.Fatalf("-o json uses camelCase names: %s", out)
			}
		}
	}
}

func TestDecisionLabelsAndSaturatedAges(t *testing.T) {
	b, cli := seeded(t)
	// 1500 is further back than a time.Duration reaches (292 years).
	ancient := time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC)
	b.AddDeadLetters(sandbox.DeadLetter{Queue: "ancient", Partition: "p", TransactionID: "t-1500", ConsumerGroup: "g", Error: "old",
		FailedAt: ancient, Data: json.RawMessage(`{}`)})
	days := (testutil.Now.Unix() - ancient.Unix()) / 86400
	out, _, _ := cli.Exec("dlq", "check", "--queue", "ancient")
	if !regexp.MustCompile(fmt.Sprintf(` %dd(\d+h)? `, days)).MatchString(out) {
		t.Fatalf("OLDEST of a row from 1500 should be %dd:\n%s", days, out)
	}
	js, _, _ := cli.Exec("dlq", "check", "--queue", "ancient", "-o", "json")
	var res struct {
		Scopes []struct{ OldestAgeSeconds float64 }
	}
	if err := json.Unmarshal([]byte(js), &res); err != nil || len(res.Scopes) != 1 || int64(res.Scopes[0].OldestAgeSeconds)/86400 != days {
		t.Fatalf("oldestAgeSeconds: %v %s", err, js)
	}
	// The four undecryptable messages stay after a replay of their queue:
	// the batch did not carry them out, and their DECISION does not say
	// "replayed". Discarded, the rest of the queue reads "discarded".
	cli.Exec("dlq", "replay", "--queue", "notifications", "--why", "x", "--yes", "--rate", "0", "--order", "none")
	ls, _, _ := cli.Exec("dlq", "ls", "--queue", "notifications")
	if strings.Contains(ls, "replayed") || !strings.Contains(ls, " replay") {
		t.Fatalf("labels:\n%s", ls)
	}
}

// Addresses another live run holds are not this run's to finish: the
// batch is not done, and the exit code says so (1), with how to go on.
func TestClaimedElsewhereIsNotSuccess(t *testing.T) {
	_, cli := seeded(t)
	id, _, code := cli.Exec("dlq", "decide", "--queue", "payments", "--action", "replay", "--why", "x")
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatal(code)
	}
	// Enrol the batch's addresses (a dry-run of nothing: run it once with
	// every address held by a run on another host, lease not expired).
	ld := testkit.OpenLedger(t, cli.Env["DLQCTL_LEDGER"])
	man, err := ld.Manifest(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range man[:5] {
		if _, err := ld.DB().Exec(`INSERT INTO journal (broker, partition_id, transaction_id, state, batch_id, action, generation, updated_at, claim_owner, claim_until)
			VALUES (?, ?, ?, 'pending', ?, 'replay', 1, '2026-11-30T03:00:00.000Z', 'other-host:4242:abcd', '2999-01-01T00:00:00.000Z')`,
			cli.Broker(), m.Address.PartitionID, m.Address.TransactionID, id); err != nil {
			t.Fatal(err)
		}
	}
	_, stderr, code := cli.Exec("dlq", "replay", "--batch", id, "--yes", "--rate", "0")
	if code != 1 || !strings.Contains(stderr, "5 claimed by another run") || !strings.Contains(stderr, "Resume with:") {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
}

// A selection flag given twice with two values is refused, before
// anything is read or written: a plain string flag kept the last, and
// "--queue orders --queue payments" acted on payments alone.
func TestARepeatedSelectionFlagIsRefused(t *testing.T) {
	b, cli := seeded(t)
	depth := b.Depth()
	for _, args := range [][]string{
		{"dlq", "rm", "--queue", "orders", "--queue", "payments", "--why", "x", "--yes", "--rate", "0"},
		{"dlq", "replay", "--class", "f47c6181", "--class", "ad8e8ffc", "--why", "x", "--yes", "--rate", "0"},
		{"dlq", "ls", "--cg", "billing", "--cg", "fraud"},
		{"dlq", "decide", "--where", ".retryCount > 1", "--where", ".retryCount > 2", "--action", "hold", "--until", "1h", "--why", "x"},
	} {
		_, stderr, code := cli.Exec(args...)
		if code != 2 || !strings.Contains(stderr, "given twice") || b.Depth() != depth {
			t.Fatalf("%v: exit %d, depth %d of %d\n%s", args, code, b.Depth(), depth, stderr)
		}
	}
	if _, stderr, code := cli.Exec("dlq", "ls", "--queue", "orders", "--queue", "orders", "--limit", "1"); code != 0 {
		t.Fatalf("the same queue twice: exit %d\n%s", code, stderr)
	}
}

// Every command takes --server URL, version too: its own switch (which
// broker release) is --broker, where a boolean --server shadowed the
// global flag ("unknown command" for the URL, a ParseBool error for
// --server=URL).
func TestVersionTakesTheServerFlag(t *testing.T) {
	_, cli := seeded(t)
	url := cli.Env["DLQCTL_SERVER"]
	delete(cli.Env, "DLQCTL_SERVER")
	for _, args := range [][]string{{"version", "--server", url, "--broker"}, {"version", "--server=" + url, "--broker"}} {
		out, stderr, code := cli.Exec(args...)
		if code != 0 || !strings.Contains(out, "broker "+url+": Queen 1.0–1.5") {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, stderr)
		}
	}
}
