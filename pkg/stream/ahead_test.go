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
	produce := func(ctx context.Context, emit func([]int) ([]int, bool)) error {
		for i := 0; i < 100; i += 10 {
			chunk := make([]int, 10)
			for k := range chunk {
				chunk[k] = i + k
			}
			if _, ok := emit(chunk); !ok {
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
	early := func(ctx context.Context, emit func([]int) ([]int, bool)) error {
		for i := 0; ; i++ {
			if _, ok := emit([]int{i}); !ok {
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

// A producer that fills the slices emit gives back allocates a few
// chunks for a long stream, and no value is overwritten before the
// caller has taken it.
func TestAheadRecyclesChunks(t *testing.T) {
	const chunks, size = 2000, 16
	arrays := map[*int]bool{}
	produce := func(ctx context.Context, emit func([]int) ([]int, bool)) error {
		buf := make([]int, 0, size)
		for i := 0; i < chunks*size; i++ {
			buf = append(buf, i)
			if len(buf) == size {
				arrays[&buf[0]] = true
				var ok bool
				if buf, ok = emit(buf); !ok {
					return ctx.Err()
				}
				if len(buf) != 0 || cap(buf) != size {
					return errors.New("emit gave back a slice that is not empty or not of the chunk's capacity")
				}
			}
		}
		return nil
	}
	want := 0
	for v, err := range Ahead(context.Background(), 3, produce) {
		if err != nil {
			t.Fatal(err)
		}
		if v != want {
			t.Fatalf("value %d came as %d: a chunk was reused before it was read", want, v)
		}
		want++
	}
	if want != chunks*size {
		t.Fatalf("got %d values, want %d", want, chunks*size)
	}
	if len(arrays) > 3+2+1 {
		t.Fatalf("%d chunks allocated for %d emitted: want them recycled (at most depth+3)", len(arrays), chunks)
	}
}

// A stream its context ended (an interrupt) ends with the context's
// error after the values it had, never as if it were complete.
func TestAheadInterruptedEndsWithTheError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	seq := Ahead(ctx, 2, func(ctx context.Context, emit func([]int) ([]int, bool)) error {
		for i := 0; ; i++ {
			if i == 3 {
				cancel()
			}
			if _, ok := emit([]int{i}); !ok {
				return nil
			}
		}
	})
	var last error
	n := 0
	for _, err := range seq {
		if err != nil {
			last = err
			break
		}
		n++
	}
	if !errors.Is(last, context.Canceled) {
		t.Fatalf("after %d values: %v, want context.Canceled", n, last)
	}
}
