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
//
// emit takes a chunk and gives back an empty slice to fill next: one
// whose values the caller has already taken (cleared, so it holds on to
// nothing), or a new one of the same capacity when none is back yet. A
// long stream so allocates a few chunks, not one per chunk; a producer
// must not touch a chunk after emitting it.
func Ahead[T any](ctx context.Context, depth int, produce func(ctx context.Context, emit func([]T) ([]T, bool)) error) iter.Seq2[T, error] {
	type chunk struct {
		vals []T
		err  error
	}
	return func(yield func(T, error) bool) {
		stopped, stop := context.WithCancel(ctx)
		out := make(chan chunk, depth)
		// Room for every chunk that can be in flight: the channel's, the
		// one being yielded and the one being filled.
		free := make(chan []T, depth+2)
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
			emit := func(vals []T) ([]T, bool) {
				if len(vals) == 0 {
					return vals, true
				}
				if !send(chunk{vals: vals}) {
					return nil, false
				}
				select {
				case b := <-free:
					return b, true
				default:
					return make([]T, 0, cap(vals)), true
				}
			}
			err := produce(stopped, emit)
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
			clear(c.vals)
			select {
			case free <- c.vals[:0]:
			default:
			}
		}
		// The producer ended: on its own, or because ctx did (an
		// interrupt). An interrupted stream is not a complete one.
		if err := ctx.Err(); err != nil {
			var zero T
			yield(zero, err)
		}
	}
}
