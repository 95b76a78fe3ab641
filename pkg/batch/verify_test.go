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
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// After a replay, the broker consumes some copies, fails some again and
// loses some; verify counts each where it is, records it, asks only what
// is not known to be completed the next time, and marks the batch
// verified once every copy completed. On both broker modes: the /retry
// endpoint's copies (new ids) and the manual path's (derived ids).
func TestVerifyCopies(t *testing.T) {
	for _, released := range []bool{false, true} {
		testkit.ForEachLedger(t, func(t *testing.T, _ *ledger.Store, dsn string) {
			b, env := world(t, dsn)
			if released {
				b.SetLine(sandbox.Queen015)
			}
			ctx := context.Background()
			res := run(t, env, deadletter.Replay, deadletter.Selection{Class: "f47c6181"})
			if res.Report.Replayed == 0 {
				t.Fatalf("run: %+v", res.Report)
			}
			id := res.Report.BatchID
			live := b.LiveMessages()
			if len(live) != res.Report.Replayed {
				t.Fatalf("%d copies live for %d replayed", len(live), res.Report.Replayed)
			}
			// 0, 1: completed; 2: dead-lettered again; 3: lost; the rest pending.
			b.Complete(live[0].PartitionID, live[0].TransactionID)
			b.Complete(live[1].PartitionID, live[1].TransactionID)
			if !b.FailAgain(live[2].Queue, live[2].TransactionID, "billing", "still broken") {
				t.Fatal("FailAgain")
			}
			b.Forget(live[3].PartitionID, live[3].TransactionID)

			v, err := batch.Verify(ctx, env.Client, env.Ledger, id, batch.VerifyOptions{By: "ann"})
			if err != nil {
				t.Fatal(err)
			}
			n := len(live)
			if v.Copies != n || v.Completed != 2 || v.DeadLetteredAgain != 1 || v.Missing != 1 || v.Pending != n-4 || v.Unchecked != 0 || v.Complete {
				t.Fatalf("released=%v: %+v", released, v)
			}
			if len(v.ByQueue) != 1 || v.ByQueue[0].Queue != "orders" || len(v.NotCompleted) != n-2 {
				t.Fatalf("by queue %+v, %d not completed", v.ByQueue, len(v.NotCompleted))
			}
			if released && v.ByQueue[0].PendingGroups["billing"] != n-4 {
				t.Fatalf("the released server names the groups that have not consumed: %+v", v.ByQueue[0].PendingGroups)
			}
			last, err := env.Ledger.LastVerification(ctx, id)
			if err != nil || last == nil || last.Counts[ledger.CopyDeadAgain] != 1 || last.By != "ann" {
				t.Fatalf("recorded: %+v %v", last, err)
			}

			// Everything still live is consumed; the lost and re-failed stay
			// what they are. The completed ones are not asked again.
			for _, m := range b.LiveMessages() {
				b.Complete(m.PartitionID, m.TransactionID)
			}
			b.ResetCalls()
			v, err = batch.Verify(ctx, env.Client, env.Ledger, id, batch.VerifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if v.Asked != n-2 || b.Calls()["GET /api/v1/messages"] != n-2 || v.Completed != n-2 || v.Complete {
				t.Fatalf("second verify: asked %d (%d calls): %+v", v.Asked, b.Calls()["GET /api/v1/messages"], v)
			}
			bt, _ := env.Ledger.Batch(ctx, id)
			if bt.Status != ledger.StatusDone {
				t.Fatalf("status %s with copies lost", bt.Status)
			}
		})
	}
}

// A batch whose every copy completed is verified; a discard has nothing
// to verify.
func TestVerifiedBatch(t *testing.T) {
	b, env := world(t, "sqlite://"+t.TempDir()+"/l.db")
	ctx := context.Background()
	res := run(t, env, deadletter.Replay, deadletter.Selection{Class: "f47c6181"})
	for _, m := range b.LiveMessages() {
		b.Complete(m.PartitionID, m.TransactionID)
	}
	v, err := batch.Verify(ctx, env.Client, env.Ledger, res.Report.BatchID, batch.VerifyOptions{})
	if err != nil || !v.Complete {
		t.Fatalf("%v %+v", err, v)
	}
	bt, _ := env.Ledger.Batch(ctx, res.Report.BatchID)
	if bt.Status != ledger.StatusVerified {
		t.Fatalf("status %s", bt.Status)
	}
	dec, _ := env.Ledger.LatestDecisions(ctx, env.Client.Broker())
	for _, d := range dec {
		if d.BatchID == bt.ID && d.Label(now) != "replayed" {
			t.Fatalf("a verified replay reads %q", d.Label(now))
		}
	}

	rres := run(t, env, deadletter.Discard, deadletter.Selection{Class: "3ce87dde"})
	if _, err := batch.Verify(ctx, env.Client, env.Ledger, rres.Report.BatchID, batch.VerifyOptions{}); err == nil {
		t.Fatal("a discard verified")
	}
}

// run plans and runs a batch of a selection through the package.
func run(t *testing.T, env batch.Env, action string, s deadletter.Selection) *batch.Result {
	t.Helper()
	ctx := context.Background()
	p, err := prepare(t, env, request(action, selection(t, s)))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := p.MakePlan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := pl.Run(ctx, batch.Go{}, batch.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A batch of more copies than a page is verified a page at a time: every
// copy counted once, each not completed given to the sink once, in
// manifest order. Interrupted part way, the pages asked are recorded,
// the rest are counted as not asked, and the next verify finishes it.
func TestVerifyPages(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, _ *ledger.Store, dsn string) {
		b, url := seeded(t, func(b *sandbox.Broker) { b.Fill(2600, 1) })
		env := batch.Env{Client: testkit.Client(t, url), Ledger: testkit.OpenLedger(t, dsn), Now: func() time.Time { return now }, User: "tester"}
		ctx := context.Background()
		res := run(t, env, deadletter.Replay, deadletter.Selection{All: true})
		live := b.LiveMessages()
		n := len(live)
		if n < 1500 || res.Report.Replayed != n {
			t.Fatalf("%d copies live for %d replayed", n, res.Report.Replayed)
		}
		for _, m := range live[:n/2] {
			b.Complete(m.PartitionID, m.TransactionID)
		}

		// Interrupted once 500 copies (of the first page's 1,000) were
		// asked about: the rest of the page is unchecked, the next never
		// read.
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var sunk int
		v, err := batch.Verify(cctx, env.Client, env.Ledger, res.Report.BatchID, batch.VerifyOptions{
			NotCompleted: func(batch.CopyState) error { sunk++; return nil },
			Progress: func(done, total int) {
				if done == 500 {
					cancel()
				}
			}})
		if err == nil || v == nil {
			t.Fatalf("interrupted: %v %+v", err, v)
		}
		if v.Copies != n || v.NotAsked != n-1000 || v.Completed+v.Pending+v.Unchecked != n || len(v.NotCompleted) != 0 || sunk != n-v.Completed-v.NotAsked {
			t.Fatalf("interrupted: %d copies, sunk %d: %+v", n, sunk, v)
		}

		// Run again: the pages asked before are not asked again where
		// they completed; every copy is counted, each not completed once.
		seen := map[string]bool{}
		var order []string
		v, err = batch.Verify(ctx, env.Client, env.Ledger, res.Report.BatchID, batch.VerifyOptions{
			NotCompleted: func(st batch.CopyState) error {
				if seen[st.Of.String()] {
					t.Errorf("%s given twice", st.Of)
				}
				seen[st.Of.String()] = true
				order = append(order, st.Of.String())
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		if v.Copies != n || v.Completed != n/2 || v.Pending != n-n/2 || v.NotAsked != 0 || len(seen) != n-n/2 || v.Asked >= n {
			t.Fatalf("second verify of %d copies: %+v (%d not completed given)", n, v, len(seen))
		}
		man, err := env.Ledger.Manifest(ctx, res.Report.BatchID)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, m := range man {
			if seen[m.Address.String()] {
				want = append(want, m.Address.String())
			}
		}
		if strings.Join(order, " ") != strings.Join(want, " ") {
			t.Fatal("the copies not completed are not given in manifest order")
		}
	})
}
