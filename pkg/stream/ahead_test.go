package stream

import (
	"context"
	"errors"
	"testing"
)

// Every value comes in order, then the error; a caller that stops early
// stops the producer.
func TestAhead(t *testing.T) {
	boom := errors.New("boom")
	produce := func(ctx context.Context, emit func([]int) bool) error {
		for i := 0; i < 100; i += 10 {
			chunk := make([]int, 10)
			for k := range chunk {
				chunk[k] = i + k
			}
			if !emit(chunk) {
				return ctx.Err()
			}
		}
		return boom
	}
	var got []int
	var gotErr error
	for v, err := range Ahead(context.Background(), 2, produce) {
		if err != nil {
			gotErr = err
			break
		}
		got = append(got, v)
	}
	if len(got) != 100 || got[99] != 99 || !errors.Is(gotErr, boom) {
		t.Fatalf("got %d values (last %v), error %v: want 0..99 then boom", len(got), got[len(got)-1], gotErr)
	}
	ended := make(chan error, 1)
	early := func(ctx context.Context, emit func([]int) bool) error {
		for i := 0; ; i++ {
			if !emit([]int{i}) {
				ended <- ctx.Err()
				return ctx.Err()
			}
		}
	}
	n := 0
	for range Ahead(context.Background(), 2, early) {
		if n++; n == 5 {
			break
		}
	}
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the producer ended with %v, want it stopped by the caller", err)
	}
}
