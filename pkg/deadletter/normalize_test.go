package deadletter

import (
	"regexp"
	"strings"
	"testing"
)

// normalizeByRegexp is NormalizeError's definition, as the five regular
// expressions it was first written with; NormalizeError must agree with
// it on every input (FuzzNormalizeMatchesItsDefinition).
func normalizeByRegexp(s string) string {
	var (
		reUUID   = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
		reQuoted = regexp.MustCompile(`"[^"]*"|'[^']*'|` + "`[^`]*`")
		reHexTok = regexp.MustCompile(`\b(?:0x)?[0-9a-fA-F]+\b`)
		reDigits = regexp.MustCompile(`[0-9]+(?:\.[0-9]+)?`)
		reSpace  = regexp.MustCompile(`\s+`)
	)
	s = strings.TrimSpace(s)
	if s == "" {
		return "(no error message)"
	}
	s = reUUID.ReplaceAllString(s, "<uuid>")
	s = reQuoted.ReplaceAllString(s, "<str>")
	s = reHexTok.ReplaceAllStringFunc(s, func(tok string) string {
		if strings.ContainsAny(tok, "0123456789") {
			return "<n>"
		}
		return tok
	})
	s = reDigits.ReplaceAllString(s, "<n>")
	return reSpace.ReplaceAllString(s, " ")
}

func FuzzNormalizeMatchesItsDefinition(f *testing.F) {
	for _, s := range []string{"order 8812 not found", `field "email" invalid`, "card 4f2a1b3c declined", "6f1c0a4e-1111-4222-8333-444455556666 gone",
		"", "timeout after 30000ms", "x'y'z", "0xdeadbeef 0x 0xg deadbeef ab_12 é12 1.2.3 3.x", "a\t\n\f\r  b\v c", "\"unclosed 'x' `y`", "0X12 _1 1_",
		"aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaaa-bbbb", "connection refused: payments-db:5432", "\u00a0 12\u00a0", "12abc 1e5 0x1F",
		"v1.2x", "v1.2", "x1.5q", "v1.2z.3y v1.2.3y", "12.5x", "v1.0x1f", "a1 .2b", "1.2.3.4", "q9.9_ r7.x s8.", "\t lead  and\ttrail \n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := NormalizeError(s), normalizeByRegexp(s); got != want {
			t.Fatalf("%q: %q, its definition says %q", s, got, want)
		}
	})
}
