package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestResolvePrecedence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	os.WriteFile(filepath.Join(dir, "prod.token"), []byte("prod-token\n"), 0o600)
	os.WriteFile(path, []byte(`current-context: prod
contexts:
  prod: {server: https://queen.prod:6632, token-file: `+filepath.Join(dir, "prod.token")+`, ledger: postgres://dlqctl@db/dlqctl}
  staging: {server: http://queen.staging:6632}
policies:
  - queue: orders
    owner: team-billing
    max-age: 1h
    triage-slo: 4h
  - queue: "*"
    max-age: 1d
`), 0o600)
	c, err := Load(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := c.PolicyFor("orders", ""); p.MaxAge != time.Hour || p.TriageSLO != 4*time.Hour || p.Owner != "team-billing" {
		t.Fatalf("orders policy %+v", p)
	}
	if p, _ := c.PolicyFor("payments", ""); p.MaxAge != 24*time.Hour {
		t.Fatalf("default policy %+v", p)
	}
	flags := func(args ...string) Flags {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		f := Flags{Set: fs}
		fs.StringVar(&f.Server, "server", "", "")
		fs.StringVar(&f.Token, "token", "", "")
		fs.StringVar(&f.TokenFile, "token-file", "", "")
		fs.StringVar(&f.Context, "context", "", "")
		fs.StringVar(&f.Ledger, "ledger", "", "")
		fs.Parse(args)
		return f
	}
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	// Context over default.
	s, err := Resolve(c, flags(), env())
	if err != nil || s.Server != "https://queen.prod:6632" || s.Token != "prod-token" || s.Ledger != "postgres://dlqctl@db/dlqctl" {
		t.Fatalf("context: %+v %v", s, err)
	}
	// Env over context; DLQCTL_ over QUEEN_.
	s, _ = Resolve(c, flags(), env("QUEEN_SERVER", "http://q", "DLQCTL_SERVER", "http://d", "QUEEN_TOKEN", "qt"))
	if s.Server != "http://d" || s.Token != "qt" || s.TokenSource != "QUEEN_TOKEN" {
		t.Fatalf("env: %+v", s)
	}
	// Flag over env.
	s, _ = Resolve(c, flags("--server", "http://f", "--token", "ft", "--ledger", "sqlite:///x.db"), env("DLQCTL_SERVER", "http://d", "DLQCTL_TOKEN", "dt"))
	if s.Server != "http://f" || s.Token != "ft" || s.Ledger != "sqlite:///x.db" {
		t.Fatalf("flags: %+v", s)
	}
	// Another context by env; its missing token-file means no token.
	s, _ = Resolve(c, flags(), env("DLQCTL_CONTEXT", "staging"))
	if s.Server != "http://queen.staging:6632" || s.Token != "" || !strings.HasPrefix(s.Ledger, "sqlite://") {
		t.Fatalf("staging: %+v", s)
	}
	if _, err := Resolve(c, flags("--context", "nope"), env()); err == nil || !strings.Contains(err.Error(), `no context "nope"`) {
		t.Fatalf("unknown context: %v", err)
	}
	// Save and load round-trip.
	c.CurrentContext = "staging"
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	c2, err := Load(path, false)
	if err != nil || c2.CurrentContext != "staging" || len(c2.Policies) != 2 || c2.Policies[0].MaxAge.D() != time.Hour {
		t.Fatalf("round trip: %+v %v", c2, err)
	}
}

// A policy sets what it names and inherits the rest: a group's policy
// from its queue's, a queue's from the default.
func TestPoliciesInherit(t *testing.T) {
	d := func(s string) Duration { v, _ := ParseDuration(s); return NewDuration(v, s) }
	c := &Config{Policies: []Policy{
		{Queue: "orders", Owner: "team-billing", MaxAge: d("1h"), TriageSLO: d("4h")},
		{Queue: "orders", ConsumerGroup: "shipping", Owner: "team-shipping", MaxAge: d("30m")},
		{Queue: "*", MaxAge: d("24h"), TriageSLO: d("2d")},
		{Queue: "payments", Owner: "team-pay"},
	}}
	for _, c2 := range []struct {
		queue, group, owner string
		maxAge, slo         time.Duration
	}{
		{"orders", "shipping", "team-shipping", 30 * time.Minute, 4 * time.Hour},
		{"orders", "billing", "team-billing", time.Hour, 4 * time.Hour},
		{"payments", "ledger", "team-pay", 24 * time.Hour, 48 * time.Hour},
		{"other", "", "", 24 * time.Hour, 48 * time.Hour},
	} {
		p, ok := c.PolicyFor(c2.queue, c2.group)
		if !ok || p.Owner != c2.owner || p.MaxAge != c2.maxAge || p.TriageSLO != c2.slo {
			t.Errorf("%s/%s: %+v, want owner %q max-age %s triage-slo %s", c2.queue, c2.group, p, c2.owner, c2.maxAge, c2.slo)
		}
	}
	if _, ok := (&Config{}).PolicyFor("q", "g"); ok {
		t.Error("no policy at all must say so")
	}
}
