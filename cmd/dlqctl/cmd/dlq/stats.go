package dlq

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/config"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
	"github.com/spf13/cobra"
)

// StatsOptions are `dlq stats`'s flags.
type StatsOptions struct {
	Since     string
	AllScopes bool
	since     time.Duration
}

// NewCmdStats prints the DLQ's health numbers.
func NewCmdStats(f *cmdutil.Factory, runF func(*StatsOptions) error) *cobra.Command {
	o := &StatsOptions{}
	cmd := &cobra.Command{
		Use:   "stats [--since 24h]",
		Short: "Oldest age per DLQ, arrivals by failure class, time to decision, replay outcomes",
		Example: `  $ dlqctl dlq stats
  $ dlqctl dlq stats --since 7d -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := cmdutil.ParseDurationFlag("since", o.Since, config.ParseDuration)
			if err != nil {
				return err
			}
			if d <= 0 {
				return cmdutil.FlagErrorf("--since must be a positive duration")
			}
			o.since = d
			if runF != nil {
				return runF(o)
			}
			return statsRun(cmd.Context(), f, o)
		},
	}
	cmd.Flags().StringVar(&o.Since, "since", "24h", "the window: arrivals, decisions and outcomes since this long ago")
	cmd.Flags().BoolVar(&o.AllScopes, "all-scopes", false, "also list the queues with no dead letter that no policy names")
	return cmd
}

// Stats is `dlq stats -o json`.
type Stats struct {
	Window           string         `json:"window"`
	Queues           []QueueStat    `json:"queues"`
	Arrivals         []ClassHourly  `json:"arrivalsByClass"`
	DecisionP50Secs  *float64       `json:"timeToDecisionP50Seconds"`
	DecisionP90Secs  *float64       `json:"timeToDecisionP90Seconds"`
	Decided          int            `json:"decided"`
	UndecidedPastSLO int            `json:"undecidedPastSlo"`
	ReplayOutcomes   map[string]int `json:"replayOutcomes"`
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

func statsRun(ctx context.Context, f *cmdutil.Factory, o *StatsOptions) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	cl, ld, err := f.Session(ctx)
	if err != nil {
		return err
	}
	now := f.Now()
	since := now.Add(-o.since)
	st := Stats{Window: o.Since, ReplayOutcomes: map[string]int{}}

	dec, err := ld.LatestDecisions(ctx, cl.Broker())
	if err != nil {
		return err
	}
	// Arrivals in the window, by class: the rows still in the DLQ and the
	// archived ones that left it since (replayed, discarded, vanished).
	hours := int(o.since.Hours() + 0.999)
	classes := map[string]*ClassHourly{}
	arrived := func(errText string, failedAt time.Time) {
		if failedAt.Before(since) {
			return
		}
		id := replay.ClassID(errText)
		c := classes[id]
		if c == nil {
			c = &ClassHourly{Class: id, Pattern: replay.NormalizeError(errText), Hours: make([]int, hours)}
			classes[id] = c
		}
		c.Arrivals++
		h := int(failedAt.Sub(since).Hours())
		c.Hours[min(max(h, 0), hours-1)]++
	}
	// A replay that failed again is back in the DLQ under the id it was
	// replayed as: derived (manual path) or minted by the broker (endpoint
	// path, recorded in the journal).
	outcomes, replayedAs, err := ld.OutcomeCounts(ctx, cl.Broker(), since)
	if err != nil {
		return err
	}
	ours := make(map[string]bool, len(replayedAs))
	for _, id := range replayedAs {
		ours[id] = true
	}
	refailed := 0
	inWindow := func(r client.Row) {
		if r.FailedAt.Before(since) {
			return
		}
		arrived(r.ErrorMessage, r.FailedAt)
		if replay.IsReplayID(r.TransactionID) || ours[r.TransactionID] {
			refailed++
		}
	}
	res, err := Check(ctx, cl, CheckInput{Config: cfg, Decisions: dec, Now: now, AllScopes: o.AllScopes, Visit: inWindow})
	if err != nil {
		return err
	}
	perQueue := map[string]*QueueStat{}
	for _, s := range res.Scopes {
		q := perQueue[s.Queue]
		if q == nil {
			q = &QueueStat{Queue: s.Queue}
			perQueue[s.Queue] = q
		}
		q.Depth += s.Depth
		q.OldestAgeSeconds = max(q.OldestAgeSeconds, s.OldestAgeSeconds)
		st.UndecidedPastSLO += s.UndecidedPastSLO
	}
	for _, q := range perQueue {
		st.Queues = append(st.Queues, *q)
	}
	sort.Slice(st.Queues, func(i, j int) bool { return st.Queues[i].Queue < st.Queues[j].Queue })
	if !res.ReadWhole {
		// A broker that pages was probed, not read: read the window only
		// (newest first, so stop at its start).
		for r, err := range cl.Rows(ctx, client.ListQuery{Limit: pageSize, NoData: true}) {
			if err != nil {
				return err
			}
			if r.FailedAt.Before(since) {
				break
			}
			inWindow(r)
		}
	}
	if err := ld.Departed(ctx, cl.Broker(), since, func(_, errText string, failedAt time.Time) { arrived(errText, failedAt) }); err != nil {
		return err
	}
	for _, c := range classes {
		c.PerHour = float64(c.Arrivals) / o.since.Hours()
		st.Arrivals = append(st.Arrivals, *c)
	}
	sort.Slice(st.Arrivals, func(i, j int) bool {
		if st.Arrivals[i].Arrivals != st.Arrivals[j].Arrivals {
			return st.Arrivals[i].Arrivals > st.Arrivals[j].Arrivals
		}
		return st.Arrivals[i].Class < st.Arrivals[j].Class
	})

	lat, err := ld.DecisionLatencies(ctx, cl.Broker(), since)
	if err != nil {
		return err
	}
	st.Decided = len(lat)
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		p := func(q float64) *float64 { return secs(lat[min(len(lat)-1, int(q*float64(len(lat))))]) }
		st.DecisionP50Secs, st.DecisionP90Secs = p(0.5), p(0.9)
	}
	names := map[string]string{"replayed": "replayed", "duplicate": "suppressedAsDuplicate", "gone": "alreadyGone",
		"discarded": "discarded", ledger.Failed: "failed", ledger.Unknown: "unknown", ledger.Skipped: "skipped"}
	for k, v := range outcomes {
		if n, ok := names[k]; ok {
			st.ReplayOutcomes[n] += v
		}
	}
	st.ReplayOutcomes["failedAgain"] = refailed

	if !fm.Human() {
		return render.Document(f.IO.Out, fm, st)
	}
	w := f.IO.Out
	fmt.Fprintf(w, "Window: last %s\n\n", o.Since)
	var rows [][]string
	for _, q := range st.Queues {
		oldest := "-"
		if q.Depth > 0 {
			oldest = render.AgeOfSeconds(q.OldestAgeSeconds)
		}
		rows = append(rows, []string{render.Clean(q.Queue), strconv.Itoa(q.Depth), oldest})
	}
	_ = render.WriteTable(w, []string{"QUEUE", "DEPTH", "OLDEST"}, rows)
	fmt.Fprintln(w, "\nArrivals by failure class:")
	rows = nil
	for _, c := range st.Arrivals {
		rows = append(rows, []string{c.Class, strconv.Itoa(c.Arrivals), strconv.FormatFloat(c.PerHour, 'f', 2, 64), render.Truncate(render.Clean(c.Pattern), 70)})
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		_ = render.WriteTable(w, []string{"CLASS", "ARRIVALS", "PER-HOUR", "ERROR"}, rows)
	}
	fmt.Fprintln(w)
	if st.DecisionP50Secs != nil {
		fmt.Fprintf(w, "Time to decision: p50 %s, p90 %s (%d decided)\n",
			render.AgeOfSeconds(*st.DecisionP50Secs), render.AgeOfSeconds(*st.DecisionP90Secs), st.Decided)
	} else {
		fmt.Fprintln(w, "Time to decision: no decisions in the window")
	}
	fmt.Fprintf(w, "Undecided past SLO: %d\n", st.UndecidedPastSLO)
	keys := make([]string, 0, len(st.ReplayOutcomes))
	for k := range st.ReplayOutcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "Replay outcomes: %s\n", render.Counts(st.ReplayOutcomes))
	return nil
}
