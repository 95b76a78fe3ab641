package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dlqctl/dlqctl/internal/config"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// A broker reached under two names has two histories in the ledger, and
// a replay under the second cannot see what was replayed under the
// first. dlqctl does not merge names on its own (a host resolving alike
// today may not tomorrow): it says when the ledger has history under a
// name that reaches the same address now, and a replay or discard waits
// for a person to say whether they are one broker (ConfirmBroker).

// suspect is an identity with history in the ledger that may be this
// session's broker under another name, and why.
type suspect struct{ identity, why string }

// brokerSuspects are the ledger's other identities that may be the
// session's broker: URLs whose host resolves to the same address, on the
// same port and scheme, now; and context names (broker:) whose server
// does. None once a person has said what this broker is.
func (f *Factory) brokerSuspects(ctx context.Context, cl *client.Client, ld *ledger.Store) ([]suspect, error) {
	if said, err := ld.Alias(ctx, cl.Broker()); err != nil || said != "" {
		return nil, err
	}
	others, err := ld.Brokers(ctx)
	if err != nil || len(others) == 0 {
		return nil, err
	}
	mine, err := deadletter.Identity(cl.Server())
	if err != nil {
		return nil, nil
	}
	cfg, _ := f.Config()
	var out []suspect
	for _, o := range others {
		if o == cl.Broker() {
			continue
		}
		if _, err := deadletter.Identity(o); err == nil {
			if deadletter.SameAddress(ctx, mine, o) {
				out = append(out, suspect{o, fmt.Sprintf("%s and %s reach the same address now", mine, o)})
			}
			continue
		}
		// A broker name: the contexts that name it say where it is, and
		// so does the ledger, where a session of such a context reached it
		// (one of another person's config, say).
		if s, ok := namedHere(ctx, cfg, o, mine); ok {
			out = append(out, s)
			continue
		}
		servers, err := ld.Servers(ctx, o)
		if err != nil {
			return nil, err
		}
		for _, at := range servers {
			if at == mine || deadletter.SameAddress(ctx, mine, at) {
				out = append(out, suspect{o, fmt.Sprintf("the ledger recorded that broker %s was reached at %s, which reaches the same address as %s now", o, at, mine)})
				break
			}
		}
	}
	return out, nil
}

// namedHere is the suspect a context of this config makes of the broker
// name o: one that names o the broker at a server reaching mine.
func namedHere(ctx context.Context, cfg *config.Config, o, mine string) (suspect, bool) {
	if cfg == nil {
		return suspect{}, false
	}
	for name, c := range cfg.Contexts {
		if c.Broker != o || c.Server == "" {
			continue
		}
		if id, err := deadletter.Identity(c.Server); err == nil && deadletter.SameAddress(ctx, mine, id) {
			return suspect{o, fmt.Sprintf("context %s names %s the broker at %s, which reaches the same address as %s now", name, o, c.Server, mine)}, true
		}
	}
	return suspect{}, false
}

// noteOtherHistory says, for a command that only reads, when the ledger
// has nothing of this broker but has history under what may be the same
// broker by another name.
func (f *Factory) noteOtherHistory(ctx context.Context, cl *client.Client, ld *ledger.Store) {
	if has, err := ld.HasHistory(ctx, cl.Broker()); err != nil || has {
		return
	}
	ss, err := f.brokerSuspects(ctx, cl, ld)
	if err != nil {
		return
	}
	for _, s := range ss {
		fmt.Fprintf(f.IO.ErrOut, "note: the ledger has no history for broker %s, but has some for %s, which may be the same broker (%s); a replay or rm will ask which it is\n", cl.Broker(), s.identity, s.why)
	}
}

// BrokerAnswer is what a person said on the command line of the broker
// of a replay or discard: that it is the broker the ledger knows as
// SameAs, or (Other) one of its own.
type BrokerAnswer struct {
	SameAs string
	Other  bool
}

// ErrBrokerUnconfirmed: the ledger has history under another name that
// may be this broker, and nobody has said whether it is.
var ErrBrokerUnconfirmed = errors.New("the broker may be one the ledger knows under another name")

// ConfirmBroker makes sure a replay or discard knows which broker's
// history it continues: where the ledger has history under another
// identity that may be this broker, it refuses (a usage error) until the
// answer says which it is, and records the answer in the ledger (asked
// once). Answered "the same", the session's broker is filed under that
// identity from then on.
func (f *Factory) ConfirmBroker(ctx context.Context, ans BrokerAnswer) error {
	cl, ld, err := f.Session(ctx)
	if err != nil {
		return err
	}
	ss, err := f.brokerSuspects(ctx, cl, ld)
	if err != nil {
		return err
	}
	if ans.SameAs == "" && !ans.Other && len(ss) == 0 {
		return nil
	}
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = s.identity
	}
	switch {
	case ans.SameAs != "":
		canonical := ans.SameAs
		if id, err := deadletter.Identity(canonical); err == nil {
			canonical = id
		}
		if has, err := ld.HasHistory(ctx, canonical); err != nil {
			return err
		} else if !has {
			return errs.Usagef("--same-broker-as %s: the ledger has no history for that broker (it knows %s)", ans.SameAs, strings.Join(names, ", "))
		}
		if err := ld.SetAlias(ctx, cl.Broker(), canonical, f.User(), f.Now()); err != nil {
			return err
		}
		cl.FileUnder(canonical)
		return nil
	case ans.Other:
		return ld.SetAlias(ctx, cl.Broker(), cl.Broker(), f.User(), f.Now())
	}
	slices.SortFunc(ss, func(a, b suspect) int { return strings.Compare(a.identity, b.identity) })
	var why []string
	for _, s := range ss {
		why = append(why, s.why)
	}
	return errs.Usagef("%w: the ledger has history for %s, and %s; what was replayed under one name is not seen under another, so this could publish a second copy. If they are one broker, run again with --same-broker-as %s (this broker's history is then filed there); if not, with --other-broker. The answer is recorded in the ledger",
		ErrBrokerUnconfirmed, strings.Join(names, ", "), strings.Join(why, "; "), names[0])
}
