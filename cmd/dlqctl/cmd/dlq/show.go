package dlq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
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
	InDLQ         bool              `json:"inDlq"`
	IsEncrypted   bool              `json:"isEncrypted"`
	Undecryptable bool              `json:"undecryptable"`
	Rows          []Row             `json:"rows"`
	Data          json.RawMessage   `json:"data,omitempty"`
	Decisions     []ledger.Decision `json:"decisions"`
	Journal       *ledger.Entry     `json:"journal,omitempty"`
	// Archived are the rows the ledger's archive kept of this address
	// (discarded rows, synced ones): what remains once it left the DLQ.
	Archived []ledger.Archived `json:"archived,omitempty"`
	// ReplayedAs is the copy a replay published, with its status now.
	ReplayedAs *ReplayedCopy `json:"replayedAs,omitempty"`
}

// ReplayedCopy is where a replay put a message, and its status there.
type ReplayedCopy struct {
	PartitionID   string `json:"partitionId,omitempty"`
	TransactionID string `json:"transactionId"`
	Queue         string `json:"queue,omitempty"`
	Status        string `json:"status,omitempty"`
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
	var addr client.Address
	if strings.Contains(o.Target, "/") {
		if addr, err = client.ParseAddress(o.Target); err != nil {
			return cmdutil.FlagErrorf("%v", err)
		}
	} else if addr, err = findBareID(ctx, cl, ld, o.Target); err != nil {
		return err
	}
	res, err := lookup(ctx, cl, ld, addr, f.Now())
	if err != nil {
		return err
	}
	if !fm.Human() {
		return render.Document(f.IO.Out, fm, res)
	}
	writeShow(f.IO.Out, f.IO.ErrOut, f.Palette(), res)
	return nil
}

// lookup gathers everything known about one address: the broker's detail
// route and its rows in the DLQ, then the ledger's history (ld may be nil).
func lookup(ctx context.Context, cl *client.Client, ld *ledger.Store, addr client.Address, now time.Time) (ShowResult, error) {
	var rows []client.Row
	var err error
	res := ShowResult{Address: addr.String(), Decisions: []ledger.Decision{}, Rows: []Row{}}
	// The detail route answers for one message without reading the list
	// (and decrypts, where the released server's list does not).
	var m *client.Message
	answered := false // the detail route said whether the message exists
	if addr.PathSafe() {
		m, err = cl.Get(ctx, addr)
		switch {
		case err == nil:
			answered = true
			res.Queue, res.Partition, res.MessageID, res.Status = m.Queue, m.Partition, m.ID, m.Status
			res.Data, res.IsEncrypted = m.Payload, m.IsEncrypted
		case errors.Is(err, client.ErrNoDeadLetterRow):
			answered, m = true, nil
		case errors.Is(err, client.ErrRouteMissing):
			m = nil
		default:
			return res, err
		}
	}
	// Its rows (one per consumer group and failure) are in the list only:
	// read the message's queue, without payloads, when it is dead-lettered;
	// the whole list only when the detail route could not say.
	if !answered || m != nil && (m.Status == "" || m.Status == "dead_letter") {
		q := client.ListQuery{Limit: pageSize, NoData: m != nil}
		if m != nil {
			q.Queue = m.Queue
		}
		for r, err := range cl.Rows(ctx, q) {
			if err != nil {
				return res, err
			}
			if r.Address() == addr {
				rows = append(rows, r)
			}
		}
	}
	res.InDLQ = len(rows) > 0
	for _, r := range rows {
		row := toRow(r, now, nil, 0)
		row.Data = nil
		res.Rows = append(res.Rows, row)
		if res.Queue == "" {
			res.Queue, res.Partition, res.MessageID = r.Queue, r.Partition, r.ID
		}
		if len(res.Data) == 0 {
			res.Data = r.Data
		}
		res.IsEncrypted = res.IsEncrypted || r.IsEncrypted
	}
	if ld != nil {
		if err := showHistory(ctx, cl, ld, addr, &res); err != nil {
			return res, err
		}
	}
	if !res.InDLQ && m == nil && len(res.Decisions) == 0 && res.Journal == nil && len(res.Archived) == 0 {
		return res, cmdutil.NotFoundf("no dead-letter row at %s, and the ledger knows nothing of it", addr)
	}
	if res.Queue == "" && len(res.Archived) > 0 {
		a := res.Archived[0]
		res.Queue, res.Partition, res.MessageID = a.Queue, a.Partition, a.MessageID
	}
	if len(res.Data) == 0 && len(res.Archived) > 0 {
		res.Data = res.Archived[0].Payload
	}
	res.Undecryptable = client.IsEnvelope(res.Data) && (m != nil || cl.ListDecrypts())
	return res, nil
}

// findBareID finds the address of a bare transaction id: in the DLQ
// (reading it, without payloads), else in the ledger. Several partitions
// holding it is a usage error listing them.
func findBareID(ctx context.Context, cl *client.Client, ld *ledger.Store, txid string) (client.Address, error) {
	partitions := map[client.Address][]client.Row{}
	for r, err := range cl.Rows(ctx, client.ListQuery{Limit: pageSize, NoData: true}) {
		if err != nil {
			return client.Address{}, err
		}
		if r.TransactionID == txid {
			partitions[r.Address()] = append(partitions[r.Address()], r)
		}
	}
	if len(partitions) == 0 && ld != nil {
		known, err := ld.AddressesOf(ctx, cl.Broker(), txid)
		if err != nil {
			return client.Address{}, err
		}
		for _, a := range known {
			partitions[a] = nil
		}
	}
	switch len(partitions) {
	case 0:
		return client.Address{}, cmdutil.NotFoundf("no dead letter has transaction id %q, and the ledger knows none (give PARTITION_ID/TRANSACTION_ID to look up a message that is not dead-lettered)", txid)
	case 1:
		// The payloads were skipped: the detail route, or the list read
		// for the address, brings them.
		for a := range partitions {
			return a, nil
		}
	}
	var cands []string
	for a, rs := range partitions {
		c := a.String()
		if len(rs) > 0 {
			c += " (queue " + rs[0].Queue + ")"
		}
		cands = append(cands, c)
	}
	sort.Strings(cands)
	return client.Address{}, cmdutil.UsageError(fmt.Errorf("transaction id %q is in %d partitions; give one of: %s", txid, len(cands), strings.Join(cands, ", ")))
}

// showHistory adds what the ledger knows of an address: decisions, its
// journal, archived rows, and where a replay put it (with its status now).
func showHistory(ctx context.Context, cl *client.Client, ld *ledger.Store, addr client.Address, res *ShowResult) error {
	ds, err := ld.DecisionsFor(ctx, cl.Broker(), addr)
	if err != nil {
		return err
	}
	res.Decisions = append(res.Decisions, ds...)
	if res.Journal, err = ld.Entry(ctx, cl.Broker(), addr); err != nil {
		return err
	}
	if !res.InDLQ {
		if res.Archived, err = ld.ArchivedRows(ctx, cl.Broker(), ledger.ArchiveFilter{Address: &addr}); err != nil {
			return err
		}
	}
	j := res.Journal
	if j == nil || j.ReplayTxID == "" || j.Action != replay.Replay {
		return nil
	}
	cp := &ReplayedCopy{PartitionID: j.ReplayPartitionID, TransactionID: j.ReplayTxID}
	// /retry and a manual replay to the same queue land in the message's
	// own partition; --to-queue records where its copy went.
	if cp.PartitionID == "" {
		cp.PartitionID = addr.PartitionID
	}
	if m, err := cl.Get(ctx, client.Address{PartitionID: cp.PartitionID, TransactionID: cp.TransactionID}); err == nil {
		cp.Status, cp.Queue = m.Status, m.Queue
	} else if errors.Is(err, client.ErrNoDeadLetterRow) {
		cp.Status = "not found"
	}
	res.ReplayedAs = cp
	return nil
}

// writeShow writes a lookup for people: the record to w, the warning
// about an undecryptable payload to warn.
func writeShow(w, warn io.Writer, pal *render.Palette, res ShowResult) {
	c := render.Clean
	kv := func(k, v string) { fmt.Fprintf(w, "%-14s %s\n", k+":", v) }
	kv("Address", pal.Bold(c(res.Address)))
	kv("Queue", orDash(c(res.Queue)))
	kv("Partition", orDash(c(res.Partition)))
	kv("Message ID", orDash(c(res.MessageID)))
	if res.Status != "" {
		kv("Status", c(res.Status))
	}
	if !res.InDLQ {
		kv("In the DLQ", "no (its history below is the ledger's)")
	}
	enc := "no"
	if res.IsEncrypted {
		enc = "yes (decrypted)"
	}
	if res.Undecryptable {
		enc = pal.Red("undecryptable envelope")
	}
	kv("Encrypted", enc)
	if len(res.Rows) > 0 {
		fmt.Fprintf(w, "\nFailures (%d):\n", len(res.Rows))
		for _, r := range res.Rows {
			fmt.Fprintf(w, "  %s  group %s, %d retries, failed %s (%s ago)\n", pal.Red("✗"), c(groupName(r.ConsumerGroup)), r.RetryCount, r.FailedAt, render.AgeOfSeconds(float64(r.AgeSeconds)))
			fmt.Fprintf(w, "     %s  [class %s]\n", orNone(c(r.ErrorMessage)), r.ErrorClass)
		}
	} else if len(res.Archived) > 0 {
		fmt.Fprintf(w, "\nArchived failures (%d):\n", len(res.Archived))
		for _, a := range res.Archived {
			gone := "last seen in the DLQ " + render.Timestamp(a.LastSeen)
			if !a.GoneAt.IsZero() {
				gone = "left the DLQ by " + render.Timestamp(a.GoneAt)
				if a.Vanished {
					gone += ", with no decision (vanished)"
				}
			}
			fmt.Fprintf(w, "  %s  group %s, %d retries, failed %s; %s\n", pal.Red("✗"), c(groupName(a.ConsumerGroup)), a.RetryCount, render.Timestamp(a.FailedAt), gone)
			fmt.Fprintf(w, "     %s  [class %s]\n", orNone(c(a.Error)), replay.ClassID(a.Error))
		}
	}
	if res.Undecryptable {
		fmt.Fprintln(warn, pal.Yellow("warning: the payload is an encryption envelope the broker could not decrypt (wrong or rotated key); it will not be replayed"))
	}
	fmt.Fprintln(w, "\nPayload:")
	var pretty bytes.Buffer
	if len(res.Data) == 0 {
		fmt.Fprintln(w, "  (none)")
	} else if json.Indent(&pretty, res.Data, "  ", "  ") == nil {
		fmt.Fprintf(w, "  %s\n", render.CleanLines(pretty.String()))
	} else {
		fmt.Fprintf(w, "  %s\n", c(string(res.Data)))
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
		owner := ""
		if d.Owner != "" {
			owner = " for " + c(d.Owner)
		}
		fmt.Fprintf(w, "  %s  %s%s by %s%s (batch %s, %s): %s\n", render.Timestamp(d.At), d.Action, until, c(d.By), owner, d.BatchID, d.Status, c(d.Why))
	}
	if j := res.Journal; j != nil {
		fmt.Fprintln(w, "\nJournal:")
		fmt.Fprintf(w, "  %s, generation %d, %d attempt(s), batch %s, updated %s\n", journalSentence(j), j.Generation, j.Attempts, j.BatchID, render.Timestamp(j.UpdatedAt))
		if cp := res.ReplayedAs; cp != nil {
			now := "its status now is unknown"
			switch cp.Status {
			case "":
			case "not found":
				now = "the broker no longer holds it"
			default:
				now = "now " + c(cp.Status)
				if cp.Queue != "" {
					now += " in queue " + c(cp.Queue)
				}
			}
			fmt.Fprintf(w, "  replayed as transaction id %s (partition %s) via %s; %s\n", c(cp.TransactionID), c(cp.PartitionID), j.Via, now)
		}
		if j.LastError != "" {
			fmt.Fprintf(w, "  last error: %s\n", c(j.LastError))
		}
	}
}

// journalSentence says an address's journal state in words.
func journalSentence(j *ledger.Entry) string {
	switch {
	case j.State == ledger.Removed && j.Outcome == "discarded":
		return "discarded (archived, then deleted)"
	case j.State == ledger.Removed && (j.Outcome == "replayed" || j.Outcome == "duplicate"):
		return "replayed, dead letter removed"
	case j.State == ledger.Removed && j.Outcome == "gone":
		return "gone before it was acted on"
	}
	return j.State
}

func orNone(s string) string {
	if s == "" {
		return "(no error message)"
	}
	return s
}
