package replay

import (
	"context"
	"sort"
	"time"
)

// pace waits for the pausers and the rate limiter before an address's
// first call that changes the broker: addresses settled from the journal
// or the list cost nothing. An interrupt while waiting leaves the address
// not started.
func (e *Engine) pace(ctx context.Context) error {
	if ctx.Err() != nil || e.stopped() {
		return errNotStarted
	}
	if err := e.waitPausers(ctx); err != nil {
		return errNotStarted
	}
	if err := e.lim.Wait(ctx); err != nil {
		return errNotStarted
	}
	if e.stopped() {
		return errNotStarted
	}
	return nil
}

// waitPausers returns once no pauser holds the run back. While one is closed, the
// pause is timed and announced once (again when its reason changes).
func (e *Engine) waitPausers(ctx context.Context) error {
	for len(e.o.Pausers) > 0 {
		why, kind, recheck := e.askPausers(ctx)
		if why == "" {
			e.endPause()
			return nil
		}
		e.beginPause(kind, why)
		if err := e.o.Sleep(ctx, max(recheck, 10*time.Millisecond)); err != nil {
			return err
		}
		if e.stopped() {
			return errNotStarted
		}
	}
	return nil
}

func (e *Engine) askPausers(ctx context.Context) (why, kind string, recheck time.Duration) {
	e.pauseMu.Lock()
	defer e.pauseMu.Unlock()
	now := e.o.Now()
	for _, g := range e.o.Pausers {
		if why, recheck := g.Closed(ctx, now); why != "" {
			return why, g.Kind(), recheck
		}
	}
	return "", "", 0
}

func (e *Engine) beginPause(kind, why string) {
	e.mu.Lock()
	now := e.o.Now()
	if !e.pausedSince.IsZero() && e.pausedKind != kind {
		e.closePauseLocked(now)
	}
	changed := e.pausedWhy != why
	if e.pausedSince.IsZero() {
		e.pausedSince, e.pausedKind = now, kind
		if e.pauses == nil {
			e.pauses = map[string]*Pause{}
		}
		p := e.pauses[kind]
		if p == nil {
			p = &Pause{Kind: kind}
			e.pauses[kind] = p
		}
		p.Times++
	}
	e.pausedWhy = why
	e.pauses[kind].Last = why
	e.mu.Unlock()
	if changed && e.o.Paused != nil {
		e.o.Paused(why)
	}
}

func (e *Engine) endPause() {
	e.mu.Lock()
	was := !e.pausedSince.IsZero()
	if was {
		e.closePauseLocked(e.o.Now())
	}
	e.mu.Unlock()
	if was && e.o.Paused != nil {
		e.o.Paused("")
	}
}

func (e *Engine) closePauseLocked(now time.Time) {
	p := e.pauses[e.pausedKind]
	p.For += now.Sub(e.pausedSince)
	p.Seconds = p.For.Seconds()
	e.pausedSince, e.pausedKind, e.pausedWhy = time.Time{}, "", ""
}

func (e *Engine) pauseList() []Pause {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Pause
	for _, p := range e.pauses {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}
