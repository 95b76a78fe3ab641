package inspect

import (
	"context"
	"sort"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/gate"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/policy"
)

// Stats is `dlq stats -o json`.
type Stats struct {
	// Broker is which Queen the broker runs, as dlqctl told it.
	Broker           client.Release `json:"broker"`
	Window           string         `json:"window"`
	Queues           []QueueStat    `json:"queues"`
	Arrivals         []ClassHourly  `json:"arrivalsByClass"`
	DecisionP50Secs  *float64       `json:"timeToDecisionP50Seconds"`
	DecisionP90Secs  *float64       `json:"timeToDecisionP90Seconds"`
	Decided          int            `json:"decided"`
	UndecidedPastSLO int            `json:"undecidedPastSlo"`
	// Scopes counts the queue/consumer-group scopes the gate checked;
	// SLOScopes those a triage SLO applies to (UndecidedPastSLO counts in
	// them only: 0 of them is "not measured", not "none undecided").
	Scopes         int            `json:"scopes"`
	SLOScopes      int            `json:"triageSloScopes"`
	ReplayOutcomes map[string]int `json:"replayOutcomes"`
}

// QueueStat is one DLQ's depth and oldest age.
type QueueStat struct {
	Queue            string  `json:"queue"`
	Depth            int     `json:"depth"`
	OldestAgeSeconds float64 `json:"oldestAgeSeconds"`
}

// ClassHourly is a failure class's arrivals in the window, per hour.
type ClassHourly struct {
	Class    string  `json:"class"`
	Pattern  string  `json:"pattern"`
	Arrivals int     `json:"arrivals"`
	PerHour  float64 `json:"perHour"`
	Hours    []int   `json:"hours"` // arrivals per hour, oldest hour first
}

// StatsInput is what the numbers are computed over.
type StatsInput struct {
	Policies policy.Set
	Now      time.Time
	// Window is how far back arrivals, decisions and outcomes are
	// counted; WindowText is how it was written (for the output).
	Window     time.Duration
	WindowText string
	AllScopes  bool
}

// ComputeStats reads the DLQ once (through the gate: the oldest age and
// depth per queue; on a broker that pages, the window's rows after it)
// and the ledger: arrivals by class (also those that left the DLQ since,
// from the archive), time to first decision, replay outcomes.
func ComputeStats(ctx context.Context, cl *client.Client, ld *ledger.Store, in StatsInput) (*Stats, error) {
	since := in.Now.Add(-in.Window)
	rel, err := cl.Release(ctx)
	if err != nil {
		return nil, err
	}
	st := &Stats{Broker: rel, Window: in.WindowText, ReplayOutcomes: map[string]int{}}
	// A replay that failed again is back in the DLQ under the id it was
	// replayed as: derived (manual path) or minted by the broker (endpoint
	// path, recorded in the journal).
	outcomes, replayedAs, err := ld.OutcomeCounts(ctx, cl.Broker(), since)
	if err != nil {
		return nil, err
	}
	arr := newArrivals(since, in.Window, replayedAs)
	res, err := gate.Check(ctx, cl, gate.Input{Policies: in.Policies, Source: ld, Now: in.Now, AllScopes: in.AllScopes, Visit: arr.row})
	if err != nil {
		return nil, err
	}
	st.Queues = perQueue(res.Scopes)
	st.Scopes = len(res.Scopes)
	for _, s := range res.Scopes {
		st.UndecidedPastSLO += s.UndecidedPastSLO
		if s.TriageSLOSeconds != nil {
			st.SLOScopes++
		}
	}
	if !res.ReadWhole {
		// A broker that pages was probed, not read: read the window only
		// (newest first, so stop at its start).
		for r, err := range cl.Rows(ctx, client.ListQuery{Limit: PageSize, NoData: true}) {
			if err != nil {
				return nil, err
			}
			if r.FailedAt.Before(since) {
				break
			}
			arr.row(r)
		}
	}
	if err := ld.Departed(ctx, cl.Broker(), since, func(_, errText string, failedAt time.Time) { arr.add(errText, failedAt) }); err != nil {
		return nil, err
	}
	st.Arrivals = arr.classes()
	if err := decisionTimes(ctx, ld, cl.Broker(), since, st); err != nil {
		return nil, err
	}
	names := map[string]string{"replayed": "replayed", "duplicate": "suppressedAsDuplicate", "gone": "alreadyGone", deadletter.OutcomeMovedElsewhere: "movedElsewhere",
		"discarded": "discarded", ledger.Failed: "failed", ledger.Unknown: "unknown", ledger.Skipped: "skipped"}
	for k, v := range outcomes {
		if n, ok := names[k]; ok {
			st.ReplayOutcomes[n] += v
		}
	}
	st.ReplayOutcomes["failedAgain"] = arr.refailed
	return st, nil
}

// perQueue adds the scopes' depths and oldest ages up per queue.
func perQueue(scopes []gate.Scope) []QueueStat {
	by := map[string]*QueueStat{}
	for _, s := range scopes {
		q := by[s.Queue]
		if q == nil {
			q = &QueueStat{Queue: s.Queue}
			by[s.Queue] = q
		}
		q.Depth += s.Depth
		q.OldestAgeSeconds = max(q.OldestAgeSeconds, s.OldestAgeSeconds)
	}
	out := make([]QueueStat, 0, len(by))
	for _, q := range by {
		out = append(out, *q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	return out
}

// arrivals counts the window's arrivals per failure class and hour, and
// the ones that are this ledger's replays failing again.
type arrivals struct {
	since    time.Time
	window   time.Duration
	hours    int
	by       map[string]*ClassHourly
	ours     map[string]bool
	refailed int
}

func newArrivals(since time.Time, window time.Duration, replayedAs []string) *arrivals {
	a := &arrivals{since: since, window: window, hours: int(window.Hours() + 0.999), by: map[string]*ClassHourly{}, ours: map[string]bool{}}
	for _, id := range replayedAs {
		a.ours[id] = true
	}
	return a
}

// row counts a dead-letter row still in the DLQ.
func (a *arrivals) row(r deadletter.Row) {
	if r.FailedAt.Before(a.since) {
		return
	}
	a.add(r.ErrorMessage, r.FailedAt)
	if deadletter.IsReplayID(r.TransactionID) || a.ours[r.TransactionID] {
		a.refailed++
	}
}

// add counts a failure of the window.
func (a *arrivals) add(errText string, failedAt time.Time) {
	if failedAt.Before(a.since) {
		return
	}
	id := deadletter.ClassID(errText)
	c := a.by[id]
	if c == nil {
		c = &ClassHourly{Class: id, Pattern: deadletter.NormalizeError(errText), Hours: make([]int, a.hours)}
		a.by[id] = c
	}
	c.Arrivals++
	h := int(failedAt.Sub(a.since).Hours())
	c.Hours[min(max(h, 0), a.hours-1)]++
}

// classes are the counts, biggest first.
func (a *arrivals) classes() []ClassHourly {
	out := make([]ClassHourly, 0, len(a.by))
	for _, c := range a.by {
		c.PerHour = float64(c.Arrivals) / a.window.Hours()
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Arrivals != out[j].Arrivals {
			return out[i].Arrivals > out[j].Arrivals
		}
		return out[i].Class < out[j].Class
	})
	return out
}

// decisionTimes fills the time from arrival to first decision.
func decisionTimes(ctx context.Context, ld *ledger.Store, broker string, since time.Time, st *Stats) error {
	lat, err := ld.DecisionLatencies(ctx, broker, since)
	if err != nil {
		return err
	}
	st.Decided = len(lat)
	if len(lat) == 0 {
		return nil
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) *float64 {
		s := lat[min(len(lat)-1, int(q*float64(len(lat))))].Seconds()
		return &s
	}
	st.DecisionP50Secs, st.DecisionP90Secs = p(0.5), p(0.9)
	return nil
}
