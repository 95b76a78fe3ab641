package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/policy"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// WhereStats is what a --where cost and saw, for the notes after a
// command and for a plan.
type WhereStats struct {
	sel  *deadletter.Selection
	cl   *client.Client
	gets atomic.Int64
}

// Gets is how many payloads --where-decrypt fetched.
func (w *WhereStats) Gets() int {
	if w == nil {
		return 0
	}
	return int(w.gets.Load())
}

// PrepareWhere makes a selection's --where see each row as ls prints it,
// its decision included, at now; with --where-decrypt, envelope rows the
// other criteria select get their payload through one GET each (refused
// on a selection that is --where alone: that would be a GET per row of
// the whole DLQ). A selection without --where is left as it is.
func PrepareWhere(ctx context.Context, cl *client.Client, sel *deadletter.Selection, dec DecisionLookup, policies policy.Set, now time.Time) (*WhereStats, error) {
	if sel == nil || sel.Where == "" {
		if sel != nil && sel.WhereDecrypt {
			return nil, errs.Flagf("--where-decrypt goes with --where")
		}
		return nil, nil
	}
	ws := &WhereStats{sel: sel, cl: cl}
	sel.WhereNow = now
	sel.WhereInput = func(r deadletter.Row, v map[string]any) {
		label, batch := "", ""
		if dec != nil {
			if d, ok := dec(r.Address()); ok {
				label, batch = DecisionLabel(d, r, now, TriageSLO(policies, r.Queue, r.ConsumerGroup)), d.BatchID
			}
		}
		deadletter.FillWhereValue(v, r, now, label, batch)
	}
	if sel.WhereDecrypt {
		if !sel.Narrowed() {
			return nil, errs.Flagf("--where-decrypt fetches one payload a row: narrow the selection first (--queue, --cg, --class, --error, --failed-after, …)")
		}
		// Rows of one message come one after another: one GET serves them.
		var last deadletter.Address
		var lastData json.RawMessage
		sel.Decrypt = func(r deadletter.Row) (json.RawMessage, error) {
			if a := r.Address(); a == last {
				return lastData, nil
			}
			ws.gets.Add(1)
			m, err := cl.Get(ctx, r.Address())
			if err != nil {
				return nil, err
			}
			last, lastData = r.Address(), m.Payload
			return m.Payload, nil
		}
	}
	return ws, nil
}

// Notes are what --where has to say after the rows: rows it failed on,
// rows whose data was an encryption envelope, GETs it made.
func (w *WhereStats) Notes() []string {
	if w == nil {
		return nil
	}
	p := w.sel.WherePredicate()
	var out []string
	if n, first := p.Errored(); n > 0 {
		out = append(out, fmt.Sprintf("--where failed on %s, not selected (the first: %s)", render.Plural(n, "row", "rows"), render.Clean(first)))
	}
	for _, a := range p.Absent() {
		out = append(out, "--where: "+render.Clean(a))
	}
	switch n := p.Envelopes(); {
	case n == 0:
	case w.cl != nil && w.cl.ListDecrypts():
		out = append(out, fmt.Sprintf("--where saw the encryption envelope as data for %s: the broker could not decrypt them (undecryptable)", render.Plural(n, "row", "rows")))
	default:
		out = append(out, fmt.Sprintf("--where saw the encryption envelope as data for %s: this broker's list does not decrypt (narrow the selection and add --where-decrypt to fetch each payload with one GET)", render.Plural(n, "row", "rows")))
	}
	if n := w.Gets(); n > 0 {
		out = append(out, fmt.Sprintf("--where-decrypt fetched %s, one GET each", render.Plural(n, "payload", "payloads")))
	}
	return out
}
