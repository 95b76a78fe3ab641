package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// chains fills a sandbox with `parts` partitions of `per` messages each,
// enqueued in order i = 0, 1, … but failed in a shuffled order (a later
// version can fail first), every payload naming its partition and place.
func fillChains(b *sandbox.Broker, parts, per int, rng *rand.Rand, undecryptable ...place) *sandbox.Broker {
	var u [][2]int
	for _, x := range undecryptable {
		u = append(u, [2]int{x.P, x.I})
	}
	b.FillChains(parts, per, rng.Uint64(), u...)
	return b
}

type place struct{ P, I int }

func placeOf(payload json.RawMessage) place {
	var x place
	json.Unmarshal(payload, &x)
	return x
}

// assertOrdered reads the broker's books: for every partition, the copies
// were accepted in enqueue order (no index going back), each at most
// once; with complete, every message once; and no gap crossed: a message
// still dead-lettered has no later message of its partition published.
func assertOrdered(t *testing.T, b *sandbox.Broker, parts, per int, complete bool) {
	t.Helper()
	last := map[int]int{}
	seen := map[place]int{}
	for _, m := range b.LiveMessages() {
		x := placeOf(m.Payload)
		seen[x]++
		if seen[x] > 1 {
			t.Fatalf("message %v published %d times", x, seen[x])
		}
		if l, ok := last[x.P]; ok && x.I < l {
			t.Fatalf("partition p%d: message %d accepted after message %d", x.P, x.I, l)
		}
		last[x.P] = x.I
		if m.Partition != fmt.Sprintf("p%d", x.P) {
			t.Fatalf("message %v published to partition %s", x, m.Partition)
		}
	}
	dead := map[place]bool{}
	for _, r := range b.DeadLetterRows() {
		dead[placeOf(r.Payload)] = true
	}
	for p := 0; p < parts; p++ {
		gap := -1
		for i := 0; i < per; i++ {
			x := place{p, i}
			switch {
			case seen[x] == 0 && !dead[x]:
				t.Fatalf("message %v lost", x)
			case complete && (seen[x] != 1 || dead[x]):
				t.Fatalf("message %v: published %d, still dead-lettered %v", x, seen[x], dead[x])
			case seen[x] == 0 && gap < 0:
				gap = i
			case seen[x] == 1 && gap >= 0 && dead[place{p, gap}]:
				t.Fatalf("partition p%d: message %d published past %d, which is not", p, i, gap)
			}
		}
	}
}

func orderedItems(t testing.TB, c *client.Client, mode string) ([]replay.Item, replay.OrderInfo) {
	sel := &deadletter.Selection{All: true}
	sel.Compile()
	items, err := testkit.Snapshot(context.Background(), c, sel, 100)
	if err != nil {
		t.Fatal(err)
	}
	return testkit.Arrange(items, mode, "")
}

func TestArrangeKeepsEnqueueOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	b, url := testkit.Sandbox(t)
	fillChains(b, 3, 6, rng)
	items, info := orderedItems(t, testkit.Client(t, url), replay.OrderPartition)
	if info.Partitions != 3 || info.LongestChain != 6 || info.ByFailure != 0 {
		t.Fatalf("info %+v", info)
	}
	for i := 1; i < len(items); i++ {
		a, c := placeOf(items[i-1].Newest().Data), placeOf(items[i].Newest().Data)
		if a.P == c.P && c.I < a.I {
			t.Fatalf("arranged %v before %v", a, c)
		}
		if a.P != c.P && i%6 != 0 {
			t.Fatalf("partition p%d is not contiguous at %d", c.P, i)
		}
	}
	// Ids that are not time-ordered: the first failure orders them, and
	// the plan says so.
	for i := range items {
		items[i].Rows[0].ID = "not-a-uuid"
	}
	_, info = testkit.Arrange(items, replay.OrderPartition, "")
	if info.ByFailure != len(items) {
		t.Fatalf("fallback not reported: %+v", info)
	}
}

// Ordered replay under every fault the engine survives, resumed until
// done (following the runbook for unknowns), on both broker modes: every
// partition's copies accepted in enqueue order, each once.
func TestOrderedReplayUnderFaults(t *testing.T) {
	for _, c := range []struct {
		name   string
		via    string
		line   sandbox.Line
		faults sandbox.Faults
	}{
		{"manual 503s and cuts", replay.ViaManual, sandbox.Queen15, sandbox.Faults{Fail503Every: 4, CutEvery: 5}},
		{"endpoint cuts", replay.ViaEndpoint, sandbox.Queen15, sandbox.Faults{CutEvery: 4}},
		{"endpoint row kept", replay.ViaEndpoint, sandbox.Queen15, sandbox.Faults{RowKeptEvery: 3}},
		{"released server with cuts", replay.ViaAuto, sandbox.Queen015, sandbox.Faults{CutEvery: 6}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const parts, per = 8, 12
			rng := rand.New(rand.NewPCG(uint64(len(c.name)), 9))
			b, url := testkit.Sandbox(t)
			b.SetLine(c.line)
			fillChains(b, parts, per, rng)
			cl := testkit.Client(t, url)
			store := testkit.OpenLedger(t, "sqlite://"+filepath.Join(t.TempDir(), "l.db"))
			items, _ := orderedItems(t, cl, replay.OrderPartition)
			b.SetFaults(c.faults)
			run := func(retryUnknown bool) *replay.Report {
				o := replay.Options{Action: deadletter.Replay, Broker: cl.Server(), BatchID: "b", Owner: ledger.NewOwner("b"), Concurrency: 4,
					Via: c.via, Order: replay.OrderPartition, RetryUnknown: retryUnknown, Sleep: func(context.Context, time.Duration) error { return nil }}
				rep, err := replay.NewEngine(cl, store, o).Run(context.Background(), items)
				if err != nil {
					t.Fatal(err)
				}
				return rep
			}
			rep := run(false)
			assertOrdered(t, b, parts, per, false)
			for i := 0; i < 20 && !rep.Clean(); i++ {
				// The runbook for unknowns: discard the row of a message
				// already live, then re-attempt the rest.
				live := map[string]bool{}
				for _, m := range b.LiveMessages() {
					live[string(m.Payload)] = true
				}
				for _, r := range b.DeadLetterRows() {
					if live[string(r.Payload)] {
						b.RemoveDeadLetters(r.PartitionID, r.TransactionID)
					}
				}
				rep = run(true)
				assertOrdered(t, b, parts, per, false)
			}
			if !rep.Clean() {
				t.Fatalf("never finished: %+v", rep)
			}
			assertOrdered(t, b, parts, per, true)
		})
	}
}

// A message that cannot be replayed holds back the later messages of its
// partition (and says so); --order skip-gaps goes on past it.
func TestGapHoldsBackItsPartition(t *testing.T) {
	for _, mode := range []string{replay.OrderPartition, replay.OrderSkipGaps} {
		t.Run(mode, func(t *testing.T) {
			b, url := testkit.Sandbox(t)
			// Message 2 of partition p0 is an envelope nobody can decrypt.
			fillChains(b, 2, 5, rand.New(rand.NewPCG(3, 4)), place{0, 2})
			cl := testkit.Client(t, url)
			items, _ := orderedItems(t, cl, mode)
			store := testkit.OpenLedger(t, "sqlite://"+filepath.Join(t.TempDir(), "l.db"))
			o := replay.Options{Action: deadletter.Replay, Broker: cl.Server(), BatchID: "b", Owner: "o:1:x", Concurrency: 2, Via: replay.ViaManual, Order: mode}
			rep, err := replay.NewEngine(cl, store, o).Run(context.Background(), items)
			if err != nil {
				t.Fatal(err)
			}
			published := map[place]bool{}
			for _, m := range b.LiveMessages() {
				published[placeOf(m.Payload)] = true
			}
			if mode == replay.OrderPartition {
				if rep.HeldBack != 2 || len(rep.BlockedPartitions) != 1 || rep.BlockedPartitions[0].Partition != "p0" || published[place{0, 3}] || published[place{0, 4}] || !published[place{1, 4}] || rep.Clean() {
					t.Fatalf("held back %d, blocked %+v, published %v", rep.HeldBack, rep.BlockedPartitions, published)
				}
				// The ledger can say the same afterwards.
				man := make(map[deadletter.Address]*ledger.Entry)
				for _, it := range items {
					e, _ := store.Entry(context.Background(), cl.Server(), it.Address)
					man[it.Address] = e
				}
				bl := replay.BlockedChains(items, "", man)
				if len(bl) != 1 || bl[0].Messages != 2 || !strings.Contains(bl[0].Reason, "skipped") {
					t.Fatalf("BlockedChains: %+v", bl)
				}
			} else if rep.HeldBack != 0 || !published[place{0, 3}] || !published[place{0, 4}] {
				t.Fatalf("skip-gaps: held back %d, published %v", rep.HeldBack, published)
			}
		})
	}
}

// Two runners on one ordered batch: a partition is worked by one of them
// at a time, so order and exactly-once hold.
func TestTwoRunnersKeepOrder(t *testing.T) {
	testkit.ForEachLedger(t, func(t *testing.T, store *ledger.Store, dsn string) {
		const parts, per = 6, 10
		b, url := testkit.Sandbox(t)
		fillChains(b, parts, per, rand.New(rand.NewPCG(5, 6)))
		b.SetFaults(sandbox.Faults{RowKeptEvery: 1}) // only claims keep a row from being replayed twice
		cl := testkit.Client(t, url)
		items, _ := orderedItems(t, cl, replay.OrderPartition)
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := replay.Options{Action: deadletter.Replay, Broker: cl.Server(), BatchID: "b", Owner: fmt.Sprintf("otherhost:%d:w", w),
					Concurrency: 3, Via: replay.ViaEndpoint, Order: replay.OrderPartition}
				if _, err := replay.NewEngine(cl, testkit.OpenLedger(t, dsn), o).Run(context.Background(), items); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		assertOrdered(t, b, parts, per, true)
	})
}

// claimSizes is a journal that records how many addresses each claim
// asks for.
type claimSizes struct {
	*ledger.Store
	mu    sync.Mutex
	sizes []int
}

func (j *claimSizes) Acquire(ctx context.Context, broker, batchID, action string, addrs []deadletter.Address, enrol []ledger.Enrolment, owner string, now time.Time, lease time.Duration) (map[deadletter.Address]*ledger.Entry, error) {
	j.mu.Lock()
	j.sizes = append(j.sizes, len(addrs))
	j.mu.Unlock()
	return j.Store.Acquire(ctx, broker, batchID, action, addrs, enrol, owner, now, lease)
}

// An unlimited run claims a long partition in growing chunks (32, then
// twice the last up to 256): 32 at a time, every claim is a journal write
// the partition's worker waits for, and an unlimited 10,000-address run
// went at 0.77 of the bare loop (BenchmarkUnlimited). Without order the
// feeder's chunks grow the same way (they are claimed ahead of the
// workers); at a rate, a chunk stays a second of work.
func TestUnlimitedClaimsGrow(t *testing.T) {
	for _, c := range []struct {
		name  string
		o     replay.Options
		sizes []int
	}{
		{"unlimited/partition", replay.Options{Order: replay.OrderPartition}, []int{32, 64, 128, 256, 256, 256, 8}},
		{"unlimited/none", replay.Options{Order: replay.OrderNone}, []int{32, 64, 128, 256, 256, 256, 8}},
		{"rate", replay.Options{Order: replay.OrderPartition, Rate: 1e6, Burst: 1}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, url := testkit.Sandbox(t)
			fillChains(b, 1, 1000, rand.New(rand.NewPCG(7, 8)))
			cl := testkit.Client(t, url)
			items, _ := orderedItems(t, cl, replay.OrderPartition)
			j := &claimSizes{Store: testkit.OpenLedger(t, "sqlite://"+filepath.Join(t.TempDir(), "l.db"))}
			o := c.o
			o.Action, o.Broker, o.BatchID, o.Owner, o.Concurrency, o.Via = deadletter.Replay, cl.Server(), "b", "otherhost:1:x", 4, replay.ViaEndpoint
			rep, err := replay.NewEngine(cl, j, o).Run(context.Background(), items)
			if err != nil || rep.Replayed != 1000 {
				t.Fatalf("%v %+v", err, rep)
			}
			if c.sizes == nil {
				for _, n := range j.sizes {
					if n > 32 {
						t.Fatalf("claims at a rate: %v, want at most 32 each", j.sizes)
					}
				}
				return
			}
			if !slices.Equal(j.sizes, c.sizes) {
				t.Fatalf("claims %v, want %v", j.sizes, c.sizes)
			}
			if o.Order == replay.OrderPartition {
				assertOrdered(t, b, 1, 1000, true)
				return
			}
			seen := map[place]int{}
			for _, m := range b.LiveMessages() {
				seen[placeOf(m.Payload)]++
			}
			for i := 0; i < 1000; i++ {
				if n := seen[place{0, i}]; n != 1 {
					t.Fatalf("message %d published %d times", i, n)
				}
			}
		})
	}
}
