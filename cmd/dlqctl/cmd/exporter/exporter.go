// Package exporter is `dlqctl exporter`: a long-running Prometheus
// exporter whose verdicts are dlq check's. The passes and the metrics are
// pkg/exporter's; this is the flags, the web server (TLS and basic auth
// through the Prometheus exporter-toolkit's web config) and the signals.
package exporter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/internal/build"
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/config"
	"github.com/dlqctl/dlqctl/pkg/exporter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/spf13/cobra"
)

// DefaultAddress is where the exporter listens unless told otherwise.
const DefaultAddress = ":9797"

// Options are `dlqctl exporter`'s flags.
type Options struct {
	Listen        []string
	TelemetryPath string
	WebConfig     string
	Interval      string
	PassTimeout   string
	Sync          bool
	MaxClasses    int
	AllScopes     bool
	LogLevel      string
	LogFormat     string
	// AllContexts evaluates every context of the config (or the
	// contexts --context a,b names), each labelled context=NAME.
	AllContexts bool

	interval, passTimeout time.Duration
}

// NewCmdExporter serves check's verdicts as Prometheus metrics.
func NewCmdExporter(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	o := &Options{}
	cmd := &cobra.Command{
		Use:   "exporter [--web.listen-address ADDR] [--interval D] [--sync]",
		Short: "Serve dlq check's verdicts as Prometheus metrics, for alerts that page the owner",
		Long: `Exporter evaluates, every --interval, exactly what dlq check evaluates
(the config's policies, the ledger's holds and decisions, vanished rows),
plus failure classes and the progress of running batches, and serves the
last pass's result at /metrics. A scrape never reaches the broker: the
broker is read once a pass, however often Prometheus scrapes. When the
broker or the ledger is down, /metrics keeps the last known values with
dlqctl_broker_up or dlqctl_ledger_up at 0; a pass that runs past its
interval marks the broker down until it ends. --sync also mirrors the DLQ
into the archive each pass (dlq sync), so a dead letter that vanishes with
no decision is seen within one interval. /readyz answers 200 once a pass
reached a context's broker and ledger, 503 before and while none is (for
a readiness probe); /healthz answers while the
process runs; / is a landing page. TLS and basic auth come from
--web.config.file, the Prometheus exporter-toolkit's web config. The alert
rules that go with it are in deploy/prometheus/ of dlqctl's repository.`,
		Example: `  $ dlqctl exporter
  $ dlqctl exporter --web.listen-address 127.0.0.1:9797 --interval 30s --sync
  $ dlqctl exporter --web.config.file /etc/dlqctl/web.yml    # TLS, basic auth`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			if runF != nil {
				return runF(o)
			}
			return run(cmd.Context(), f, o)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&o.Listen, "web.listen-address", []string{DefaultAddress}, "address to serve on (repeatable)")
	fl.StringVar(&o.TelemetryPath, "web.telemetry-path", "/metrics", "path the metrics are served at")
	fl.StringVar(&o.WebConfig, "web.config.file", "", "exporter-toolkit web config: TLS and basic auth")
	fl.StringVar(&o.Interval, "interval", "1m", "time from one pass's start to the next")
	fl.StringVar(&o.PassTimeout, "pass-timeout", "", "longest a pass may take (default: five intervals); the broker is marked down once a pass outlasts one interval")
	fl.BoolVar(&o.Sync, "sync", false, "each pass, also mirror the DLQ into the archive, as dlq sync does")
	fl.IntVar(&o.MaxClasses, "max-classes", 10, "failure classes exported one by one; the rest are summed as class=\"other\"")
	fl.BoolVar(&o.AllScopes, "all-scopes", false, "also export the scopes with no dead letter that no policy names")
	fl.StringVar(&o.LogLevel, "log.level", "info", "debug, info, warn or error")
	fl.StringVar(&o.LogFormat, "log.format", "logfmt", "logfmt or json")
	fl.BoolVar(&o.AllContexts, "all-contexts", false, "evaluate every context of the config (or name several: --context a,b), each on its own, every series labelled context=NAME")
	return cmd
}

func (o *Options) validate() error {
	var err error
	if o.interval, err = cmdutil.ParseDurationFlag("interval", o.Interval, config.ParseDuration); err != nil {
		return err
	}
	if o.interval < time.Second {
		return cmdutil.FlagErrorf("--interval %s: want at least 1s (each pass reads the DLQ)", o.Interval)
	}
	if o.PassTimeout != "" {
		if o.passTimeout, err = cmdutil.ParseDurationFlag("pass-timeout", o.PassTimeout, config.ParseDuration); err != nil {
			return err
		}
		if o.passTimeout < time.Second {
			return cmdutil.FlagErrorf("--pass-timeout %s: want at least 1s", o.PassTimeout)
		}
	}
	if o.MaxClasses < 0 || o.MaxClasses > 1000 {
		return cmdutil.FlagErrorf("--max-classes %d: want 0 to 1000", o.MaxClasses)
	}
	if !strings.HasPrefix(o.TelemetryPath, "/") || o.TelemetryPath == "/" || o.TelemetryPath == "/healthz" || o.TelemetryPath == "/readyz" {
		return cmdutil.FlagErrorf("--web.telemetry-path %q: want a path such as /metrics (not /, /healthz or /readyz)", o.TelemetryPath)
	}
	if len(o.Listen) == 0 {
		return cmdutil.FlagErrorf("--web.listen-address: give at least one address")
	}
	if o.WebConfig != "" {
		if err := web.Validate(o.WebConfig); err != nil {
			return cmdutil.FlagErrorf("--web.config.file %s: %v", o.WebConfig, firstLine(err))
		}
	}
	if err := promslog.NewLevel().Set(o.LogLevel); err != nil {
		return cmdutil.FlagErrorf("--log.level %q: want debug, info, warn or error", o.LogLevel)
	}
	if err := promslog.NewFormat().Set(o.LogFormat); err != nil {
		return cmdutil.FlagErrorf("--log.format %q: want logfmt or json", o.LogFormat)
	}
	return nil
}

func run(ctx context.Context, f *cmdutil.Factory, o *Options) error {
	s, err := start(f, o)
	if err != nil {
		return err
	}
	defer func() {
		for _, e := range s.exps {
			e.exp.Close()
		}
	}()
	for _, l := range s.listeners {
		fmt.Fprintf(f.IO.ErrOut, "Serving metrics on http://%s%s\n", l.Addr(), o.TelemetryPath)
	}
	return s.serve(ctx)
}

// server is a started exporter: its listeners are bound, nothing is
// served or evaluated yet.
type server struct {
	exps      []named
	srv       *http.Server
	listeners []net.Listener
	logger    *slog.Logger
	o         *Options
}

// named is one context's exporter ("" when the exporter serves one).
type named struct {
	context string
	exp     *exporter.Exporter
}

func start(f *cmdutil.Factory, o *Options) (*server, error) {
	names, err := f.Contexts(o.AllContexts, "an exporter")
	if err != nil {
		return nil, err
	}
	if names == nil {
		names = []string{""} // the context the flags and environment name
	}
	logger := newLogger(f, o)
	version, revision, _ := build.Info()
	var exps []named
	var starting []func()
	for _, name := range names {
		sf := f
		if name != "" {
			sf = f.ForContext(name)
		}
		exp, said, err := newExporter(sf, o, logger, version, revision, name)
		if err != nil {
			return nil, err
		}
		exps = append(exps, named{name, exp})
		starting = append(starting, said)
	}
	listeners, err := listen(o.Listen)
	if err != nil {
		return nil, err
	}
	for _, said := range starting {
		said()
	}
	return &server{exps: exps, srv: &http.Server{Handler: handler(exps, o, version), ReadHeaderTimeout: 10 * time.Second},
		listeners: listeners, logger: logger, o: o}, nil
}

// newExporter is one context's exporter, from its factory, and the log
// line that says it starts.
func newExporter(f *cmdutil.Factory, o *Options, logger *slog.Logger, version, revision, name string) (*exporter.Exporter, func(), error) {
	cfg, err := f.Config()
	if err != nil {
		return nil, nil, err
	}
	cl, err := f.Client()
	if err != nil {
		return nil, nil, err
	}
	settings, err := f.Settings()
	if err != nil {
		return nil, nil, err
	}
	_, _, shownLedger, err := ledger.ParseDSN(settings.Ledger)
	if err != nil {
		return nil, nil, cmdutil.UsageError(err)
	}
	if name != "" {
		logger = logger.With("context", name)
	}
	exp := exporter.New(exporter.Config{
		Client: cl,
		// The ledger is opened by the passes, not here: one that is down
		// at start is reported (dlqctl_ledger_up 0) and picked up later.
		Ledger: func(ctx context.Context) (*ledger.Store, error) {
			return ledger.OpenWith(ctx, settings.Ledger, ledger.Options{Silence: f.Globals.Timeout})
		},
		Policies:    cfg.PolicySetFor(settings.Context),
		Now:         f.Now,
		Interval:    o.interval,
		PassTimeout: o.passTimeout,
		Sync:        o.Sync,
		MaxClasses:  o.MaxClasses,
		AllScopes:   o.AllScopes,
		Version:     version,
		Revision:    revision,
		Logger:      logger,
	})
	return exp, func() {
		logger.Info("dlqctl exporter starting", "version", version, "broker", cl.Server(), "ledger", shownLedger,
			"interval", o.interval, "sync", o.Sync)
	}, nil
}

// serve runs the passes and serves until ctx is done (SIGTERM, SIGINT),
// then stops both within a second.
func (s *server) serve(ctx context.Context) error {
	pctx, stopPasses := context.WithCancel(ctx)
	passes := make(chan struct{})
	go func() {
		// Each context passes on its own: one broker that is down or slow
		// holds back no other's.
		var wg sync.WaitGroup
		for _, e := range s.exps {
			wg.Go(func() { e.exp.Run(pctx) })
		}
		wg.Wait()
		close(passes)
	}()
	flags := &web.FlagConfig{WebListenAddresses: &s.o.Listen, WebConfigFile: &s.o.WebConfig}
	errc := make(chan error, 1)
	go func() { errc <- web.ServeMultiple(s.listeners, s.srv, flags, s.logger) }()

	var serveErr error
	select {
	case <-ctx.Done():
		s.logger.Info("stopping")
	case serveErr = <-errc:
	}
	// Within a second of the signal, whatever the clients do: scrapes
	// in flight get half of it, then every connection is closed (one
	// opened and never used would hold Shutdown to its deadline); a pass
	// gets what is left, then the process goes without it.
	stopPasses()
	deadline := time.Now().Add(800 * time.Millisecond)
	sctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	if s.srv.Shutdown(sctx) != nil {
		_ = s.srv.Close()
	}
	select {
	case <-passes:
	case <-time.After(time.Until(deadline)):
		s.logger.Warn("a pass did not stop in time; exiting without it")
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return cmdutil.UsageError(fmt.Errorf("serving: %v", firstLine(serveErr)))
	}
	return nil
}

// listen binds every address before anything is served, so a taken port
// is a one-line error at start, not a log line later.
func listen(addrs []string) ([]net.Listener, error) {
	var out []net.Listener
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, cmdutil.UsageError(fmt.Errorf("cannot listen on %s: %v", a, errors.Unwrap(err)))
		}
		out = append(out, l)
	}
	return out, nil
}

func newLogger(f *cmdutil.Factory, o *Options) *slog.Logger {
	lvl, format := promslog.NewLevel(), promslog.NewFormat()
	_ = lvl.Set(o.LogLevel)
	_ = format.Set(o.LogFormat)
	return promslog.New(&promslog.Config{Level: lvl, Format: format, Writer: f.IO.ErrOut})
}

// handler serves the metrics, /healthz and the landing page.
func handler(exps []named, o *Options, version string) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, e := range exps {
		if e.context == "" {
			reg.MustRegister(e.exp)
			continue
		}
		// Every series of a context's exporter carries its name.
		prometheus.WrapRegistererWith(prometheus.Labels{"context": e.context}, reg).MustRegister(e.exp)
	}
	mux := http.NewServeMux()
	mux.Handle(o.TelemetryPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if len(exps) == 1 && exps[0].context == "" {
			_ = json.NewEncoder(w).Encode(healthOf(exps[0].exp.Snapshot()))
			return
		}
		out := struct {
			Status   string            `json:"status"`
			Contexts map[string]health `json:"contexts"`
		}{Status: "ok", Contexts: map[string]health{}}
		for _, e := range exps {
			h := healthOf(e.exp.Snapshot())
			out.Contexts[e.context] = h
			if h.Status != "ok" {
				out.Status = "degraded" // one context that is not ok makes the whole not ok
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	// /readyz is for a probe that reads only the status code (Kubernetes'
	// readiness, as Prometheus's own /-/ready): 200 once a pass reached,
	// for some context, its broker and its ledger, so what it serves says
	// something; 503 before the first pass and while no context's does.
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, e := range exps {
			if healthOf(e.exp.Snapshot()).Status == "ok" {
				io.WriteString(w, "ready\n")
				return
			}
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "not ready: no context's broker and ledger were reached by the latest pass (/healthz says why)\n")
	})
	landing, err := web.NewLandingPage(web.LandingConfig{
		Name:        "dlqctl exporter",
		Description: "Dead-letter queue SLOs, holds and decisions, as dlq check judges them",
		Version:     version,
		Links: []web.LandingLinks{
			{Address: o.TelemetryPath, Text: "Metrics"},
			{Address: "/healthz", Text: "Health", Description: "the latest pass: broker and ledger reachable, last success"},
			{Address: "/readyz", Text: "Ready", Description: "200 once a context's broker and ledger were reached, else 503"},
		},
	})
	if err == nil {
		mux.Handle("/", landing)
	}
	return mux
}

// health is /healthz's answer. Its status is "ok" only while the last
// pass reached the broker and the ledger; "broker-down", "ledger-down" or
// "starting" otherwise, and over several contexts "degraded" when one is
// not ok. It answers 200 while the process serves, whatever the status:
// the broker being down is a metric to alert on, not a reason to restart
// the exporter.
type health struct {
	Status      string `json:"status"`
	BrokerUp    bool   `json:"brokerUp"`
	LedgerUp    bool   `json:"ledgerUp"`
	LastPass    string `json:"lastPass,omitempty"`
	LastSuccess string `json:"lastSuccess,omitempty"`
	LastError   string `json:"lastError,omitempty"`
}

func healthOf(s *exporter.Snapshot) health {
	h := health{Status: "ok", BrokerUp: s.BrokerUp, LedgerUp: s.LedgerUp, LastError: render.Clean(s.LastError)}
	if !s.LastPass.IsZero() {
		h.LastPass = render.Timestamp(s.LastPass)
	}
	if !s.LastSuccess.IsZero() {
		h.LastSuccess = render.Timestamp(s.LastSuccess)
	}
	switch {
	case s.LastPass.IsZero():
		h.Status = "starting"
	case !s.BrokerUp:
		h.Status = "broker-down"
	case !s.LedgerUp:
		h.Status = "ledger-down"
	}
	return h
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
