package replay_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// watchedSource is a Source that says how it was read: the most items
// one Load asked for, how many times each item was loaded, and (after
// failAfter loads, when set) a read that fails.
type watchedSource struct {
	replay.Items
	mu        sync.Mutex
	most      int
	loads     int
	loaded    map[int32]int
	failAfter int
}

var errSourceGone = errors.New("the manifest cannot be read")

func (w *watchedSource) Load(ctx context.Context, pos []int32) ([]replay.Item, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.loads++
	if w.failAfter > 0 && w.loads > w.failAfter {
		return nil, errSourceGone
	}
	w.most = max(w.most, len(pos))
	for _, p := range pos {
		w.loaded[p]++
	}
	return w.Items.Load(ctx, pos)
}

// A run reads its batch a claim at a time, each item once, and a
// partition longer than a claim keeps its order across its claims.
func TestRunReadsItsSourceAClaimAtATime(t *testing.T) {
	for _, mode := range []string{replay.OrderPartition, replay.OrderNone} {
		t.Run(mode, func(t *testing.T) {
			const parts, per = 3, 700 // a partition spans several claims of at most 256
			b, url := testkit.Sandbox(t)
			fillChains(b, parts, per, rand.New(rand.NewPCG(5, 6)))
			cl := testkit.Client(t, url)
			store := testkit.OpenLedger(t, "sqlite://"+filepath.Join(t.TempDir(), "l.db"))
			items, _ := orderedItems(t, cl, replay.OrderPartition)
			b.SetFaults(sandbox.Faults{Fail503Every: 7})
			src := &watchedSource{Items: items, loaded: map[int32]int{}}
			o := replay.Options{Action: deadletter.Replay, Broker: cl.Server(), BatchID: "b", Owner: ledger.NewOwner("b"), Concurrency: 4,
				Via: replay.ViaManual, Order: mode, Sleep: func(context.Context, time.Duration) error { return nil }}
			rep, err := replay.NewEngine(cl, store, o).RunSource(context.Background(), src)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Total != len(items) || rep.Accounted() != len(items) {
				t.Fatalf("total %d, accounted %d of %d", rep.Total, rep.Accounted(), len(items))
			}
			if src.most > 256 {
				t.Fatalf("one read asked for %d items: a claim is at most 256", src.most)
			}
			for p := range len(items) {
				if src.loaded[int32(p)] != 1 {
					t.Fatalf("item %d was read %d times", p, src.loaded[int32(p)])
				}
			}
			if mode == replay.OrderPartition {
				assertOrdered(t, b, parts, per, false)
			}
			b.SetFaults(sandbox.Faults{})
			for i := 0; i < 10 && !rep.Clean(); i++ {
				if rep, err = replay.NewEngine(cl, store, o).RunSource(context.Background(), replay.Items(items)); err != nil {
					t.Fatal(err)
				}
			}
			if !rep.Clean() {
				t.Fatalf("never finished: %+v", rep.Outcome())
			}
			if mode == replay.OrderPartition {
				assertOrdered(t, b, parts, per, true)
			}
		})
	}
}

// A source that cannot be read stops the run as a ledger failure: what
// was not read is not started, and a resume finishes the batch exactly
// once.
func TestUnreadableSourceStopsTheRun(t *testing.T) {
	// skip-gaps: the rig's undecryptable messages would hold back their
	// partitions for good.
	for _, mode := range []string{replay.OrderSkipGaps, replay.OrderNone} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t, 300, "")
			items := r.items(t)
			items, _ = testkit.Arrange(items, mode, "")
			src := &watchedSource{Items: items, loaded: map[int32]int{}, failAfter: 2}
			o := replay.Options{Order: mode, Action: deadletter.Replay, Broker: r.c.Server(), BatchID: "b", Owner: ledger.NewOwner("b"),
				Concurrency: 2, Sleep: func(context.Context, time.Duration) error { return nil }}
			rep, err := replay.NewEngine(r.c, r.store, o).RunSource(context.Background(), src)
			if !errors.Is(err, errSourceGone) {
				t.Fatalf("err = %v, want the source's", err)
			}
			if rep.NotStarted == 0 || rep.LedgerError == "" || rep.Accounted() != rep.Total {
				t.Fatalf("not started %d, ledger error %q, accounted %d of %d", rep.NotStarted, rep.LedgerError, rep.Accounted(), rep.Total)
			}
			r.resumeUntilClean(t, "b", items, func(o *replay.Options) { o.Order = mode })
			r.assertExactlyOnce(t)
		})
	}
}
