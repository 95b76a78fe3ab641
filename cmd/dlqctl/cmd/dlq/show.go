package dlq

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// ShowOptions are `dlq show`'s flags.
type ShowOptions struct {
	Target string
}

// NewCmdShow shows one dead letter.
func NewCmdShow(f *cmdutil.Factory) *cobra.Command {
	o := &ShowOptions{}
	return &cobra.Command{
		Use:   "show ADDRESS|TRANSACTION_ID",
		Short: "Show everything known about one dead letter",
		Long: `Show one dead letter: its rows (one per consumer group that failed it), the
error, retries, the payload pretty-printed (raw with -o json), a warning when
the payload is an undecryptable envelope, and the ledger's decisions and
replay journal for it. A bare transaction id is accepted when it is unique
across partitions.`,
		Example: `  $ dlqctl dlq show 6f1c0a4e-…/order:8812:v3
  $ dlqctl dlq show order:8812:v3 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Target = args[0]
			if strings.TrimSpace(o.Target) == "" {
				return cmdutil.FlagErrorf("empty address")
			}
			return showRun(cmd.Context(), f, o)
		},
	}
}

func showRun(ctx context.Context, f *cmdutil.Factory, o *ShowOptions) error {
	fm, err := f.Format()
	if err != nil {
		return err
	}
	cl, err := f.Client()
	if err != nil {
		return err
	}
	ld, lerr := f.Ledger(ctx)
	if lerr != nil {
		if !errors.Is(lerr, ledger.ErrUnavailable) {
			return lerr
		}
		fmt.Fprintf(f.IO.ErrOut, "warning: ledger not read: %s\n", render.Clean(lerr.Error()))
		ld = nil
	}
	var addr deadletter.Address
	if strings.Contains(o.Target, "/") {
		if addr, err = deadletter.ParseAddress(o.Target); err != nil {
			return cmdutil.FlagErrorf("%v", err)
		}
	} else if addr, err = inspect.FindBareID(ctx, cl, ld, o.Target); err != nil {
		return err
	}
	res, err := inspect.Lookup(ctx, cl, ld, addr, f.Now())
	if err != nil {
		return err
	}
	if !fm.Human() {
		return render.Document(f.IO.Out, fm, res)
	}
	present.Show(f.IO.Out, f.IO.ErrOut, f.Palette(), res)
	return nil
}
