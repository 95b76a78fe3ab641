package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// moveRig is a broker of a line that moves, holding n messages one
// group dead-lettered (one row each) and two groups more (two rows),
// and a ledger.
type moveRig struct {
	b     *sandbox.Broker
	c     *client.Client
	store *ledger.Store
	items []replay.Item
}

func newMoveRig(t *testing.T, line sandbox.Line, single, double int) *moveRig {
	t.Helper()
	b, url := testkit.Sandbox(t)
	b.SetLine(line)
	now := time.Now()
	var dls []sandbox.DeadLetter
	for i := range single + double {
		dl := sandbox.DeadLetter{Queue: "orders", Partition: fmt.Sprintf("p%d", i%7), TransactionID: fmt.Sprintf("m-%d", i), ConsumerGroup: "billing",
			Error: "boom", FailedAt: now.Add(-time.Duration(i+2) * time.Second), Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
		dls = append(dls, dl)
		if i >= single {
			dl.ConsumerGroup, dl.FailedAt = "shipping", dl.FailedAt.Add(time.Second/2)
			dls = append(dls, dl)
		}
	}
	b.AddDeadLetters(dls...)
	r := &moveRig{b: b, c: testkit.Client(t, url), store: testkit.OpenLedger(t, "sqlite://"+filepath.Join(t.TempDir(), "l.db"))}
	r.items = r.snapshot(t)
	return r
}

func (r *moveRig) snapshot(t *testing.T) []replay.Item {
	t.Helper()
	sel := &deadletter.Selection{All: true}
	if err := sel.Compile(); err != nil {
		t.Fatal(err)
	}
	items, err := testkit.Snapshot(context.Background(), r.c, sel, 100)
	if err != nil {
		t.Fatal(err)
	}
	return items
}

func (r *moveRig) run(t *testing.T, batch string, mod func(*replay.Options)) *replay.Report {
	t.Helper()
	rel, err := r.c.Release(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	o := replay.Options{Order: replay.OrderNone, Action: deadletter.Replay, Broker: r.c.Broker(), BatchID: batch, Owner: ledger.NewOwner(batch),
		Concurrency: 4, Release: rel, Sleep: func(context.Context, time.Duration) error { return nil }}
	if mod != nil {
		mod(&o)
	}
	rep, err := replay.NewEngine(r.c, r.store, o).Run(context.Background(), r.items)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Accounted() != rep.Total {
		t.Fatalf("the report accounts for %d of %d: %v", rep.Accounted(), rep.Total, rep.Outcome())
	}
	return rep
}

// books: every message live exactly once, the DLQ empty.
func (r *moveRig) books(t *testing.T) {
	t.Helper()
	live := map[string]int{}
	for _, m := range r.b.LiveMessages() {
		live[string(m.Payload)]++
	}
	for i := range len(r.items) {
		if p := fmt.Sprintf(`{"n":%d}`, i); live[p] != 1 {
			t.Errorf("message %d live %d times", i, live[p])
		}
	}
	if d := r.b.Depth(); d != 0 {
		t.Errorf("%d dead-letter rows left", d)
	}
}

// On 1.6 a replay takes the broker's move, one call a message one group
// dead-lettered; a message two groups dead-lettered is pushed once,
// under the broker's copy id of one of its rows, then deleted.
func TestMoveIsOneCallAMessage(t *testing.T) {
	for _, line := range []sandbox.Line{sandbox.Queen16, sandbox.Queen22} {
		t.Run(line.String(), func(t *testing.T) {
			r := newMoveRig(t, line, 30, 10)
			r.b.ResetCalls()
			rep := r.run(t, "b", nil)
			if rep.Replayed != 40 || !rep.Clean() {
				t.Fatalf("report %v", rep.Outcome())
			}
			calls := r.b.Calls()
			if calls["POST /api/v1/dlq/replay"] != 30 || calls["POST /api/v1/push"] > 10 || calls["DELETE /api/v1/messages"] != 10 || calls["POST /api/v1/messages/retry"] != 0 {
				t.Fatalf("calls %v: want 30 moves, the 10 two-row messages pushed and deleted", calls)
			}
			r.books(t)
			for _, m := range r.b.LiveMessages() {
				if !strings.HasPrefix(m.TransactionID, "dlq:") {
					t.Fatalf("copy %s: want the broker's copy id dlq:<row id>", m.TransactionID)
				}
			}
		})
	}
}

// The console moves rows while a batch runs: no second copy of any of
// them, and the summary says they were moved elsewhere.
func TestConsoleMovesRowsDuringABatch(t *testing.T) {
	r := newMoveRig(t, sandbox.Queen16, 300, 0)
	// The oldest 100 rows, which an unordered run of newest-first items
	// reaches last: moved by the console after dlqctl's first move.
	rows := r.b.DeadLetterRows()
	var console []string
	for _, row := range rows[200:] {
		console = append(console, row.ID)
	}
	moved := false
	r.b.SetFaults(sandbox.Faults{Script: func(c sandbox.Call) sandbox.Action {
		if c.Route == "POST /api/v1/dlq/{id}/replay" && !moved {
			moved = true
			r.b.ConsoleReplay(console...)
		}
		return sandbox.Serve
	}})
	rep := r.run(t, "b", func(o *replay.Options) { o.Concurrency = 1 })
	if rep.Replayed != 200 || rep.MovedElsewhere != 100 || !rep.Clean() {
		t.Fatalf("report %v: want 200 replayed, 100 moved elsewhere", rep.Outcome())
	}
	if r.b.ConsoleMoves() != 100 {
		t.Fatalf("the console moved %d", r.b.ConsoleMoves())
	}
	r.books(t)
	// The journal says so too.
	out, err := r.store.BatchOutcome(context.Background(), "b")
	if err != nil || out[deadletter.OutcomeMovedElsewhere] != 100 || out["replayed"] != 200 {
		t.Fatalf("journal outcome %v %v", out, err)
	}
}

// A message two groups dead-lettered, one of whose rows the console
// moved meanwhile: its copy is there, nothing is pushed again.
func TestConsoleMovedOneRowOfTwo(t *testing.T) {
	r := newMoveRig(t, sandbox.Queen16, 0, 5)
	for _, it := range r.items {
		// The row dlqctl does not push under: the other group's.
		r.b.ConsoleReplay(it.AllRows()[1].ID)
	}
	rep := r.run(t, "b", nil)
	if rep.MovedElsewhere != 5 || rep.Replayed != 0 {
		t.Fatalf("report %v", rep.Outcome())
	}
	r.books(t)
}

// Each verdict of the move, as the engine settles it, and a resume of
// whatever a run leaves: exactly once in the broker's books.
func TestMoveVerdictsSettle(t *testing.T) {
	for _, c := range []struct {
		name   string
		action sandbox.Action
		every  int
	}{
		{"moved, answers lost", sandbox.CutAfterApply, 3},
		{"500 dlqRowRemoved null, applied", sandbox.UnknownAfterApply, 2},
		{"500 dlqRowRemoved null, not applied", sandbox.UnknownNotApplied, 2},
		{"500 dlqRowRemoved false", sandbox.FailNotApplied, 2},
		{"503 maintenance", sandbox.Maintenance, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newMoveRig(t, sandbox.Queen16, 20, 4)
			r.b.SetFaults(sandbox.Faults{Script: func(call sandbox.Call) sandbox.Action {
				if call.Route == "POST /api/v1/dlq/{id}/replay" && call.N%c.every == 0 {
					return c.action
				}
				return sandbox.Serve
			}})
			for i := 0; ; i++ {
				rep := r.run(t, "b", nil)
				if rep.Clean() {
					break
				}
				if i == 5 {
					t.Fatalf("never clean: %v", rep.Outcome())
				}
			}
			r.books(t)
		})
	}
}

// A row some other tool already pushed the broker's copy of: the move
// answers duplicate, nothing is published, the leftover row goes.
func TestDuplicateVerdictIsMovedElsewhere(t *testing.T) {
	r := newMoveRig(t, sandbox.Queen16, 6, 0)
	it := r.items[0]
	if _, err := r.c.Push(context.Background(), []client.PushItem{{Queue: it.Queue, Partition: it.Partition, Payload: it.Data(),
		TransactionID: client.CopyID(it.Rows[0].ID)}}); err != nil {
		t.Fatal(err)
	}
	rep := r.run(t, "b", nil)
	if rep.MovedElsewhere != 1 || rep.Replayed != 5 {
		t.Fatalf("report %v", rep.Outcome())
	}
	r.books(t)
}

// --to-queue on 1.6 is the move's destination: both halves sent, the
// partition kept.
func TestMoveToARecoveryQueue(t *testing.T) {
	r := newMoveRig(t, sandbox.Queen16, 8, 0)
	rep := r.run(t, "b", func(o *replay.Options) { o.ToQueue = "orders-recovery" })
	if rep.Replayed != 8 || r.b.Calls()["POST /api/v1/dlq/replay"] != 8 {
		t.Fatalf("report %v, calls %v", rep.Outcome(), r.b.Calls())
	}
	parts := map[string]bool{}
	for _, it := range r.items {
		parts[it.Partition] = true
	}
	for _, m := range r.b.LiveMessages() {
		if m.Queue != "orders-recovery" || !parts[m.Partition] {
			t.Fatalf("copy in %s/%s", m.Queue, m.Partition)
		}
	}
}

// A transformed payload cannot be moved: it is pushed under the
// broker's copy id, so a console move of the row later is a duplicate.
func TestTransformPushesUnderTheCopyID(t *testing.T) {
	r := newMoveRig(t, sandbox.Queen16, 4, 0)
	rep := r.run(t, "b", func(o *replay.Options) {
		o.Transform = func(_ context.Context, p json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{"fixed":true}`), nil
		}
	})
	if rep.Replayed != 4 || r.b.Calls()["POST /api/v1/dlq/replay"] != 0 {
		t.Fatalf("report %v, calls %v", rep.Outcome(), r.b.Calls())
	}
	for _, m := range r.b.LiveMessages() {
		if !strings.HasPrefix(m.TransactionID, "dlq:") || string(m.Payload) != `{"fixed":true}` {
			t.Fatalf("copy %s %s", m.TransactionID, m.Payload)
		}
	}
}

// A 2.x disk that is full (507) stops the batch; what is left resumes.
func TestDiskFullStopsTheBatch(t *testing.T) {
	r := newMoveRig(t, sandbox.Queen22, 0, 6)
	full := true
	r.b.SetFaults(sandbox.Faults{Script: func(c sandbox.Call) sandbox.Action {
		if c.Route == "POST /api/v1/push" && full {
			return sandbox.DiskFull
		}
		return sandbox.Serve
	}})
	rep := r.run(t, "b", func(o *replay.Options) { o.Concurrency = 1 })
	if rep.Stopped == "" || !strings.Contains(rep.Stopped, "full") || rep.Failed != 1 || rep.NotStarted != 5 {
		t.Fatalf("report %v, stopped %q", rep.Outcome(), rep.Stopped)
	}
	full = false
	if rep := r.run(t, "b", nil); !rep.Clean() {
		t.Fatalf("resume %v", rep.Outcome())
	}
	r.books(t)
}

// A 2.x address has a decimal partition id: replayed, resumed and
// looked up by it.
func TestDecimalPartitionIDs(t *testing.T) {
	r := newMoveRig(t, sandbox.Queen22, 5, 2)
	for _, it := range r.items {
		if strings.Contains(it.Address.PartitionID, "-") {
			t.Fatalf("address %s: want 2.x's decimal partition id", it.Address)
		}
	}
	rep := r.run(t, "b", nil)
	if rep.Replayed != 7 || !rep.Clean() {
		t.Fatalf("report %v", rep.Outcome())
	}
	ent, err := r.store.Entry(context.Background(), r.c.Broker(), r.items[0].Address)
	if err != nil || ent == nil || ent.State != ledger.Removed {
		t.Fatalf("journal of %s: %+v %v", r.items[0].Address, ent, err)
	}
	r.books(t)
}

// A message two groups dead-lettered, one of whose rows the console
// moved before a replay to a recovery queue: the console's copy in the
// message's own queue reached every group, so nothing is published to
// the recovery queue.
func TestConsoleMoveBeforeAReplayToARecoveryQueue(t *testing.T) {
	for _, line := range []sandbox.Line{sandbox.Queen16, sandbox.Queen22} {
		t.Run(line.String(), func(t *testing.T) {
			r := newMoveRig(t, line, 2, 3)
			for _, it := range r.items {
				if rows := it.AllRows(); len(rows) == 2 {
					r.b.ConsoleReplay(rows[1].ID)
				}
			}
			rep := r.run(t, "b", func(o *replay.Options) { o.ToQueue = "orders-recovery" })
			if rep.MovedElsewhere != 3 || rep.Replayed != 2 {
				t.Fatalf("report %v: want the 3 the console moved said so, the 2 others replayed", rep.Outcome())
			}
			r.books(t)
		})
	}
}

// A run that claimed a two-row message with its intent (the manual
// path's copy id) and was killed before its push; the console then
// moved the message's other row. The resume finds the console's copy
// and publishes nothing.
func TestResumeFindsTheConsolesCopyOfAnotherRow(t *testing.T) {
	for _, line := range []sandbox.Line{sandbox.Queen16, sandbox.Queen22} {
		t.Run(line.String(), func(t *testing.T) {
			r := newMoveRig(t, line, 0, 4)
			ctx := context.Background()
			addrs := make([]deadletter.Address, len(r.items))
			enrol := make([]ledger.Enrolment, len(r.items))
			for i, it := range r.items {
				addrs[i] = it.Address
				enrol[i] = ledger.Enrolment{Via: replay.ViaManual, ReplayTxID: client.CopyID(it.Rows[0].ID), ReplayQueue: it.Queue,
					Digest: ledger.PayloadDigest(it.Data())}
			}
			// The killed run: on another host, its lease already run out.
			if _, err := r.store.Acquire(ctx, r.c.Broker(), "b", deadletter.Replay, addrs, enrol, "elsewhere:1:dead", time.Now().Add(-time.Hour), time.Minute); err != nil {
				t.Fatal(err)
			}
			for _, it := range r.items {
				r.b.ConsoleReplay(it.AllRows()[1].ID)
			}
			rep := r.run(t, "b", nil)
			if rep.MovedElsewhere != 4 || rep.Replayed != 0 {
				t.Fatalf("report %v: want all 4 moved elsewhere", rep.Outcome())
			}
			r.books(t)
		})
	}
}

// The killed run's push landed, then the console moved the message's
// other row: the broker holds the message twice, one copy by each hand.
// Nothing more is published, and the report says what the broker holds.
func TestAMessageTheBrokerHoldsTwiceIsSaid(t *testing.T) {
	r := newMoveRig(t, sandbox.Queen16, 1, 2)
	ctx := context.Background()
	var addrs []deadletter.Address
	var enrol []ledger.Enrolment
	for _, it := range r.items {
		if len(it.AllRows()) < 2 {
			continue
		}
		addrs = append(addrs, it.Address)
		enrol = append(enrol, ledger.Enrolment{Via: replay.ViaManual, ReplayTxID: client.CopyID(it.Rows[0].ID), ReplayQueue: it.Queue,
			Digest: ledger.PayloadDigest(it.Data())})
		if _, err := r.c.Push(ctx, []client.PushItem{{Queue: it.Queue, Partition: it.Partition, Payload: it.Data(), TransactionID: client.CopyID(it.Rows[0].ID)}}); err != nil {
			t.Fatal(err)
		}
		r.b.ConsoleReplay(it.AllRows()[1].ID)
	}
	if _, err := r.store.Acquire(ctx, r.c.Broker(), "b", deadletter.Replay, addrs, enrol, "elsewhere:1:dead", time.Now().Add(-time.Hour), time.Minute); err != nil {
		t.Fatal(err)
	}
	before := len(r.b.LiveMessages())
	rep := r.run(t, "b", nil)
	if rep.HeldMoreThanOnce != 2 || rep.MovedElsewhere != 2 || rep.Replayed != 1 || len(r.b.LiveMessages()) != before+1 {
		t.Fatalf("report %v, held twice %d, %d copies published: want the 2 said held twice, the single-row one replayed", rep.Outcome(), rep.HeldMoreThanOnce, len(r.b.LiveMessages())-before)
	}
	twice := 0
	for _, l := range rep.Listed {
		if strings.Contains(l.Reason, "held 2 times") {
			twice++
		}
	}
	if twice != 2 || r.b.Depth() != 0 {
		t.Fatalf("%d listed held twice, depth %d", twice, r.b.Depth())
	}
}

// On 2.x the delete after dlqctl's own push says how many rows it
// removed: fewer than the message had means another hand took one
// meanwhile. Here the console moved the other row between the push and
// the delete: the broker holds the message twice, and the report says so
// where it said "replayed".
func TestADeleteThatRemovedFewerRowsIsSaid(t *testing.T) {
	r := newMoveRig(t, sandbox.Queen22, 0, 3)
	other := map[string]string{} // the address's other row, by transaction id
	for _, it := range r.items {
		other[it.Address.TransactionID] = it.AllRows()[1].ID
	}
	r.b.SetFaults(sandbox.Faults{Script: func(c sandbox.Call) sandbox.Action {
		if c.Route == "DELETE /api/v1/messages/{pid}/{txid}" {
			r.b.ConsoleReplay(other[path.Base(c.Path)])
		}
		return sandbox.Serve
	}})
	rep := r.run(t, "b", func(o *replay.Options) { o.Concurrency = 1 })
	if rep.HeldMoreThanOnce != 3 || rep.Replayed != 3 {
		t.Fatalf("report %v, held twice %d: want all 3 replayed and said held twice", rep.Outcome(), rep.HeldMoreThanOnce)
	}
}

// 2.x's console moves a row the broker cannot decrypt, the envelope as
// the copy: dlqctl never replays an envelope, but a row the console moved
// while the batch held it is said moved elsewhere, not "left in place".
func TestConsoleMovedAnUndecryptableRow(t *testing.T) {
	r := newMoveRig(t, sandbox.Queen22, 0, 0)
	r.b.AddQueue("secrets", true, 3, "billing")
	r.b.AddDeadLetters(
		sandbox.DeadLetter{Queue: "secrets", Partition: "p", TransactionID: "s-1", ConsumerGroup: "billing", Error: "decryption failed", FailedAt: time.Now().Add(-time.Minute), Data: json.RawMessage(`{"card":1}`), Undecryptable: true},
		sandbox.DeadLetter{Queue: "secrets", Partition: "p", TransactionID: "s-2", ConsumerGroup: "billing", Error: "decryption failed", FailedAt: time.Now().Add(-2 * time.Minute), Data: json.RawMessage(`{"card":2}`), Undecryptable: true},
	)
	r.items = r.snapshot(t)
	if r.b.ConsoleReplay(r.items[0].Rows[0].ID) != 1 {
		t.Fatal("the console did not move the undecryptable row")
	}
	rep := r.run(t, "b", nil)
	if rep.MovedElsewhere != 1 || rep.SkippedEncrypted != 1 {
		t.Fatalf("report %v: want the moved one said moved elsewhere, the other skipped", rep.Outcome())
	}
	live := r.b.LiveMessages()
	if len(live) != 1 || !deadletter.IsEnvelope(live[0].Payload) {
		t.Fatalf("the copy: %+v", live)
	}
}

// A later 2.x raft answers an in-doubt commit with 503 and Retry-After:
// the move may have happened. Read as an unknown outcome (the copy looked
// for, the row moved again where it is not there), every message is
// replayed once and none is taken for another hand's.
func TestInDoubtMoveOn2x(t *testing.T) {
	r := newMoveRig(t, sandbox.Queen22, 20, 0)
	r.b.SetFaults(sandbox.Faults{Script: func(c sandbox.Call) sandbox.Action {
		if c.Route == "POST /api/v1/dlq/{id}/replay" && c.N%3 == 0 {
			return []sandbox.Action{sandbox.UnknownAfterApply, sandbox.UnknownNotApplied}[c.N/3%2]
		}
		return sandbox.Serve
	}})
	replayed := 0
	for i := 0; ; i++ {
		rep := r.run(t, "b", nil)
		replayed += rep.Replayed
		if rep.MovedElsewhere != 0 {
			t.Fatalf("run %d: report %v: a move of this batch's taken for another hand's", i, rep.Outcome())
		}
		if rep.Clean() {
			break
		}
		if i == 5 {
			t.Fatalf("never clean: %v", rep.Outcome())
		}
	}
	if replayed != 20 {
		t.Fatalf("%d replayed in all", replayed)
	}
	r.books(t)
}

// The console moved both rows of a message two groups dead-lettered: the
// broker holds it twice, by the console's hand. The batch publishes
// nothing more and says so: moved elsewhere, held 2 times.
func TestTheConsoleMovedBothRowsIsSaid(t *testing.T) {
	for _, line := range []sandbox.Line{sandbox.Queen16, sandbox.Queen22} {
		t.Run(line.String(), func(t *testing.T) {
			r := newMoveRig(t, line, 1, 2)
			var moved []string
			for _, it := range r.items {
				if rows := it.AllRows(); len(rows) == 2 {
					r.b.ConsoleReplay(rows[0].ID, rows[1].ID)
					moved = append(moved, it.Address.String())
				}
			}
			rep := r.run(t, "b", nil)
			if rep.MovedElsewhere != 2 || rep.HeldMoreThanOnce != 2 || rep.Replayed != 1 {
				t.Fatalf("report %v, held more than once %d", rep.Outcome(), rep.HeldMoreThanOnce)
			}
			said := 0
			for _, l := range rep.Listed {
				if strings.Contains(l.Reason, "held 2 times by the broker") && strings.Contains(l.Reason, "console") {
					said++
				}
			}
			if said != 2 {
				t.Fatalf("%d listed as held 2 times: %+v", said, rep.Listed)
			}
		})
	}
}
