// Package duration reads the durations dlqctl takes from people: Go's
// (90m, 4h, 1h30m) plus a day unit (2d, 1d12h).
package duration

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Max is the longest duration there is (about 292 years): one limit for
// every spelling, so 106751d and 2562047h are both read, and one past
// either is refused with the same words.
const Max = time.Duration(math.MaxInt64)

const day = 24 * time.Hour

// ErrTooLong: the duration is longer than Max.
var ErrTooLong = errors.New("longer than the longest dlqctl counts, " + String(Max) + " (about 292 years)")

// Parse reads a duration as dlqctl's flags and config file write
// them: Go durations plus a day unit ("2d", "1d12h").
func Parse(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty duration")
	}
	bad := fmt.Errorf("invalid duration %q: want e.g. 90m, 4h, 2d", s)
	tooLong := fmt.Errorf("duration %q is %w", s, ErrTooLong)
	rest := s
	var days time.Duration
	if i := strings.Index(s, "d"); i > 0 {
		n, err := strconv.ParseUint(s[:i], 10, 64)
		switch {
		case err != nil && strings.Trim(s[:i], "0123456789") == "":
			return 0, tooLong // digits only: too many of them
		case err != nil || s[0] == '+':
			return 0, bad
		case n > uint64(Max/day):
			return 0, tooLong
		}
		days = time.Duration(n) * day
		if rest = s[i+1:]; rest == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(rest)
	switch {
	case err != nil && strings.Contains(err.Error(), "invalid duration") && isNumberUnit(rest):
		return 0, tooLong // time.ParseDuration says "invalid" of an overflow
	case err != nil || d < 0 || strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, "+"):
		return 0, bad
	case d > Max-days:
		return 0, tooLong
	}
	return days + d, nil
}

// isNumberUnit: s is digits and units only (an overflow, not a typo).
func isNumberUnit(s string) bool {
	return s != "" && strings.Trim(s, "0123456789.nsuµmh") == "" && strings.ContainsAny(s[:1], "0123456789")
}

// String writes d as Parse reads it, days first: 106751d23h47m16.854775807s.
func String(d time.Duration) string {
	if d < day {
		return d.String()
	}
	days, rest := d/day, d%day
	if rest == 0 {
		return strconv.FormatInt(int64(days), 10) + "d"
	}
	return strconv.FormatInt(int64(days), 10) + "d" + rest.String()
}

// Seconds is s seconds as a duration, held within what a duration can
// hold: a broker's figure (a lag, a failure time thousands of years
// away) that overflows it is the longest one, never a wrapped value.
func Seconds(s float64) time.Duration {
	const most = float64(math.MaxInt64) / float64(time.Second)
	switch {
	case math.IsNaN(s):
		return 0
	case s >= most:
		return Max
	case s <= -most:
		return -Max
	}
	return time.Duration(s * float64(time.Second))
}
