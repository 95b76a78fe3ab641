package batch

import (
	"context"
	"slices"
	"sort"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// paceBy reads the destination's consumer-group lag for the plan and
// sets the pausers the settings ask for: --max-lag (refused on a broker
// that reports no lag: a pace it cannot keep is not a pace) and --window.
func (p *Pending) paceBy(ctx context.Context, queues []string) error {
	s := p.settings
	dests := destinations(queues, s.ToQueue)
	lag, known := destinationLag(ctx, p.env.Client, dests)
	p.po.Lag = lag
	p.opts.Pausers = nil
	if s.MaxLag != "" {
		max, err := ParseMaxLag(s.MaxLag)
		if err != nil {
			return err
		}
		if !known {
			return refuse(errs.Usage, GivenMaxLag, "", "this broker reports no consumer-group lag (no maxTimeLag in GET /api/v1/consumer-groups), so a replay cannot be paced by it; pace it by rate instead")
		}
		lag.MaxLag, lag.MaxLagSecs = max, max.Seconds()
		p.opts.Pausers = append(p.opts.Pausers, &replay.LagPauser{Source: p.env.Client, Queues: dests, Max: max})
	}
	if s.Window != "" {
		w, err := ParseWindow(s.Window)
		if err != nil {
			return err
		}
		p.po.Window = w.String()
		p.opts.Pausers = append(p.opts.Pausers, w)
	}
	p.opts.Paused = func(why string) {
		if p.paused != nil {
			p.paused(why)
		}
	}
	return nil
}

// destinations are the queues a replay of a batch in these queues
// publishes to.
func destinations(queues []string, toQueue string) []string {
	if toQueue != "" {
		return []string{toQueue}
	}
	out := slices.Clone(queues)
	sort.Strings(out)
	return slices.Compact(out)
}

// destinationLag is the lag of the groups that read the destination
// queues. known is false when the broker lists groups but reports no lag
// for any (the seed contract), or cannot be asked; a broker with no group
// at all has nothing that could lag.
func destinationLag(ctx context.Context, cl *client.Client, dests []string) (*LagPlan, bool) {
	cgs, err := cl.ConsumerGroups(ctx)
	if err != nil {
		return &LagPlan{}, false
	}
	lp := &LagPlan{}
	for _, cg := range cgs {
		if cg.Lag != nil {
			lp.Reported = true
		}
		if !slices.Contains(dests, cg.Queue) || cg.Lag == nil {
			continue
		}
		lp.Groups = append(lp.Groups, GroupLag{Queue: cg.Queue, ConsumerGroup: cg.Name, Lag: cg.Lag.MaxTime,
			LagSecs: cg.Lag.MaxTime.Seconds(), Messages: cg.Lag.Messages, State: cg.Lag.State})
	}
	return lp, lp.Reported || len(cgs) == 0
}
