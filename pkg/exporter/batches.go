package exporter

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// BatchProgress is a replay or discard batch that has started and not
// finished (running, or interrupted and waiting for a resume), from the
// ledger's journal.
type BatchProgress struct {
	ID, Action, Status string
	Size               int
	// Done counts the addresses carried out (published or removed);
	// Failed, the ones the broker refused or whose outcome is unknown;
	// Skipped, the ones deliberately left.
	Done, Failed, Skipped int
	// Refailed counts replays back in the DLQ; known only when the pass
	// read every row (RefailedKnown).
	Refailed      int
	RefailedKnown bool
	// Rate, EstimatedEnd and LastBeat are what its run said at its last
	// beat (ledger.Progress).
	Rate         float64
	EstimatedEnd time.Time
	LastBeat     time.Time
}

// Pending is what is left to do.
func (b BatchProgress) Pending() int { return max(0, b.Size-b.Done-b.Failed-b.Skipped) }

// activeStatuses are the batches whose progress is exported.
var activeStatuses = []string{ledger.StatusRunning, ledger.StatusInterrupted}

// activeBatches reads the running batches' progress, and what tells their
// replays that failed again apart: the ids they were published as.
func activeBatches(ctx context.Context, ld *ledger.Store, broker string) ([]BatchProgress, *refailures, error) {
	bs, err := ld.Batches(ctx, ledger.BatchFilter{Broker: broker, Statuses: activeStatuses})
	if err != nil {
		return nil, nil, err
	}
	rf := &refailures{byTxID: map[string]int{}}
	out := make([]BatchProgress, 0, len(bs))
	for _, b := range bs {
		if ledger.IsHold(b.Action) {
			continue
		}
		pr, err := ld.ProgressOf(ctx, &b)
		if err != nil {
			return nil, nil, err
		}
		p := BatchProgress{ID: b.ID, Action: b.Action, Status: pr.Status, Size: b.Size, Done: pr.Done, Failed: pr.Failed, Skipped: pr.Skipped,
			Rate: pr.Rate, EstimatedEnd: pr.EstimatedEnd, LastBeat: pr.Run.LastBeat}
		if deadletter.ActionOf(b.Action).Republishes() {
			ids, err := ld.ReplayTxIDs(ctx, b.ID)
			if err != nil {
				return nil, nil, err
			}
			for id := range ids {
				rf.byTxID[id] = len(out)
			}
		}
		out = append(out, p)
	}
	rf.counts = make([]int, len(out))
	return out, rf, nil
}

// refailures counts, among the rows a pass reads, the replays of the
// active batches that are back in the DLQ.
type refailures struct {
	byTxID map[string]int // replay transaction id → index in the batches
	counts []int
}

func (rf *refailures) row(r deadletter.Row) {
	if i, ok := rf.byTxID[r.TransactionID]; ok {
		rf.counts[i]++
	}
}

func (rf *refailures) settle(bs []BatchProgress) {
	for i := range bs {
		bs[i].Refailed, bs[i].RefailedKnown = rf.counts[i], true
	}
}

// ClassDepth is a failure class's rows in one queue; Class "other" sums
// the classes beyond the exported ones.
type ClassDepth struct {
	Queue, Class, Pattern string
	Depth                 int
}

// OtherClass is the class the rows of the classes not exported one by
// one are summed under.
const OtherClass = "other"

type classKey struct{ queue, class string }

// classTally counts the rows of a read by queue and failure class.
type classTally struct {
	counts   map[classKey]int
	patterns map[string]string
	// redact keeps the token out of the patterns: an error text may
	// quote the request that failed.
	redact func(string) string
}

func newClassTally(redact func(string) string) *classTally {
	return &classTally{counts: map[classKey]int{}, patterns: map[string]string{}, redact: redact}
}

func (t *classTally) add(r deadletter.Row) {
	id := deadletter.ClassID(r.ErrorMessage)
	t.counts[classKey{r.Queue, id}]++
	if _, ok := t.patterns[id]; !ok {
		t.patterns[id] = labelText(t.redact(deadletter.NormalizeError(t.redact(r.ErrorMessage))))
	}
}

// top keeps the n (queue, class) pairs with the most rows, and sums the
// rest per queue as OtherClass: at most n + queues series, however many
// distinct failures there are.
func (t *classTally) top(n int) []ClassDepth {
	if n <= 0 {
		return nil
	}
	keys := slices.Collect(maps.Keys(t.counts))
	slices.SortFunc(keys, func(a, b classKey) int {
		if d := t.counts[b] - t.counts[a]; d != 0 {
			return d
		}
		if c := strings.Compare(a.queue, b.queue); c != 0 {
			return c
		}
		return strings.Compare(a.class, b.class)
	})
	var out []ClassDepth
	other := map[string]int{}
	for i, k := range keys {
		if i < n {
			out = append(out, ClassDepth{Queue: k.queue, Class: k.class, Pattern: t.patterns[k.class], Depth: t.counts[k]})
			continue
		}
		other[k.queue] += t.counts[k]
	}
	for _, q := range slices.Sorted(maps.Keys(other)) {
		out = append(out, ClassDepth{Queue: q, Class: OtherClass, Depth: other[q]})
	}
	return out
}

// maxLabel bounds a pattern label: enough to recognise a failure on a
// dashboard, not a whole stack trace per series.
const maxLabel = 120

// labelText is s as a label value: valid UTF-8, one line, at most
// maxLabel runes.
func labelText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > maxLabel {
		s = string(r[:maxLabel-1]) + "…"
	}
	return s
}
