// Package stream runs the producing side of an iteration ahead of the
// side that uses it.
package stream

import (
	"context"
	"iter"
)

// Ahead yields the values produce emits, chunk by chunk, produced in a
// goroutine up to depth chunks ahead of the caller: reading (pages of a
// list, lookups for them) and using the values overlap. An error produce
// returns comes after every value it emitted before it. A caller that
// stops early cancels the context produce is given (emit then reports
// false), and Ahead returns only once produce has.
func Ahead[T any](ctx context.Context, depth int, produce func(ctx context.Context, emit func([]T) bool) error) iter.Seq2[T, error] {
	type chunk struct {
		vals []T
		err  error
	}
	return func(yield func(T, error) bool) {
		stopped, stop := context.WithCancel(ctx)
		out := make(chan chunk, depth)
		go func() {
			defer close(out)
			send := func(c chunk) bool {
				select {
				case out <- c:
					return true
				case <-stopped.Done():
					return false
				}
			}
			err := produce(stopped, func(vals []T) bool { return len(vals) == 0 || send(chunk{vals: vals}) })
			if err != nil && stopped.Err() == nil {
				send(chunk{err: err})
			}
		}()
		defer func() {
			stop()
			for range out { // wait for produce to end
			}
		}()
		for c := range out {
			for _, v := range c.vals {
				if !yield(v, nil) {
					return
				}
			}
			if c.err != nil {
				var zero T
				yield(zero, c.err)
				return
			}
		}
	}
}
