package secret_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/dlqctl/dlqctl/pkg/secret"
)

const jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJvbmNhbGwiLCJyb2xlIjoicncifQ.dGhpcy9pcy9hL3Rva2VuK3dpdGgvc2xhc2hlcw=="

// The token never survives an echo, whatever encoding the broker gives
// it: raw, JSON-escaped (\/ as PHP writes it, \u), percent-encoded,
// base64 at any alignment, or any piece of 8 characters or more of it.
func TestRedactsEveryEcho(t *testing.T) {
	r := secret.NewRedactor(jwt)
	quoted, _ := json.Marshal(jwt)
	php := strings.ReplaceAll(string(quoted[1:len(quoted)-1]), "/", `\/`)
	var unicode strings.Builder
	for _, c := range jwt {
		fmt.Fprintf(&unicode, `\u%04x`, c)
	}
	var pct strings.Builder
	for i := 0; i < len(jwt); i++ {
		fmt.Fprintf(&pct, "%%%02X", jwt[i])
	}
	echoes := map[string]string{
		"raw":             "token " + jwt + " refused",
		"json \\/":        `{"error":"bad token ` + php + `"}`,
		"json \\u":        `{"error":"` + unicode.String() + `"}`,
		"query escape":    "got " + url.QueryEscape(jwt),
		"path escape":     "got " + url.PathEscape(jwt),
		"percent all":     "got " + pct.String(),
		"percent lower":   "got " + strings.ToLower(pct.String()),
		"base64":          "auth " + base64.StdEncoding.EncodeToString([]byte(jwt)),
		"base64 url":      "auth " + base64.RawURLEncoding.EncodeToString([]byte(jwt)),
		"basic auth":      "Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+jwt)),
		"basic, offset 2": "Basic " + base64.StdEncoding.EncodeToString([]byte("u2:"+jwt+"!")),
		"last 10":         "…" + jwt[len(jwt)-10:],
		"middle 12":       "x" + jwt[40:52] + "x",
		"cut after quote": `"` + jwt[:30],
	}
	for name, s := range echoes {
		got := r.Redact(s)
		if leaked(got) {
			t.Errorf("%s: %q", name, got)
		}
	}
	// Texts that share no 8 characters with it stay as they are.
	for _, s := range []string{"order 8812 not found", "eyJhbGc", strings.Repeat("a", 100)} {
		if got := r.Redact(s); got != s {
			t.Errorf("%q became %q", s, got)
		}
	}
}

// leaked reports whether 8 consecutive bytes of the token, or of any of
// its encodings, are in s.
func leaked(s string) bool {
	forms := []string{jwt, url.QueryEscape(jwt), base64.StdEncoding.EncodeToString([]byte(jwt))}
	for _, f := range forms {
		for i := 0; i+8 <= len(f); i++ {
			if strings.Contains(s, f[i:i+8]) {
				return true
			}
		}
	}
	return false
}

// A credential in a URL's query (?token=) is masked as a password is.
func TestURLQueryCredentials(t *testing.T) {
	for _, u := range []string{"http://h:1/?token=s3cr3t-value", "http://h:1/?access_token=s3cr3t-value&x=1", "http://h:1/?api_key=s3cr3t-value"} {
		if got := secret.URL(u); strings.Contains(got, "s3cr3t") {
			t.Errorf("%s: %s", u, got)
		}
	}
}

// FuzzRedactEchoes: a token echoed in any of the encodings a server may
// use, inside any text, leaves no 8 bytes of itself, raw or encoded, in
// what is redacted.
func FuzzRedactEchoes(f *testing.F) {
	f.Add("s3cr3t-t0ken/with+chars=", "error: ", " refused", uint8(0))
	f.Add(jwt, `{"e":"`, `"}`, uint8(3))
	f.Add("abcdefghijklmnop", "u:", "", uint8(7))
	f.Fuzz(func(t *testing.T, token, before, after string, how uint8) {
		if len(token) < secret.MinFragment || strings.ContainsAny(token, "\x00") {
			return
		}
		var echo string
		switch how % 8 {
		case 0:
			echo = token
		case 1:
			q, _ := json.Marshal(token)
			echo = strings.ReplaceAll(string(q[1:len(q)-1]), "/", `\/`)
		case 2:
			echo = url.QueryEscape(token)
		case 3:
			echo = url.PathEscape(token)
		case 4:
			echo = base64.StdEncoding.EncodeToString([]byte(before + token + after))
			before, after = "Basic ", ""
		case 5:
			echo = base64.RawURLEncoding.EncodeToString([]byte(token))
		case 6:
			var b strings.Builder
			for i := 0; i < len(token); i++ {
				fmt.Fprintf(&b, "%%%02X", token[i])
			}
			echo = b.String()
		case 7:
			echo = token[len(token)/3:] // a piece of it
			if len(echo) < secret.MinFragment {
				return
			}
		}
		got := secret.NewRedactor(token).Redact(before + echo + after)
		for i := 0; i+secret.MinFragment <= len(token); i++ {
			if strings.Contains(got, token[i:i+secret.MinFragment]) && !strings.Contains(before+after, token[i:i+secret.MinFragment]) {
				t.Fatalf("%q of the token survived in %q", token[i:i+secret.MinFragment], got)
			}
		}
	})
}
