package client

import (
	"testing"
	"time"
)

// Whatever the try count, the base delay and the broker's Retry-After,
// a retry waits between nothing and 30 s, and never panics: a broker that
// refused one call 37 times in a row once crashed dlqctl (the base,
// shifted left, overflowed into a negative bound for rand.N).
func FuzzBackoff(f *testing.F) {
	f.Add(37, int64(200*time.Millisecond), int64(0))
	f.Add(1, int64(0), int64(-5))
	f.Add(1<<30, int64(1)<<62, int64(1)<<62)
	f.Add(-3, int64(-1), int64(time.Second))
	f.Fuzz(func(t *testing.T, try int, base, retryAfter int64) {
		c := &Client{opts: Options{Backoff: time.Duration(base)}}
		var last error
		if retryAfter != 0 {
			last = &HTTPError{RetryAfter: time.Duration(retryAfter)}
		}
		d := c.backoff(try, last)
		if d < 0 || d > maxRetryAfter {
			t.Fatalf("backoff(%d) with base %v, Retry-After %v = %v", try, time.Duration(base), time.Duration(retryAfter), d)
		}
	})
}
