package batch

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// The plan is made in one pass over the stage, a chunk of items at a
// time, once what it depends on beside the items is known (the path, the
// queues' groups, the pace). Each chunk settles what the list could not
// say: which envelopes the broker cannot decrypt (the detail route is
// asked), which messages an active hold covers (left out with
// --skip-held), which addresses an earlier attempt pinned to the manual
// path, the copies' generations, and whether --transform runs on every
// payload; what it finds is written beside the item, and the items the
// batch keeps are counted.

// planChunk is how many items the pass holds at a time.
const planChunk = 400

// planItems is the pass: every item settled, and counted on pl.
func (p *Pending) planItems(ctx context.Context, pl *Planner) error {
	cl, ld, st := p.env.Client, p.env.Ledger, p.in.st
	replaying := p.req.Action == deadletter.Replay
	if p.act().Outside() {
		// The archive's rows, or a file's: no hold, journal path or
		// envelope to ask the broker about (the rows are not in it).
		return st.chunks(ctx, planChunk, func([]placed) error { return nil }, func(chunk []placed) error {
			for _, c := range chunk {
				if err := p.tryTransform(ctx, c.it); err != nil {
					return err
				}
				pl.Add(c.it, ItemFacts{})
			}
			return nil
		})
	}
	ahead := func(chunk []placed) error { return p.checkEnvelopes(ctx, chunk) }
	// A broker the ledger knows nothing of (its first batch) has no
	// decision, entry or copy to look up, chunk after chunk.
	history, err := ld.HasHistory(ctx, cl.Broker())
	if err != nil {
		return err
	}
	return st.chunks(ctx, planChunk, ahead, func(chunk []placed) error {
		addrs := make([]deadletter.Address, len(chunk))
		for i, c := range chunk {
			addrs[i] = c.it.Address
		}
		dec := map[deadletter.Address]ledger.Decision{}
		if history {
			var err error
			if dec, err = ld.LatestDecisionsFor(ctx, cl.Broker(), addrs); err != nil {
				return err
			}
		}
		var ents map[deadletter.Address]*ledger.Entry
		if replaying && history {
			if ents, err = ld.Entries(ctx, cl.Broker(), addrs); err != nil {
				return err
			}
			gens, err := copyGenerations(ctx, ld, cl.Broker(), addrs)
			if err != nil {
				return err
			}
			for a, g := range gens {
				p.gens[a] = g
			}
		}
		var skipped, pins []int
		held := map[string][]int{}
		for _, c := range chunk {
			it := c.it
			var f ItemFacts
			if d, ok := dec[it.Address]; ok && d.Holds(it.Newest().FailedAt, p.now) && (p.in.batch == nil || d.BatchID != p.in.batch.ID) {
				if p.req.SkipHeld {
					skipped = append(skipped, c.at)
					continue
				}
				h, ok := p.holds[d.BatchID]
				if !ok {
					h = HoldShare{BatchID: d.BatchID, By: d.By, Until: d.Until, Why: d.Why}
					p.holds[d.BatchID] = h
				}
				f.Hold = &h
				held[d.BatchID] = append(held[d.BatchID], c.at)
			}
			if d, ok := dec[it.Address]; ok && p.in.batch == nil && d.Action == p.req.Action && d.Copy == nil && (d.Status == ledger.StatusRecorded || d.Status == ledger.StatusAwaiting) && d.Covers(it.Newest().FailedAt, p.now) {
				ds, ok := p.decided[d.BatchID]
				if !ok {
					ds = DecidedShare{BatchID: d.BatchID, By: d.By, Status: d.Status, Why: d.Why}
					p.decided[d.BatchID] = ds
				}
				f.Decided = &ds
			}
			if e, ok := ents[it.Address]; ok && replay.Pinned(e) {
				f.Pinned = true
				pins = append(pins, c.at)
			}
			if err := p.tryTransform(ctx, it); err != nil {
				return err
			}
			pl.Add(it, f)
		}
		p.skippedHeld += len(skipped)
		if err := st.mark(ctx, "skipped", 1, skipped); err != nil {
			return err
		}
		if err := st.mark(ctx, "pinned", 1, pins); err != nil {
			return err
		}
		for id, at := range held {
			if err := st.mark(ctx, "hold", id, at); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkEnvelopes asks the detail route about each item of a chunk whose
// payload the list showed as an encryption envelope, 8 at a time: the
// released server's list never decrypts, so only the detail route tells
// an encrypted payload (it decrypts) from an undecryptable one. The
// answer is what the batch publishes, and is staged. An address gone
// from the DLQ, or a broker without the route, leaves it unanswered (a
// run settles it).
func (p *Pending) checkEnvelopes(ctx context.Context, chunk []placed) error {
	var ask []*placed
	for i := range chunk {
		if c := &chunk[i]; !c.it.Checked && c.it.Envelope() {
			ask = append(ask, c)
		}
	}
	return askDetails(ctx, p.env.Client, len(ask), func(i int) deadletter.Address { return ask[i].it.Address }, func(i int, m *client.Message, err error) error {
		switch {
		case errors.Is(err, client.ErrNoDeadLetterRow), errors.Is(err, client.ErrRouteMissing):
			return nil
		case err != nil:
			return err
		}
		ask[i].it.Payload, ask[i].it.Checked = m.Payload, true
		return p.in.st.checked(ctx, ask[i].at, m.Payload)
	})
}

// tryTransform runs a replay's --transform on the payload an item would
// publish, before anything is recorded: one that fails, or runs past
// jq's budget, fails the plan, naming the message. An item that is not
// published (gone, undecryptable, empty) is not tried.
func (p *Pending) tryTransform(ctx context.Context, it replay.Item) error {
	t := p.opts.Transform
	if t == nil || !p.act().Publishes || it.Absent || it.Undecryptable() || len(it.Data()) == 0 || !it.Checked && it.Envelope() {
		return nil
	}
	if _, err := t(ctx, it.Data()); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return refuse(errs.Usage, GivenTransform, "", fmt.Sprintf("fails on %s: %v; nothing was recorded or sent", it.Address, err))
	}
	return nil
}

// groups adds each queue and consumer group of the staged rows (for the
// fan-out warning).
func (st *stage) groups(ctx context.Context, add func(q, g string)) error {
	return st.each(ctx, "reading the staged snapshot", `SELECT DISTINCT queue, grp FROM rows ORDER BY queue, grp`, nil, func(rows *sql.Rows) error {
		var q, g string
		if err := rows.Scan(&q, &g); err != nil {
			return err
		}
		add(q, g)
		return nil
	})
}

// copyGenerations are the generations of the addresses that are copies
// the /retry endpoint published (their ids, minted by the broker, say
// none): the ledger's journal knows which replay made each.
func copyGenerations(ctx context.Context, ld *ledger.Store, broker string, addrs []deadletter.Address) (replay.Generations, error) {
	var minted []deadletter.Address
	for _, a := range addrs {
		if !deadletter.IsReplayID(a.TransactionID) {
			minted = append(minted, a)
		}
	}
	gens, err := ld.CopyGenerations(ctx, broker, minted)
	return replay.Generations(gens), err
}
