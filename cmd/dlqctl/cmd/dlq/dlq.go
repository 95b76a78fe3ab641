// Package dlq holds the `dlqctl dlq` verbs: ls, show, replay, rm, decide,
// check, stats, sync. Each is its flags, its options and its printing;
// what it means to list, look up, check or run a batch is in pkg/
// (inspect, gate, batch), which the triage screen and the exporter call
// the same way.
package dlq

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/spf13/cobra"
)

// NewCmdDLQ is the `dlq` noun.
func NewCmdDLQ(f *cmdutil.Factory) *cobra.Command {
	cmd := cmdutil.Noun(&cobra.Command{
		Use:   "dlq",
		Short: "Inspect, replay, discard and decide on dead letters",
	})
	cmd.AddCommand(
		NewCmdLs(f),
		NewCmdShow(f),
		NewCmdReplay(f, nil),
		NewCmdRm(f),
		NewCmdRestore(f),
		NewCmdExport(f),
		NewCmdImport(f),
		NewCmdDecide(f),
		NewCmdCheck(f),
		NewCmdStats(f),
		NewCmdSync(f),
	)
	return cmd
}

// groupName shows a consumer group to a person: queue-mode consumers'
// internal name is spelled out.
func groupName(g string) string { return deadletter.GroupLabel(g) }

// decisions loads the latest decision per address. A ledger that cannot
// be reached only costs the DECISION column (with a warning): the DLQ is
// still worth seeing at 3am. A ledger that is misconfigured is an error.
// decisionsFor is where a read of the DLQ finds each row's decision: the
// ledger, asked a chunk of rows at a time; with a ledger that cannot be
// reached, none (and a warning).
func decisionsFor(ctx context.Context, f *cmdutil.Factory, broker string) (*inspect.Decisions, error) {
	ld, err := f.Ledger(ctx)
	if err == nil {
		return inspect.NewDecisions(ld, broker, f.Now()), nil
	}
	if errors.Is(err, ledger.ErrUnavailable) {
		fmt.Fprintf(f.IO.ErrOut, "warning: decisions not shown: %v\n", err)
		return inspect.KnownDecisions(nil), nil
	}
	return nil, err
}
