package dlq_test

import (
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
		if code != 0 || !strings.Contains(stderr, "need a second person's approval") {
			t.Fatalf("decide --action %s: exit %d\n%s", c.action, code, stderr)
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
