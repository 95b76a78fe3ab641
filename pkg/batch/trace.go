package batch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// Replay lineage in the broker: on a broker that keeps traces (Queen
// 1.x, 2.x), each copy a replay or a restore publishes gets a trace event
// naming the batch, its action and reason, who decided, and the original's
// address, so Queen's console shows why a message came back. The traces are
// written beside the run, never in its way: the run hands each copy on
// without waiting (a full queue drops it, counted), as many writers as
// the run has workers post them (a trace is one call, as a copy's push
// is, so an unlimited run does not outrun them) on a client of their own (a broker that does not answer them does not
// make the run's client give up), each once, and the run waits at most
// traceDrain for the last ones. What was and was not written is in the
// report; a trace write that fails never fails the replay.

const (
	traceQueue   = 1024
	traceWriters = 2 // at the least
	traceTimeout = 5 * time.Second
	traceDrain   = 2 * time.Second
)

// TraceName is the trace name every dlqctl event carries; a batch's own
// are under TraceName + ":batch:" + its id.
const TraceName = "dlqctl"

type traceItem struct {
	orig, copy deadletter.Address
	generation int
}

type tracer struct {
	cl    *client.Client
	batch *ledger.Batch
	ch    chan traceItem
	wg    sync.WaitGroup

	written, failed atomic.Int64
	mu              sync.Mutex
	firstErr        string
}

// startTracer starts the writers, or returns nil where no trace is
// written (the broker keeps none, or --no-trace).
func startTracer(cl *client.Client, rel client.Release, st Settings, b *ledger.Batch) *tracer {
	if st.NoTrace || !rel.Traces() {
		return nil
	}
	t := &tracer{cl: cl.Aside(), batch: b, ch: make(chan traceItem, traceQueue)}
	for range max(st.Concurrency, traceWriters) {
		t.wg.Go(t.write)
	}
	return t
}

// replayed is the engine's Options.Replayed: it never waits.
func (t *tracer) replayed(orig, copy deadletter.Address, generation int) {
	if copy.PartitionID == "" {
		t.fail("the broker did not say which partition the copy went to")
		return
	}
	select {
	case t.ch <- traceItem{orig, copy, generation}:
	default:
		t.fail("the trace writers fell behind the run")
	}
}

func (t *tracer) write() {
	for it := range t.ch {
		ctx, cancel := context.WithTimeout(context.Background(), traceTimeout)
		lineage := map[string]any{"batch": t.batch.ID, "action": t.batch.Action, "why": t.batch.Why, "by": t.batch.By, "original": it.orig.String()}
		if deadletter.ActionOf(t.batch.Action).Generations {
			lineage["generation"] = it.generation
		}
		err := t.cl.Trace(ctx, client.TraceEvent{PartitionID: it.copy.PartitionID, TransactionID: it.copy.TransactionID, EventType: t.batch.Action,
			TraceNames: []string{TraceName, TraceName + ":batch:" + t.batch.ID}, Data: map[string]any{"dlqctl": lineage}})
		cancel()
		if err != nil {
			t.fail(t.cl.Redact(err.Error()))
			continue
		}
		t.written.Add(1)
	}
}

func (t *tracer) fail(why string) {
	t.failed.Add(1)
	t.mu.Lock()
	if t.firstErr == "" {
		t.firstErr = why
	}
	t.mu.Unlock()
}

// finish waits at most traceDrain for the traces handed on, and says in
// the report what was written and what was not.
func (t *tracer) finish(rep *replay.Report) {
	if t == nil {
		return
	}
	close(t.ch)
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(traceDrain):
	}
	if rep == nil {
		return
	}
	left := int64(len(t.ch))
	rep.Traced = int(t.written.Load())
	rep.TraceFailed = int(t.failed.Load() + left)
	t.mu.Lock()
	rep.TraceError = t.firstErr
	t.mu.Unlock()
	if left > 0 && rep.TraceError == "" {
		rep.TraceError = "not written before the run ended"
	}
}
