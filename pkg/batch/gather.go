package batch

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// input is what a batch executes: a fresh snapshot, or a recorded
// batch's frozen manifest.
type input struct {
	items   []replay.Item
	batch   *ledger.Batch // set when executing a recorded batch
	fresh   bool
	missing []deadletter.Address // explicit addresses that are not dead-lettered
	absent  map[deadletter.Address]bool
	planAt  time.Time
	// released counts the items a fresh batch's run let go once they
	// were recorded (it reads them from the manifest).
	released int
	// copiesBack are the copies a recorded batch published that are
	// dead-lettered again (found as its queues are read to resume it).
	copiesBack []copyBack
}

// copyBack is a batch's copy back in the DLQ.
type copyBack struct {
	Copy    deadletter.Address
	Lineage ledger.Lineage
}

// gather snapshots the selection, or loads a recorded batch's manifest and
// checks which of its addresses are still dead-lettered.
func gather(ctx context.Context, cl *client.Client, ld *ledger.Store, req Request, now time.Time) (*input, error) {
	sel, batchID, action := req.Selection, req.BatchID, req.Action
	in := &input{planAt: now}
	if batchID != "" {
		b, err := ld.Batch(ctx, batchID)
		if err != nil {
			return nil, err
		}
		if b.Broker != cl.Broker() {
			return nil, errs.Usagef("batch %s belongs to broker %s, not %s (use --server or --context)", b.ID, b.Broker, cl.Broker())
		}
		if b.Status == ledger.StatusCancelled {
			return nil, errs.Usagef("batch %s was cancelled (see dlqctl decisions show %s): it is no longer a decision; select the dead letters again for a new batch", b.ID, b.ID)
		}
		want := map[string]string{deadletter.Replay: ledger.ActionReplay, deadletter.Discard: ledger.ActionDiscard}[action]
		if b.Action != want {
			verb := map[string]string{ledger.ActionReplay: "dlq replay", ledger.ActionDiscard: "dlq rm", ledger.ActionHold: "nothing (a hold is not executed)"}[b.Action]
			return nil, errs.Usagef("batch %s records a %s decision; execute it with %s", b.ID, b.Action, verb)
		}
		man, err := ld.Manifest(ctx, b.ID)
		if err != nil {
			return nil, err
		}
		in.batch = b
		in.items = ManifestItems(man)
		// A recorded manifest may be old: find what is still dead-lettered,
		// so nothing is deleted that is not (an older server's DELETE
		// removes live messages too), and every row a delete removes now.
		endpoint, err := ld.HasEndpointCopies(ctx, b.Broker)
		if err != nil {
			return nil, err
		}
		maybeCopy := func(txid string) bool { return endpoint || ledger.MayBeCopy(txid) }
		current, cands, err := currentRows(ctx, cl, in.items, b.Destination, maybeCopy)
		if err != nil {
			return nil, err
		}
		if in.copiesBack, err = copiesBack(ctx, ld, b, cands); err != nil {
			return nil, err
		}
		in.absent = map[deadletter.Address]bool{}
		for i := range in.items {
			it := &in.items[i]
			rows := current[it.Address]
			if len(rows) == 0 {
				in.absent[it.Address] = true
				continue
			}
			have := map[string]bool{}
			for _, r := range it.AllRows() {
				have[r.ConsumerGroup+"\x00"+r.FailedAt.String()] = true
			}
			for _, r := range rows {
				if !have[r.ConsumerGroup+"\x00"+r.FailedAt.String()] {
					it.Others = append(it.Others, r)
				}
			}
		}
		return in, nil
	}
	var items []replay.Item
	var err error
	if sel.OnlyAddresses() {
		items, in.missing, err = snapshotAddresses(ctx, cl, sel.Addresses)
	} else {
		snapshot := replay.Snapshot
		if req.PlanOnly {
			snapshot = replay.SnapshotForPlan
		}
		items, err = snapshot(ctx, cl, sel, inspect.PageSize)
	}
	if err != nil {
		return nil, err
	}
	in.items, in.fresh = items, true
	if len(sel.Addresses) > 0 && !sel.OnlyAddresses() {
		found := map[deadletter.Address]bool{}
		for _, it := range items {
			found[it.Address] = true
		}
		for _, a := range sel.Addresses {
			if !found[a] {
				in.missing = append(in.missing, a)
			}
		}
	}
	return in, nil
}

// snapshotAddresses snapshots explicit addresses without reading the
// whole DLQ: the detail route says whether each is dead-lettered (and
// gives its payload, decrypted); the rows are read from their queues
// only, without payloads. An address the broker cannot be asked about
// (see Address.Unreachable) is looked for in the list.
func snapshotAddresses(ctx context.Context, cl *client.Client, addrs []deadletter.Address) ([]replay.Item, []deadletter.Address, error) {
	type got struct {
		m   *client.Message
		err error
	}
	res := make([]got, len(addrs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, a := range addrs {
		if !a.PathSafe() {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res[i].m, res[i].err = cl.Get(ctx, a)
		}()
	}
	wg.Wait()
	var items []replay.Item
	var missing []deadletter.Address
	byAddr := map[deadletter.Address]int{} // -1: dead-lettered, not yet seen in the list
	seen := map[deadletter.Address]bool{}
	var queues []string
	readAll := false
	for i, a := range addrs {
		if seen[a] {
			continue
		}
		seen[a] = true
		r := res[i]
		switch {
		case !a.PathSafe():
			readAll = true
		case errors.Is(r.err, client.ErrNoDeadLetterRow):
			missing = append(missing, a)
			continue
		case errors.Is(r.err, client.ErrRouteMissing):
			readAll = true
		case r.err != nil:
			return nil, nil, r.err
		case r.m.Status != "" && r.m.Status != "dead_letter":
			missing = append(missing, a)
			continue
		default:
			if !slices.Contains(queues, r.m.Queue) {
				queues = append(queues, r.m.Queue)
			}
		}
		byAddr[a] = -1
	}
	if readAll {
		queues = []string{""}
	}
	// The rows of the addresses found, in list order (newest first).
	for _, q := range queues {
		for row, err := range cl.Rows(ctx, client.ListQuery{Queue: q, Limit: inspect.PageSize, NoData: !readAll}) {
			if err != nil {
				return nil, nil, err
			}
			a := row.Address()
			i, want := byAddr[a]
			if !want || q != "" && row.Queue != q {
				continue
			}
			if i < 0 {
				byAddr[a] = len(items)
				items = append(items, replay.Item{Address: a, Queue: row.Queue, Partition: row.Partition, Rows: []deadletter.Row{row}})
				continue
			}
			items[i].Rows = append(items[i].Rows, row)
		}
	}
	clear(seen)
	for k, a := range addrs {
		i, ok := byAddr[a]
		if !ok || seen[a] {
			continue
		}
		seen[a] = true
		switch {
		case i < 0:
			// Dead-lettered a moment ago, gone by the time the list was read.
			missing = append(missing, a)
		case res[k].m != nil:
			items[i].Payload, items[i].Checked = res[k].m.Payload, true
		}
	}
	return items, missing, nil
}

// checkEnvelopes asks the detail route for each item whose list payload
// is an encryption envelope: the released server's list never decrypts,
// so only the detail route tells an encrypted payload (it decrypts) from
// an undecryptable one. The answer is what the batch publishes.
func checkEnvelopes(ctx context.Context, cl *client.Client, items []replay.Item) error {
	var ask []*replay.Item
	for i := range items {
		if it := &items[i]; !it.Checked && it.Envelope() && it.Address.PathSafe() {
			ask = append(ask, it)
		}
	}
	return askDetails(ctx, cl, len(ask), func(i int) deadletter.Address { return ask[i].Address }, func(i int, m *client.Message) {
		ask[i].Payload, ask[i].Checked = m.Payload, true
	})
}

// askDetails asks the detail route about n addresses, 8 at a time, and
// gives each answer to got (called one at a time). An address gone from
// the DLQ, or a broker without the route, leaves it unanswered (a run
// settles it); any other error is returned.
func askDetails(ctx context.Context, cl *client.Client, n int, addr func(i int) deadletter.Address, got func(i int, m *client.Message)) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	var mu sync.Mutex
	var first error
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			m, err := cl.Get(ctx, addr(i))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				got(i, m)
			case errors.Is(err, client.ErrNoDeadLetterRow), errors.Is(err, client.ErrRouteMissing):
			default:
				if first == nil {
					first = err
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// ManifestItems turns a recorded manifest back into items to execute.
func ManifestItems(man []ledger.ManifestItem) []replay.Item {
	items := make([]replay.Item, 0, len(man))
	for _, m := range man {
		it := replay.Item{Address: m.Address, Queue: m.Queue, Partition: m.Partition, Payload: m.Payload, Checked: m.Checked}
		row := func(id, g, errText string, retries int, failed time.Time) deadletter.Row {
			if id == "" {
				id = m.MessageID // a manifest written before rows kept their ids
			}
			return deadletter.Row{ID: id, PartitionID: m.Address.PartitionID, TransactionID: m.Address.TransactionID, Queue: m.Queue,
				Partition: m.Partition, ConsumerGroup: g, ErrorMessage: errText, RetryCount: retries, FailedAt: failed, Data: m.Payload}
		}
		if len(m.Rows) > 0 {
			for _, r := range m.Rows {
				if r.Selected {
					it.Rows = append(it.Rows, row(r.ID, r.ConsumerGroup, r.Error, r.RetryCount, r.FailedAt))
				} else {
					it.Others = append(it.Others, row(r.ID, r.ConsumerGroup, r.Error, r.RetryCount, r.FailedAt))
				}
			}
		}
		if len(it.Rows) == 0 {
			// Manifests written before rows were recorded: one row per group.
			groups := m.Groups
			if len(groups) == 0 {
				groups = []string{""}
			}
			for _, g := range groups {
				it.Rows = append(it.Rows, row("", g, m.Error, m.RetryCount, m.FailedAt))
			}
		}
		items = append(items, it)
	}
	return items
}

// ToManifest freezes items into a manifest to record.
func ToManifest(items []replay.Item) []ledger.ManifestItem {
	out := make([]ledger.ManifestItem, len(items))
	for i, it := range items {
		out[i] = ManifestItemOf(it)
	}
	return out
}

// ManifestItemOf freezes one item as its manifest records it.
func ManifestItemOf(it replay.Item) ledger.ManifestItem {
	r := it.Newest()
	mi := ledger.ManifestItem{Address: it.Address, MessageID: r.ID, Queue: it.Queue, Partition: it.Partition, Groups: it.Groups(),
		Error: r.ErrorMessage, RetryCount: r.RetryCount, Payload: it.Data(), Undecryptable: it.Undecryptable(), Checked: it.Checked}
	for _, x := range it.Rows {
		mi.Rows = append(mi.Rows, ledger.ManifestRow{ID: x.ID, ConsumerGroup: x.ConsumerGroup, Error: x.ErrorMessage, RetryCount: x.RetryCount, FailedAt: x.FailedAt, Selected: true})
	}
	for _, x := range it.Others {
		mi.Rows = append(mi.Rows, ledger.ManifestRow{ID: x.ID, ConsumerGroup: x.ConsumerGroup, Error: x.ErrorMessage, RetryCount: x.RetryCount, FailedAt: x.FailedAt})
	}
	// The newest failure the batch saw: a row that fails later is a
	// new dead letter the decision does not cover.
	for _, x := range mi.Rows {
		if x.FailedAt.After(mi.FailedAt) {
			mi.FailedAt = x.FailedAt
		}
	}
	return mi
}

// newSince counts dead letters matching a fresh selection that arrived
// after the plan (not in the batch, not the run's own copies failed
// again: own): they are not silently added to a frozen batch. The
// candidates are looked up in the batch's manifest a chunk at a time, so
// nothing of the batch is held; a ledger that cannot be read ends the
// count.
func newSince(ctx context.Context, cl *client.Client, ld *ledger.Store, batchID string, sel *deadletter.Selection, planAt time.Time, own func(txid string) bool) int {
	n := 0
	var chunk []deadletter.Address
	count := func() bool {
		in, err := ld.InBatch(ctx, cl.Broker(), batchID, chunk)
		if err != nil {
			return false
		}
		for _, a := range chunk {
			if !in[a] {
				n++
			}
		}
		chunk = chunk[:0]
		return true
	}
	q := client.QueryFor(sel, inspect.PageSize)
	q.NoData = true
	for r, err := range cl.Rows(ctx, q) {
		if err != nil || r.FailedAt.Before(planAt) {
			break // newest first: nothing older can be new
		}
		if sel.Match(r) && !own(r.TransactionID) {
			if chunk = append(chunk, r.Address()); len(chunk) == 400 && !count() {
				return n
			}
		}
	}
	if len(chunk) > 0 {
		count()
	}
	return n
}

// queueGroups lists consumer groups per queue from the broker's queue and
// consumer-group lists and from the rows in hand (in, which adds each
// queue and group it has).
func queueGroups(ctx context.Context, cl *client.Client, in func(add func(q, g string))) map[string][]string {
	out := map[string][]string{}
	add := func(q, g string) {
		if !slices.Contains(out[q], g) {
			out[q] = append(out[q], g)
		}
	}
	if qs, err := cl.Queues(ctx); err == nil {
		for _, q := range qs {
			for _, g := range q.ConsumerGroups {
				add(q.Name, g)
			}
		}
	}
	if cgs, err := cl.ConsumerGroups(ctx); err == nil {
		for _, g := range cgs {
			add(g.Queue, g.Name)
		}
	}
	in(add)
	return out
}

// archiveItem queues every row of an item for the archive, each with the
// message's payload (the checked one, when the detail route was asked).
func archiveItem(ctx context.Context, a *ledger.Archiver, it replay.Item) error {
	for _, r := range it.AllRows() {
		if len(r.Data) == 0 || it.Checked {
			r.Data = it.Data()
		}
		if err := a.Add(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// currentRows reads, without payloads, the rows each item's address has
// in the DLQ now (every consumer group), reading only the items' queues
// (and dest, where the batch's copies went). The other addresses whose
// transaction id maybeCopy says may be a replay's copy are returned too.
func currentRows(ctx context.Context, cl *client.Client, items []replay.Item, dest string, maybeCopy func(string) bool) (map[deadletter.Address][]deadletter.Row, []deadletter.Address, error) {
	want := map[deadletter.Address]bool{}
	var queues []string
	for _, it := range items {
		want[it.Address] = true
		if !slices.Contains(queues, it.Queue) {
			queues = append(queues, it.Queue)
		}
	}
	if dest != "" && !slices.Contains(queues, dest) {
		queues = append(queues, dest)
	}
	out := map[deadletter.Address][]deadletter.Row{}
	var cands []deadletter.Address
	seen := map[deadletter.Address]bool{}
	for _, q := range queues {
		for r, err := range cl.Rows(ctx, client.ListQuery{Queue: q, Limit: inspect.PageSize, NoData: true}) {
			if err != nil {
				return nil, nil, err
			}
			switch a := r.Address(); {
			case r.Queue != q:
			case want[a]:
				out[a] = append(out[a], r)
			case !seen[a] && maybeCopy(r.TransactionID):
				seen[a] = true
				cands = append(cands, a)
			}
		}
	}
	return out, cands, nil
}

// copiesBack are the candidates that are copies batch b published.
func copiesBack(ctx context.Context, ld *ledger.Store, b *ledger.Batch, cands []deadletter.Address) ([]copyBack, error) {
	lin, err := ld.LineageOf(ctx, b.Broker, cands)
	if err != nil {
		return nil, err
	}
	var out []copyBack
	for _, a := range cands {
		if l, ok := lin[a]; ok && l.BatchID == b.ID {
			out = append(out, copyBack{Copy: a, Lineage: l})
		}
	}
	return out, nil
}

// manifestSource is a recorded batch's manifest as the engine reads it:
// a claim's items at a time, from the ledger.
type manifestSource struct {
	ld *ledger.Store
	id string
	n  int
}

func (m manifestSource) Len() int { return m.n }

func (m manifestSource) Chains(ctx context.Context, from, to int, toQueue string, f func(pos int, c replay.Chain)) error {
	return m.ld.ManifestChains(ctx, m.id, from, to, func(pos int, queue, partition string) {
		f(pos, replay.ChainOf(replay.Item{Queue: queue, Partition: partition}, toQueue))
	})
}

func (m manifestSource) Load(ctx context.Context, pos []int32) ([]replay.Item, error) {
	man, err := m.ld.ManifestAt(ctx, m.id, pos)
	if err != nil {
		return nil, err
	}
	return ManifestItems(man), nil
}
