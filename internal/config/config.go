// Package config reads and writes dlqctl's config file and resolves the
// connection settings (flag > env > context > default). It is the only
// place viper is used.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/adrg/xdg"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/duration"
	"github.com/dlqctl/dlqctl/pkg/policy"
	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// DefaultServer is the broker URL when nothing else names one.
const DefaultServer = "http://localhost:6632"

// Config is the config file.
type Config struct {
	CurrentContext string              `mapstructure:"current-context" yaml:"current-context,omitempty" json:"currentContext,omitempty"`
	Contexts       map[string]*Context `mapstructure:"contexts" yaml:"contexts,omitempty" json:"contexts,omitempty"`
	Policies       []Policy            `mapstructure:"policies" yaml:"policies,omitempty" json:"policies,omitempty"`
	// Approval asks for four eyes on large batches.
	Approval Approval `mapstructure:"approval" yaml:"approval,omitempty" json:"approval,omitzero"`

	path   string
	exists bool
	// Warnings are what the file has that dlqctl does not use (unknown
	// keys): worth saying, not worth refusing.
	Warnings []string `mapstructure:"-" yaml:"-" json:"-"`
}

// Exists reports whether the file was there to read.
func (c *Config) Exists() bool { return c.exists }

// Context is a named broker profile.
type Context struct {
	Server    string `mapstructure:"server" yaml:"server,omitempty" json:"server,omitempty"`
	TokenFile string `mapstructure:"token-file" yaml:"token-file,omitempty" json:"tokenFile,omitempty"`
	Ledger    string `mapstructure:"ledger" yaml:"ledger,omitempty" json:"ledger,omitempty"`
	// Broker names the broker in the ledger, for a broker reached by
	// several URLs (a load balancer and its nodes): contexts that name
	// the same broker share its history. Unset, the history is filed
	// under the URL's identity.
	Broker string `mapstructure:"broker" yaml:"broker,omitempty" json:"broker,omitempty"`
	// Policies are this context's own: a context's rule for a scope is
	// the one for it, before the file's (PolicySetFor).
	Policies []Policy `mapstructure:"policies" yaml:"policies,omitempty" json:"policies,omitempty"`
	// Sandbox is the instance id of the dlqctl sandbox the context names
	// (dlqctl sandbox writes it): a command under it talks to that
	// sandbox alone, never to another broker that answers at its address.
	Sandbox string `mapstructure:"sandbox" yaml:"sandbox,omitempty" json:"sandbox,omitempty"`
}

// Approval: a replay or discard of more than MinMessages messages is
// recorded awaiting a second person's approval (decisions approve) and
// runs only once it has it. Zero asks for none.
type Approval struct {
	MinMessages int `mapstructure:"min-messages" yaml:"min-messages,omitempty" json:"minMessages,omitempty"`
}

// Policy holds a queue's thresholds, or one consumer group's of it;
// Queue "*" is the default.
type Policy struct {
	Queue         string   `mapstructure:"queue" yaml:"queue" json:"queue"`
	ConsumerGroup string   `mapstructure:"consumer-group" yaml:"consumer-group,omitempty" json:"consumerGroup,omitempty"`
	Owner         string   `mapstructure:"owner" yaml:"owner,omitempty" json:"owner,omitempty"`
	MaxAge        Duration `mapstructure:"max-age" yaml:"max-age,omitempty" json:"maxAge,omitzero"`
	TriageSLO     Duration `mapstructure:"triage-slo" yaml:"triage-slo,omitempty" json:"triageSlo,omitzero"`
}

// Duration is a duration as the file writes it ("1h30m", "2d"); zero is
// unset. It keeps the text it was written as, so the file is shown and
// saved back the way its author wrote it.
type Duration struct {
	d    time.Duration
	text string
}

// NewDuration returns d, written as text.
func NewDuration(d time.Duration, text string) Duration { return Duration{d: d, text: text} }

// D returns the time.Duration.
func (d Duration) D() time.Duration { return d.d }

// IsZero reports an unset duration (omitempty, omitzero).
func (d Duration) IsZero() bool { return d.d == 0 && d.text == "" }

// String is the text the duration was written as.
func (d Duration) String() string {
	if d.text != "" {
		return d.text
	}
	return d.d.String()
}

// MarshalYAML writes the duration as its text.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalJSON writes the duration as its text.
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(d.String())), nil }

// PolicySet is the config's policies as the gate reads them.
func (c *Config) PolicySet() policy.Set {
	if c == nil {
		return nil
	}
	return rules(c.Policies)
}

// PolicySetFor is the policies in force in a context: the context's own
// rules, then the file's. The first rule that names a scope is the one
// for it (policy.Set.For), so a context's rule for orders replaces the
// file's for orders, and the file's "*" still applies where the context
// sets none.
func (c *Config) PolicySetFor(context string) policy.Set {
	if c == nil {
		return nil
	}
	var own []Policy
	if cx := c.Contexts[context]; cx != nil {
		own = cx.Policies
	}
	return append(rules(own), rules(c.Policies)...)
}

func rules(ps []Policy) policy.Set {
	out := make(policy.Set, len(ps))
	for i, p := range ps {
		out[i] = policy.Rule{Queue: p.Queue, ConsumerGroup: p.ConsumerGroup,
			Policy: policy.Policy{Owner: p.Owner, MaxAge: p.MaxAge.D(), TriageSLO: p.TriageSLO.D()}}
	}
	return out
}

// ContextNames are the config's contexts, in order.
func (c *Config) ContextNames() []string {
	var out []string
	for name := range c.Contexts {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// PolicyFor returns the policy in force for a queue's consumer group
// (policy.Set.For: each rule sets what it names and inherits the rest).
func (c *Config) PolicyFor(queue, group string) (policy.Policy, bool) {
	return c.PolicySet().For(queue, group)
}

// Path is where the config was read from (and is written to).
func (c *Config) Path() string { return c.path }

// DefaultPath is $XDG_CONFIG_HOME/dlqctl/config.yaml.
func DefaultPath() string {
	return filepath.Join(xdg.ConfigHome, "dlqctl", "config.yaml")
}

// DefaultLedger is sqlite://$XDG_STATE_HOME/dlqctl/ledger.db.
func DefaultLedger() string {
	return "sqlite://" + filepath.Join(xdg.StateHome, "dlqctl", "ledger.db")
}

// SandboxLedger is the ledger of the sandbox's context,
// sqlite://$XDG_STATE_HOME/dlqctl/sandbox.db: what is tried on the
// sandbox is kept apart from the ledger of real brokers.
func SandboxLedger() string {
	return "sqlite://" + filepath.Join(xdg.StateHome, "dlqctl", "sandbox.db")
}

// SandboxContext is the context dlqctl sandbox points at itself.
const SandboxContext = "sandbox"

// ErrInvalid marks a config that cannot be used (exit 2).
var ErrInvalid = errors.New("invalid configuration")

// Load reads the config file. A missing file is an empty config (Exists
// says so), so that `config set-context` can create it, unless mustExist
// (the user named the file with --config): then it is an error.
func Load(path string, mustExist bool) (*Config, error) {
	c := &Config{path: path, Contexts: map[string]*Context{}}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if mustExist {
			return nil, fmt.Errorf("%w: --config %s does not exist (create it with dlqctl --config %s config set-context NAME --server URL)", ErrInvalid, path, path)
		}
		return c, nil
	}
	c.exists = true
	v := viper.New()
	v.SetConfigFile(path)
	v.SetConfigType("yaml")
	if err := v.ReadInConfig(); err != nil {
		return nil, fmt.Errorf("%w: reading %s: %v", ErrInvalid, path, oneLine(err.Error()))
	}
	hook := mapstructure.ComposeDecodeHookFunc(durationHook)
	var md mapstructure.Metadata
	if err := v.Unmarshal(c, viper.DecodeHook(hook), func(dc *mapstructure.DecoderConfig) { dc.Metadata = &md }); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, path, oneLine(err.Error()))
	}
	for _, k := range md.Unused {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s: unknown key %q is ignored", path, k))
	}
	if c.Contexts == nil {
		c.Contexts = map[string]*Context{}
	}
	for i, p := range c.Policies {
		if p.Queue == "" {
			return nil, fmt.Errorf("%w: %s: policy %d has no queue (use \"*\" for the default)", ErrInvalid, path, i+1)
		}
	}
	if c.Approval.MinMessages < 0 {
		return nil, fmt.Errorf("%w: %s: approval min-messages %d: want 0 (none) or more", ErrInvalid, path, c.Approval.MinMessages)
	}
	for _, name := range c.ContextNames() {
		for i, p := range c.Contexts[name].Policies {
			if p.Queue == "" {
				return nil, fmt.Errorf("%w: %s: context %s: policy %d has no queue (use \"*\" for the default)", ErrInvalid, path, name, i+1)
			}
		}
	}
	return c, nil
}

// oneLine joins a multi-line error (viper's and mapstructure's put the
// cause on later lines) into one.
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeOf(Duration{}) {
		return data, nil
	}
	switch v := data.(type) {
	case string:
		d, err := ParseDuration(v)
		if err != nil {
			return nil, err
		}
		return Duration{d: d, text: v}, nil
	case int:
		return Duration{d: time.Duration(v) * time.Second, text: fmt.Sprintf("%ds", v)}, nil
	}
	return nil, fmt.Errorf("want a duration such as 90m, 4h or 2d, not %v", data)
}

// ParseDuration is duration.Parse: Go durations plus a day unit.
func ParseDuration(s string) (time.Duration, error) { return duration.Parse(s) }

// Save writes the config back to its path (0600: it may name token files).
func (c *Config) Save() error {
	out, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o700); err != nil {
		return err
	}
	tmp := c.path + ".tmp"
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.path)
}

// Settings are the resolved connection settings.
type Settings struct {
	Context string
	Server  string
	// Broker is the context's explicit broker name ("" when it has none).
	Broker string
	// Sandbox is the instance id of the dlqctl sandbox the context names
	// ("" for a context of a real broker).
	Sandbox     string
	Token       string
	TokenSource string // where the token came from, for messages (never the token)
	Ledger      string
	// Warnings are worth saying once (a token file others can read).
	Warnings []string
}

// Flags are the global flags as parsed; Changed reports whether the user set one.
type Flags struct {
	Server, Token, TokenFile, Context, Ledger string
	Set                                       *pflag.FlagSet
}

func (f Flags) changed(name string) bool { return f.Changed(name) }

// Changed reports whether the command line set the global flag name.
func (f Flags) Changed(name string) bool {
	if f.Set == nil {
		return false // no command line: a factory built by a test or a library
	}
	fl := f.Set.Lookup(name)
	return fl != nil && fl.Changed
}

// Resolve applies flag > env > context > default. getenv is os.Getenv in
// production.
func Resolve(c *Config, f Flags, getenv func(string) string) (*Settings, error) {
	v := viper.New()
	for _, b := range []struct {
		key  string
		envs []string
	}{
		{"server", []string{"DLQCTL_SERVER", "QUEEN_SERVER"}},
		{"ledger", []string{"DLQCTL_LEDGER"}},
		{"context", []string{"DLQCTL_CONTEXT"}},
	} {
		if f.changed(b.key) {
			v.Set(b.key, f.Set.Lookup(b.key).Value.String())
			continue
		}
		for _, e := range b.envs {
			if val := getenv(e); val != "" {
				v.Set(b.key, val)
				break
			}
		}
	}
	s := &Settings{Context: v.GetString("context")}
	if s.Context == "" && !f.changed("context") { // --context "" is no context
		s.Context = c.CurrentContext
	}
	var ctx Context
	if s.Context != "" {
		cp, ok := c.Contexts[s.Context]
		if !ok {
			if f.changed("context") || getenv("DLQCTL_CONTEXT") != "" {
				return nil, fmt.Errorf("%w: no context %q in %s (see dlqctl config view)", ErrInvalid, s.Context, c.path)
			}
			return nil, fmt.Errorf("%w: current-context %q is not defined in %s", ErrInvalid, s.Context, c.path)
		}
		ctx = *cp
	}
	v.SetDefault("server", firstNonEmpty(ctx.Server, DefaultServer))
	v.SetDefault("ledger", firstNonEmpty(ctx.Ledger, DefaultLedger()))
	s.Server = v.GetString("server")
	s.Ledger = v.GetString("ledger")
	// A name belongs to the context's server, however its URL is spelt:
	// a --server (or env) that points elsewhere is filed under its own.
	if ctx.Broker != "" && (ctx.Server == "" || sameIdentity(s.Server, ctx.Server)) {
		s.Broker = ctx.Broker
	}
	if ctx.Sandbox != "" {
		// A sandbox's context is for that sandbox: a --server or
		// DLQCTL_SERVER in force with it names another broker, and the
		// command that meant the sandbox would act there.
		if !sameIdentity(s.Server, ctx.Server) {
			return nil, fmt.Errorf("%w: context %s is the dlqctl sandbox at %s, but %s points this command at %s: unset it, or leave the context", ErrInvalid, s.Context, ctx.Server, serverSource(f, getenv), s.Server)
		}
		s.Sandbox = ctx.Sandbox
	}

	var err error
	switch {
	case f.changed("token"):
		s.Token, s.TokenSource = f.Token, "--token"
	case f.changed("token-file"):
		s.Token, err = readToken(f.TokenFile, &s.Warnings)
		s.TokenSource = "--token-file " + f.TokenFile
	case getenv("DLQCTL_TOKEN") != "":
		s.Token, s.TokenSource = getenv("DLQCTL_TOKEN"), "DLQCTL_TOKEN"
	case getenv("QUEEN_TOKEN") != "":
		s.Token, s.TokenSource = getenv("QUEEN_TOKEN"), "QUEEN_TOKEN"
	case ctx.TokenFile != "":
		s.Token, err = readToken(ctx.TokenFile, &s.Warnings)
		s.TokenSource = "context " + s.Context + " token-file " + ctx.TokenFile
	}
	if err != nil {
		return nil, err
	}
	if s.Token != "" && !tokenShaped(s.Token) {
		// A header cannot carry it; the broker would be blamed for it.
		return nil, fmt.Errorf("%w: the token from %s has a space, a line break or a control character: it must be the token alone, on one line", ErrInvalid, s.TokenSource)
	}
	return s, nil
}

// serverSource says where the server in force came from: the flag or
// the variable.
func serverSource(f Flags, getenv func(string) string) string {
	switch {
	case f.changed("server"):
		return "--server"
	case getenv("DLQCTL_SERVER") != "":
		return "DLQCTL_SERVER"
	}
	return "QUEEN_SERVER"
}

// sameIdentity reports whether two server URLs are one broker's by
// deadletter.Identity (a port with leading zeros, 0.0.0.0 for 127.0.0.1, …).
func sameIdentity(a, b string) bool {
	if a == b {
		return true
	}
	ia, ea := deadletter.Identity(a)
	ib, eb := deadletter.Identity(b)
	return ea == nil && eb == nil && ia == ib
}

// tokenShaped reports whether a token can travel in a header as is.
func tokenShaped(t string) bool {
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

func readToken(path string, warnings *[]string) (string, error) {
	if strings.HasPrefix(path, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			path = filepath.Join(home, path[2:])
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: reading token file: %v", ErrInvalid, err)
	}
	// One line, with or without its end (LF or CRLF).
	t := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	t = strings.TrimSpace(t)
	switch {
	case t == "":
		return "", fmt.Errorf("%w: token file %s is empty", ErrInvalid, path)
	case strings.ContainsAny(t, "\r\n"):
		return "", fmt.Errorf("%w: token file %s has more than one line: it must hold the token alone", ErrInvalid, path)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		*warnings = append(*warnings, fmt.Sprintf("token file %s can be read by others (mode %04o): chmod 600 %s", path, fi.Mode().Perm(), path))
	}
	return t, nil
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}
