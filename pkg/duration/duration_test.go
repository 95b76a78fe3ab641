package duration

import (
	"math"
	"strings"
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

// One limit for every spelling: the longest duration is read however it
// is written, and anything past it is refused with the same words.
func TestOneLimitForEverySpelling(t *testing.T) {
	for _, s := range []string{"106751d", "2562047h", "106751d23h", "153722867m", "106751d23h47m16s", "2562047h47m16.854775807s"} {
		if _, err := Parse(s); err != nil {
			t.Errorf("%s refused: %v", s, err)
		}
	}
	for _, s := range []string{"106752d", "2562048h", "106751d24h", "106751d23h47m17s", "99999999999999999999d", "9999999999999999999h"} {
		_, err := Parse(s)
		if err == nil || !strings.Contains(err.Error(), "longer than the longest dlqctl counts, 106751d23h47m16.854775807s") {
			t.Errorf("%s: %v, want it refused as too long", s, err)
		}
	}
	if got := String(Max); got != "106751d23h47m16.854775807s" {
		t.Errorf("String(Max) = %s", got)
	}
}

func TestSecondsStayWithinADuration(t *testing.T) {
	for s, want := range map[float64]time.Duration{
		1.5: 1500 * time.Millisecond, -2: -2 * time.Second, 9223372036.854776: Max, 1e300: Max, -1e300: -Max, math.Inf(1): Max, math.NaN(): 0,
	} {
		if got := Seconds(s); got != want {
			t.Errorf("Seconds(%v) = %v, want %v", s, got, want)
		}
	}
}
