package render

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Clean makes text from the broker or the ledger safe to print for a
// person: control characters (ESC, CR, LF, BEL, DEL, the C1 range), the
// Unicode format characters that reorder or hide text (bidi overrides
// and isolates, zero-width joiners, tags, the soft hyphen), line and
// paragraph separators and the letters that render as nothing are
// written as visible escapes (\x1b, \n, \u202e, \U000e0041), so no
// terminal sequence, forged line or hidden text can reach the screen. Machine formats (-o json, ndjson,
// yaml) never go through it: they keep the data exact.
func Clean(s string) string {
	if !needsClean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	cleanTo(&b, s, false)
	return b.String()
}

// CleanLines is Clean for text of several lines (pretty-printed JSON):
// line ends stay, everything else is escaped.
func CleanLines(s string) string {
	if !needsClean(s) {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = Clean(l)
	}
	return strings.Join(lines, "\n")
}

// CleanKeepColour is Clean for a cell dlqctl may have painted itself: SGR
// colour sequences (ESC [ digits ; … m, what the palette writes) are kept,
// everything else is escaped. Data is cleaned with Clean before painting.
func CleanKeepColour(s string) string {
	if !needsClean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	cleanTo(&b, s, true)
	return b.String()
}

func needsClean(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c >= 0x80 {
			if c >= 0x80 {
				return hasBadRune(s[i:])
			}
			return true
		}
	}
	return false
}

func hasBadRune(s string) bool {
	for _, r := range s {
		if badRune(r) {
			return true
		}
	}
	return false
}

func badRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0, r == utf8.RuneError:
		return true
	case r < 0xa0:
		return false
	// Format characters (bidi controls and isolates, zero-width spaces
	// and joiners, the soft hyphen, invisible operators, tags, the
	// Arabic letter mark), line and paragraph separators, and letters
	// that render as nothing at all.
	case unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
		return true
	case r == 0x034f, r == 0x115f, r == 0x1160, r == 0x180e, r == 0x3164, r == 0xffa0, r >= 0xe0000 && r <= 0xe007f:
		return true
	}
	return false
}

func cleanTo(b *strings.Builder, s string, keepSGR bool) {
	for i := 0; i < len(s); {
		if keepSGR && s[i] == 0x1b {
			if n := sgrLen(s[i:]); n > 0 {
				b.WriteString(s[i : i+n])
				i += n
				continue
			}
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && badRune(r):
			fmt.Fprintf(b, `\x%02x`, r)
		case badRune(r) && r > 0xffff:
			fmt.Fprintf(b, `\U%08x`, r)
		case badRune(r):
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
}

// sgrLen is the length of an SGR sequence at the start of s, 0 if none.
func sgrLen(s string) int {
	if len(s) < 3 || s[0] != 0x1b || s[1] != '[' {
		return 0
	}
	for i := 2; i < len(s) && i < 32; i++ {
		switch c := s[i]; {
		case c == 'm':
			return i + 1
		case c >= '0' && c <= '9', c == ';':
		default:
			return 0
		}
	}
	return 0
}
