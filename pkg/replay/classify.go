package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"sync"
)

var (
	reUUID   = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
	reQuoted = regexp.MustCompile(`"[^"]*"|'[^']*'|` + "`[^`]*`")
	reHexTok = regexp.MustCompile(`\b(?:0x)?[0-9a-fA-F]+\b`)
	reDigits = regexp.MustCompile(`[0-9]+(?:\.[0-9]+)?`)
	reSpace  = regexp.MustCompile(`\s+`)
)

// NormalizeError turns an error text into its failure class's pattern:
// UUIDs, quoted values, hex ids and numbers become placeholders, so
// "order 8812 not found" and "order 91 not found" are one class.
func NormalizeError(s string) string {
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

// ClassID is the stable id of a failure class: a hash of its pattern, so
// the same error text gets the same id on every machine and every day.
// Texts repeat (one failure mode, thousands of rows), so ids are memoised.
func ClassID(errorMessage string) string {
	classMu.Lock()
	id, ok := classMemo[errorMessage]
	classMu.Unlock()
	if ok {
		return id
	}
	h := sha256.Sum256([]byte(NormalizeError(errorMessage)))
	id = hex.EncodeToString(h[:4])
	classMu.Lock()
	if len(classMemo) >= 1<<14 {
		clear(classMemo) // bounded: distinct texts (ids in them) must not grow it forever
	}
	classMemo[errorMessage] = id
	classMu.Unlock()
	return id
}

var (
	classMu   sync.Mutex
	classMemo = map[string]string{}
)

// IsClassID reports whether s has the form of a class id (8 hex digits).
func IsClassID(s string) bool {
	if len(s) != 8 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
