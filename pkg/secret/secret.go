// Package secret keeps credentials out of what dlqctl prints: URLs and
// DSNs with their passwords removed, and texts with a bearer token (or a
// long enough piece of it) replaced.
package secret

import (
	"net/url"
	"regexp"
	"strings"
)

// Mask is what stands in for a removed credential.
const Mask = "xxxxx"

// passwordParams are the query parameters that carry a password in the
// DSNs dlqctl accepts (libpq's names, which pgx honours).
var passwordParams = []string{"password", "pass", "pwd", "sslpassword"}

// keywordPassword matches password=… in a libpq keyword DSN
// (host=db password='s e' user=x).
var keywordPassword = regexp.MustCompile(`(?i)\b(password|sslpassword)\s*=\s*('(?:[^'\\]|\\.)*'|\S*)`)

// URL returns u with any user information and password parameters masked.
// It never echoes a part it could not parse: a string that is not a URL
// but has an "@" loses everything before it.
func URL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Opaque != "" || (p.Scheme == "" && strings.Contains(u, "@")) {
		return maskBeforeAt(keywordPassword.ReplaceAllString(u, "$1="+Mask))
	}
	if p.User != nil {
		p.User = url.User(Mask)
	}
	if p.RawQuery != "" {
		q := p.Query()
		changed := false
		for k := range q {
			for _, name := range passwordParams {
				if strings.EqualFold(k, name) {
					q.Set(k, Mask)
					changed = true
				}
			}
		}
		if changed {
			p.RawQuery = q.Encode()
		}
	}
	return p.String()
}

func maskBeforeAt(s string) string {
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return s
	}
	start := 0
	if i := strings.Index(s, "://"); i >= 0 && i < at {
		start = i + 3
	}
	return s[:start] + Mask + s[at:]
}

// DSN masks the password of a ledger DSN in any of the forms a user may
// type (URL, libpq keywords), and of a URL typed without its scheme
// (user:pw@host/db).
func DSN(dsn string) string {
	if strings.Contains(dsn, "://") || (strings.Contains(dsn, "@") && !strings.Contains(dsn, "=")) {
		return URL(dsn)
	}
	return keywordPassword.ReplaceAllString(dsn, "$1="+Mask)
}

// MinFragment is the shortest piece of a token that is still redacted
// where it appears on its own (a body cut mid-token, an echo of part of it).
const MinFragment = 8

// Redactor removes one token from texts.
type Redactor struct{ token string }

// NewRedactor redacts token; an empty token redacts nothing.
func NewRedactor(token string) Redactor { return Redactor{token: token} }

// Redact replaces the token, and any run of at least MinFragment bytes
// that is a prefix of it, with [redacted].
func (r Redactor) Redact(s string) string {
	t := r.token
	if t == "" {
		return s
	}
	s = strings.ReplaceAll(s, t, "[redacted]")
	if len(t) < MinFragment {
		return s
	}
	head := t[:MinFragment]
	var b strings.Builder
	for {
		i := strings.Index(s, head)
		if i < 0 {
			break
		}
		n := MinFragment
		for i+n < len(s) && n < len(t) && s[i+n] == t[n] {
			n++
		}
		b.WriteString(s[:i])
		b.WriteString("[redacted]")
		s = s[i+n:]
	}
	b.WriteString(s)
	return b.String()
}
