package duration

import (
	"testing"
	"time"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{"90m", "4h", "2d", "1d12h", "", "-1h", "d", "3x", "1d-2h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err == nil && d < 0 {
			t.Fatalf("%q parsed to a negative %s", s, d)
		}
	})
}

func TestParse(t *testing.T) {
	for s, want := range map[string]time.Duration{"90m": 90 * time.Minute, "2d": 48 * time.Hour, "1d12h": 36 * time.Hour} {
		if got, err := Parse(s); err != nil || got != want {
			t.Errorf("%s: %s %v", s, got, err)
		}
	}
	for _, s := range []string{"", "-1h", "soon", "1d-2h"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}
