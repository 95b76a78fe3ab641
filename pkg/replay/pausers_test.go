package replay_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// While a destination group lags past --max-lag nothing is published;
// once the lag clears the replay goes on, every message once, each
// partition in order, and the report says how long it waited and why.
func TestReplayWaitsForTheConsumers(t *testing.T) {
	const parts, per = 4, 8
	b, url := testkit.Sandbox(t)
	b.SetLine(sandbox.Queen015) // the released server reports lag
	fillChains(b, parts, per, rand.New(rand.NewPCG(3, 4)))
	b.SetLag("orders", "billing", 7*time.Minute)
	c := testkit.Client(t, url)
	st := testkit.OpenLedger(t, "sqlite://"+filepath.Join(t.TempDir(), "l.db"))
	items, _ := orderedItems(t, c, replay.OrderPartition)

	var mu sync.Mutex
	var said []string
	pausedNow := make(chan struct{}, 1)
	o := replay.Options{Action: deadletter.Replay, Broker: c.Server(), BatchID: "b", Owner: "o:1:x", Concurrency: 4, Via: replay.ViaAuto,
		Pausers: []replay.Pauser{&replay.LagPauser{Source: c, Queues: []string{"orders"}, Max: 2 * time.Minute, Every: 20 * time.Millisecond}},
		Paused: func(why string) {
			mu.Lock()
			said = append(said, why)
			mu.Unlock()
			if why != "" {
				select {
				case pausedNow <- struct{}{}:
				default:
				}
			}
		}}
	type result struct {
		rep *replay.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := replay.NewEngine(c, st, o).Run(context.Background(), items)
		done <- result{rep, err}
	}()
	<-pausedNow
	// Several lag readings later, still nothing published.
	time.Sleep(200 * time.Millisecond)
	if n := len(b.LiveMessages()); n != 0 {
		t.Fatalf("%d messages published while group billing lagged 7m (max 2m)", n)
	}
	b.SetLag("orders", "billing", 30*time.Second)
	r := <-done
	if r.err != nil || r.rep.Replayed != parts*per {
		t.Fatalf("%v: %+v", r.err, r.rep)
	}
	assertOrdered(t, b, parts, per, true)
	if len(r.rep.Pauses) != 1 || r.rep.Pauses[0].Kind != "consumer lag" || r.rep.Pauses[0].Times != 1 || r.rep.Pauses[0].For < 200*time.Millisecond {
		t.Fatalf("pauses: %+v", r.rep.Pauses)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(said) < 2 || said[0] != "group billing lags 7m (max 2m)" || said[len(said)-1] != "" {
		t.Fatalf("said %q", said)
	}
}

// A lag the broker cannot say keeps a lag-paced replay waiting: pacing
// was asked for, and consumers nobody can see are not flooded.
func TestUnknownLagWaits(t *testing.T) {
	b, url := testkit.Sandbox(t) // the contract's broker: groups, no lag
	b.FillChains(1, 2, 1)
	c := testkit.Client(t, url)
	g := &replay.LagPauser{Source: c, Queues: []string{"orders"}, Max: time.Minute}
	why, _ := g.Closed(context.Background(), time.Now())
	if !strings.HasPrefix(why, "consumer lag unknown") {
		t.Fatalf("closed: %q", why)
	}
	// No group reads the queue: nothing can lag.
	g = &replay.LagPauser{Source: c, Queues: []string{"elsewhere"}, Max: time.Minute}
	if why, _ := g.Closed(context.Background(), time.Now()); why != "" {
		t.Fatalf("a queue nobody reads: %q", why)
	}
}

func TestWindow(t *testing.T) {
	for _, bad := range []string{"22:00", "22-06", "25:00-06:00", "22:00-22:00", "22:00-06:00 Mars/Olympus", "7:5-8:00"} {
		if _, err := replay.ParseWindow(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	w, err := replay.ParseWindow("22:00-06:00 UTC")
	if err != nil {
		t.Fatal(err)
	}
	at := func(h, m int) time.Time { return time.Date(2026, 12, 1, h, m, 0, 0, time.UTC) }
	for _, c := range []struct {
		t     time.Time
		in    bool
		opens time.Time
	}{
		{at(23, 0), true, at(23, 0)},
		{at(3, 0), true, at(3, 0)},
		{at(6, 0), false, at(22, 0)},
		{at(12, 30), false, at(22, 0)},
		{at(21, 59), false, at(22, 0)},
	} {
		if w.Contains(c.t) != c.in || !w.Opens(c.t).Equal(c.opens) {
			t.Errorf("%s: in %v opens %s, want %v %s", c.t.Format("15:04"), w.Contains(c.t), w.Opens(c.t), c.in, c.opens)
		}
	}
	why, recheck := w.Closed(context.Background(), at(12, 0))
	if why != "outside the window 22:00-06:00 UTC (opens in 10h)" || recheck != time.Minute {
		t.Fatalf("%q %s", why, recheck)
	}
	day, _ := replay.ParseWindow("01:00-05:00 Europe/Berlin")
	if !day.Contains(time.Date(2026, 12, 1, 1, 30, 0, 0, time.UTC)) { // 02:30 in Berlin
		t.Fatal("zone not applied")
	}
}

// Outside the window nothing is started; the run starts when it opens.
func TestReplayKeepsToTheWindow(t *testing.T) {
	b, url := testkit.Sandbox(t)
	b.FillChains(2, 3, 5)
	c := testkit.Client(t, url)
	st := testkit.OpenLedger(t, "sqlite://"+filepath.Join(t.TempDir(), "l.db"))
	items, _ := orderedItems(t, c, replay.OrderPartition)
	w, _ := replay.ParseWindow("22:00-06:00 UTC")
	var mu sync.Mutex
	clock := time.Date(2026, 12, 1, 21, 58, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	var slept time.Duration
	o := replay.Options{Action: deadletter.Replay, Broker: c.Server(), BatchID: "b", Owner: "o:1:x", Concurrency: 1, Via: replay.ViaManual,
		Pausers: []replay.Pauser{w}, Now: now,
		Sleep: func(ctx context.Context, d time.Duration) error {
			if n := len(b.LiveMessages()); n != 0 {
				t.Errorf("%d published outside the window", n)
			}
			mu.Lock()
			clock = clock.Add(d)
			slept += d
			mu.Unlock()
			return nil
		}}
	rep, err := replay.NewEngine(c, st, o).Run(context.Background(), items)
	if err != nil || rep.Replayed != 6 {
		t.Fatalf("%v %+v", err, rep)
	}
	if slept != 2*time.Minute || len(rep.Pauses) != 1 || rep.Pauses[0].For != 2*time.Minute {
		t.Fatalf("slept %s, pauses %+v", slept, rep.Pauses)
	}
}
