// Package secret keeps credentials out of what dlqctl prints: URLs and
// DSNs with their passwords removed, and texts with a bearer token (or a
// long enough piece of it) replaced.
package secret

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Mask is what stands in for a removed credential.
const Mask = "xxxxx"

// passwordParams are the query parameters that carry a password in the
// DSNs dlqctl accepts (libpq's names, which pgx honours), and a token in
// a URL (?token=, ?access_token=, …).
var passwordParams = []string{"password", "pass", "pwd", "sslpassword", "token", "access_token", "api_key", "apikey", "key", "auth", "jwt", "secret"}

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

// Redactor removes one token from texts, in every form a server may
// echo it back in.
type Redactor struct {
	forms []string // the token and its encodings
	// grams finds where a piece of MinFragment bytes of a form begins in
	// a text: each form's every MinFragment-byte window, as a key.
	grams map[string]struct{}
}

// NewRedactor redacts token; an empty token redacts nothing.
func NewRedactor(token string) Redactor {
	if token == "" {
		return Redactor{}
	}
	r := Redactor{grams: map[string]struct{}{}}
	seen := map[string]bool{}
	for _, f := range encodings(token) {
		if len(f) < MinFragment || seen[f] {
			continue
		}
		seen[f] = true
		r.forms = append(r.forms, f)
		for i := 0; i+MinFragment <= len(f); i++ {
			r.grams[f[i:i+MinFragment]] = struct{}{}
		}
	}
	if len(token) < MinFragment {
		r.forms = append(r.forms, token) // short: redacted whole only
	}
	return r
}

// encodings are the forms a server may echo a token in: as it is;
// JSON-escaped (encoding/json's, with / as \/ as PHP writes it, and every
// character as \u and four hex digits); percent-encoded (query and path escaping, every
// byte as %XX in both cases); base64 in its four alphabets, at each of
// the three alignments it may start at inside a longer encoded text
// (user:TOKEN in a Basic header): the characters that depend on the
// token's bytes alone.
func encodings(t string) []string {
	out := []string{t}
	q, _ := json.Marshal(t)
	js := string(q[1 : len(q)-1])
	out = append(out, js, strings.ReplaceAll(js, "/", `\/`))
	var uni, up, low strings.Builder
	for _, c := range t {
		fmt.Fprintf(&uni, `\u%04x`, c)
	}
	for i := 0; i < len(t); i++ {
		fmt.Fprintf(&up, "%%%02X", t[i])
		fmt.Fprintf(&low, "%%%02x", t[i])
	}
	out = append(out, uni.String(), strings.ToUpper(uni.String()), up.String(), low.String(), url.QueryEscape(t), url.PathEscape(t))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		for k := 0; k < 3; k++ {
			b := append(make([]byte, k), t...)
			s := enc.EncodeToString(b)
			from, to := 0, len(b)/3*4 // whole groups only: the last depends on what follows
			if k > 0 {
				from = 4 // the first group holds bytes before the token
			}
			if k == 0 {
				out = append(out, s) // the whole, padding and all
			}
			if to > from {
				out = append(out, s[from:to])
			}
		}
	}
	return out
}

// Redact replaces the token, in any of its forms, and any run of at
// least MinFragment bytes of one of its forms, with [redacted].
func (r Redactor) Redact(s string) string {
	if len(r.forms) == 0 {
		return s
	}
	for _, f := range r.forms {
		s = strings.ReplaceAll(s, f, "[redacted]")
	}
	if len(s) < MinFragment {
		return s
	}
	var b strings.Builder
	last := 0
	for i := 0; i+MinFragment <= len(s); {
		if _, ok := r.grams[s[i:i+MinFragment]]; !ok {
			i++
			continue
		}
		// The longest run from i that is a piece of some form.
		n := MinFragment
		for _, f := range r.forms {
			for m := n + 1; i+m <= len(s) && strings.Contains(f, s[i:i+m]); m++ {
				n = m
			}
		}
		b.WriteString(s[last:i])
		b.WriteString("[redacted]")
		i += n
		last = i
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}
