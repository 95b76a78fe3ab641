package replay

import "strings"

// NormalizeError turns an error text into its failure class's pattern:
// UUIDs, quoted values, hex ids and numbers become placeholders, so
// "order 8812 not found" and "order 91 not found" are one class.
//
// It is the byte-loop form of five regular-expression passes (kept in
// the tests as the definition, and fuzzed against this): UUIDs, then
// quoted strings, then hex words (a word of hex digits, 0x allowed,
// with a digit in it), then numbers (with an optional fraction), then
// runs of whitespace.
func NormalizeError(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return "(no error message)"
	}
	s = replaceUUIDs(s)
	s = replaceQuoted(s)
	s = replaceHexWords(s)
	s = replaceNumbers(s)
	return squeezeSpace(s)
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// isWord is RE2's \w: ASCII letters, digits and underscore.
func isWord(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
}

func uuidAt(s string, i int) bool {
	if len(s)-i < 36 {
		return false
	}
	for k := 0; k < 36; k++ {
		c := s[i+k]
		if k == 8 || k == 13 || k == 18 || k == 23 {
			if c != '-' {
				return false
			}
		} else if !isHex(c) {
			return false
		}
	}
	return true
}

func replaceUUIDs(s string) string {
	if len(s) < 36 || strings.Count(s, "-") < 4 {
		return s
	}
	var b strings.Builder
	last := 0
	for i := 0; i+36 <= len(s); {
		if uuidAt(s, i) {
			b.WriteString(s[last:i])
			b.WriteString("<uuid>")
			i += 36
			last = i
			continue
		}
		i++
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func replaceQuoted(s string) string {
	if !strings.ContainsAny(s, "\"'`") {
		return s
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); i++ {
		q := s[i]
		if q != '"' && q != '\'' && q != '`' {
			continue
		}
		j := strings.IndexByte(s[i+1:], q)
		if j < 0 {
			continue
		}
		b.WriteString(s[last:i])
		b.WriteString("<str>")
		i += j + 1
		last = i + 1
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// replaceHexWords replaces each ASCII word that is (0x)? followed by hex
// digits, and has a digit in it, with <n>.
func replaceHexWords(s string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		if !isWord(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isWord(s[j]) {
			j++
		}
		w := s[i:j]
		h := w
		if len(h) > 2 && h[0] == '0' && h[1] == 'x' {
			h = h[2:]
		}
		hex := true
		for k := 0; k < len(h); k++ {
			if !isHex(h[k]) {
				hex = false
				break
			}
		}
		if hex && strings.ContainsAny(w, "0123456789") {
			b.WriteString(s[last:i])
			b.WriteString("<n>")
			last = j
		}
		i = j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func replaceNumbers(s string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		if s[i] < '0' || s[i] > '9' {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j+1 < len(s) && s[j] == '.' && s[j+1] >= '0' && s[j+1] <= '9' {
			j++
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
		}
		b.WriteString(s[last:i])
		b.WriteString("<n>")
		last, i = j, j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// squeezeSpace turns each run of RE2's \s ([\t\n\f\r ]) into one space.
func squeezeSpace(s string) string {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' }
	need := false
	for i := 0; i < len(s); i++ {
		if isSpace(s[i]) && (s[i] != ' ' || i+1 < len(s) && isSpace(s[i+1])) {
			need = true
			break
		}
	}
	if !need {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if isSpace(s[i]) {
			b.WriteByte(' ')
			for i+1 < len(s) && isSpace(s[i+1]) {
				i++
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
