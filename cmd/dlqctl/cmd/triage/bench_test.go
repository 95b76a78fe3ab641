package triage

import (
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testutil"
)

// BenchmarkTriage100k is the screen on 100,000 dead letters: how soon the
// first classes are drawn, how fast the rows are taken in, and what a
// frame and a key press cost once they are (the screen must keep up with
// a key held down).
func BenchmarkTriage100k(b *testing.B) {
	const n = 100_000
	br := sandbox.New(func() time.Time { return testutil.Now })
	br.Fill(n, 1)

	b.Run("load", func(b *testing.B) {
		var first, total time.Duration
		for b.Loop() {
			start := time.Now()
			w := openWorld(b, br, false)
			w.until(func() bool { return len(w.m.groups) > 0 })
			first += time.Since(start)
			w.settle()
			total += time.Since(start)
			if w.m.rows.Len() != n {
				b.Fatalf("loaded %d rows", w.m.rows.Len())
			}
		}
		b.ReportMetric(float64(first.Milliseconds())/float64(b.N), "ms-to-first-classes")
		b.ReportMetric(float64(n*b.N)/total.Seconds(), "rows/s")
	})

	w := openWorld(b, br, true)
	w.settle()
	b.Run("frame-classes", func(b *testing.B) {
		for b.Loop() {
			_ = w.m.render()
		}
	})
	w.keys("enter")
	b.ReportMetric(float64(len(w.m.rowView)), "rows-in-class")
	b.Run("key-and-frame-rows", func(b *testing.B) {
		for b.Loop() {
			w.send(keyPress("down"))
			_ = w.m.render()
		}
		b.ReportMetric(float64(len(w.m.rowView)), "rows-in-class")
	})
	b.Run("filter-keystroke", func(b *testing.B) {
		w.keys("/")
		for b.Loop() {
			w.send(keyPress("x"))
			w.send(keyPress("backspace"))
			_ = w.m.render()
		}
	})
}
