package batch

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// The rules every front end's decisions and batches go by, in one place:
// the command line and the triage screen call these and word the errors
// their own way (a flag's name on one, a field's on the other).

// ErrNoReason: nothing is decided, replayed or discarded without a
// reason: it is recorded in the ledger, for whoever looks next.
var ErrNoReason = errors.New("a reason is required")

// ErrNoUntil: a hold ends; it needs an until.
var ErrNoUntil = errors.New("a hold needs an until")

// ErrUntilNotHold: only a hold has an until.
var ErrUntilNotHold = errors.New("only a hold has an until")

// HeldError: messages of the batch are under an active hold, and the
// caller did not say to act on them all the same.
type HeldError struct{ Messages int }

func (e *HeldError) Error() string {
	return fmt.Sprintf("%d message(s) under an active hold", e.Messages)
}

// DecideRequest is a decision as a person states it.
type DecideRequest struct {
	Selection *deadletter.Selection
	// Action is ledger.ActionReplay, ActionDiscard or ActionHold.
	Action string
	By     string
	Why    string
	Owner  string
	// Until ends a hold: RFC 3339, or a duration from now (24h).
	Until string
}

// Decided is a recorded decision.
type Decided struct {
	Batch *ledger.Batch
	// Messages is how many messages it covers.
	Messages int
	// Notes are what the selection's --where found worth saying.
	Notes []string
}

// CheckDecision applies the rules a decision must meet before anything is
// read: a reason, and an until for a hold (only for a hold).
func CheckDecision(req DecideRequest) error {
	switch {
	case strings.TrimSpace(req.Why) == "":
		return ErrNoReason
	case ledger.IsHold(req.Action) && strings.TrimSpace(req.Until) == "":
		return ErrNoUntil
	case !ledger.IsHold(req.Action) && req.Until != "":
		return ErrUntilNotHold
	}
	return nil
}

// Record records a decision of a selection, as dlq decide and the triage
// screen's hold do: the rules (CheckDecision), the until read, then the
// selection frozen into a batch (Decide).
func Record(ctx context.Context, env Env, req DecideRequest) (*Decided, error) {
	if err := CheckDecision(req); err != nil {
		return nil, err
	}
	now := env.Now()
	b := &ledger.Batch{Action: req.Action, By: req.By, At: now, Why: req.Why, Owner: strings.TrimSpace(req.Owner)}
	if b.By == "" {
		b.By = env.User
	}
	if req.Until != "" {
		var err error
		if b.Until, err = ParseUntil(req.Until, now); err != nil {
			return nil, err
		}
	}
	return Decide(ctx, env, req.Selection, b)
}

// Refusal is why the batch cannot run as asked, or nil: no reason given,
// an approval it needs and lacks (or that was for another plan), or
// messages under an active hold the request does not override. Run
// refuses on it; a front end asks first, to say so before it asks for a
// confirmation.
func (p *Planned) Refusal(g Go) error {
	if err := p.take(g); err != nil {
		return err
	}
	if err := p.Unreasoned(); err != nil {
		return err
	}
	return p.PlanRefusal()
}

// Unreasoned is ErrNoReason when the batch has no reason yet: a front
// end that takes none after the plan refuses before planning.
func (p *Pending) Unreasoned() error {
	if strings.TrimSpace(p.why) == "" {
		return ErrNoReason
	}
	return nil
}

// PlanRefusal is Refusal but for the reason: what a dry run, which needs
// none, says the run would be refused for. A fresh batch whose every
// message one batch of the same action already decides (dlq decide, then
// the same selection again) is that batch's to run.
func (p *Planned) PlanRefusal() error {
	if err := p.approvalRefusal(); err != nil {
		return err
	}
	if p.plan.Held > 0 && !p.req.OverrideHold {
		return &HeldError{Messages: p.plan.Held}
	}
	if d := p.plan.Decided; p.in.batch == nil && len(d) == 1 && d[0].Messages == p.plan.Addresses {
		return &DecidedError{DecidedShare: d[0], Action: p.req.Action}
	}
	return nil
}

// DecidedError: every message of a fresh batch is a batch's of the same
// action, decided and never run: that batch runs them.
type DecidedError struct {
	DecidedShare
	Action string
}

func (e *DecidedError) Error() string {
	return fmt.Sprintf("every message of this selection is batch %s's, which decided to %s %s (by %s, %s: %s)",
		e.BatchID, e.Action, render.Plural(e.Messages, "message", "messages"), e.By, e.Status, e.Why)
}
