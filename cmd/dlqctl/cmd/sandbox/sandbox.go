// Package sandbox is `dlqctl sandbox`: a Queen-compatible broker in memory.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/config"
	sb "github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/spf13/cobra"
)

// Options are `dlqctl sandbox`'s flags.
type Options struct {
	Addr          string
	Seed          string
	ServerVersion string
	OldServer     bool
	// NoContext leaves the config file alone (no sandbox context).
	NoContext bool
	Faults    sb.Faults
	// Consumers read what a replay or a restore publishes.
	Consumers sb.Consumers
	// addrGiven: --addr was given, so a taken port is an error, not a
	// reason to take another.
	addrGiven bool
	// pushLatency and deleteLatency cost what a real broker's do.
	pushLatency, deleteLatency time.Duration
}

// DefaultAddr is where the sandbox listens unless told or taken.
const DefaultAddr = "127.0.0.1:6632"

// NewCmdSandbox runs the sandbox broker until interrupted.
func NewCmdSandbox(f *cmdutil.Factory) *cobra.Command {
	o := &Options{}
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Run a Queen-compatible broker in memory, seeded with realistic dead letters",
		Long: `Sandbox serves the broker API dlqctl uses from memory (docs/broker.md in
dlqctl's repository describes it), seeded with dead letters over several
queues, consumer groups and failure classes, some encrypted and a few
undecryptable. It keeps the broker's semantics (newest-first paging, dedup
by partition and transaction id, the 404 texts) in the shapes of the Queen
release line --server-version names:

  0.15  the C++ 0.x server (one-body lists, no /retry, errors as 200,
        DELETE removing the message itself); --old-server is the same
  1.5   the Rust line before 1.6, as the seed contract describes it
        (paged lists, /retry publishing under a fresh id): the default
  1.6   the broker's move (POST /api/v1/dlq/{id}/replay publishes the row
        as dlq:<row id> and deletes that row alone), with the console's
        replay: POST /_sandbox/console/replay?queue=Q&limit=N replays the
        N newest rows as someone pressing Replay in Queen's console would
  2.2   the raft line: decimal partition ids, pages of at most 1000,
        409 refusals, 503 with Retry-After

It listens on 127.0.0.1:6632, or, when another program has that port (and
--addr was not given), on a free one. Either way it points the context
"sandbox" of the config file at itself, with a ledger of its own
(sandbox.db beside the default ledger): with --context sandbox (or
DLQCTL_CONTEXT=sandbox) a command talks to this sandbox and to no other
broker; if the sandbox has stopped and something else answers at its
address, the command refuses. --no-context leaves the config alone.

Its queues' consumer groups read what a replay or a restore publishes, at
--consume-rate messages a second per queue, and every --consume-fail-every
delivery fails again (dead-lettered once more): decisions verify then sees
copies completed, pending and failed again. --consume-rate 0 leaves the
copies unread (benchmarks do).

It can also misbehave on purpose for rehearsals: --fail-503-every,
--cut-every, --row-kept-every, --latency, --database-down, --maintenance
(1.6), --require-token; and cost what a real broker does with
--push-latency 6ms --delete-latency 1ms. Stop it with Ctrl-C; nothing is kept.`,
		Example: `  $ dlqctl sandbox
  $ dlqctl sandbox --server-version 1.6
  $ curl -X POST 'http://127.0.0.1:6632/_sandbox/console/replay?queue=orders&limit=20'
  $ dlqctl sandbox --addr 127.0.0.1:7000 --server-version 0.15 --require-token s3cret`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := sb.ParseLine(o.ServerVersion); err != nil {
				return cmdutil.FlagErrorf("--server-version: %v", err)
			}
			if o.OldServer && cmd.Flags().Changed("server-version") {
				return cmdutil.FlagErrorf("--old-server is --server-version 0.15: give one of them")
			}
			if o.Consumers.Rate < 0 || o.Consumers.Rate > 1e6 || o.Consumers.FailEvery < 0 {
				return cmdutil.FlagErrorf("--consume-rate wants messages a second (0: none), --consume-fail-every a count (0: none)")
			}
			o.addrGiven = cmd.Flags().Changed("addr")
			return run(cmd.Context(), f, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Addr, "addr", DefaultAddr, "address to listen on (unless given, a free port when this one is taken)")
	fl.BoolVar(&o.NoContext, "no-context", false, "do not point the config's sandbox context at this sandbox")
	fl.StringVar(&o.Seed, "seed", "", "seed file (default: the built-in testdata/sandbox.json)")
	fl.StringVar(&o.ServerVersion, "server-version", sb.Queen15.Does().Flag, "the Queen release line to behave as: 0.15, 1.5, 1.6 or 2.2")
	fl.BoolVar(&o.OldServer, "old-server", false, "behave as the C++ 0.x server (--server-version 0.15)")
	fl.BoolVar(&o.Faults.Maintenance, "maintenance", false, "behave as a 1.6 broker in push maintenance: moves answered 503, pushes buffered")
	fl.BoolVar(&o.Faults.DatabaseDown, "database-down", false, "behave as a broker whose database is away: pushes answered buffered, other calls hang")
	fl.IntVar(&o.Faults.Fail503Every, "fail-503-every", 0, "answer every Nth mutating call with 503")
	fl.IntVar(&o.Faults.CutEvery, "cut-every", 0, "apply every Nth push or retry, then cut the connection")
	fl.IntVar(&o.Faults.RowKeptEvery, "row-kept-every", 0, "answer every Nth retry with dlqRowRemoved:false")
	fl.DurationVar(&o.Faults.Latency, "latency", 0, "added to every call")
	fl.DurationVar(&o.pushLatency, "push-latency", 0, "added to every push (a real broker's costs about 6ms)")
	fl.DurationVar(&o.deleteLatency, "delete-latency", 0, "added to every delete of a message's dead-letter rows (a real broker's costs about 1ms)")
	fl.StringVar(&o.Faults.Token, "require-token", "", "bearer token every call but /health needs")
	fl.Float64Var(&o.Consumers.Rate, "consume-rate", 10, "messages a second per queue the consumer groups read of what is published (0: none)")
	fl.IntVar(&o.Consumers.FailEvery, "consume-fail-every", 10, "every Nth delivery to a consumer group fails again (0: none)")
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
	line, _ := sb.ParseLine(o.ServerVersion)
	if o.OldServer {
		line = sb.Queen015
	}
	b := sb.New(nil)
	b.SetLine(line)
	if err := b.Load(seed); err != nil {
		return cmdutil.UsageError(fmt.Errorf("--seed: %v", err))
	}
	if o.pushLatency > 0 || o.deleteLatency > 0 {
		o.Faults.RouteLatency = map[string]time.Duration{"POST /api/v1/push": o.pushLatency, "DELETE /api/v1/messages/{pid}/{txid}": o.deleteLatency}
	}
	b.SetFaults(o.Faults)
	instance := nonce()
	b.SetInstance(instance)
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil && !o.addrGiven && errors.Is(err, syscall.EADDRINUSE) {
		// Another program has the default port: a free one, so that no
		// command meant for the sandbox reaches that program.
		fmt.Fprintf(f.IO.ErrOut, "%s is taken by another program; this sandbox takes a free port instead.\n", o.Addr)
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return cmdutil.UsageError(fmt.Errorf("cannot listen on %s: %v (is another sandbox running? try --addr 127.0.0.1:0)", o.Addr, err))
	}
	srv := &http.Server{Handler: b.Handler(), ReadHeaderTimeout: 10 * time.Second}
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(f.IO.ErrOut, "Sandbox broker (Queen %s) on %s with %d dead letters.\n", line.Does().Flag, url, b.Depth())
	if !o.NoContext {
		path, err := pointContext(f, url, instance)
		if err != nil {
			_ = ln.Close()
			return cmdutil.UsageError(fmt.Errorf("writing the sandbox context: %v (or run with --no-context)", err))
		}
		fmt.Fprintf(f.IO.ErrOut, "Context %q in %s points at it, with a ledger of its own: in another terminal,\n  export DLQCTL_CONTEXT=%s\n", config.SandboxContext, path, config.SandboxContext)
	} else {
		fmt.Fprintf(f.IO.ErrOut, "Point dlqctl at it: export DLQCTL_SERVER=%s\n", url)
	}
	if o.Faults.Token != "" {
		// The token itself is printed nowhere, not even the sandbox's own.
		fmt.Fprintln(f.IO.ErrOut, "It takes a token: export DLQCTL_TOKEN='<the value of --require-token>'")
	}
	fmt.Fprintln(f.IO.ErrOut, "Try: dlqctl dlq ls --group-by error    (Ctrl-C stops the sandbox)")
	fmt.Fprintln(f.IO.ErrOut, "     (from a clone without dlqctl installed: go run ./cmd/dlqctl dlq ls --group-by error)")
	if o.Consumers.Rate > 0 {
		fails := "none fails"
		if n := o.Consumers.FailEvery; n > 0 {
			fails = fmt.Sprintf("every %d%s delivery fails again", n, ordinal(n))
		}
		fmt.Fprintf(f.IO.ErrOut, "Its consumer groups read what is published at %g/s a queue; %s.\n", o.Consumers.Rate, fails)
		go b.RunConsumers(ctx, o.Consumers)
	}
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

// pointContext points the config's sandbox context at this sandbox (its
// URL and instance id), with the sandbox's own ledger, and returns the
// config file's path. The current context is left as it is.
func pointContext(f *cmdutil.Factory, url, instance string) (string, error) {
	f.CreatingConfig = true
	c, err := f.Config()
	if err != nil {
		return "", err
	}
	if c.Contexts == nil {
		c.Contexts = map[string]*config.Context{}
	}
	ctx := c.Contexts[config.SandboxContext]
	if ctx != nil && ctx.Sandbox == "" {
		return "", fmt.Errorf("%s has a context %q of its own (not a sandbox's): rename it, or give --no-context", c.Path(), config.SandboxContext)
	}
	if ctx == nil {
		ctx = &config.Context{Ledger: config.SandboxLedger()}
		c.Contexts[config.SandboxContext] = ctx
	}
	ctx.Server, ctx.Sandbox = url, instance
	return c.Path(), c.Save()
}

// nonce is a short random hex string: a sandbox's instance id.
func nonce() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func ordinal(n int) string {
	switch {
	case n%100 >= 11 && n%100 <= 13:
		return "th"
	case n%10 == 1:
		return "st"
	case n%10 == 2:
		return "nd"
	case n%10 == 3:
		return "rd"
	}
	return "th"
}
