// Package wordscan finds, eight bytes at a time, where the text of a JSON
// string stops being plain: the loops that read and write a list's
// strings spend most of their time looking for such a byte and seldom
// find one.
package wordscan

import "math/bits"

const (
	ones = 0x0101010101010101
	high = 0x8080808080808080
)

// zero flags (in the high bit of its byte) the lowest byte of x that is
// zero; bytes above it may be flagged wrongly, never one below.
func zero(x uint64) uint64 { return (x - ones) &^ x & high }

// below flags the lowest byte of x under n (n ≤ 0x80), as zero does.
func below(x uint64, n byte) uint64 { return (x - ones*uint64(n)) &^ x & high }

func load[T ~string | ~[]byte](s T, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// StringEnd returns the index of the first byte of s at or after i that a
// JSON string cannot hold as it is (a quote, a backslash or a control
// character), or len(s). Bytes past ASCII are plain here.
func StringEnd[T ~string | ~[]byte](s T, i int) int {
	for ; i+8 <= len(s); i += 8 {
		x := load(s, i)
		if m := below(x, 0x20) | zero(x^(ones*'"')) | zero(x^(ones*'\\')); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			return i
		}
	}
	return i
}

// SafeEnd returns the index of the first byte of s at or after i that
// encoding/json does not write as it is: those StringEnd stops at, the
// HTML characters <, > and &, and any byte past ASCII (which the caller
// checks rune by rune), or len(s).
func SafeEnd[T ~string | ~[]byte](s T, i int) int {
	for ; i+8 <= len(s); i += 8 {
		x := load(s, i)
		// '"' (0x22) and '&' (0x26) differ in one bit, as '<' (0x3c) and
		// '>' (0x3e) do: clearing it tests each pair at once.
		m := below(x, 0x20) | zero((x^(ones*'"'))&^(ones*0x04)) | zero(x^(ones*'\\')) |
			zero((x^(ones*'<'))&^(ones*0x02)) | x&high
		if m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= 0x80 {
			return i
		}
	}
	return i
}

// RawEnd returns the index of the first byte of s at or after i that may
// make encoding/json write a raw JSON value other than as it is: a space
// or control byte (whitespace to compact), <, > or &, or 0xE2 (which
// starts U+2028 and U+2029), or len(s).
func RawEnd[T ~string | ~[]byte](s T, i int) int {
	for ; i+8 <= len(s); i += 8 {
		x := load(s, i)
		m := below(x, 0x21) | zero((x^(ones*'<'))&^(ones*0x02)) | zero(x^(ones*'&')) | zero(x^(ones*0xE2))
		if m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c == '<' || c == '>' || c == '&' || c == 0xE2 {
			return i
		}
	}
	return i
}
