package batch_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// pinJournal records a manual attempt on the DLQ's first address, as a
// run that died after its push leaves it: the plan says it keeps the
// manual path.
func pinJournal(t *testing.T, env batch.Env) {
	t.Helper()
	ctx := context.Background()
	var a deadletter.Address
	for r, err := range env.Client.Rows(ctx, client.ListQuery{Limit: 100, NoData: true}) {
		if err != nil {
			t.Fatal(err)
		}
		a = r.Address()
		break
	}
	ents, err := env.Ledger.Acquire(ctx, env.Client.Broker(), "earlier", ledger.ActionReplay, []deadletter.Address{a}, ledger.PlainEnrolments(1), "o", now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	e := ents[a]
	e.State, e.Via, e.ReplayTxID = ledger.Inflight, replay.ViaManual, replay.ReplayTxID(a, 1)
	if errs := env.Ledger.SaveMany(ctx, []ledger.SaveItem{{Entry: e, Release: true}}, "o", now); errs[0] != nil {
		t.Fatal(errs[0])
	}
}

// A queue with more consumer groups than fit in a word (70) is planned
// as any other, dry run or not.
func TestManyGroupsInOneQueue(t *testing.T) {
	b := sandbox.New(func() time.Time { return now })
	var dls []sandbox.DeadLetter
	for i := range 300 {
		dls = append(dls, sandbox.DeadLetter{Queue: "wide", Partition: fmt.Sprint(i % 5), TransactionID: fmt.Sprintf("m-%d", i%40),
			ConsumerGroup: fmt.Sprintf("g%02d", i%70), Error: "boom", RetryCount: 1, FailedAt: now.Add(-time.Duration(i) * time.Second)})
	}
	b.AddDeadLetters(dls...)
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	env := batch.Env{Client: testkit.Client(t, srv.URL), Ledger: testkit.OpenLedger(t, "sqlite://"+t.TempDir()+"/l.db"), Now: func() time.Time { return now }, User: "tester"}
	ctx := context.Background()
	var plans [2]batch.Plan
	for i, planOnly := range []bool{false, true} {
		req := request(deadletter.Replay, selection(t, deadletter.Selection{Queue: "wide"}))
		req.PlanOnly = planOnly
		p, err := prepare(t, env, req)
		if err != nil {
			t.Fatal(err)
		}
		pl, err := p.MakePlan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		plans[i] = pl.Plan()
	}
	if plans[0].Messages != 40 || plans[0].Rows != 300 || !reflect.DeepEqual(plans[0], plans[1]) {
		t.Fatalf("plans differ or miss:\n%+v\n%+v", plans[0], plans[1])
	}
}
