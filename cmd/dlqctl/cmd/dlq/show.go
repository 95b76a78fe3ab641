package dlq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// ShowOptions are `dlq show`'s flags.
type ShowOptions struct {
	Target string
}

// NewCmdShow shows one dead letter.
func NewCmdShow(f *cmdutil.Factory, runF func(*ShowOptions) error) *cobra.Command {
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
			if runF != nil {
				return runF(o)
			}
			return showRun(cmd.Context(), f, o)
		},
	}
}

// ShowResult is `dlq show -o json`.
type ShowResult struct {
	Address       string            `json:"address"`
	Queue         string            `json:"queue"`
	Partition     string            `json:"partition"`
	MessageID     string            `json:"messageId"`
	Status        string            `json:"status,omitempty"`
	IsEncrypted   bool              `json:"isEncrypted"`
	Undecryptable bool              `json:"undecryptable"`
	Rows          []Row             `json:"rows"`
	Data          json.RawMessage   `json:"data,omitempty"`
	Decisions     []ledger.Decision `json:"decisions"`
	Journal       *ledger.Entry     `json:"journal,omitempty"`
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
	var addr client.Address
	bare := !strings.Contains(o.Target, "/")
	if !bare {
		if addr, err = client.ParseAddress(o.Target); err != nil {
			return cmdutil.FlagErrorf("%v", err)
		}
	}
	// The rows: scan the DLQ once, matching the address or the bare id.
	var rows []client.Row
	partitions := map[client.Address][]client.Row{}
	for r, err := range cl.Rows(ctx, client.ListQuery{Limit: pageSize}) {
		if err != nil {
			return err
		}
		if bare && r.TransactionID == o.Target {
			partitions[r.Address()] = append(partitions[r.Address()], r)
		} else if !bare && r.Address() == addr {
			rows = append(rows, r)
		}
	}
	if bare {
		switch len(partitions) {
		case 0:
			return cmdutil.NotFoundf("no dead letter has transaction id %q (give PARTITION_ID/TRANSACTION_ID to look up a message that is not dead-lettered)", o.Target)
		case 1:
			for a, rs := range partitions {
				addr, rows = a, rs
			}
		default:
			var cands []string
			for a, rs := range partitions {
				cands = append(cands, fmt.Sprintf("%s (queue %s)", a, rs[0].Queue))
			}
			sort.Strings(cands)
			return cmdutil.UsageError(fmt.Errorf("transaction id %q is in %d partitions; give one of: %s", o.Target, len(cands), strings.Join(cands, ", ")))
		}
	}
	now := f.Now()
	if len(rows) == 0 {
		if m, gerr := cl.Get(ctx, addr); gerr == nil {
			return cmdutil.NotFoundf("no dead-letter row at %s: the message exists in queue %s with status %s", addr, m.Queue, m.Status)
		}
		return cmdutil.NotFoundf("no dead-letter row at %s", addr)
	}
	res := ShowResult{Address: addr.String(), Queue: rows[0].Queue, Partition: rows[0].Partition, MessageID: rows[0].ID,
		IsEncrypted: rows[0].IsEncrypted, Data: rows[0].Data, Decisions: []ledger.Decision{}}
	// The detail route decrypts where an older server's list does not.
	if addr.PathSafe() {
		m, gerr := cl.Get(ctx, addr)
		switch {
		case gerr == nil:
			res.Status = m.Status
			if len(m.Payload) > 0 {
				res.Data = m.Payload
			}
			res.IsEncrypted = res.IsEncrypted || m.IsEncrypted
		case errors.Is(gerr, client.ErrNoDeadLetterRow), errors.Is(gerr, client.ErrRouteMissing):
		default:
			return gerr
		}
	}
	res.Undecryptable = client.IsEnvelope(res.Data)
	for _, r := range rows {
		res.Rows = append(res.Rows, toRow(r, now, nil))
		res.Rows[len(res.Rows)-1].Data = nil
	}
	if ld, lerr := f.Ledger(ctx); lerr == nil {
		if ds, err := ld.DecisionsFor(ctx, cl.Server(), addr); err == nil {
			res.Decisions = append(res.Decisions, ds...)
		}
		if e, err := ld.Entry(ctx, cl.Server(), addr); err == nil {
			res.Journal = e
		}
	} else if errors.Is(lerr, ledger.ErrUnavailable) {
		fmt.Fprintf(f.IO.ErrOut, "warning: ledger not read: %v\n", lerr)
	} else {
		return lerr
	}
	if !fm.Human() {
		return render.Document(f.IO.Out, fm, res)
	}
	return showHuman(f, res)
}

func showHuman(f *cmdutil.Factory, res ShowResult) error {
	w := f.IO.Out
	pal := f.Palette()
	kv := func(k, v string) { fmt.Fprintf(w, "%-14s %s\n", k+":", v) }
	kv("Address", pal.Bold(res.Address))
	kv("Queue", res.Queue)
	kv("Partition", res.Partition)
	kv("Message ID", res.MessageID)
	if res.Status != "" {
		kv("Status", res.Status)
	}
	enc := "no"
	if res.IsEncrypted {
		enc = "yes (decrypted)"
	}
	if res.Undecryptable {
		enc = pal.Red("undecryptable envelope")
	}
	kv("Encrypted", enc)
	fmt.Fprintf(w, "\nFailures (%d):\n", len(res.Rows))
	for _, r := range res.Rows {
		fmt.Fprintf(w, "  %s  group %s, %s retries, failed %s (%s ago)\n", pal.Red("✗"), r.ConsumerGroup, fmt.Sprint(r.RetryCount), r.FailedAt, render.Age(time.Duration(r.AgeSeconds)*time.Second))
		fmt.Fprintf(w, "     %s  [class %s]\n", orNone(r.ErrorMessage), r.ErrorClass)
	}
	if res.Undecryptable {
		fmt.Fprintln(f.IO.ErrOut, pal.Yellow("warning: the payload is an encryption envelope the broker could not decrypt (wrong or rotated key); it will not be replayed"))
	}
	fmt.Fprintln(w, "\nPayload:")
	var pretty bytes.Buffer
	if len(res.Data) == 0 {
		fmt.Fprintln(w, "  (none)")
	} else if json.Indent(&pretty, res.Data, "  ", "  ") == nil {
		fmt.Fprintf(w, "  %s\n", pretty.String())
	} else {
		fmt.Fprintf(w, "  %s\n", res.Data)
	}
	fmt.Fprintln(w, "\nDecisions:")
	if len(res.Decisions) == 0 {
		fmt.Fprintln(w, "  none recorded")
	}
	for _, d := range res.Decisions {
		until := ""
		if !d.Until.IsZero() {
			until = " until " + render.Timestamp(d.Until)
		}
		fmt.Fprintf(w, "  %s  %s%s by %s (batch %s, %s): %s\n", render.Timestamp(d.At), d.Action, until, d.By, d.BatchID, d.Status, d.Why)
	}
	if j := res.Journal; j != nil {
		fmt.Fprintln(w, "\nReplay journal:")
		fmt.Fprintf(w, "  state %s, generation %d, %d attempt(s), batch %s, updated %s\n", j.State, j.Generation, j.Attempts, j.BatchID, render.Timestamp(j.UpdatedAt))
		if j.ReplayTxID != "" {
			fmt.Fprintf(w, "  replayed as %s via %s\n", j.ReplayTxID, j.Via)
		}
		if j.LastError != "" {
			fmt.Fprintf(w, "  last error: %s\n", j.LastError)
		}
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(no error message)"
	}
	return s
}
