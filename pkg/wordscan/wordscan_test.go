package wordscan

import (
	"strings"
	"testing"
)

// The byte-at-a-time definitions the word loops must agree with.
func stringEndRef(s string, i int) int {
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			return i
		}
	}
	return i
}

func safeEndRef(s string, i int) int {
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= 0x80 {
			return i
		}
	}
	return i
}

func rawEndRef(s string, i int) int {
	for ; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c == '<' || c == '>' || c == '&' || c == 0xE2 {
			return i
		}
	}
	return i
}

// agree checks each word loop against its byte loop on s from from, the
// text as a string and as bytes.
func agree(t *testing.T, s string, from int) {
	t.Helper()
	b := []byte(s)
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"StringEnd", StringEnd(s, from), stringEndRef(s, from)},
		{"StringEnd []byte", StringEnd(b, from), stringEndRef(s, from)},
		{"SafeEnd", SafeEnd(s, from), safeEndRef(s, from)},
		{"SafeEnd []byte", SafeEnd(b, from), safeEndRef(s, from)},
		{"RawEnd", RawEnd(s, from), rawEndRef(s, from)},
		{"RawEnd []byte", RawEnd(b, from), rawEndRef(s, from)},
	} {
		if c.got != c.want {
			t.Fatalf("%s(%q, %d) = %d, want %d", c.name, s, from, c.got, c.want)
		}
	}
}

// Every byte value at every place of a word, after every other byte value
// (a borrow from the byte below must not hide or invent a stop).
func TestEveryByteEverywhere(t *testing.T) {
	for c := 0; c < 256; c++ {
		for prev := 0; prev < 256; prev++ {
			for at := 0; at < 17; at++ {
				b := []byte(strings.Repeat("a", 20))
				if at > 0 {
					b[at-1] = byte(prev)
				}
				b[at] = byte(c)
				agree(t, string(b), 0)
				agree(t, string(b), at)
			}
		}
	}
}

func FuzzAgreesWithTheByteLoop(f *testing.F) {
	f.Add("plain text of a failure, then a \"quote\"", 3)
	f.Add("<html> & \x00 \u2028 é", 0)
	f.Fuzz(func(t *testing.T, s string, from int) {
		if from >= 0 && from <= len(s) {
			agree(t, s, from)
		}
	})
}

func BenchmarkSafeEnd(b *testing.B) {
	s := "upstream timeout after 30s calling payments-api (order 4711, attempt 3)"
	b.SetBytes(int64(len(s)))
	b.Run("words", func(b *testing.B) {
		for range b.N {
			SafeEnd(s, 0)
		}
	})
	b.Run("bytes", func(b *testing.B) {
		for range b.N {
			safeEndRef(s, 0)
		}
	})
}
