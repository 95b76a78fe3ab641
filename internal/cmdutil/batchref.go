package cmdutil

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// ResolveBatch is the batch a command names: its id, or "last", this
// broker's newest batch of one of actions (any action when none given).
func (f *Factory) ResolveBatch(ctx context.Context, ld *ledger.Store, id string, actions ...string) (string, error) {
	if id != "last" {
		return id, nil
	}
	broker, err := f.BrokerKey(ctx, ld)
	if err != nil {
		return "", err
	}
	if len(actions) == 0 {
		actions = []string{""}
	}
	var newest *ledger.Batch
	for _, a := range actions {
		bs, err := ld.Batches(ctx, ledger.BatchFilter{Broker: broker, Action: a, Limit: 1})
		if err != nil {
			return "", err
		}
		if len(bs) == 1 && (newest == nil || bs[0].At.After(newest.At)) {
			newest = &bs[0]
		}
	}
	if newest != nil {
		return newest.ID, nil
	}
	actions = slices.DeleteFunc(actions, func(a string) bool { return a == "" })
	what := "batch"
	if len(actions) > 0 {
		what = strings.Join(actions, " or ") + " batch"
	}
	return "", UsageError(fmt.Errorf("no %s of this broker in the ledger (decisions ls lists them)", what))
}
