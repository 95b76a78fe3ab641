package secret_test

import (
	"strings"
	"testing"

	"github.com/dlqctl/dlqctl/pkg/secret"
)

func TestURLAndDSN(t *testing.T) {
	for in, want := range map[string]string{
		"https://ann:hunter2@queen.example:6632/x":         "https://xxxxx@queen.example:6632/x",
		"postgres://u:pw@db/ledger?sslmode=disable":        "postgres://xxxxx@db/ledger?sslmode=disable",
		"postgres://db/ledger?password=pw&sslmode=require": "postgres://db/ledger?password=xxxxx&sslmode=require",
		"ann:hunter2@queen.example":                        "xxxxx@queen.example",
		"host=db user=u password='s e cret' dbname=ledger": "host=db user=u password=xxxxx dbname=ledger",
		"http://127.0.0.1:6632":                            "http://127.0.0.1:6632",
	} {
		got := secret.DSN(in)
		if got != want {
			t.Errorf("DSN(%q) = %q, want %q", in, got, want)
		}
		for _, s := range []string{"hunter2", "pw&", ":pw@", "s e cret"} {
			if strings.Contains(got, s) {
				t.Errorf("DSN(%q) = %q keeps %q", in, got, s)
			}
		}
	}
}

func TestRedactor(t *testing.T) {
	tok := "eyJhbGciOiJIUzI1NiJ9.payload.signature"
	r := secret.NewRedactor(tok)
	for in, want := range map[string]string{
		"Authorization: Bearer " + tok:       "Authorization: Bearer [redacted]",
		"cut mid-token: " + tok[:12] + "…":   "cut mid-token: [redacted]…",
		"too short to say: " + tok[:7] + ".": "too short to say: " + tok[:7] + ".",
	} {
		if got := r.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	if got := secret.NewRedactor("").Redact("nothing to hide"); got != "nothing to hide" {
		t.Errorf("an empty token redacted %q", got)
	}
}
