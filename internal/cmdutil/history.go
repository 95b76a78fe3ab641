package cmdutil

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// noteOtherHistory says when the ledger has nothing of this broker but
// has history under what may be the same broker by another name: the
// URL of a context that now names its broker, or a URL whose host
// resolves to the same address and port. dlqctl does not merge them (a
// name resolving alike today may not tomorrow); a person can, by naming
// the broker in the contexts that reach it.
func (f *Factory) noteOtherHistory(ctx context.Context, cl *client.Client, ld *ledger.Store) {
	if has, err := ld.HasHistory(ctx, cl.Broker()); err != nil || has {
		return
	}
	others, err := ld.Brokers(ctx)
	if err != nil || len(others) == 0 {
		return
	}
	s, _ := f.Settings()
	var same []string
	if s != nil && s.Broker != "" {
		if id, err := client.Identity(s.Server); err == nil && slices.Contains(others, id) {
			same = append(same, id)
		}
	}
	if len(same) == 0 && s != nil && s.Broker == "" {
		mine := resolve(ctx, cl.Broker())
		for _, o := range others {
			if o == cl.Broker() {
				continue
			}
			theirs := resolve(ctx, o)
			for _, a := range mine {
				if slices.Contains(theirs, a) {
					same = append(same, o)
					break
				}
			}
		}
	}
	for _, o := range same {
		fmt.Fprintf(f.IO.ErrOut, "note: the ledger has no history for broker %s, but has some for %s, which may be the same broker; if it is, give the contexts that reach it one name (config set-context NAME --broker NAME)\n", cl.Broker(), o)
	}
}

// resolve turns a URL identity into the host:port pairs it reaches now
// (none for a broker name or when resolving fails, within a second).
func resolve(ctx context.Context, identity string) []string {
	u, err := url.Parse(identity)
	if err != nil || u.Host == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, u.Hostname())
	if err != nil {
		return nil
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = net.JoinHostPort(a, u.Port())
	}
	return out
}
