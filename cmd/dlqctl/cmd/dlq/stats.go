package dlq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/config"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// StatsOptions are `dlq stats`'s flags.
type StatsOptions struct {
	Since     string
	AllScopes bool
	since     time.Duration
}

// NewCmdStats prints the DLQ's health numbers.
func NewCmdStats(f *cmdutil.Factory) *cobra.Command {
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
			return statsRun(cmd.Context(), f, o)
		},
	}
	cmd.Flags().StringVar(&o.Since, "since", "24h", "the window: arrivals, decisions and outcomes since this long ago")
	cmd.Flags().BoolVar(&o.AllScopes, "all-scopes", false, "also list the queues with no dead letter that no policy names")
	return cmd
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
	st, err := inspect.ComputeStats(ctx, cl, ld, inspect.StatsInput{Policies: cfg.PolicySetFor(f.ContextName()), Now: f.Now(), Window: o.since, WindowText: o.Since, AllScopes: o.AllScopes})
	if err != nil {
		return err
	}
	if !fm.Human() {
		return render.Document(f.IO.Out, fm, st)
	}
	w := f.IO.Out
	fmt.Fprintf(w, "Broker: %s — %s\n", render.Clean(st.Broker.Name()), st.Broker.ReplayWords())
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
	fmt.Fprintln(w, undecidedWords(st))
	outcomes := "none in the window"
	for _, n := range st.ReplayOutcomes {
		if n > 0 {
			outcomes = render.Counts(st.ReplayOutcomes)
			break
		}
	}
	fmt.Fprintf(w, "Replay outcomes: %s\n", outcomes)
	return nil
}

// undecidedWords is stats' undecided-past-SLO line: a count only where a
// policy sets a triage SLO (a scope without one is not measured, and 0
// there would read as "all decided").
func undecidedWords(st *inspect.Stats) string {
	switch {
	case st.SLOScopes == 0:
		return "Undecided past SLO: not measured (no policy sets a triage-slo)"
	case st.SLOScopes < st.Scopes:
		return fmt.Sprintf("Undecided past SLO: %d (in the %d of %d queue/group scopes with a triage-slo)", st.UndecidedPastSLO, st.SLOScopes, st.Scopes)
	}
	return fmt.Sprintf("Undecided past SLO: %d", st.UndecidedPastSLO)
}
