package deadletter

import (
	"bytes"
	"strings"
	"sync"
	"unsafe"
)

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
	n := normalizers.Get().(*normalizer)
	defer normalizers.Put(n)
	return string(n.normalize(s))
}

// normalizer runs the passes through two buffers it keeps, one pass
// writing into the buffer the previous one did not; a pass that changes
// nothing hands its input on as it is. Classifying a listing's rows so
// allocates nothing but the memo's entries.
type normalizer struct{ bufs [2][]byte }

var normalizers = sync.Pool{New: func() any { return new(normalizer) }}

// normalize returns NormalizeError(s), valid until n's next use.
func (n *normalizer) normalize(s string) []byte {
	s = strings.TrimSpace(s)
	if s == "" {
		return []byte("(no error message)")
	}
	// The passes only read their input, so the text is read in place.
	cur, next := unsafe.Slice(unsafe.StringData(s), len(s)), 0
	for _, pass := range [...]func(dst, s []byte) ([]byte, bool){replaceUUIDs, replaceQuoted, replaceHexWords, replaceNumbers, squeezeSpace} {
		if out, changed := pass(n.bufs[next][:0], cur); changed {
			n.bufs[next], cur, next = out, out, 1-next
		}
	}
	return cur
}

// Byte classes, as tables: the loops below test every byte of every
// error text a listing classifies.
const (
	hexByte   = 1 << iota // 0-9 a-f A-F
	wordByte              // RE2's \w: ASCII letters, digits and underscore
	spaceByte             // RE2's \s: \t \n \f \r and space
)

var byteClass = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' {
			t[c] |= hexByte
		}
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' {
			t[c] |= wordByte
		}
		if c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' {
			t[c] |= spaceByte
		}
	}
	return t
}()

func isHex(c byte) bool { return byteClass[c]&hexByte != 0 }

func isWord(c byte) bool { return byteClass[c]&wordByte != 0 }

func isSpace(c byte) bool { return byteClass[c]&spaceByte != 0 }

func uuidAt(s []byte, i int) bool {
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

// Each pass appends its result to dst and reports whether it changed s
// (when it did not, dst holds nothing of use).

func replaceUUIDs(dst, s []byte) ([]byte, bool) {
	if len(s) < 36 || bytes.Count(s, []byte("-")) < 4 {
		return dst, false
	}
	last := 0
	for i := 0; i+36 <= len(s); {
		if uuidAt(s, i) {
			dst = append(dst, s[last:i]...)
			dst = append(dst, "<uuid>"...)
			i += 36
			last = i
			continue
		}
		i++
	}
	if last == 0 {
		return dst, false
	}
	return append(dst, s[last:]...), true
}

func replaceQuoted(dst, s []byte) ([]byte, bool) {
	last := 0
	for i := 0; i < len(s); i++ {
		q := s[i]
		if q != '"' && q != '\'' && q != '`' {
			continue
		}
		j := bytes.IndexByte(s[i+1:], q)
		if j < 0 {
			continue
		}
		dst = append(dst, s[last:i]...)
		dst = append(dst, "<str>"...)
		i += j + 1
		last = i + 1
	}
	if last == 0 {
		return dst, false
	}
	return append(dst, s[last:]...), true
}

// replaceHexWords replaces each ASCII word that is (0x)? followed by hex
// digits, and has a digit in it, with <n>.
func replaceHexWords(dst, s []byte) ([]byte, bool) {
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
		h := i
		if j-i > 2 && s[i] == '0' && s[i+1] == 'x' {
			h += 2 // "0x" has a digit: so does the word
		}
		hex, digit := true, h > i
		for k := h; k < j && hex; k++ {
			hex = isHex(s[k])
			digit = digit || s[k] <= '9'
		}
		if hex && digit {
			dst = append(dst, s[last:i]...)
			dst = append(dst, "<n>"...)
			last = j
		}
		i = j
	}
	if last == 0 {
		return dst, false
	}
	return append(dst, s[last:]...), true
}

func replaceNumbers(dst, s []byte) ([]byte, bool) {
	last, changed := 0, false
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
		dst = append(dst, s[last:i]...)
		dst = append(dst, "<n>"...)
		last, i, changed = j, j, true
	}
	if !changed {
		return dst, false
	}
	return append(dst, s[last:]...), true
}

// squeezeSpace turns each run of RE2's \s ([\t\n\f\r ]) into one space.
func squeezeSpace(dst, s []byte) ([]byte, bool) {
	need := false
	for i := 0; i < len(s); i++ {
		if isSpace(s[i]) && (s[i] != ' ' || i+1 < len(s) && isSpace(s[i+1])) {
			need = true
			break
		}
	}
	if !need {
		return dst, false
	}
	for i := 0; i < len(s); i++ {
		if isSpace(s[i]) {
			dst = append(dst, ' ')
			for i+1 < len(s) && isSpace(s[i+1]) {
				i++
			}
			continue
		}
		dst = append(dst, s[i])
	}
	return dst, true
}
