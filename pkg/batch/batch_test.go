package batch_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

var now = testkit.Now

func world(t *testing.T, dsn string) (*sandbox.Broker, batch.Env) {
	t.Helper()
	b, url := seeded(t, nil)
	return b, batch.Env{Client: testkit.Client(t, url), Ledger: testkit.OpenLedger(t, dsn), Now: func() time.Time { return now }, User: "tester"}
}

// seeded serves the sandbox's seed, with what more adds to it: the
// broker and its URL.
func seeded(t *testing.T, more func(b *sandbox.Broker)) (*sandbox.Broker, string) {
	if more == nil {
		return testkit.Seeded(t, now)
	}
	return testkit.Seeded(t, now, more)
}

func selection(t *testing.T, s deadletter.Selection) *deadletter.Selection {
	t.Helper()
	if err := s.Compile(); err != nil {
		t.Fatal(err)
	}
	return &s
}

// prepare is batch.Prepare, the batch closed when the test ends.
func prepare(t *testing.T, env batch.Env, req batch.Request) (*batch.Pending, error) {
	p, err := batch.Prepare(context.Background(), env, req)
	if err == nil {
		t.Cleanup(p.Close)
	}
	return p, err
}

func request(action string, sel *deadletter.Selection) batch.Request {
	s := batch.DefaultSettings(action)
	s.Rate = 0
	return batch.Request{Action: action, Selection: sel, Settings: s, Why: "test"}
}

// A replay planned and run through the package: recorded before the
// first publish, every message once, the batch done, its rows archived
// and marked gone; run again, nothing is left to do.
func TestReplayLifecycle(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, _ *ledger.Store, dsn string) {
		b, env := world(t, dsn)
		ctx := context.Background()
		sel := selection(t, deadletter.Selection{Class: "f47c6181"})
		p, err := prepare(t, env, request(deadletter.Replay, sel))
		if err != nil {
			t.Fatal(err)
		}
		pl, err := p.MakePlan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		plan := pl.Plan()
		if plan.Messages != p.Messages() || !strings.HasPrefix(plan.Via, "manual") || plan.Order == nil {
			t.Fatalf("plan %+v", plan)
		}
		var recorded string
		res, err := pl.Run(ctx, batch.Go{}, batch.Hooks{Recorded: func(id string, fresh bool) { recorded = id }})
		if err != nil || recorded != p.BatchID() || !res.Report.Clean() || res.Report.Replayed != p.Messages() || len(res.Next) != 0 {
			t.Fatalf("run: %v, recorded %q, report %+v", err, recorded, res.Report.Outcome())
		}
		for _, r := range b.DeadLetterRows() {
			if strings.Contains(r.Error, "not found") && r.Queue == "orders" {
				t.Fatalf("%s/%s still dead-lettered", r.PartitionID, r.TransactionID)
			}
		}
		bt, err := env.Ledger.Batch(ctx, recorded)
		if err != nil || bt.Status != ledger.StatusDone || bt.By != "tester" {
			t.Fatalf("batch %+v %v", bt, err)
		}
		// Each phase is timed (replay -o json: phases), on the wall clock.
		if ph := res.Report.Phases; ph == nil || ph.Plan <= 0 || ph.Record <= 0 || ph.Start <= 0 || ph.Run <= 0 || ph.Settle <= 0 ||
			ph.Plan+ph.Record+ph.Start+ph.Run+ph.Settle > 60 {
			t.Fatalf("phases %+v", res.Report.Phases)
		}
		again, err := prepare(t, env, request(deadletter.Replay, sel))
		if err != nil || again.Messages() != 0 {
			t.Fatalf("the same selection again: %d messages (%v)", again.Messages(), err)
		}
	})
}

// A recorded batch resumes with its recorded settings; a resume cannot
// change the destination; a batch of another broker or action is
// refused.
func TestRecordedBatches(t *testing.T) {
	_, env := world(t, "sqlite://"+t.TempDir()+"/l.db")
	ctx := context.Background()
	b := &ledger.Batch{Action: ledger.ActionReplay, By: "ann", At: now, Why: "later"}
	d, err := batch.Decide(ctx, env, selection(t, deadletter.Selection{Queue: "payments"}), b)
	if err != nil || d.Messages == 0 {
		t.Fatalf("decide: %+v %v", d, err)
	}
	n := d.Messages
	req := request(deadletter.Replay, nil)
	req.BatchID, req.Why = b.ID, ""
	req.Settings.ToQueue = "elsewhere"
	req.Given = batch.GivenToQueue
	if _, err := prepare(t, env, req); err != nil {
		t.Fatalf("a decided batch records no destination; a first run may give one: %v", err)
	}
	req.Given = 0
	req.Settings.ToQueue = ""
	p, err := prepare(t, env, req)
	if err != nil || p.Why() != "later" || p.Messages() != n {
		t.Fatalf("prepare the recorded batch: %v, why %q, %d of %d", err, p.Why(), p.Messages(), n)
	}
	rm := request(deadletter.Discard, nil)
	rm.BatchID = b.ID
	if _, err := prepare(t, env, rm); errs.KindOf(err) != errs.Usage || !strings.Contains(err.Error(), "execute it with dlq replay") {
		t.Fatalf("rm of a replay batch: %v", err)
	}
}

// Decide records a hold for the messages a selection matches; the plan
// of a replay over them counts them held, and SkipHeld leaves them out.
func TestHoldsInPlans(t *testing.T) {
	_, env := world(t, "sqlite://"+t.TempDir()+"/l.db")
	ctx := context.Background()
	hold := &ledger.Batch{Action: ledger.ActionHold, By: "ann", At: now, Why: "INC", Until: now.Add(time.Hour)}
	d, err := batch.Decide(ctx, env, selection(t, deadletter.Selection{Class: "f47c6181"}), hold)
	if err != nil || d.Messages == 0 {
		t.Fatalf("hold: %+v %v", d, err)
	}
	p, err := prepare(t, env, request(deadletter.Replay, selection(t, deadletter.Selection{Queue: "orders"})))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := p.MakePlan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Held() != d.Messages {
		t.Fatalf("%d held in the plan, the hold has %d", pl.Held(), d.Messages)
	}
	all := p.Messages()
	req := request(deadletter.Replay, selection(t, deadletter.Selection{Queue: "orders"}))
	req.SkipHeld = true
	p, _ = prepare(t, env, req)
	if pl, err = p.MakePlan(ctx); err != nil {
		t.Fatal(err)
	}
	if pl.Held() != 0 || pl.SkippedHeld() != d.Messages || pl.Messages() != all-d.Messages {
		t.Fatalf("SkipHeld: %d held, %d skipped, %d of %d", pl.Held(), pl.SkippedHeld(), pl.Messages(), all)
	}
}

// NextSteps says how to go on from what a run left.
func TestNextSteps(t *testing.T) {
	rep := &replay.Report{Unknown: 2, BlockedPartitions: []replay.Blocked{{Permanent: true}},
		Listed: []replay.AddrResult{{Reason: "skipped: undecryptable envelope", Next: replay.DiscardNext}}}
	kinds := map[batch.StepKind]int{}
	for _, s := range batch.NextSteps(rep) {
		kinds[s.Kind] = s.N
	}
	if _, resume := kinds[batch.Resume]; resume || kinds[batch.RetryUnknown] != 2 || kinds[batch.SkipGaps] != 1 || kinds[batch.Unreplayable] != 1 {
		t.Fatalf("steps %v", kinds)
	}
	if !batch.Resumable(&replay.Report{Failed: 1}) || batch.Resumable(&replay.Report{}) {
		t.Fatal("a failed address is retried by a resume; a clean run has nothing left")
	}
}

// Once a run has recorded its settings, a resume keeps the destination
// and the transform; the other settings follow what the caller gave and
// the record elsewhere, a setting the run left out of its record (it was
// empty: no cap, no pacing) included.
func TestResumeSettings(t *testing.T) {
	started := []byte(`{"rate":5,"burst":1,"concurrency":4,"via":"auto","toQueue":"recovery","order":"partition"}`)
	if _, err := batch.ResumeSettings(started, batch.Settings{ToQueue: "elsewhere"}, batch.GivenToQueue); errs.KindOf(err) != errs.Flag {
		t.Fatalf("a started batch's destination changed: %v", err)
	}
	if _, err := batch.ResumeSettings(started, batch.Settings{Transform: ".x"}, batch.GivenTransform); errs.KindOf(err) != errs.Flag {
		t.Fatalf("a started batch's transform changed: %v", err)
	}
	defaults := batch.DefaultSettings(deadletter.Replay)
	defaults.Rate, defaults.ToQueue, defaults.MaxLag = 50, "elsewhere", "2m"
	got, err := batch.ResumeSettings(started, defaults, batch.GivenRate)
	if err != nil || got.Rate != 50 || got.ToQueue != "recovery" || got.Burst != 1 || got.MaxGeneration != 0 || got.MaxLag != "" {
		t.Fatalf("merge: %+v %v", got, err)
	}
	decided := []byte(`{"order":"partition"}`)
	got, err = batch.ResumeSettings(decided, batch.Settings{Rate: 10, ToQueue: "recovery", MaxGeneration: 3}, batch.GivenToQueue)
	if err != nil || got.ToQueue != "recovery" || got.Order != "partition" || got.Rate != 10 || got.MaxGeneration != 3 {
		t.Fatalf("a decided batch's first run: %+v %v", got, err)
	}
}
