package dlq

import (
	"context"
	"fmt"
	"github.com/dlqctl/dlqctl/pkg/duration"
	"github.com/dlqctl/dlqctl/pkg/exporter"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/config"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/gate"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// CheckOptions are `dlq check`'s flags.
type CheckOptions struct {
	Queues    []string
	MaxAge    string
	TriageSLO string
	Format    string
	AllScopes bool
	// AllContexts judges every context of the config (fleet.go).
	AllContexts bool

	maxAge, triageSLO time.Duration
}

// NewCmdCheck is the SLO gate for CI and cron.
func NewCmdCheck(f *cmdutil.Factory) *cobra.Command {
	o := &CheckOptions{}
	cmd := &cobra.Command{
		Use:   "check [--queue Q…] [--max-age D] [--triage-slo D]",
		Short: "The SLO gate: exit 1 when a dead letter is too old or undecided too long",
		Long: `Check evaluates each queue and consumer group against its thresholds:
max-age breaches when the oldest dead letter not under an active hold is
older than it; triage-slo when a dead letter with no decision (an active
hold counts as one) is older than it; a row that vanished from the broker
with no recorded decision (seen by dlq sync) always breaches. Thresholds
come from the config file's policies; --max-age and --triage-slo each
override their own. A queue no policy sets a threshold for is held to
max-age 0, so with no config file every dead letter breaches: --triage-slo
alone leaves that in place (add --max-age to judge age by it). The oldest
dead letter is found in O(log N) requests, not by reading the DLQ.
Exit 0 when all hold, 1 on any breach, 2 for a usage error (a flag, a
queue or group the broker does not have, a bad config), 3 when the broker
or the ledger cannot be read (unreachable, 5xx, an unreadable answer),
4 when the broker refuses the token. docs/ci.md has the formats and
fields.`,
		Example: `  $ dlqctl dlq check
  $ dlqctl dlq check --queue orders --max-age 1h --triage-slo 4h
  $ dlqctl dlq check --format github          # workflow annotations
  $ dlqctl dlq check --format prometheus > /var/lib/node_exporter/textfile/dlq.prom`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.MaxAge != "" {
				if o.maxAge, err = cmdutil.ParseDurationFlag("max-age", o.MaxAge, config.ParseDuration); err != nil {
					return err
				}
			}
			if o.TriageSLO != "" {
				if o.triageSLO, err = cmdutil.ParseDurationFlag("triage-slo", o.TriageSLO, config.ParseDuration); err != nil {
					return err
				}
			}
			switch o.Format {
			case "", "github", "prometheus":
			default:
				return cmdutil.FlagErrorf("invalid --format %q: valid formats are github, prometheus (or -o table|json|yaml)", o.Format)
			}
			return checkRun(cmd.Context(), f, o)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&o.Queues, "queue", nil, "check only these queues (repeatable)")
	fl.StringVar(&o.MaxAge, "max-age", "", "breach when the oldest dead letter is older than this (overrides policies)")
	fl.StringVar(&o.TriageSLO, "triage-slo", "", "breach when a dead letter has had no decision for longer than this (overrides policies)")
	fl.StringVar(&o.Format, "format", "", "github (workflow annotations) or prometheus (textfile exposition)")
	fl.BoolVar(&o.AllScopes, "all-scopes", false, "also show the scopes with no dead letter that no policy names")
	fl.BoolVar(&o.AllContexts, "all-contexts", false, "judge every context of the config (or name several: --context a,b), each with its own broker, token, ledger and policies, at once; exit with the worst verdict, 3 for a context that cannot be judged")
	return cmd
}

func checkRun(ctx context.Context, f *cmdutil.Factory, o *CheckOptions) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	names, err := f.Contexts(o.AllContexts, "a check")
	if err != nil {
		return err
	}
	if names != nil {
		return checkFleet(ctx, f, o, names)
	}
	res, err := evaluate(ctx, f, gate.Input{Queues: o.Queues, MaxAge: o.maxAge, TriageSLO: o.triageSLO, AllScopes: o.AllScopes})
	if err != nil {
		return err
	}
	switch {
	case o.Format == "github":
		writeGitHub(f.IO.Out, res)
	case o.Format == "prometheus":
		if err := writePrometheus(f.IO.Out, res, f.Now()); err != nil {
			return err
		}
	case !fm.Human():
		if err := render.Document(f.IO.Out, fm, present.DocumentOf(res)); err != nil {
			return err
		}
	default:
		writeCheckTable(f, res)
	}
	if !res.OK {
		return cmdutil.ErrBreach
	}
	return nil
}

// evaluate runs the gate against the broker and the ledger: in is
// completed with the config, the decisions, the vanished rows and the
// clock.
func evaluate(ctx context.Context, f *cmdutil.Factory, in gate.Input) (*gate.Result, error) {
	cfg, err := f.Config()
	if err != nil {
		return nil, err
	}
	cl, ld, err := f.Session(ctx)
	if err != nil {
		return nil, err
	}
	in.Policies, in.Now = cfg.PolicySetFor(f.ContextName()), f.Now()
	return gate.Evaluate(ctx, cl, ld, in)
}

func fmtThreshold(p *float64) string {
	if p == nil {
		return "-"
	}
	return render.Duration(duration.Seconds(*p))
}

func writeCheckTable(f *cmdutil.Factory, res *gate.Result) {
	header := []string{"QUEUE", "CG", "OWNER", "DEPTH", "OLDEST", "MAX-AGE", "UNDECIDED>SLO", "VANISHED", "STATUS"}
	pal := f.Palette()
	rows := checkRows(pal, res)
	_ = render.WriteTable(f.IO.Out, header, rows)
	if res.Hidden > 0 {
		fmt.Fprintf(f.IO.ErrOut, "note: %s with no dead letter and no policy not shown (--all-scopes shows them)\n", render.Plural(res.Hidden, "scope", "scopes"))
	}
	for _, n := range res.Notes {
		fmt.Fprintln(f.IO.ErrOut, "note: "+render.Clean(n))
	}
	for _, s := range res.Scopes {
		for _, b := range s.Breaches {
			fmt.Fprintf(f.IO.ErrOut, "%s %s: %s\n", pal.Red("breach"), render.Clean(scopeName(s)), render.Clean(present.BreachText(b)))
		}
	}
}

// checkRows are the check table's rows, a scope each.
func checkRows(pal *render.Palette, res *gate.Result) [][]string {
	var rows [][]string
	for _, s := range res.Scopes {
		status := pal.Green("ok")
		if len(s.Breaches) > 0 {
			status = pal.Red("BREACH")
		}
		oldest := "-"
		if s.Depth > 0 {
			oldest = render.AgeOfSeconds(s.OldestAgeSeconds)
			if h := s.OldestHold; h != nil {
				oldest += " (held by " + render.Clean(h.Holder()) + ")"
			}
		}
		ma := fmtThreshold(s.MaxAgeSeconds)
		if s.DefaultedMaxAge {
			ma = "0 (no policy)"
		}
		// A threshold that is not set is not checked: "-", not a 0 that
		// reads as compliant.
		undecided := "-"
		if s.TriageSLOSeconds != nil {
			undecided = strconv.Itoa(s.UndecidedPastSLO)
		}
		rows = append(rows, []string{render.Clean(s.Queue), present.OrDash(render.Clean(groupName(s.ConsumerGroup))), present.OrDash(render.Clean(s.Owner)), strconv.Itoa(s.Depth), oldest, ma,
			undecided, strconv.Itoa(s.VanishedUndecided), status})
	}
	return rows
}

func scopeName(s gate.Scope) string {
	if s.ConsumerGroup == "" {
		return s.Queue
	}
	return s.Queue + "/" + groupName(s.ConsumerGroup)
}

// writeGitHub prints workflow commands: an ::error per breach, a ::notice
// per healthy scope. Values are escaped as the runner requires.
func writeGitHub(w io.Writer, res *gate.Result) { writeGitHubAs(w, res, "DLQ ") }

// writeGitHubAs is writeGitHub with each title after prefix.
func writeGitHubAs(w io.Writer, res *gate.Result, prefix string) {
	for _, s := range res.Scopes {
		title := prefix + scopeName(s)
		if s.Owner != "" {
			title += " (owner " + s.Owner + ")"
		}
		if len(s.Breaches) == 0 {
			fmt.Fprintf(w, "::notice title=%s::%s\n", escapeProperty(title), escapeData(fmt.Sprintf("ok: depth %d", s.Depth)))
			continue
		}
		for _, b := range s.Breaches {
			fmt.Fprintf(w, "::error title=%s::%s\n", escapeProperty(title), escapeData(present.BreachText(b)))
		}
	}
}

// The runner's escapes first, then no control character at all: the
// annotations end up in a log someone reads in a terminal too.
var (
	escR     = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A")
	escPropR = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C")
)

func escapeData(s string) string     { return render.Clean(escR.Replace(s)) }
func escapeProperty(s string) string { return render.Clean(escPropR.Replace(s)) }

// writePrometheus prints the text exposition format for a node_exporter
// textfile collector, through the exporter's own collector: the same
// series a rule reads from the exporter.
func writePrometheus(w io.Writer, res *gate.Result, at time.Time) error {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exporter.CheckCollector(res, at))
	return writeGathered(w, reg)
}

// writeGathered writes what a registry gathers as the text exposition.
func writeGathered(w io.Writer, reg *prometheus.Registry) error {
	fams, err := reg.Gather()
	if err != nil {
		return err
	}
	for _, mf := range fams {
		if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
			return err
		}
	}
	return nil
}
