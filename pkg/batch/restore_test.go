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
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// runBatch plans and runs a batch of req, and returns its report (none
// for a batch of no message, whose plan is empty).
func runBatch(t *testing.T, env batch.Env, req batch.Request) (*batch.Planned, *replay.Report) {
	t.Helper()
	ctx := context.Background()
	p, err := prepare(t, env, req)
	if err != nil {
		t.Fatal(err)
	}
	if p.Messages() == 0 {
		return &batch.Planned{Pending: p}, nil
	}
	pl, err := p.MakePlan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := pl.Run(ctx, batch.Go{}, batch.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	return pl, res.Report
}

// A discard is undone on every Queen line: restore --batch of the discard
// publishes each message it deleted once more, under the id derived from
// its address, to its own queue and partition, with the payload the
// archive kept; the envelopes the archive kept undecrypted are said and
// left out; a queue that does not exist is said and published nothing;
// a second restore publishes nothing and says why; decisions verify asks
// after each copy; show says who discarded and who restored it, as what.
func TestRestoreUndoesADiscard(t *testing.T) {
	for _, line := range []sandbox.Line{sandbox.Queen015, sandbox.Queen15, sandbox.Queen16, sandbox.Queen22} {
		t.Run(line.String(), func(t *testing.T) {
			b, url := seeded(t, func(b *sandbox.Broker) { b.SetLine(line) })
			cl := testkit.Client(t, url)
			env := batch.Env{Client: cl, Ledger: testkit.OpenLedger(t, "sqlite://"+t.TempDir()+"/l.db"), Now: func() time.Time { return now }, User: "tester"}
			ctx := context.Background()
			undec := 0
			var payments int
			for _, r := range b.DeadLetterRows() {
				if r.Queue == "notifications" && strings.HasPrefix(r.Error, "decryption failed") {
					undec++
				}
			}
			_, rm := runBatch(t, env, request(deadletter.Discard, selection(t, deadletter.Selection{Queue: "notifications"})))
			if rm == nil || rm.Discarded == 0 || undec == 0 {
				t.Fatalf("the discard: %+v, %d undecryptable", rm, undec)
			}
			discard := rm.BatchID
			_, rmp := runBatch(t, env, request(deadletter.Discard, selection(t, deadletter.Selection{Queue: "payments"})))
			payments = rmp.Discarded
			live := len(b.LiveMessages())

			// What the discard of notifications archived, by its batch.
			req := request(deadletter.Restore, nil)
			req.BatchID = discard
			p, rep := runBatch(t, env, req)
			if rep == nil || rep.Restored != rm.Discarded-undec || rep.SkippedEncrypted != undec || rep.Duplicate != 0 || p.Plan().Undecryptable != undec {
				t.Fatalf("restore of batch %s: %+v (plan %+v), want %d restored, %d undecryptable", discard, rep, p.Plan(), rm.Discarded-undec, undec)
			}
			restored := map[string]int{}
			for _, m := range b.LiveMessages() {
				if strings.HasPrefix(m.TransactionID, "dlqa-") {
					restored[m.TransactionID]++
					if m.Queue != "notifications" {
						t.Fatalf("restored to %s", m.Queue)
					}
				}
			}
			if len(restored) != rep.Restored || len(b.LiveMessages()) != live+rep.Restored {
				t.Fatalf("%d restored copies live (%d live in all, %d before), want %d", len(restored), len(b.LiveMessages()), live, rep.Restored)
			}

			// Again: nothing is published, and the plan says why (the
			// envelopes are planned again, to be said again).
			again, err := prepare(t, env, req)
			if err != nil || again.Messages() != undec || again.Unrestorable()["already restored"] != rep.Restored {
				t.Fatalf("a second restore: %d messages, %v (%v)", again.Messages(), again.Unrestorable(), err)
			}

			// To a queue that does not exist: said, nothing published.
			req = request(deadletter.Restore, selection(t, deadletter.Selection{Queue: "payments"}))
			req.Settings.ToQueue = "nowhere"
			p, rep = runBatch(t, env, req)
			if rep == nil || rep.QueueGone != payments || rep.Restored != 0 || p.Plan().QueueGone["nowhere"] != payments || rep.Clean() {
				t.Fatalf("to a queue that is gone: %+v (plan %v)", rep, p.Plan().QueueGone)
			}

			// Then to one that does, rewritten by --transform.
			req.Settings.ToQueue, req.Settings.Transform, req.Why = "orders", ".restored = true", "to orders, marked"
			if _, rep = runBatch(t, env, req); rep == nil || rep.Restored != payments || !rep.Clean() {
				t.Fatalf("to orders: %+v", rep)
			}
			marked := 0
			for _, m := range b.LiveMessages() {
				if strings.HasPrefix(m.TransactionID, "dlqa-") && m.Queue == "orders" && strings.Contains(string(m.Payload), `"restored":true`) {
					marked++
				}
			}
			if marked != payments {
				t.Fatalf("%d of %d restored to orders with the transform's payload", marked, payments)
			}

			// decisions verify asks after each copy of the restore.
			v, err := batch.Verify(ctx, cl, env.Ledger, discardRestore(t, env, discard), batch.VerifyOptions{Concurrency: 4})
			if err != nil || v.Copies != len(restored) {
				t.Fatalf("verify: %+v %v", v, err)
			}

			// show: discarded by whom, restored by whom, as what.
			var one deadletter.Address
			man, _ := env.Ledger.Manifest(ctx, discard)
			for _, m := range man {
				if _, ok := restored[deadletter.RestoreTxID(m.Address)]; ok {
					one = m.Address
					break
				}
			}
			res, err := inspect.Lookup(ctx, cl, env.Ledger, one, now)
			actions := map[string]string{}
			for _, d := range res.Decisions {
				actions[d.Action] = d.By
			}
			if err != nil || res.Journal == nil || res.Journal.Outcome != deadletter.OutcomeRestored || res.ReplayedAs == nil ||
				res.ReplayedAs.TransactionID != deadletter.RestoreTxID(one) || len(res.Decisions) != 2 ||
				actions[ledger.ActionDiscard] != "tester" || actions[ledger.ActionRestore] != "tester" {
				t.Fatalf("show %s: %+v %v", one, res, err)
			}
		})
	}
}

// discardRestore is the restore batch of what discard archived.
func discardRestore(t *testing.T, env batch.Env, discard string) string {
	t.Helper()
	bs, err := env.Ledger.Batches(context.Background(), ledger.BatchFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if b.Action == ledger.ActionRestore && strings.Contains(b.Selection, discard) {
			return b.ID
		}
	}
	t.Fatalf("no restore of batch %s", discard)
	return ""
}
