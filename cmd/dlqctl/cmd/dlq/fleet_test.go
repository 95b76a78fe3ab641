package dlq_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
	"github.com/dlqctl/dlqctl/internal/testutil"
)

// One gate over the fleet: every context judged with its own broker,
// ledger and policies; the worst verdict is the exit (an unreachable
// context is exit 3, never a pass); each format names the context.
func TestCheckAllContexts(t *testing.T) {
	cli := testutil.Fleet(t, root.Run)
	out, stderr, code := cli.Exec("--timeout", "2s", "dlq", "check", "--all-contexts", "-o", "json")
	if code != 3 {
		t.Fatalf("a context is unreachable: exit %d, want 3\n%s", code, stderr)
	}
	var res struct {
		OK       bool
		Contexts []struct {
			Context, Error string
			OK             bool
			Result         *struct{ OK bool }
		}
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.OK || len(res.Contexts) != 3 {
		t.Fatalf("json: %v\n%s", err, out)
	}
	byName := map[string]int{}
	for i, c := range res.Contexts {
		byName[c.Context] = i
	}
	calm, busy, gone := res.Contexts[byName["calm"]], res.Contexts[byName["busy"]], res.Contexts[byName["gone"]]
	if !calm.OK || calm.Result == nil || !calm.Result.OK {
		t.Fatalf("calm (its own policy: 1000d) should pass: %+v", calm)
	}
	if busy.OK || busy.Result == nil || busy.Result.OK {
		t.Fatalf("busy (no policy, max-age 0) should breach: %+v", busy)
	}
	if gone.OK || gone.Result != nil || gone.Error == "" {
		t.Fatalf("gone should have no verdict and say why: %+v", gone)
	}

	// Without the unreachable one, the worst is busy's breach: exit 1.
	out, stderr, code = cli.Exec("--timeout", "2s", "--context", "calm,busy", "dlq", "check")
	if code != 1 || !strings.Contains(out, "CONTEXT") || !strings.Contains(stderr, "breach busy ") || strings.Contains(stderr, "breach calm ") {
		t.Fatalf("calm,busy: exit %d\n%s\n%s", code, out, stderr)
	}
	if _, stderr, code := cli.Exec("--timeout", "2s", "--context", "calm", "dlq", "check"); code != 0 {
		t.Fatalf("calm alone: exit %d\n%s", code, stderr)
	}

	out, _, code = cli.Exec("--timeout", "2s", "dlq", "check", "--all-contexts", "--format", "prometheus")
	if code != 3 || !strings.Contains(out, `dlqctl_broker_up{context="gone"} 0`) || !strings.Contains(out, `dlqctl_broker_up{context="calm"} 1`) ||
		!regexp.MustCompile(`dlqctl_dlq_breach\{consumer_group="[a-z]*",context="busy",owner="",queue="orders"\} 1`).MatchString(out) {
		t.Fatalf("prometheus: exit %d\n%s", code, out)
	}
	out, _, _ = cli.Exec("--timeout", "2s", "dlq", "check", "--all-contexts", "--format", "github")
	if !strings.Contains(out, "::error title=DLQ context gone::no verdict") || !strings.Contains(out, "::error title=DLQ busy orders") {
		t.Fatalf("github:\n%s", out)
	}

	for _, args := range [][]string{
		{"--server", "http://x", "dlq", "check", "--all-contexts"},
		{"--context", "calm", "dlq", "check", "--all-contexts"},
		{"--context", "calm,nope", "dlq", "check"},
	} {
		if _, stderr, code := cli.Exec(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, stderr)
		}
	}
}
