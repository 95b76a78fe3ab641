package replay

import (
	"context"
	"encoding/json"
	"iter"
	"slices"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Lister pages dead-letter rows; *client.Client is one.
type Lister interface {
	Rows(ctx context.Context, q client.ListQuery) iter.Seq2[deadletter.Row, error]
}

// Item is one address of a batch with its dead-letter rows.
type Item struct {
	Address deadletter.Address `json:"address"`
	Queue   string             `json:"queue"`
	// Partition is the partition name.
	Partition string `json:"partition"`
	// Rows are the rows that matched the selection (one per consumer
	// group and failure), newest first.
	Rows []deadletter.Row `json:"rows"`
	// Others are the address's rows that did not match (another group's,
	// another class's): the delete that acts on the address removes them
	// too, so the batch accounts for them.
	Others []deadletter.Row `json:"others,omitempty"`
	// Payload, when Checked, is the message as the detail route returned
	// it (decrypted where the list showed an envelope).
	Payload json.RawMessage `json:"-"`
	Checked bool            `json:"-"`
}

// Newest returns the item's newest selected row.
func (it Item) Newest() deadletter.Row { return it.Rows[0] }

// AllRows are the selected rows and the others.
func (it Item) AllRows() []deadletter.Row { return append(slices.Clip(it.Rows), it.Others...) }

// Envelope reports whether the list showed the payload as an encryption
// envelope: the released server's list never decrypts, so that alone
// does not make it undecryptable.
func (it Item) Envelope() bool { return it.Rows[0].Undecryptable() }

// Undecryptable reports whether the payload is known to be an envelope the
// broker cannot decrypt: the detail route said so (Checked), or the list
// of a broker that decrypts showed one.
func (it Item) Undecryptable() bool {
	if it.Checked {
		return deadletter.IsEnvelope(it.Payload)
	}
	return it.Envelope()
}

// Data is the payload to publish: the checked one, else the list's.
func (it Item) Data() json.RawMessage {
	if it.Checked {
		return it.Payload
	}
	return it.Rows[0].Data
}

// Groups lists the consumer groups that dead-lettered the message (every
// row of the address, selected or not).
func (it Item) Groups() []string {
	var g []string
	for _, r := range it.AllRows() {
		if !slices.Contains(g, r.ConsumerGroup) {
			g = append(g, r.ConsumerGroup)
		}
	}
	return g
}

// Snapshot reads the selection from the broker into a frozen list of
// addresses, newest failure first, before anything is written: paging
// cannot skip rows that a later delete shifts. Limit counts addresses.
// Each item also gets the address's rows the selection left out (Widen).
func Snapshot(ctx context.Context, l Lister, sel *deadletter.Selection, pageSize int) ([]Item, error) {
	return snapshot(ctx, l, sel, pageSize, false)
}

// SnapshotForPlan is Snapshot for a plan that is never run (a dry run):
// it keeps no payload but the encryption envelopes the plan counts, so
// what it holds does not grow with the payloads' size.
func SnapshotForPlan(ctx context.Context, l Lister, sel *deadletter.Selection, pageSize int) ([]Item, error) {
	return snapshot(ctx, l, sel, pageSize, true)
}

func snapshot(ctx context.Context, l Lister, sel *deadletter.Selection, pageSize int, planOnly bool) ([]Item, error) {
	var items []Item
	idx := map[deadletter.Address]int{}
	inScope, matched := 0, 0
	sel.Bind(ctx)
	rows := l.Rows(ctx, client.QueryFor(sel, pageSize))
	if sel.WhereRows != nil {
		rows = sel.WhereRows(ctx, rows)
	}
	for r, err := range rows {
		if err != nil {
			return nil, err
		}
		if sel.InScope(r) {
			inScope++
		}
		if !sel.Match(r) {
			if err := sel.WhereErr(); err != nil {
				return nil, err
			}
			continue
		}
		matched++
		if planOnly && !r.Undecryptable() {
			r.Data = nil
		}
		a := r.Address()
		if i, ok := idx[a]; ok {
			items[i].Rows = append(items[i].Rows, r)
			continue
		}
		if sel.Limit > 0 && len(items) >= sel.Limit {
			continue
		}
		idx[a] = len(items)
		items = append(items, Item{Address: a, Queue: r.Queue, Partition: r.Partition, Rows: []deadletter.Row{r}})
	}
	if err := sel.Everything(sel.Acting, inScope, matched); err != nil {
		return nil, err
	}
	if sel.RowLevel() {
		if err := Widen(ctx, l, items, pageSize); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// Widen adds to each item the rows of its address that are not among its
// rows (other groups', other failures'), reading only the items' queues
// and skipping payloads.
func Widen(ctx context.Context, l Lister, items []Item, pageSize int) error {
	idx := make(map[deadletter.Address]int, len(items))
	have := map[client.Key]bool{}
	var queues []string
	for i, it := range items {
		idx[it.Address] = i
		for _, r := range it.Rows {
			have[client.RowKey(r)] = true
		}
		if !slices.Contains(queues, it.Queue) {
			queues = append(queues, it.Queue)
		}
	}
	for _, q := range queues {
		for r, err := range l.Rows(ctx, client.ListQuery{Queue: q, Limit: pageSize, NoData: true}) {
			if err != nil {
				return err
			}
			i, ok := idx[r.Address()]
			if !ok || r.Queue != q || have[client.RowKey(r)] {
				continue
			}
			have[client.RowKey(r)] = true
			items[i].Others = append(items[i].Others, r)
		}
	}
	return nil
}
