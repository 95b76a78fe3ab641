package render

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dustin/go-humanize"
)

// Age renders a duration the way kubectl does, but with two units past a
// day however old: 45s, 12m, 3h12m, 2d4h, 40d6h.
func Age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 10*time.Minute:
		m, s := int(d.Minutes()), int(d.Seconds())%60
		if s == 0 {
			return fmt.Sprintf("%dm", m)
		}
		return fmt.Sprintf("%dm%ds", m, s)
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		h, m := int(d.Hours()), int(d.Minutes())%60
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	}
	// Days and hours however old: 8d3h and 8d18h are a day apart.
	days, h := int64(d.Hours())/24, int64(d.Hours())%24
	if h == 0 {
		return fmt.Sprintf("%dd", days)
	}
	return fmt.Sprintf("%dd%dh", days, h)
}

// Truncate shortens s to at most n runes, ending with "…"; n <= 0 keeps it.
func Truncate(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	if n == 1 {
		return "…"
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// Timestamp is the one way dlqctl prints an instant: RFC 3339, UTC, ms.
func Timestamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// SecondsSince is now-t in seconds, exact however far apart they are
// (time.Duration saturates at about 292 years).
func SecondsSince(now, t time.Time) float64 {
	return float64(now.Unix()-t.Unix()) + float64(now.Nanosecond()-t.Nanosecond())/1e9
}

// AgeSince is the Age of t at now, without saturating.
func AgeSince(now, t time.Time) string { return AgeOfSeconds(SecondsSince(now, t)) }

// AgeOfSeconds is Age for an age given in seconds, however large.
func AgeOfSeconds(s float64) string {
	const maxSecs = float64(math.MaxInt64 / int64(time.Second))
	if s >= maxSecs {
		days, h := int64(s/86400), int64(s/3600)%24
		if h == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, h)
	}
	return Age(time.Duration(s * float64(time.Second)))
}

// Duration renders a threshold or a setting the one way dlqctl writes
// durations for people: its non-zero parts in days, hours, minutes and
// seconds (10d, 4h, 1d12h, 1h30m, 90s → 1m30s), milliseconds below a second.
func Duration(d time.Duration) string {
	if d < 0 {
		if d == math.MinInt64 {
			d++ // -d would overflow back to itself (a time far in the future)
		}
		return "-" + Duration(-d)
	}
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	var b []byte
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if n := d / u.unit; n > 0 {
			b = fmt.Appendf(b, "%d%s", n, u.name)
			d -= n * u.unit
		}
	}
	return string(b)
}

// Count writes a count for people, in thousands: 14,960.
func Count(n int) string { return humanize.Comma(int64(n)) }

// Plural is "1 thing" or "N things".
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Counts writes counts for people, largest name-order stable: "3 already
// gone, 23 replayed" (camelCase keys become words), or "-" when empty.
func Counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], Words(k)))
	}
	return strings.Join(parts, ", ")
}

// Words turns a camelCase key into lower-case words: "alreadyGone" →
// "already gone".
func Words(key string) string {
	var b strings.Builder
	for i, r := range key {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte(' ')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
