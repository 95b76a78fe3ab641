// Package sandbox is `dlqctl sandbox`: a Queen-compatible broker in memory.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	sb "github.com/dlqctl/dlqctl/pkg/sandbox"
	"github.com/spf13/cobra"
)

// Options are `dlqctl sandbox`'s flags.
type Options struct {
	Addr   string
	Seed   string
	Faults sb.Faults
}

// NewCmdSandbox runs the sandbox broker until interrupted.
func NewCmdSandbox(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	o := &Options{}
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Run a Queen-compatible broker in memory, seeded with realistic dead letters",
		Long: `Sandbox serves the broker API dlqctl uses from memory (docs/broker.md in
dlqctl's repository describes it), seeded with dead letters over several
queues, consumer groups and failure classes, some encrypted and a few
undecryptable. It keeps the broker's semantics (newest-first paging, dedup
by partition and transaction id, the 404 texts, /retry with a fresh id).
--old-server makes it the released Queen server users run today (one-body
lists, no /retry, errors as 200, groups from /api/v1/consumer-groups); it
can also misbehave on purpose for rehearsals: --fail-503-every, --cut-every,
--row-kept-every, --latency, --database-down, --require-token. Stop it with
Ctrl-C; nothing is kept.`,
		Example: `  $ dlqctl sandbox
  $ dlqctl sandbox --addr 127.0.0.1:7000 --old-server --require-token s3cret`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(o)
			}
			return run(cmd.Context(), f, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Addr, "addr", "127.0.0.1:6632", "address to listen on")
	fl.StringVar(&o.Seed, "seed", "", "seed file (default: the built-in testdata/sandbox.json)")
	fl.BoolVar(&o.Faults.OldServer, "old-server", false, "behave as the released Queen server: no /retry, limit ignored, errors as 200, DELETE removes the message")
	fl.BoolVar(&o.Faults.DatabaseDown, "database-down", false, "behave as a broker whose database is away: pushes answered buffered, other calls hang")
	fl.IntVar(&o.Faults.Fail503Every, "fail-503-every", 0, "answer every Nth mutating call with 503")
	fl.IntVar(&o.Faults.CutEvery, "cut-every", 0, "apply every Nth push or retry, then cut the connection")
	fl.IntVar(&o.Faults.RowKeptEvery, "row-kept-every", 0, "answer every Nth retry with dlqRowRemoved:false")
	fl.DurationVar(&o.Faults.Latency, "latency", 0, "added to every call")
	fl.StringVar(&o.Faults.Token, "require-token", "", "bearer token every call but /health needs")
	return cmd
}

func run(ctx context.Context, f *cmdutil.Factory, o *Options) error {
	seed := dlqctl.SandboxSeed
	if o.Seed != "" {
		b, err := os.ReadFile(o.Seed)
		if err != nil {
			return cmdutil.UsageError(fmt.Errorf("--seed: %v", err))
		}
		seed = b
	}
	b := sb.New(nil)
	if err := b.Load(seed); err != nil {
		return cmdutil.UsageError(fmt.Errorf("--seed: %v", err))
	}
	b.SetFaults(o.Faults)
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return cmdutil.UsageError(fmt.Errorf("cannot listen on %s: %v (is another sandbox running? try --addr 127.0.0.1:0)", o.Addr, err))
	}
	srv := &http.Server{Handler: b.Handler(), ReadHeaderTimeout: 10 * time.Second}
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(f.IO.ErrOut, "Sandbox broker on %s with %d dead letters.\n", url, b.Depth())
	var set []string
	if url != "http://127.0.0.1:6632" {
		set = append(set, "export DLQCTL_SERVER="+url)
	}
	if o.Faults.Token != "" {
		// The token itself is printed nowhere, not even the sandbox's own.
		set = append(set, "export DLQCTL_TOKEN='<the value of --require-token>'")
	}
	if len(set) == 0 {
		fmt.Fprintln(f.IO.ErrOut, "dlqctl's default server (http://localhost:6632) is this one: nothing to set.")
	} else {
		fmt.Fprintf(f.IO.ErrOut, "Point dlqctl at it: %s\n", strings.Join(set, "; "))
	}
	fmt.Fprintln(f.IO.ErrOut, "Try: dlqctl dlq ls --group-by error    (Ctrl-C stops the sandbox)")
	fmt.Fprintln(f.IO.ErrOut, "     (from a clone without dlqctl installed: go run ./cmd/dlqctl dlq ls --group-by error)")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}
