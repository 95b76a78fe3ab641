// Package exporter is what `dlqctl exporter` serves: a background pass
// evaluates exactly what `dlq check` evaluates (pkg/gate, with the
// config's policies and the ledger's decisions), adds the failure
// classes and the running batches, and swaps the result in whole as an
// immutable Snapshot; a prometheus.Collector builds the metrics from the
// current snapshot at scrape time. Scrapes never reach the broker or the
// ledger, so how often Prometheus scrapes never changes the broker's load,
// and a broker or ledger that is down leaves the last known values in
// place with dlqctl_broker_up or dlqctl_ledger_up at 0.
package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/gate"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/policy"
)

// Config is what the exporter evaluates, and how often.
type Config struct {
	Client *client.Client
	// Ledger opens the ledger. It is called again after a failure, so a
	// ledger that is down when the exporter starts is picked up when it
	// comes back.
	Ledger   func(context.Context) (*ledger.Store, error)
	Policies policy.Set
	// Now is the clock the verdicts are judged at.
	Now func() time.Time
	// Interval is the time from one pass's start to the next's.
	Interval time.Duration
	// PassTimeout bounds one pass; zero means five intervals.
	PassTimeout time.Duration
	// Sync mirrors the DLQ into the archive each pass, as dlq sync does,
	// so rows that vanish with no decision are seen continuously.
	Sync bool
	// MaxClasses bounds the failure-class series: the classes with the
	// most rows are exported one by one, the rest summed per queue as
	// class "other". Zero exports none.
	MaxClasses int
	// AllScopes also exports the scopes with no dead letter that no
	// policy names (check's --all-scopes).
	AllScopes bool
	// Version and Revision label dlqctl_build_info.
	Version, Revision string
	Logger            *slog.Logger
}

// Snapshot is one pass's outcome. The values (Check, Classes, Batches)
// are those of the last pass that succeeded; the health fields are the
// latest pass's. A snapshot is never changed once stored.
type Snapshot struct {
	Check *gate.Result
	// Classes are known only when the pass read every row (a broker that
	// answers in one body, or Sync): a paging broker is probed, not read.
	Classes      []ClassDepth
	ClassesKnown bool
	Batches      []BatchProgress

	BrokerUp, LedgerUp bool
	// LastSuccess is when the last successful pass evaluated (zero before
	// the first); LastPass, when the latest pass did.
	LastSuccess, LastPass time.Time
	LastDuration          time.Duration
	// LastError is the latest pass's error, "" when it succeeded. It
	// carries no credential: the client and the ledger redact theirs.
	LastError string
}

// Exporter runs passes and serves their snapshots.
type Exporter struct {
	cfg  Config
	snap atomic.Pointer[Snapshot]

	// Cumulative counters for the exporter's own health.
	passesOK, passesFailed atomic.Int64
	requests, bytes        atomic.Int64
	started                time.Time

	mu sync.Mutex // guards ld (the pass loop and Close)
	ld *ledger.Store

	storeMu sync.Mutex // orders a pass's snapshot and its overrun's

}

// New is an exporter that has not run a pass yet: its snapshot says the
// broker and ledger are not known to be up.
func New(cfg Config) *Exporter {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PassTimeout <= 0 {
		cfg.PassTimeout = 5 * cfg.Interval
	}
	e := &Exporter{cfg: cfg, started: time.Now()}
	e.snap.Store(&Snapshot{})
	return e
}

// Snapshot is the current snapshot.
func (e *Exporter) Snapshot() *Snapshot { return e.snap.Load() }

// Run passes every interval until ctx is done. A pass that outlasts the
// interval is followed at once by the next; passes never overlap.
func (e *Exporter) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		_ = e.Pass(ctx)
		t.Reset(max(0, e.cfg.Interval-time.Since(start)))
	}
}

// Close releases the ledger.
func (e *Exporter) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ld != nil {
		e.ld.Close()
		e.ld = nil
	}
}

// Pass evaluates once and stores the new snapshot, whatever the outcome.
func (e *Exporter) Pass(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.PassTimeout)
	defer cancel()
	m := &client.Meter{}
	ctx = client.WithMeter(ctx, m)
	// A broker that was unresponsive in the last pass is asked again:
	// the client's breaker is for one command, not for a process's life.
	e.cfg.Client.ResetUnresponsive()
	t0 := time.Now()
	now := e.cfg.Now()
	var done bool // under e.storeMu: the pass stored its own snapshot
	if e.cfg.Interval > 0 {
		overrun := time.AfterFunc(e.cfg.Interval, func() {
			e.storeMu.Lock()
			defer e.storeMu.Unlock()
			if !done {
				e.overran(m)
			}
		})
		defer overrun.Stop()
	}
	v, st, err := e.evaluate(ctx, now)
	e.requests.Add(int64(m.Requests()))
	e.bytes.Add(m.Bytes())

	e.storeMu.Lock()
	defer e.storeMu.Unlock()
	done = true
	prev := e.snap.Load()
	next := *prev
	next.LastPass, next.LastDuration = now, time.Since(t0)
	next.BrokerUp, next.LedgerUp = st.brokerUp, st.ledgerUp
	if err == nil {
		e.passesOK.Add(1)
		next.Check, next.Classes, next.ClassesKnown, next.Batches = v.check, v.classes, v.classesKnown, v.batches
		next.LastSuccess, next.LastError = now, ""
	} else {
		e.passesFailed.Add(1)
		next.LastError = e.cfg.Client.Redact(err.Error())
	}
	e.snap.Store(&next)
	e.logChange(prev, &next, err)
	return err
}

// overran marks the broker down while a pass runs past its interval: a
// broker that stops answering is down from the next pass on, not only
// once PassTimeout cuts the pass short. The pass that finishes sets it
// again from what it learnt.
func (e *Exporter) overran(m *client.Meter) {
	next := *e.snap.Load()
	next.BrokerUp = false
	call := m.Last()
	if call == "" {
		call = "none yet"
	}
	next.LastError = e.cfg.Client.Redact(fmt.Sprintf("the pass has run past its %s interval with %s; its latest call: %s", e.cfg.Interval, e.cfg.Client.Broker(), call))
	e.snap.Store(&next)
	e.cfg.Logger.Warn("pass overran its interval; broker marked down", "err", next.LastError)
}

// values are what a successful pass exports.
type values struct {
	check        *gate.Result
	classes      []ClassDepth
	classesKnown bool
	batches      []BatchProgress
}

// health is what a pass learnt of the broker and the ledger.
type health struct{ brokerUp, ledgerUp bool }

func (e *Exporter) evaluate(ctx context.Context, now time.Time) (values, health, error) {
	var st health
	cl := e.cfg.Client
	ld, err := e.ledger(ctx)
	if err != nil {
		st.brokerUp = e.brokerAnswers(ctx)
		return values{}, st, err
	}
	broker := cl.Broker()
	batches, refail, err := activeBatches(ctx, ld, broker)
	if err != nil {
		return values{}, e.ledgerFailed(ctx, err), err
	}
	tally := newClassTally(cl.Redact)
	visit := func(r deadletter.Row) {
		tally.add(r)
		refail.row(r)
	}
	in := gate.Input{Policies: e.cfg.Policies, Now: now, AllScopes: e.cfg.AllScopes, Visit: visit}
	if e.cfg.Sync {
		// The sync's read is the gate's: one read of the DLQ a pass, and
		// what left is known once it is done.
		in.ReadAll = func(ctx context.Context, visit func(deadletter.Row)) error {
			_, err := inspect.SyncEach(ctx, cl, ld, "", e.cfg.Now, visit)
			return err
		}
	}
	// The check dlq check makes, its notes (a ledger that lost its
	// history) included.
	res, err := gate.Evaluate(ctx, cl, ld, in)
	if err != nil {
		return values{}, e.failed(ctx, err), err
	}
	st.ledgerUp = true
	st.brokerUp = true
	whole := res.ReadWhole
	v := values{check: res, classesKnown: whole, batches: batches}
	if whole {
		v.classes = tally.top(e.cfg.MaxClasses)
		refail.settle(v.batches)
	}
	return v, st, nil
}

// failed says which side an error came from: the ledger's are marked as
// such, every other is the broker's.
func (e *Exporter) failed(ctx context.Context, err error) health {
	if isLedgerError(err) {
		return e.ledgerFailed(ctx, err)
	}
	return health{ledgerUp: true}
}

// ledgerFailed drops the ledger (it is opened again next pass) and asks
// the broker whether it, at least, is up.
func (e *Exporter) ledgerFailed(ctx context.Context, err error) health {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return health{}
	}
	e.Close()
	return health{brokerUp: e.brokerAnswers(ctx)}
}

func isLedgerError(err error) bool {
	return errors.Is(err, ledger.ErrUnavailable) || errors.Is(err, ledger.ErrBadDSN)
}

// brokerAnswers asks the broker's health route, for a pass that could not
// get as far as reading the DLQ.
func (e *Exporter) brokerAnswers(ctx context.Context) bool {
	_, err := e.cfg.Client.Health(ctx)
	return err == nil
}

// ledger is the open ledger, opened again when the SQLite file it held
// was removed or replaced at its path: a process that stays up would
// otherwise judge a file no other command reads.
func (e *Exporter) ledger(ctx context.Context) (*ledger.Store, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ld != nil {
		how := e.ld.Replaced()
		if how == "" {
			return e.ld, nil
		}
		e.cfg.Logger.Warn("ledger file "+how+" since it was opened; opening it again", "ledger", e.ld.String())
		e.ld.Close()
		e.ld = nil
	}
	ld, err := e.cfg.Ledger(ctx)
	if err != nil {
		return nil, err
	}
	if h := ld.LostOnOpen(); h != nil {
		e.cfg.Logger.Warn(h.String(), "ledger", ld.String())
	}
	e.ld = ld
	return ld, nil
}

// logChange logs what an operator needs in the exporter's log: a pass
// that failed, and the broker or the ledger coming back. A steady run of
// good passes logs nothing (their figures are in /metrics).
func (e *Exporter) logChange(prev, next *Snapshot, err error) {
	log := e.cfg.Logger
	switch {
	case err != nil:
		log.Warn("pass failed", "broker_up", next.BrokerUp, "ledger_up", next.LedgerUp, "err", next.LastError, "duration", next.LastDuration.Round(time.Millisecond))
	case prev.LastPass.IsZero() || prev.LastError != "":
		breaches := 0
		for _, s := range next.Check.Scopes {
			if len(s.Breaches) > 0 {
				breaches++
			}
		}
		log.Info("pass succeeded", "scopes", len(next.Check.Scopes), "breaching", breaches, "requests", next.Check.Requests, "bytes", next.Check.Bytes, "duration", next.LastDuration.Round(time.Millisecond))
	default:
		log.Debug("pass succeeded", "duration", next.LastDuration.Round(time.Millisecond))
	}
}
