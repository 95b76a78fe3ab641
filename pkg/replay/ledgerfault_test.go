package replay_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// failingJournal is a ledger whose writes start failing after a while,
// as a locked or full database does mid-run: every write, the claims'
// and the saves', once after of them have been made. claimed counts the
// addresses claimed before that.
type failingJournal struct {
	*ledger.Store
	writes, after, claimed atomic.Int64
}

var errLocked = errors.New("database is locked")

func (j *failingJournal) broken() bool { return j.writes.Add(1) > j.after.Load() }

func (j *failingJournal) Acquire(ctx context.Context, broker, batchID, action string, addrs []deadletter.Address, enrol []ledger.Enrolment, owner string, now time.Time, lease time.Duration) (map[deadletter.Address]*ledger.Entry, error) {
	if j.broken() {
		return nil, errLocked
	}
	got, err := j.Store.Acquire(ctx, broker, batchID, action, addrs, enrol, owner, now, lease)
	j.claimed.Add(int64(len(got)))
	return got, err
}

func (j *failingJournal) SaveMany(ctx context.Context, items []ledger.SaveItem, owner string, now time.Time) []error {
	if j.broken() {
		errs := make([]error, len(items))
		for i := range errs {
			errs[i] = errLocked
		}
		return errs
	}
	return j.Store.SaveMany(ctx, items, owner, now)
}

// When the journal cannot be written, publishing stops at once (only what
// was already claimed, its intent journaled, goes on), and the run still
// reports what it did.
func TestJournalFailureStopsPublishing(t *testing.T) {
	r := newRig(t, 200, "")
	items := r.items(t)
	j := &failingJournal{Store: r.store}
	j.after.Store(3)
	o := replay.Options{Order: replay.OrderNone, Action: deadletter.Replay, Broker: r.c.Server(), BatchID: "b", Owner: ledger.NewOwner("b"),
		Concurrency: 4, Via: replay.ViaManual, Sleep: func(context.Context, time.Duration) error { return nil }}
	rep, err := replay.NewEngine(r.c, j, o).Run(context.Background(), items)
	if !errors.Is(err, errLocked) || rep == nil || rep.LedgerError == "" {
		t.Fatalf("err %v, report %+v: want the ledger error and a report", err, rep)
	}
	if rep.Accounted() != rep.Total {
		t.Fatalf("the summary does not add up: %d of %d accounted for (%v)", rep.Accounted(), rep.Total, rep.Outcome())
	}
	published := len(r.b.LiveMessages())
	// Nothing is published that was not claimed before the failure.
	if published > int(j.claimed.Load()) || rep.NotStarted == 0 {
		t.Fatalf("%d published, %d not started: publishing went on after the journal failed", published, rep.NotStarted)
	}
	// Resumed on a working ledger, every message ends exactly once.
	r.resumeUntilClean(t, "b", items, func(o *replay.Options) { o.Via = replay.ViaManual })
	r.assertExactlyOnce(t)
}

// A manual push whose final journal entry was lost (the run died right
// after it) leaves the address pending. When the row is gone by the
// resume, the copy the push made is found: replayed, not "already gone".
func TestLostFinalEntryIsFoundReplayed(t *testing.T) {
	r := newRig(t, 40, "")
	items := r.items(t)
	rep := r.run(t, "b", items, true, func(o *replay.Options) { o.Via = replay.ViaManual })
	if rep.Replayed == 0 {
		t.Fatalf("%+v", rep)
	}
	// What a crash between the push and its write-behind leaves.
	if _, err := r.store.DB().Exec(`UPDATE journal SET state = 'pending', outcome = '', replay_txid = '' WHERE state = 'removed'`); err != nil {
		t.Fatal(err)
	}
	for i := range items {
		items[i].Absent = !r.undec[items[i].Address] // the undecryptable ones are still there
	}
	rep = r.run(t, "b", items, false, func(o *replay.Options) { o.Via = replay.ViaManual })
	if rep.AlreadyGone != 0 || rep.Replayed != len(items)-len(r.undec) {
		t.Fatalf("resume: %d replayed, %d already gone; want %d replayed", rep.Replayed, rep.AlreadyGone, len(items)-len(r.undec))
	}
	r.assertExactlyOnce(t)
}
