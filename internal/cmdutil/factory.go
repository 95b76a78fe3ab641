package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/internal/config"
	"github.com/dlqctl/dlqctl/internal/iostreams"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/secret"
	"github.com/spf13/pflag"
)

// Globals are the root's persistent flags, filled by cobra.
type Globals struct {
	Server, Token, TokenFile, Context, Ledger, ConfigPath string
	Output                                                string
	Timeout                                               time.Duration
	NoColor, Debug, Insecure                              bool
	CAFile                                                string
}

// Factory hands commands their dependencies, built on first use: a
// command pays for the network or the ledger only when it asks.
type Factory struct {
	IO      *iostreams.IOStreams
	Globals *Globals
	Getenv  func(string) string
	Now     func() time.Time
	// HTTPClient, when set, replaces the transport built from the flags.
	HTTPClient *http.Client
	// Retry backoff for the client; tests shorten it.
	Backoff time.Duration
	// MaxRow, when set, replaces the client's bound on one answer's row
	// (tests of endless bodies keep it small).
	MaxRow int64
	// MaxAnswerRows, when set, replaces the client's bound on the rows of
	// one list answer (tests of answers without end keep it small).
	MaxAnswerRows int
	// CreatingConfig: the command writes the config file, so a --config
	// that does not exist yet is not an error.
	CreatingConfig bool

	flagSet *pflag.FlagSet // the root's persistent flags, to tell set from default

	once     sync.Once
	cfg      *config.Config
	settings *config.Settings
	cfgErr   error // the file's
	setErr   error // the settings' (a context the file does not have)

	clientOnce sync.Once
	cl         *client.Client
	clErr      error

	ledgerOnce sync.Once
	ld         *ledger.Store
	ldErr      error

	sessionOnce sync.Once
	aliasMu     sync.Mutex
	aliased     bool

	pal *render.Palette
}

// NewFactory returns a factory for the process.
func NewFactory(io *iostreams.IOStreams) *Factory {
	return &Factory{IO: io, Globals: &Globals{}, Getenv: os.Getenv, Now: time.Now}
}

func (f *Factory) load() {
	f.once.Do(func() {
		path := f.Globals.ConfigPath
		named := path != ""
		if path == "" {
			path = f.Getenv("DLQCTL_CONFIG")
		}
		if path == "" {
			path = config.DefaultPath()
		}
		f.cfg, f.cfgErr = config.Load(path, named && !f.CreatingConfig)
		if f.cfgErr != nil {
			return
		}
		f.settings, f.setErr = config.Resolve(f.cfg, f.flags(), f.Getenv)
		for _, w := range f.cfg.Warnings {
			fmt.Fprintln(f.IO.ErrOut, "warning: "+w)
		}
		if f.settings != nil {
			for _, w := range f.settings.Warnings {
				fmt.Fprintln(f.IO.ErrOut, "warning: "+w)
			}
		}
	})
}

// FlagChanged reports whether the command line set a global flag.
func (f *Factory) FlagChanged(name string) bool { return f.flags().Changed(name) }

// SetFlags gives the factory the parsed persistent flags.
func (f *Factory) SetFlags(fs *pflag.FlagSet) { f.flagSet = fs }

func (f *Factory) flags() config.Flags {
	return config.Flags{Server: f.Globals.Server, Token: f.Globals.Token, TokenFile: f.Globals.TokenFile,
		Context: f.Globals.Context, Ledger: f.Globals.Ledger, Set: f.flagSet}
}

// Config returns the config file's contents.
func (f *Factory) Config() (*config.Config, error) {
	f.load()
	return f.cfg, f.cfgErr
}

// ContextName is the context in use ("" for none): whose policies are
// in force (config.PolicySetFor).
func (f *Factory) ContextName() string {
	if s, err := f.Settings(); err == nil && s != nil {
		return s.Context
	}
	return ""
}

// Contexts are the contexts a command of several judges: every one of
// the config with all (--all-contexts), or those --context a,b names; nil
// when the command is to use the one the flags and environment name.
// --server, --token and --ledger name one broker, and are refused.
func (f *Factory) Contexts(all bool, what string) ([]string, error) {
	list := strings.Contains(f.Globals.Context, ",")
	if !all && !list {
		return nil, nil
	}
	for _, name := range []string{"server", "token", "token-file", "ledger"} {
		if f.FlagChanged(name) {
			return nil, FlagErrorf("--%s goes with one broker: %s of several contexts takes each one's server, token and ledger from the config", name, what)
		}
	}
	cfg, err := f.Config()
	if err != nil {
		return nil, err
	}
	if all {
		if list || f.FlagChanged("context") {
			return nil, FlagErrorf("--all-contexts and --context name the contexts twice: give one")
		}
		if names := cfg.ContextNames(); len(names) > 0 {
			return names, nil
		}
		return nil, FlagErrorf("--all-contexts: %s defines no context (dlqctl config set-context NAME --server URL)", cfg.Path())
	}
	var names []string
	for _, n := range strings.Split(f.Globals.Context, ",") {
		if n = strings.TrimSpace(n); n == "" || slices.Contains(names, n) {
			continue
		}
		if cfg.Contexts[n] == nil {
			return nil, FlagErrorf("--context %s: no context %q in %s (see dlqctl config view)", f.Globals.Context, n, cfg.Path())
		}
		names = append(names, n)
	}
	return names, nil
}

// ForContext is a factory for one context of the config, for a command
// that judges several (dlq check --all-contexts): its server, token,
// ledger and policies are the context's alone. No --server, --token,
// --ledger or environment variable that names them reaches it (the
// caller refuses those flags); the other global flags (--timeout, TLS)
// apply to every context.
func (f *Factory) ForContext(name string) *Factory {
	g := *f.Globals
	g.Context, g.Server, g.Token, g.TokenFile, g.Ledger = "", "", "", "", ""
	env := f.Getenv
	return &Factory{IO: f.IO, Globals: &g, Now: f.Now, HTTPClient: f.HTTPClient, Backoff: f.Backoff, MaxRow: f.MaxRow,
		Getenv: func(k string) string {
			switch k {
			case "DLQCTL_CONTEXT":
				return name
			case "DLQCTL_SERVER", "QUEEN_SERVER", "DLQCTL_TOKEN", "QUEEN_TOKEN", "DLQCTL_LEDGER":
				return ""
			}
			return env(k)
		}}
}

// Settings returns the resolved connection settings.
func (f *Factory) Settings() (*config.Settings, error) {
	f.load()
	if f.cfgErr != nil {
		return nil, f.cfgErr
	}
	return f.settings, f.setErr
}

// Client returns the broker client.
func (f *Factory) Client() (*client.Client, error) {
	f.clientOnce.Do(func() {
		s, err := f.Settings()
		if err != nil {
			f.clErr = err
			return
		}
		hc := f.HTTPClient
		if hc == nil {
			if f.Globals.Insecure {
				fmt.Fprintln(f.IO.ErrOut, "warning: --insecure-skip-tls-verify: the broker's certificate is not checked; anyone on the path can read the token and the payloads")
			}
			hc, err = client.NewHTTPClient(client.TLSOptions{CAFile: f.Globals.CAFile, InsecureSkipVerify: f.Globals.Insecure, Timeout: f.Globals.Timeout})
			if err != nil {
				f.clErr = UsageError(err)
				return
			}
		}
		opts := client.Options{Server: s.Server, Token: s.Token, HTTPClient: hc, Backoff: f.Backoff, Timeout: f.Globals.Timeout, MaxRow: f.MaxRow, MaxAnswerRows: f.MaxAnswerRows}
		if s.Broker != "" {
			if opts.Identity, err = deadletter.NamedIdentity(s.Broker); err != nil {
				f.clErr = UsageError(fmt.Errorf("context %s: %v", s.Context, err))
				return
			}
		}
		if f.Globals.Debug {
			opts.Debug = f.IO.ErrOut
		}
		f.cl, f.clErr = client.New(opts)
		if f.clErr != nil {
			f.clErr = UsageError(f.clErr)
			return
		}
		if s.Sandbox != "" {
			f.clErr = f.checkSandbox(f.cl, s)
		}
	})
	f.fileUnderAlias(context.Background())
	return f.cl, f.clErr
}

// Ledger opens the ledger.
func (f *Factory) Ledger(ctx context.Context) (*ledger.Store, error) {
	f.ledgerOnce.Do(func() {
		s, err := f.Settings()
		if err != nil {
			f.ldErr = err
			return
		}
		// A silent PostgreSQL ledger is bounded as a silent broker is.
		f.ld, f.ldErr = ledger.OpenWith(ctx, s.Ledger, ledger.Options{Silence: f.Globals.Timeout})
		if f.ldErr == nil {
			if h := f.ld.LostOnOpen(); h != nil {
				fmt.Fprintln(f.IO.ErrOut, "warning: "+f.Redact(h.String()))
			}
		}
	})
	f.fileUnderAlias(ctx)
	return f.ld, f.ldErr
}

// Session returns the broker client and the ledger, for the commands that
// act on both.
func (f *Factory) Session(ctx context.Context) (*client.Client, *ledger.Store, error) {
	cl, err := f.Client()
	if err != nil {
		return nil, nil, err
	}
	ld, err := f.Ledger(ctx)
	if err != nil {
		return nil, nil, err
	}
	f.sessionOnce.Do(func() {
		f.noteServer(ctx, cl, ld)
		f.noteOtherHistory(ctx, cl, ld)
	})
	return cl, ld, nil
}

// noteServer records, for a broker a context names (broker:), where this
// session reached it: another session that reaches it by URL alone is
// then asked whether they are one broker (brokerSuspects). A ledger that
// cannot record it changes nothing else.
func (f *Factory) noteServer(ctx context.Context, cl *client.Client, ld *ledger.Store) {
	s, err := f.Settings()
	if err != nil || s.Broker == "" {
		return
	}
	if id, err := deadletter.Identity(cl.Server()); err == nil {
		_ = ld.NoteServer(ctx, s.Broker, id, f.Now())
	}
}

// BatchEnv is what the batch use cases work with: the session, the
// clock, who is acting, and the config's policies and approval size: the
// ledger's (the team's) unless the config asks approval of smaller
// batches still.
func (f *Factory) BatchEnv(ctx context.Context) (batch.Env, error) {
	cfg, err := f.Config()
	if err != nil {
		return batch.Env{}, err
	}
	cl, ld, err := f.Session(ctx)
	if err != nil {
		return batch.Env{}, err
	}
	team, err := ld.ApprovalThreshold(ctx)
	if err != nil {
		return batch.Env{}, err
	}
	return batch.Env{Client: cl, Ledger: ld, Now: f.Now, User: f.User(), Policies: cfg.PolicySetFor(f.ContextName()),
		ApprovalAbove: batch.StricterThreshold(team.Above, cfg.Approval.MinMessages)}, nil
}

// fileUnderAlias files the client's broker under what a person said of
// its name (ConfirmBroker's record in the ledger), once the client and
// the ledger both exist, whichever came first.
func (f *Factory) fileUnderAlias(ctx context.Context) {
	f.aliasMu.Lock()
	defer f.aliasMu.Unlock()
	if f.aliased || f.cl == nil || f.ld == nil {
		return
	}
	f.aliased = true
	if canonical, err := f.ld.Alias(ctx, f.cl.Broker()); err == nil && canonical != "" && canonical != f.cl.Broker() {
		f.cl.FileUnder(canonical)
	}
}

// BrokerKey is the name the ledger files this broker's history under,
// from the settings alone (no client needed): the context's broker name
// or the server's identity, then what a person said of it.
func (f *Factory) BrokerKey(ctx context.Context, ld *ledger.Store) (string, error) {
	s, err := f.Settings()
	if err != nil {
		return "", err
	}
	key := s.Broker
	if key == "" {
		if key, err = deadletter.Identity(s.Server); err != nil {
			return "", UsageError(err)
		}
	}
	if canonical, err := ld.Alias(ctx, key); err != nil {
		return "", err
	} else if canonical != "" {
		key = canonical
	}
	return key, nil
}

// Redact removes the session's token, in any form a server may echo it
// in, from a text on its way out (the last line of defence: the client
// redacts what it says itself).
func (f *Factory) Redact(s string) string {
	if f.settings == nil || f.settings.Token == "" {
		return s
	}
	return secret.NewRedactor(f.settings.Token).Redact(s)
}

// Close releases what was opened.
func (f *Factory) Close() {
	if f.ld != nil {
		f.ld.Close()
	}
}

// Palette is the one palette bound to Out.
func (f *Factory) Palette() *render.Palette {
	if f.pal == nil {
		f.pal = render.NewPalette(f.IO.ColorEnabled())
	}
	return f.pal
}

// ErrPalette is a palette for ErrOut.
func (f *Factory) ErrPalette() *render.Palette {
	return render.NewPalette(f.IO.ColorEnabledStderr())
}

// Format returns the -o format.
func (f *Factory) Format() (render.Format, error) {
	fm, err := render.ParseFormat(f.Globals.Output)
	if err != nil {
		return "", FlagErrorf("%v", err)
	}
	return fm, nil
}

// User is who decisions are recorded as by default: the OS user.
// Who is the name a decision is recorded under: --by as given, or the
// user. A name is shown on every screen that lists the decision, so one
// that holds a control, bidirectional or invisible character is refused
// (exit 2), not recorded to be escaped forever after.
func (f *Factory) Who(by string) (string, error) {
	if by == "" {
		return f.User(), nil
	}
	if render.Clean(by) != by {
		return "", FlagErrorf("--by %s holds a control, bidirectional or invisible character; give a plain name", render.Clean(by))
	}
	if strings.TrimSpace(by) == "" {
		return "", FlagErrorf("--by is blank; give a name")
	}
	return by, nil
}

// User is the name this session acts under: DLQCTL_USER, the OS user, or
// "unknown", with anything unprintable escaped.
func (f *Factory) User() string { return render.Clean(f.user()) }

func (f *Factory) user() string {
	if u := f.Getenv("DLQCTL_USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := f.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}

// ErrNotTheSandbox: a context names a dlqctl sandbox, and another broker
// (or nothing) answers at its address (exit 3).
var ErrNotTheSandbox = errors.New("the sandbox is not there")

// checkSandbox makes sure the broker a sandbox's context points at is
// that sandbox: another program listening at its address now (the
// sandbox stopped, and the port was taken) is never read from or written
// to.
func (f *Factory) checkSandbox(cl *client.Client, s *config.Settings) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(f.Globals.Timeout, 10*time.Second)+time.Second)
	defer cancel()
	h, err := cl.Health(ctx)
	if err == nil && h.Sandbox == s.Sandbox {
		return nil
	}
	why := "nothing answers there"
	var he *client.HTTPError
	switch {
	case err == nil:
		why = "another broker answers there"
	case errors.As(err, &he) && he.Status > 0, errors.Is(err, client.ErrBadResponse):
		why = "something that is not a Queen broker answers there"
	}
	return fmt.Errorf("%w: context %s is the dlqctl sandbox started at %s, and %s now: start it again with dlqctl sandbox (it points the context at itself), or choose another context",
		ErrNotTheSandbox, s.Context, s.Server, why)
}
