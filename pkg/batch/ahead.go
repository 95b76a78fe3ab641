package batch

import (
	"context"
	"errors"
)

// readAhead reads ahead of its caller: read(ctx, 0), read(ctx, 1), … run
// on another goroutine, one result held ready while the caller works on
// the one before, until read says it gave the last one or fails. next
// gives the results in order, and ok false once the last was given; an
// error of read's, or the context's when it ended the reading, ends them.
// stop ends the reading and waits for it: call it once done (a defer).
func readAhead[T any](ctx context.Context, read func(ctx context.Context, n int) (v T, last bool, err error)) (next func() (v T, ok bool, err error), stop func()) {
	type result struct {
		v    T
		last bool
		err  error
	}
	ctx, cancel := context.WithCancel(ctx)
	results := make(chan result, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(results)
		for n := 0; ; n++ {
			v, last, err := read(ctx, n)
			if ctx.Err() != nil {
				return // what was read under an ended context is not given
			}
			select {
			case results <- result{v, last, err}:
			case <-ctx.Done():
				return
			}
			if last || err != nil {
				return
			}
		}
	}()
	ended := false
	next = func() (T, bool, error) {
		var zero T
		if ended {
			return zero, false, nil
		}
		r, open := <-results
		switch {
		case !open:
			// The reading stopped before its last: the context ended it.
			ended = true
			if err := ctx.Err(); err != nil {
				return zero, false, err
			}
			return zero, false, errors.New("the reads stopped early")
		case r.err != nil:
			ended = true
			return zero, false, r.err
		}
		ended = r.last
		return r.v, true, nil
	}
	stop = func() {
		cancel()
		<-done
	}
	return next, stop
}
