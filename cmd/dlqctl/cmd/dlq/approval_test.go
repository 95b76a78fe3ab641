package dlq_test

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/internal/testutil"
)

// team is a shared PostgreSQL ledger for the CLI, alice's session by
// default: as returns the DSN of each person's own role.
func team(t *testing.T, cli *testutil.CLI) (as map[string]string) {
	as = testkit.PostgresRoles(t, "dlqctl_alice", "dlqctl_bob", "dlqctl_carol")
	cli.Env["DLQCTL_LEDGER"] = as["dlqctl_alice"]
	return as
}

// Four eyes: past approval.min-messages a replay is recorded with its
// plan and not run; its author cannot approve it, a second person can;
// then --batch runs it, as approved (a changed --to-queue is refused);
// the audit and decisions show say who approved, and check counts the
// batch as decided while it waits (not carried out past the SLO). On a
// shared PostgreSQL ledger, the people are the database's roles.
func TestLargeBatchesNeedASecondPerson(t *testing.T) {
	b, cli := seeded(t)
	as := team(t, cli)
	cli.WriteConfig("approval:\n  min-messages: 10\npolicies:\n  - queue: \"*\"\n    max-age: 1000d\n    triage-slo: 1000d\n")
	depth := b.Depth()
	out, _, _ := cli.Exec("dlq", "replay", "--class", "ad8e8ffc", "--why", "v4 parser", "--dry-run")
	if !strings.Contains(out, "approval: more than 10 messages") {
		t.Fatalf("the plan does not say it awaits approval:\n%s", out)
	}
	out, stderr, code := cli.Exec("dlq", "replay", "--class", "ad8e8ffc", "--why", "v4 parser", "--yes", "--rate", "0")
	id := strings.TrimSpace(out)
	if code != 6 || !regexp.MustCompile(`^\d{8}T\d{6}-[0-9a-f]{4}$`).MatchString(id) || !strings.Contains(stderr, "need a second person's approval") || b.Depth() != depth || len(b.LiveMessages()) != 0 {
		t.Fatalf("a large replay ran, or did not say it awaits approval: exit %d, depth %d of %d\n%s\n%s", code, b.Depth(), depth, out, stderr)
	}
	if out, _, _ := cli.Exec("decisions", "ls"); !strings.Contains(out, "awaiting-approval") {
		t.Fatalf("decisions ls:\n%s", out)
	}
	// Waiting for approval past the triage SLO is a decision not carried
	// out: check (and the exporter, which judges the same) breaches.
	cli.WriteConfig("approval:\n  min-messages: 10\npolicies:\n  - queue: \"*\"\n    max-age: 1000d\n    triage-slo: 1h\n")
	cli.Clock = testutil.Now.Add(2 * time.Hour)
	if _, stderr, code := cli.Exec("dlq", "check", "--queue", "orders"); code != 1 || !strings.Contains(stderr, "decided, not carried out: batch "+id) || !strings.Contains(stderr, "awaiting-approval") {
		t.Fatalf("check while it awaits approval past the SLO: exit %d\n%s", code, stderr)
	}
	cli.Clock = time.Time{}
	cli.WriteConfig("approval:\n  min-messages: 10\npolicies:\n  - queue: \"*\"\n    max-age: 1000d\n    triage-slo: 1000d\n")
	if _, stderr, code := cli.Exec("dlq", "replay", "--batch", id, "--yes", "--rate", "0"); code != 6 || !strings.Contains(stderr, "awaits approval") || len(b.LiveMessages()) != 0 {
		t.Fatalf("running it unapproved: exit %d\n%s", code, stderr)
	}
	// Its author (alice's role, recorded as oncall) cannot approve it,
	// whatever name she gives.
	for _, user := range []string{"oncall", "bob", "dlqctl_bob"} {
		cli.Env["DLQCTL_USER"] = user
		if _, stderr, code := cli.Exec("decisions", "approve", id, "--why", "looks fine to me"); code != 2 || !strings.Contains(stderr, "someone other than its author") {
			t.Fatalf("self-approval as %s: exit %d\n%s", user, code, stderr)
		}
	}
	cli.Env["DLQCTL_USER"], cli.Env["DLQCTL_LEDGER"] = "oncall", as["dlqctl_bob"]
	if _, stderr, code := cli.Exec("decisions", "approve", id, "--why", "checked the plan"); code != 0 || !strings.Contains(stderr, "Approved replay batch "+id) ||
		!strings.Contains(stderr, "by dlqctl_bob (the database role this ledger authenticated)") || strings.Contains(stderr, "SQLite") {
		t.Fatalf("bob's approval: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := cli.Exec("decisions", "approve", id, "--why", "again"); code != 2 {
		t.Fatalf("approving twice: exit %d\n%s", code, stderr)
	}
	cli.Env["DLQCTL_LEDGER"] = as["dlqctl_alice"]
	// Approved for the original destination: another one is another plan
	// (a recorded batch's destination does not change either way).
	if _, stderr, code := cli.Exec("dlq", "replay", "--batch", id, "--yes", "--rate", "0", "--to-queue", "orders-recovery"); code != 2 || len(b.LiveMessages()) != 0 {
		t.Fatalf("a changed plan: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := cli.Exec("dlq", "replay", "--batch", id, "--yes", "--rate", "0"); code != 0 || len(b.LiveMessages()) == 0 {
		t.Fatalf("the approved batch: exit %d, %d live\n%s", code, len(b.LiveMessages()), stderr)
	}
	out, _, _ = cli.Exec("decisions", "show", id)
	if !strings.Contains(out, "Approved:") || !strings.Contains(out, "by dlqctl_bob (the database role this ledger authenticated): checked the plan") || !strings.Contains(out, "approved") || !strings.Contains(out, "awaiting-approval") {
		t.Fatalf("decisions show of an approved batch:\n%s", out)
	}
	// Below the threshold, a replay runs as before.
	r := b.DeadLetterRows()[0]
	if _, stderr, code := cli.Exec("dlq", "replay", r.PartitionID+"/"+r.TransactionID, "--why", "small", "--yes", "--rate", "0"); code != 0 || strings.Contains(stderr, "approval") {
		t.Fatalf("a small replay: exit %d\n%s", code, stderr)
	}
}

// A large decision recorded with dlq decide is a plan like any other:
// its --batch runs it only once a second person approved it, for a
// replay and a discard alike.
func TestADecidedBatchNeedsASecondPersonToo(t *testing.T) {
	b, cli := seeded(t)
	as := team(t, cli)
	cli.WriteConfig("approval:\n  min-messages: 10\n")
	for _, c := range []struct{ action, verb string }{{"replay", "replay"}, {"discard", "rm"}} {
		depth, live := b.Depth(), len(b.LiveMessages())
		out, stderr, code := cli.Exec("dlq", "decide", "--queue", map[string]string{"replay": "payments", "discard": "notifications"}[c.action], "--action", c.action, "--why", "x")
		id := strings.TrimSpace(out)
		if code != 6 || !strings.Contains(stderr, "need a second person's approval") {
			t.Fatalf("decide --action %s: exit %d, want 6 as a batch awaiting approval\n%s", c.action, code, stderr)
		}
		if _, stderr, code := cli.Exec("dlq", c.verb, "--batch", id, "--yes", "--rate", "0"); code != 6 || !strings.Contains(stderr, "awaits approval") || b.Depth() != depth || len(b.LiveMessages()) != live {
			t.Fatalf("dlq %s --batch of an unapproved decision: exit %d, depth %d of %d\n%s", c.verb, code, b.Depth(), depth, stderr)
		}
		cli.Env["DLQCTL_LEDGER"] = as["dlqctl_bob"]
		if _, stderr, code := cli.Exec("decisions", "approve", id, "--why", "checked"); code != 0 {
			t.Fatalf("bob's approval: exit %d\n%s", code, stderr)
		}
		cli.Env["DLQCTL_LEDGER"] = as["dlqctl_alice"]
		if _, stderr, code := cli.Exec("dlq", c.verb, "--batch", id, "--yes", "--rate", "0"); code != 0 || b.Depth() >= depth {
			t.Fatalf("the approved decision: exit %d\n%s", code, stderr)
		}
	}
}

// Who recorded a batch is not a name anyone types: with --by, the batch
// is recorded as carol's decision, and the person who typed it still
// cannot approve it, on either engine. On SQLite, which vouches for
// nobody, an approval says so.
func TestTheAuthorIsNotAFlag(t *testing.T) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			b, cli := seeded(t)
			if engine == "postgres" {
				team(t, cli)
			}
			cli.WriteConfig("approval:\n  min-messages: 10\n")
			depth := b.Depth()
			out, stderr, code := cli.Exec("dlq", "rm", "--queue", "notifications", "--by", "carol", "--why", "mine", "--yes", "--rate", "0")
			id := strings.TrimSpace(out)
			if code != 6 || id == "" || b.Depth() != depth {
				t.Fatalf("rm --by carol: exit %d\n%s\n%s", code, out, stderr)
			}
			for _, user := range []string{"oncall", "bob"} {
				cli.Env["DLQCTL_USER"] = user
				if _, stderr, code := cli.Exec("decisions", "approve", id, "--why", "fine"); code != 2 || !strings.Contains(stderr, "someone other than its author") {
					t.Fatalf("approved by whoever typed --by carol (as %s): exit %d\n%s", user, code, stderr)
				}
			}
			out, _, _ = cli.Exec("decisions", "show", id)
			if !strings.Contains(out, "By:          carol (recorded by ") {
				t.Fatalf("decisions show does not say who recorded it:\n%s", out)
			}
			if _, stderr, code := cli.Exec("dlq", "rm", "--batch", id, "--yes"); code != 6 || b.Depth() != depth || !strings.Contains(stderr, "awaits approval") {
				t.Fatalf("the unapproved batch ran: depth %d of %d\n%s", b.Depth(), depth, stderr)
			}
		})
	}
}

// psql runs one statement as the role dsn logs in as, with psql itself,
// as a person holding that role's rights would; the statement's error
// (psql's stderr, with the SQLSTATE: the guards' is DQ001) or nil.
func psql(t *testing.T, dsn, stmt string) error {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	schema := q.Get("search_path")
	q.Del("search_path")
	u.RawQuery = q.Encode()
	cmd := exec.Command("psql", u.String(), "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", "-qAtc", stmt)
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+schema)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// Four eyes on a shared PostgreSQL ledger is the database's to keep: a
// role holding the rights docs/configuration.md gives cannot make the
// record say another role wrote its batch, set its own batch free, write
// an approval in another's name, undo one, rewrite the audit or the
// manifest, or lower the team's threshold, with psql or with its own
// config; judged by what the broker holds.
func TestFourEyesIsKeptByTheDatabase(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil && os.Getenv("CI") == "" {
		t.Skip("psql is not installed")
	}
	b, cli := seeded(t)
	as := team(t, cli)
	alice, bob, carol := as["dlqctl_alice"], as["dlqctl_bob"], as["dlqctl_carol"]
	for _, who := range []string{alice, carol} {
		cli.Env["DLQCTL_LEDGER"] = who
		if _, stderr, code := cli.Exec("decisions", "threshold", "1000", "--why", "mine"); code != 4 || !strings.Contains(stderr, "the role that owns the ledger") {
			t.Fatalf("a role that does not own the ledger set its threshold: exit %d\n%s", code, stderr)
		}
	}
	cli.Env["DLQCTL_LEDGER"] = as[testkit.Owner]
	if _, stderr, code := cli.Exec("decisions", "threshold", "5", "--why", "incident review"); code != 0 {
		t.Fatalf("the owner sets the threshold: exit %d\n%s", code, stderr)
	}
	// Alice's own config asks for approval only past 1000: the team's 5
	// binds her all the same.
	cli.Env["DLQCTL_LEDGER"] = alice
	cli.WriteConfig("approval:\n  min-messages: 1000\n")
	if out, _, _ := cli.Exec("decisions", "threshold"); !strings.Contains(out, "more than 5 messages") || !strings.Contains(out, "await a second person's approval in this session") {
		t.Fatalf("decisions threshold:\n%s", out)
	}
	depth := b.Depth()
	out, stderr, code := cli.Exec("dlq", "replay", "--queue", "orders", "--why", "inventory fixed", "--yes", "--rate", "0")
	id := strings.TrimSpace(out)
	if code != 6 || id == "" || b.Depth() != depth {
		t.Fatalf("a batch past the team's threshold: exit %d\n%s", code, stderr)
	}
	for _, forgery := range []string{
		`UPDATE batches SET author = 'dlqctl_bob' WHERE id = '` + id + `'`,
		`UPDATE batches SET status = 'recorded', needs_approval = 0 WHERE id = '` + id + `'`,
		`UPDATE batches SET status = 'recorded' WHERE id = '` + id + `'`,
		`UPDATE batches SET size = 4 WHERE id = '` + id + `'`,
		`DELETE FROM batches WHERE id = '` + id + `'`,
		`INSERT INTO approvals (batch_id, by_name, at, why, digest, approver) VALUES ('` + id + `', 'dlqctl_bob', '2026-11-30T03:00:00.000000000Z', 'ok', 'x', 'dlqctl_bob')`,
		// A temporary table is searched before the ledger's schema; the
		// guards read their own schema.
		`CREATE TEMP TABLE approvals (batch_id text, approver text); INSERT INTO approvals VALUES ('` + id + `', 'dlqctl_bob'); UPDATE batches SET status = 'recorded' WHERE id = '` + id + `'`,
		`UPDATE batch_items SET transaction_id = 'order:1' WHERE batch_id = '` + id + `'`,
		`DELETE FROM batch_items WHERE batch_id = '` + id + `'`,
		`INSERT INTO batches (id, broker, action, by_name, at, why, size) VALUES ('forged', '` + cli.Broker() + `', 'replay', 'oncall', '2026-11-30T03:00:00.000000000Z', 'w', 20)`,
		`UPDATE ledger_settings SET value = '100000'`,
		`DELETE FROM ledger_settings`,
		`UPDATE audit SET by_name = 'dlqctl_bob'`,
		`DELETE FROM audit`,
	} {
		if err := psql(t, alice, forgery); err == nil || !strings.Contains(err.Error(), "DQ001") {
			t.Errorf("alice's forgery was let through: %s (%v)", forgery, err)
		}
	}
	if _, stderr, code := cli.Exec("dlq", "replay", "--batch", id, "--yes", "--rate", "0"); code != 6 || b.Depth() != depth || len(b.LiveMessages()) != 0 {
		t.Fatalf("the batch ran without a second person: exit %d, depth %d of %d\n%s", code, b.Depth(), depth, stderr)
	}
	cli.Env["DLQCTL_LEDGER"] = bob
	if _, stderr, code := cli.Exec("decisions", "approve", id, "--why", "checked the plan"); code != 0 {
		t.Fatalf("bob's approval: exit %d\n%s", code, stderr)
	}
	for _, forgery := range []string{
		`UPDATE approvals SET approver = 'dlqctl_carol'`,
		`DELETE FROM approvals`,
		`UPDATE batches SET status = 'awaiting-approval', author = 'dlqctl_carol' WHERE id = '` + id + `'`,
	} {
		if err := psql(t, alice, forgery); err == nil || !strings.Contains(err.Error(), "DQ001") {
			t.Errorf("alice's forgery after the approval was let through: %s (%v)", forgery, err)
		}
	}
	cli.Env["DLQCTL_LEDGER"] = alice
	if _, stderr, code := cli.Exec("dlq", "replay", "--batch", id, "--yes", "--rate", "0"); code != 0 || b.Depth() >= depth {
		t.Fatalf("the approved batch: exit %d\n%s", code, stderr)
	}
	out, _, _ = cli.Exec("decisions", "show", id)
	if !strings.Contains(out, "recorded by database role dlqctl_alice") || !strings.Contains(out, "dlqctl_bob") {
		t.Fatalf("decisions show of the batch:\n%s", out)
	}
}

// The approval line a recorded batch prints is another person's command:
// pasted by bob in his own context, it approves; it names who may not
// approve as the ledger knows them (alice's role, not the OS account),
// for a replay and for dlq decide alike.
func TestTheApprovalLinePastedBySomeoneElse(t *testing.T) {
	_, cli := seeded(t)
	as := team(t, cli)
	server := cli.Env["DLQCTL_SERVER"]
	delete(cli.Env, "DLQCTL_SERVER")
	delete(cli.Env, "DLQCTL_LEDGER")
	cli.WriteConfig("approval:\n  min-messages: 10\ncontexts:\n  alice: {server: " + server + ", ledger: '" + as["dlqctl_alice"] + "'}\n  bob: {server: " + server + ", ledger: '" + as["dlqctl_bob"] + "'}\n")
	for _, args := range [][]string{
		{"--context", "alice", "dlq", "replay", "--queue", "payments", "--why", "fixed", "--yes", "--rate", "0"},
		{"--context", "alice", "dlq", "decide", "--queue", "orders", "--action", "replay", "--why", "fixed"},
	} {
		out, stderr, code := cli.Exec(args...)
		id := strings.TrimSpace(out)
		m := regexp.MustCompile(`Someone other than (.+) approves it, connected to this ledger as themselves: (dlqctl decisions approve .*)`).FindStringSubmatch(stderr)
		if code != 6 || m == nil {
			t.Fatalf("%v: exit %d, no approval line\n%s", args, code, stderr)
		}
		if m[1] != "database role dlqctl_alice" || strings.Contains(m[2], "--context") || strings.Contains(m[2], "--ledger") {
			t.Fatalf("%v: the approval line names %q and is %q", args, m[1], m[2])
		}
		words, err := shellWords(m[2])
		if err != nil {
			t.Fatal(err)
		}
		words[len(words)-1] = "pasted by bob"
		cli.Env["DLQCTL_CONTEXT"] = "bob"
		_, stderr, code = cli.Exec(words[1:]...)
		delete(cli.Env, "DLQCTL_CONTEXT")
		if code != 0 || !strings.Contains(stderr, "Approved") || !strings.Contains(stderr, id) {
			t.Fatalf("%v: bob pasted %q: exit %d\n%s", args, m[2], code, stderr)
		}
	}
}
