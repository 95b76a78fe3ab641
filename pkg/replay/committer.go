package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

type saveReq struct {
	item ledger.SaveItem
	done chan error // nil: nobody waits (a final state; see save)
}

// save journals an entry. Saves are committed by one goroutine, whatever
// is waiting in one transaction.
//
// A final state (release) other than published is written behind: the
// worker moves on without waiting, since losing it in a crash is safe.
// The address is then found pending or inflight and still claimed by a
// dead run: a manual replay re-pushes its derived id (a duplicate) and
// finds the row gone; an endpoint replay is settled by looking at the
// row. Everything else (the inflight mark before a /retry call, a
// published whose delete failed) is durable before save returns. Run
// returns only after every save is committed.
func (e *Engine) save(ctx context.Context, ent *ledger.Entry, release bool) error {
	if release && ent.State != ledger.Published {
		cp := *ent
		e.behind <- saveReq{item: ledger.SaveItem{Entry: &cp, Release: true}}
		return nil
	}
	req := saveReq{ledger.SaveItem{Entry: ent, Release: release}, make(chan error, 1)}
	e.saves <- req
	return <-req.done
}

// committer runs until both queues are closed; errors of saves nobody
// waits for are kept for Run to return. Each transaction takes every save
// a worker waits for (an intent before its call: the sooner it commits,
// the sooner the call goes out), and the written-behind ones when none
// is waited for or when they pile up. (Holding a group open for workers
// still in a broker call made bigger groups and a slower run.)
func (e *Engine) committer(ctx context.Context) {
	const most, pileUp = 256, 512
	saves, behind := e.saves, e.behind
	linger := time.NewTimer(0)
	defer linger.Stop()
	for saves != nil || behind != nil {
		var batch []saveReq
		select {
		case r, ok := <-saves:
			if !ok {
				saves = nil
				continue
			}
			batch = append(batch, r)
		case r, ok := <-behind:
			if !ok {
				behind = nil
				continue
			}
			batch = append(batch, r)
			batch = e.gatherBehind(&saves, &behind, batch, linger)
		}
		batch = takeReady(&saves, batch, most)
		if !slices.ContainsFunc(batch, func(r saveReq) bool { return r.done != nil }) || len(e.behind) >= pileUp {
			batch = takeReady(&behind, batch, 2*most)
		}
		e.commit(ctx, batch)
	}
}

// takeReady adds to batch the saves ch holds ready, up to n in all; a
// closed ch is set to nil.
func takeReady(ch *chan saveReq, batch []saveReq, n int) []saveReq {
	for len(batch) < n && *ch != nil {
		select {
		case r, ok := <-*ch:
			if !ok {
				*ch = nil
				return batch
			}
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// commit saves a batch of journal writes in one transaction, and tells
// each waiter its answer; a written-behind save that fails stops the run
// (nothing more is published once the journal cannot keep up).
func (e *Engine) commit(ctx context.Context, batch []saveReq) {
	items := make([]ledger.SaveItem, len(batch))
	for i, r := range batch {
		items[i] = r.item
	}
	errs := e.j.SaveMany(ctx, items, e.o.Owner, e.o.Now())
	for i, r := range batch {
		switch {
		case r.done != nil:
			r.done <- errs[i]
		case errs[i] != nil && e.behindErr == nil:
			e.behindErr = errs[i]
			e.stop("ledger error: " + errs[i].Error())
		}
	}
}

// behindLinger and behindFew: a written-behind save waits up to
// behindLinger for behindFew others before it is committed. Nobody waits
// for it, and a transaction costs as much as dozens of its statements:
// committed as they came, one or two at a time, the saves of an
// unlimited manual replay took a third of its time.
const (
	behindLinger = 20 * time.Millisecond
	behindFew    = 128
)

// gatherBehind adds written-behind saves to batch until there are
// behindFew, a save someone waits for arrives (it goes in too, and the
// batch is committed at once), behindLinger passes, or the queues close.
func (e *Engine) gatherBehind(saves, behind *chan saveReq, batch []saveReq, linger *time.Timer) []saveReq {
	linger.Reset(behindLinger)
	defer linger.Stop()
	for len(batch) < behindFew && *behind != nil {
		select {
		case r, ok := <-*behind:
			if !ok {
				*behind = nil
				return batch
			}
			batch = append(batch, r)
		case r, ok := <-*saves:
			if !ok {
				*saves = nil
			} else {
				batch = append(batch, r)
			}
			return batch
		case <-linger.C:
			return batch
		}
	}
	return batch
}

// settle records a final state, releases the claim and counts the outcome
// (and, when the count says this run removed the address, its rows).
func (e *Engine) settle(ctx context.Context, ent *ledger.Entry, state, outcome, lastErr string, count func(r *Report)) error {
	ent.State, ent.Outcome, ent.LastError = state, outcome, lastErr
	if err := e.save(ctx, ent, true); err != nil {
		return err
	}
	if state != ledger.Failed {
		e.heard(nil)
	}
	e.mu.Lock()
	removed := e.rep.Replayed + e.rep.Duplicate + e.rep.Discarded
	published := e.rep.Replayed + e.rep.Duplicate + e.rep.Restored + e.rep.Imported
	count(&e.rep)
	if e.rep.Replayed+e.rep.Duplicate+e.rep.Discarded > removed {
		e.rep.RowsRemoved += e.rows[ent.Address]
	}
	// Published by this run (or by an attempt of the batch's that died
	// before it could say so): a copy an earlier run settled is already
	// in the lineage, and is not told again.
	now := e.rep.Replayed+e.rep.Duplicate+e.rep.Restored+e.rep.Imported > published
	e.mu.Unlock()
	if now && (outcome == deadletter.OutcomeReplayed || outcome == deadletter.OutcomeRestored || outcome == deadletter.OutcomeImported) && ent.ReplayTxID != "" && e.o.Replayed != nil {
		part := ent.ReplayPartitionID
		if part == "" && !ent.Address.Foreign() {
			part = ent.Address.PartitionID // in place: the original's partition
		}
		e.o.Replayed(ent.Address, deadletter.Address{PartitionID: part, TransactionID: ent.ReplayTxID}, ent.Generation+1)
	}
	if state == ledger.Failed {
		e.mu.Lock()
		e.failed++
		over := e.o.MaxFailures > 0 && e.failed >= e.o.MaxFailures
		e.mu.Unlock()
		if over {
			e.stopFor(fmt.Sprintf("stopped after %d failure(s), the batch's limit", e.o.MaxFailures), FailureLimitNext)
		}
	}
	return nil
}

// fail records a failed address (retryable by a later run); an
// authentication or permission refusal stops the batch, since every other
// call would be refused too.
func (e *Engine) fail(ctx context.Context, ent *ledger.Entry, reason string, err error) error {
	e.stopOnRefusal(err)
	if errors.Is(err, client.ErrUnauthorized) || errors.Is(err, client.ErrForbidden) {
		e.mu.Lock()
		e.rep.AuthRefused = true
		e.mu.Unlock()
		e.stop("the broker refused the token: " + err.Error())
	}
	if serr := e.settle(ctx, ent, ledger.Failed, "", err.Error(), func(r *Report) {
		r.Failed++
		r.Listed = append(r.Listed, AddrResult{Address: ent.Address, Reason: reason + err.Error()})
	}); serr != nil {
		return serr
	}
	e.heard(err)
	return nil
}

// heard counts calls in a row that got no answer (err is one) and stops
// the run at maxSilent: a broker that is down is not asked about every
// address. Any answer (err nil, or an error the broker sent) resets it.
func (e *Engine) heard(err error) {
	e.mu.Lock()
	if err == nil || !client.NoAnswer(err) {
		e.silent = 0
		e.mu.Unlock()
		return
	}
	e.silent++
	down := e.silent >= maxSilent
	if down {
		e.rep.BrokerDown = true
	}
	e.mu.Unlock()
	if down {
		e.stop(fmt.Sprintf("the broker is not answering (%d calls in a row got no answer; the last: %v); resume when it is back", maxSilent, err))
	}
}
