package render

import (
	"bytes"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/dlqctl/dlqctl/pkg/wordscan"
)

// JSONAppender is a record that writes its own JSON (exactly what
// encoding/json would write for it), so a stream of many records skips
// reflection.
type JSONAppender interface {
	AppendJSON(b []byte) []byte
}

const hexDigits = "0123456789abcdef"

// AppendJSONStringContent is AppendJSONString without the quotes, for a
// string written in parts.
func AppendJSONStringContent(b []byte, s string) []byte {
	return appendStringContent(b, s)
}

// AppendJSONString appends s as encoding/json writes a string (HTML
// characters escaped, invalid UTF-8 as \ufffd).
func AppendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendStringContent(b, s)
	return append(b, '"')
}

func appendStringContent(b []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		if i = wordscan.SafeEnd(s, i); i == len(s) {
			break
		}
		if c := s[i]; c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(b, s[start:]...)
}

// AppendJSONRaw appends a raw JSON value as encoding/json writes a
// json.RawMessage: compacted, HTML characters escaped. Values that need
// neither (most) are copied as they are.
func AppendJSONRaw(b []byte, raw []byte) []byte {
	if wordscan.RawEnd(raw, 0) == len(raw) {
		return append(b, raw...)
	}
	var c, h bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		return append(b, raw...)
	}
	json.HTMLEscape(&h, c.Bytes())
	return append(b, h.Bytes()...)
}

// AppendTimestamp appends Timestamp(t) (RFC 3339, UTC, milliseconds).
func AppendTimestamp(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, '-')
	}
	// The date from the day number (the proleptic Gregorian calendar, in
	// 400-year eras): one pass, where Date and Clock each take their own.
	secs := t.Unix()
	days := secs / 86400
	if secs%86400 < 0 {
		days--
	}
	rem := int(secs - days*86400)
	h, mi, sec := rem/3600, rem/60%60, rem%60
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := int(z - era*146097)
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d, mo, y := doy-(153*mp+2)/5+1, mp+3, int(era)*400+yoe
	if mo > 12 {
		mo -= 12
	}
	if mo <= 2 {
		y++
	}
	if y < 0 || y > 9999 {
		return t.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z")
	}
	ms := t.Nanosecond() / int(time.Millisecond)
	two := func(b []byte, n int) []byte { return append(b, byte('0'+n/10), byte('0'+n%10)) }
	b = append(b, byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10), '-')
	b = append(two(b, mo), '-')
	b = append(two(b, d), 'T')
	b = append(two(b, h), ':')
	b = append(two(b, mi), ':')
	b = append(two(b, sec), '.')
	return append(b, byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
}
