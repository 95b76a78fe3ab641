// Package duration reads the durations dlqctl takes from people: Go's
// (90m, 4h, 1h30m) plus a day unit (2d, 1d12h).
package duration

import (
	"fmt"
	"strings"
	"time"
)

// Parse reads a duration as dlqctl's flags and config file write
// them: Go durations plus a day unit ("2d", "1d12h").
func Parse(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty duration")
	}
	var days time.Duration
	if i := strings.Index(s, "d"); i > 0 {
		var n int
		// 100,000 days is past anything meant and far from int64 overflow.
		if _, err := fmt.Sscanf(s[:i], "%d", &n); err != nil || fmt.Sprint(n) != s[:i] || n < 0 || n > 100_000 {
			return 0, fmt.Errorf("invalid duration %q: want e.g. 90m, 4h, 2d", s)
		}
		days = time.Duration(n) * 24 * time.Hour
		s = s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || days+d < days {
		return 0, fmt.Errorf("invalid duration %q: want e.g. 90m, 4h, 2d", s)
	}
	return days + d, nil
}
