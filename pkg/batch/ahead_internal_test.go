package batch

import (
	"context"
	"errors"
	"testing"
)

// readAhead gives read's results in order and ends after the last; an
// error of read's ends them with it; a context ended mid-way ends them
// with its error, never with ok and nothing; stop after an early break
// lets the reading go.
func TestReadAhead(t *testing.T) {
	upTo := func(last int, failAt int) func(context.Context, int) (int, bool, error) {
		return func(ctx context.Context, n int) (int, bool, error) {
			if n == failAt {
				return 0, false, errors.New("broken")
			}
			return n * 10, n == last, nil
		}
	}
	collect := func(next func() (int, bool, error)) ([]int, error) {
		var got []int
		for {
			v, ok, err := next()
			if err != nil || !ok {
				return got, err
			}
			got = append(got, v)
		}
	}
	next, stop := readAhead(context.Background(), upTo(3, -1))
	got, err := collect(next)
	stop()
	if err != nil || len(got) != 4 || got[0] != 0 || got[3] != 30 {
		t.Fatalf("all: %v %v", got, err)
	}
	if _, ok, err := next(); ok || err != nil {
		t.Fatalf("after the last: ok %v, %v", ok, err)
	}

	next, stop = readAhead(context.Background(), upTo(9, 2))
	got, err = collect(next)
	stop()
	if err == nil || err.Error() != "broken" || len(got) != 2 {
		t.Fatalf("failing at 2: %v %v", got, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	next, stop = readAhead(ctx, func(ctx context.Context, n int) (int, bool, error) {
		if n == 2 {
			cancel()
			<-ctx.Done()
		}
		return n, false, nil
	})
	got, err = collect(next)
	stop()
	if !errors.Is(err, context.Canceled) || len(got) != 2 {
		t.Fatalf("cancelled at 2: %v %v", got, err)
	}

	// A caller that stops after the first lets a reading that would go on
	// forever go.
	next, stop = readAhead(context.Background(), upTo(-1, -1))
	if v, ok, err := next(); v != 0 || !ok || err != nil {
		t.Fatalf("first: %v %v %v", v, ok, err)
	}
	stop()
}
