package dlq

import (
	"context"
	"errors"
	"fmt"
	"github.com/dlqctl/dlqctl/pkg/exporter"
	"github.com/prometheus/client_golang/prometheus"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/gate"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// A fleet check judges several contexts of the config at once (dlq check
// --all-contexts, or --context a,b): each with its own broker, token,
// ledger and policies, concurrently, each bounded by its own deadline.
// The command exits with the worst verdict: a context that cannot be
// judged (its broker or ledger down, its token refused) is that failure
// (exit 3, 4, …), never a pass; otherwise 1 on any breach.

// ContextVerdict is one context's part of a fleet check (-o json).
type ContextVerdict struct {
	Context string       `json:"context"`
	OK      bool         `json:"ok"`
	Error   string       `json:"error,omitempty"`
	Result  *gate.Result `json:"-"`
	// Document is Result as -o json and yaml write it.
	Document *present.CheckDocument `json:"result,omitempty"`

	code int
}

// FleetResult is a fleet check's answer.
type FleetResult struct {
	OK       bool             `json:"ok"`
	Contexts []ContextVerdict `json:"contexts"`
}

// checkFleet judges each context concurrently and prints one answer.
func checkFleet(ctx context.Context, f *cmdutil.Factory, o *CheckOptions, names []string) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	// Each context's own deadline, five broker timeouts (the client gives
	// up on a broker silent for four): one broker that hangs does not
	// hold the others' verdicts, nor the job, past it.
	deadline := 5 * f.Globals.Timeout
	out := make([]ContextVerdict, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { out[i] = judgeContext(ctx, f.ForContext(name), name, o, deadline) })
	}
	wg.Wait()
	fleet := &FleetResult{OK: true, Contexts: out}
	worst := cmdutil.ExitOK
	for _, v := range out {
		fleet.OK = fleet.OK && v.OK
		worst = max(worst, v.code)
	}
	if err := writeFleet(f, fm, o, fleet); err != nil {
		return err
	}
	if worst == cmdutil.ExitInterrupted {
		return cmdutil.ErrInterrupted
	}
	if worst != cmdutil.ExitOK {
		return &cmdutil.ExitError{Code: worst, Silent: true}
	}
	return nil
}

// judgeContext is one context's verdict, reached within deadline (sf is
// the factory of that context, closed here).
func judgeContext(ctx context.Context, sf *cmdutil.Factory, name string, o *CheckOptions, deadline time.Duration) ContextVerdict {
	defer sf.Close()
	cctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	res, err := evaluate(cctx, sf, gate.Input{Queues: o.Queues, MaxAge: o.maxAge, TriageSLO: o.triageSLO, AllScopes: o.AllScopes})
	v := ContextVerdict{Context: name, Result: res}
	switch {
	case err != nil && ctx.Err() != nil:
		v.code, v.Error = cmdutil.ExitInterrupted, "interrupted"
	case errors.Is(err, context.DeadlineExceeded):
		v.code, v.Error = cmdutil.ExitBroker, fmt.Sprintf("no verdict within %s", deadline)
	case err != nil:
		v.code, v.Error = cmdutil.ExitCode(err), sf.Redact(oneLineErr(err))
	case !res.OK:
		v.code = cmdutil.ExitBreach
	default:
		v.OK = true
	}
	if err != nil {
		v.Result = nil
	}
	return v
}

// writeFleet prints the fleet's verdicts in the format asked for.
func writeFleet(f *cmdutil.Factory, fm render.Format, o *CheckOptions, fleet *FleetResult) error {
	switch {
	case o.Format == "github":
		writeFleetGitHub(f.IO.Out, fleet)
	case o.Format == "prometheus":
		if err := writeFleetPrometheus(f.IO.Out, fleet, f.Now()); err != nil {
			return err
		}
	case !fm.Human():
		for i := range fleet.Contexts {
			if r := fleet.Contexts[i].Result; r != nil {
				fleet.Contexts[i].Document = present.DocumentOf(r)
			}
		}
		if err := render.Document(f.IO.Out, fm, fleet); err != nil {
			return err
		}
	default:
		writeFleetTable(f, fleet)
	}
	return nil
}

func oneLineErr(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// writeFleetTable is the check table with each scope's context first;
// a context with no verdict is said on stderr, and counted.
func writeFleetTable(f *cmdutil.Factory, fleet *FleetResult) {
	pal := f.Palette()
	header := []string{"CONTEXT", "QUEUE", "CG", "OWNER", "DEPTH", "OLDEST", "MAX-AGE", "UNDECIDED>SLO", "VANISHED", "STATUS"}
	var rows [][]string
	for _, v := range fleet.Contexts {
		if v.Result == nil {
			rows = append(rows, []string{render.Clean(v.Context), "-", "-", "-", "-", "-", "-", "-", "-", pal.Red("NO VERDICT")})
			continue
		}
		for _, r := range checkRows(pal, v.Result) {
			rows = append(rows, append([]string{render.Clean(v.Context)}, r...))
		}
	}
	_ = render.WriteTable(f.IO.Out, header, rows)
	for _, v := range fleet.Contexts {
		if v.Result == nil {
			fmt.Fprintf(f.IO.ErrOut, "%s context %s: %s\n", pal.Red("error"), render.Clean(v.Context), render.Clean(v.Error))
			continue
		}
		for _, n := range v.Result.Notes {
			fmt.Fprintf(f.IO.ErrOut, "note: context %s: %s\n", render.Clean(v.Context), render.Clean(n))
		}
		for _, s := range v.Result.Scopes {
			for _, b := range s.Breaches {
				fmt.Fprintf(f.IO.ErrOut, "%s %s %s: %s\n", pal.Red("breach"), render.Clean(v.Context), render.Clean(scopeName(s)), render.Clean(present.BreachText(b)))
			}
		}
	}
}

// writeFleetGitHub is writeGitHub with each title naming its context,
// and an ::error for each context with no verdict.
func writeFleetGitHub(w io.Writer, fleet *FleetResult) {
	for _, v := range fleet.Contexts {
		if v.Result == nil {
			fmt.Fprintf(w, "::error title=%s::%s\n", escapeProperty("DLQ context "+v.Context), escapeData("no verdict: "+v.Error))
			continue
		}
		writeGitHubAs(w, v.Result, "DLQ "+v.Context+" ")
	}
}

// writeFleetPrometheus is writePrometheus with a context label on every
// series, as the exporter over several contexts labels them: a context
// with no verdict has dlqctl_broker_up 0 and no scope.
func writeFleetPrometheus(w io.Writer, fleet *FleetResult, at time.Time) error {
	reg := prometheus.NewPedanticRegistry()
	for _, v := range fleet.Contexts {
		prometheus.WrapRegistererWith(prometheus.Labels{"context": v.Context}, reg).MustRegister(exporter.CheckCollector(v.Result, at))
	}
	return writeGathered(w, reg)
}
