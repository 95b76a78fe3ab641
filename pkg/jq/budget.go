package jq

import (
	"context"
	"errors"
	"fmt"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Every evaluation runs under a context of its own, which a watchdog
// cancels when the evaluation runs longer than its budget or the heap
// grows past its budget above where it stood when the evaluation began
// (gojq checks its context at every step). The watchdog samples the heap
// every few milliseconds, and only while evaluations are running: it is
// one goroutine for the process, since the heap is the process's.

var (
	errOverTime = errors.New("ran too long")
	errOverHeap = errors.New("grew the heap too far")
)

// over is why the watchdog stopped an evaluation.
type over struct {
	kind error
	how  string
}

func (o *over) Error() string { return o.how }
func (o *over) Unwrap() error { return o.kind }

// tick is how often the watchdog looks.
const tick = 5 * time.Millisecond

type evaluation struct {
	cancel context.CancelCauseFunc
	start  time.Time
	heap   uint64 // the heap when it began
	budget Budget
}

var dog struct {
	mu      sync.Mutex
	active  map[*evaluation]struct{}
	running bool
	heap    atomic.Uint64 // the last sample
}

// watch starts an evaluation under budget b: its context, and done to
// call when it ends.
func watch(parent context.Context, b Budget) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ev := &evaluation{cancel: cancel, start: time.Now(), budget: b}
	dog.mu.Lock()
	if dog.active == nil {
		dog.active = map[*evaluation]struct{}{}
	}
	if !dog.running {
		dog.running = true
		dog.heap.Store(heapBytes())
		go watchdog()
	}
	ev.heap = dog.heap.Load()
	dog.active[ev] = struct{}{}
	dog.mu.Unlock()
	return ctx, func() {
		dog.mu.Lock()
		delete(dog.active, ev)
		dog.mu.Unlock()
		cancel(nil)
	}
}

// watchdog stops the evaluations over their budget until none has run
// for a while.
func watchdog() {
	idle := 0
	t := time.NewTicker(tick)
	defer t.Stop()
	for range t.C {
		heap := heapBytes()
		dog.heap.Store(heap)
		now := time.Now()
		dog.mu.Lock()
		if len(dog.active) == 0 {
			if idle++; idle > 20 {
				dog.running = false
				dog.mu.Unlock()
				return
			}
		} else {
			idle = 0
		}
		for ev := range dog.active {
			switch {
			case ev.budget.Time > 0 && now.Sub(ev.start) > ev.budget.Time:
				ev.cancel(&over{errOverTime, fmt.Sprintf("ran longer than %s", ev.budget.Time)})
			case ev.budget.Heap > 0 && heap > ev.heap && heap-ev.heap > ev.budget.Heap:
				ev.cancel(&over{errOverHeap, fmt.Sprintf("grew the heap by more than %d MiB", ev.budget.Heap>>20)})
			}
		}
		dog.mu.Unlock()
	}
}

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
var sampleMu sync.Mutex

// heapBytes is the bytes the heap's objects take now.
func heapBytes() uint64 {
	sampleMu.Lock()
	defer sampleMu.Unlock()
	metrics.Read(heapSample)
	if heapSample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return heapSample[0].Value.Uint64()
}
