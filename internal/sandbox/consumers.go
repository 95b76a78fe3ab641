package sandbox

import (
	"context"
	"sort"
	"time"
)

// Consumers stand in for the services that read the queues: each queue's
// consumer groups take the live messages (copies a replay or a restore
// published), oldest first, about rate messages a second per queue in
// all, and one delivery in failEvery fails again (the group dead-letters
// the message once more, as a consumer whose fix did not cover it would).
// So decisions verify sees copies completed, pending and failed again.
type Consumers struct {
	Rate      float64 // messages a second per queue; 0: none consumed
	FailEvery int     // every Nth delivery fails; 0: none
}

// RunConsumers runs c until ctx ends.
func (b *Broker) RunConsumers(ctx context.Context, c Consumers) {
	if c.Rate <= 0 {
		return
	}
	const tick = 100 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	credit := map[string]float64{}
	deliveries := 0
	from := 0 // b.live[:from] are done with: consumed, or failed again
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.mu.Lock()
		for q := range b.queues {
			credit[q] = min(credit[q]+c.Rate*tick.Seconds(), c.Rate)
		}
		from = min(from, len(b.live))
		for from < len(b.live) && b.doneWith(b.live[from]) {
			from++
		}
		for _, m := range b.live[from:] {
			if credit[m.Queue] < 1 || b.doneWith(m) {
				continue
			}
			groups := b.queues[m.Queue].Groups
			if len(groups) == 0 {
				m.Completed = true
				credit[m.Queue]--
				continue
			}
			took := false
			for _, g := range groups {
				if m.consumedBy(g) {
					continue
				}
				took = true
				if deliveries++; c.FailEvery > 0 && deliveries%c.FailEvery == 0 {
					b.seq++
					b.addRowLocked(&row{msg: m, Group: g, Error: "failed again after the replay: the fix does not cover this one", Retries: 3,
						FailedAt: b.now().UTC().Truncate(stored), seq: b.seq})
					sort.SliceStable(b.rows, func(i, j int) bool { return newer(b.rows[i], b.rows[j]) })
					b.version++
					break
				}
				if m.consumed == nil {
					m.consumed = map[string]bool{}
				}
				m.consumed[g] = true
			}
			if took {
				credit[m.Queue]--
			}
		}
		b.mu.Unlock()
	}
}

// doneWith reports whether the consumers are done with a live message:
// every group consumed it, or one failed it again.
func (b *Broker) doneWith(m *message) bool {
	groups := b.queues[m.Queue].Groups
	if m.Completed || len(m.rows) > 0 || len(groups) == 0 {
		return m.Completed || len(m.rows) > 0
	}
	for _, g := range groups {
		if !m.consumedBy(g) {
			return false
		}
	}
	return true
}
