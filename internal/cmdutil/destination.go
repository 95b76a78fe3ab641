package cmdutil

import (
	"github.com/spf13/pflag"
)

// ForDestination is a factory for the broker a command publishes into
// beside its own (dlq replay --to-context, --to-server): a context of the
// config, with that context's server, token and ledger alone; or a URL,
// with the token of tokenFile alone (none without one) and this
// factory's ledger. Nothing that names this factory's broker or its
// token reaches it: not --server, --token, --token-file or --context, not
// DLQCTL_SERVER, DLQCTL_TOKEN or QUEEN_TOKEN, not the current context's
// token file. The other global flags (--timeout, TLS, --config) apply to
// both.
func (f *Factory) ForDestination(contextName, server, tokenFile string) (*Factory, error) {
	if contextName != "" {
		cfg, err := f.Config()
		if err != nil {
			return nil, err
		}
		if cfg.Contexts[contextName] == nil {
			return nil, FlagErrorf("--to-context %s: no context %q in %s (see dlqctl config view)", contextName, contextName, cfg.Path())
		}
		return f.ForContext(contextName), nil
	}
	s, err := f.Settings()
	if err != nil {
		return nil, err
	}
	g := *f.Globals
	g.Context, g.Server, g.Token, g.TokenFile, g.Ledger = "", server, "", tokenFile, s.Ledger
	// The flags set here are what Resolve takes before any environment
	// variable or context: an empty --context is no context at all (not
	// the config's current one, nor its token file).
	fs := pflag.NewFlagSet("destination", pflag.ContinueOnError)
	fs.String("context", "", "")
	fs.String("server", "", "")
	fs.String("ledger", "", "")
	fs.String("token-file", "", "")
	// No context, no token variable: the token is tokenFile's or none.
	set := map[string]string{"context": "", "server": server, "ledger": s.Ledger}
	if tokenFile != "" {
		set["token-file"] = tokenFile
	}
	for k, v := range set {
		if err := fs.Set(k, v); err != nil {
			return nil, err
		}
	}
	env := f.Getenv
	return &Factory{IO: f.IO, Globals: &g, Now: f.Now, HTTPClient: f.HTTPClient, Backoff: f.Backoff, MaxRow: f.MaxRow, MaxAnswerRows: f.MaxAnswerRows, flagSet: fs,
		Getenv: func(k string) string {
			switch k {
			case "DLQCTL_CONTEXT", "DLQCTL_SERVER", "QUEEN_SERVER", "DLQCTL_TOKEN", "QUEEN_TOKEN", "DLQCTL_LEDGER":
				return ""
			}
			return env(k)
		}}, nil
}
