package client

import (
	"context"
	"sync/atomic"
)

// Meter counts the requests and bytes of the calls made with a context
// carrying it (WithMeter), so a command can say what it cost.
type Meter struct {
	requests atomic.Int64
	bytes    atomic.Int64
	last     atomic.Pointer[string]
}

// Last is the latest call sent, "GET http://host/api/v1/…" (redacted),
// or "" before the first: what a pass that overran was waiting on.
func (m *Meter) Last() string {
	if p := m.last.Load(); p != nil {
		return *p
	}
	return ""
}

// Requests is the number of HTTP requests sent.
func (m *Meter) Requests() int { return int(m.requests.Load()) }

// Bytes is the number of body bytes read.
func (m *Meter) Bytes() int64 { return m.bytes.Load() }

type meterKey struct{}

// WithMeter returns a context whose calls are counted by m (and by any
// meter ctx already carries).
func WithMeter(ctx context.Context, m *Meter) context.Context {
	ms, _ := ctx.Value(meterKey{}).([]*Meter)
	return context.WithValue(ctx, meterKey{}, append(append([]*Meter(nil), ms...), m))
}

func meters(ctx context.Context) []*Meter {
	ms, _ := ctx.Value(meterKey{}).([]*Meter)
	return ms
}
