package gate_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/gate"
	"github.com/dlqctl/dlqctl/pkg/policy"
)

// A broker whose clock runs two hours ahead writes failedAt two hours in
// the future. Read as age 0, its dead letters would never breach; each
// counts as old as it is ahead instead, and the check says why.
func TestFutureFailedAtCountsAsTheSkew(t *testing.T) {
	for _, line := range []sandbox.Line{sandbox.Queen15, sandbox.Queen015} {
		b := sandbox.New(func() time.Time { return now })
		b.SetLine(line)
		b.AddQueue("skewed", false, 3, "workers")
		b.AddDeadLetters(
			sandbox.DeadLetter{Queue: "skewed", Partition: "p", TransactionID: "t1", ConsumerGroup: "workers", Error: "boom", FailedAt: now.Add(2 * time.Hour)},
			sandbox.DeadLetter{Queue: "skewed", Partition: "p", TransactionID: "t2", ConsumerGroup: "workers", Error: "boom", FailedAt: now.Add(90 * time.Minute)},
		)
		srv := httptest.NewServer(b.Handler())
		t.Cleanup(srv.Close)
		cl := testkit.Client(t, srv.URL)
		res, err := gate.Check(context.Background(), cl, gate.Input{Now: now,
			Policies: policy.Set{{Queue: "skewed", Policy: policy.Policy{MaxAge: time.Hour}}}})
		if err != nil {
			t.Fatal(err)
		}
		s := scope(res, "skewed", "workers")
		if res.OK || len(s.Breaches) != 1 || s.OldestAgeSeconds < 90*60 {
			t.Fatalf("%s: dead letters 90 and 120 minutes in the future, max-age 1h: ok %v, oldest %v s, breaches %v", line, res.OK, s.OldestAgeSeconds, s.Breaches)
		}
		if s.FailedAhead == 0 || s.AheadSeconds < 90*60 {
			t.Fatalf("%s: ahead %d by %v s", line, s.FailedAhead, s.AheadSeconds)
		}
		if !strings.Contains(strings.Join(res.Notes, "\n"), "failed after now") {
			t.Fatalf("%s: no note of the skew: %q", line, res.Notes)
		}
	}
}

// --triage-slo alone overrides the triage SLO only: a queue with no
// policy is still held to max-age 0, as it is without the flag.
func TestTriageSLOFlagAloneKeepsTheDefaultMaxAge(t *testing.T) {
	_, cl := seeded(t, false)
	res, err := gate.Check(context.Background(), cl, gate.Input{Now: now, TriageSLO: 100000 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s := scope(res, "payments", "ledger")
	if res.OK || !s.DefaultedMaxAge || len(s.Breaches) != 1 || s.Breaches[0].Kind != gate.DefaultMaxAge {
		t.Fatalf("--triage-slo alone, no policy: ok %v, payments/ledger %+v", res.OK, s)
	}
	// A policy that sets only a triage SLO leaves max-age unchecked.
	res, err = gate.Check(context.Background(), cl, gate.Input{Now: now, TriageSLO: 100000 * time.Hour,
		Policies: policy.Set{{Queue: "payments", Policy: policy.Policy{TriageSLO: time.Hour}}}})
	if err != nil {
		t.Fatal(err)
	}
	if s := scope(res, "payments", "ledger"); s.DefaultedMaxAge || len(s.Breaches) != 0 {
		t.Fatalf("a policy with a triage SLO only: payments/ledger %+v", s)
	}
}
