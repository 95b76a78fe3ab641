package cmdutil

import (
	"regexp"
	"strings"

	"github.com/dlqctl/dlqctl/pkg/secret"
)

var plainArg = regexp.MustCompile(`^[A-Za-z0-9_./:=@%+,-]+$`)

// CommandLine is args as a shell line a person can paste: words that a
// POSIX shell would split or expand are single-quoted.
func CommandLine(args ...string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if plainArg.MatchString(a) {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// connectionFlags are the global flags that say where a command line
// connects: a printed command that must work when pasted repeats the
// ones this run was given. --token is not among them (a secret is never
// printed).
var connectionFlags = []string{"server", "context", "ledger", "config", "token-file", "ca-file", "insecure-skip-tls-verify", "timeout"}

// Again is the command line that runs dlqctl with args the way this run
// connected: the connection flags given on this command line are
// repeated. A ledger DSN's password is masked (and the line says so), a
// --token is left out (and the line says so).
func (f *Factory) Again(args ...string) string {
	line := append([]string{"dlqctl"}, args...)
	var notes []string
	if f.flagSet != nil {
		for _, name := range connectionFlags {
			fl := f.flagSet.Lookup(name)
			if fl == nil || !fl.Changed {
				continue
			}
			v := fl.Value.String()
			if name == "ledger" && secret.DSN(v) != v {
				v = secret.DSN(v)
				notes = append(notes, "put the ledger's password back in --ledger")
			}
			if fl.Value.Type() == "bool" {
				line = append(line, "--"+name)
				continue
			}
			line = append(line, "--"+name, v)
		}
		if fl := f.flagSet.Lookup("token"); fl != nil && fl.Changed {
			notes = append(notes, "add your --token, or use --token-file")
		}
	}
	out := CommandLine(line...)
	if len(notes) > 0 {
		out += "   # " + strings.Join(notes, "; ")
	}
	return out
}

// Another is the command line another person runs with args: none of
// this run's connection flags (its context, ledger or config are this
// person's, and another reaches the ledger as themselves).
func (f *Factory) Another(args ...string) string {
	return CommandLine(append([]string{"dlqctl"}, args...)...)
}
