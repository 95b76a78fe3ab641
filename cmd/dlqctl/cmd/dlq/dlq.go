// Package dlq holds the `dlqctl dlq` verbs: ls, show, replay, rm, decide,
// check, stats, sync.
package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/config"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
	"github.com/spf13/cobra"
)

// NewCmdDLQ is the `dlq` noun.
func NewCmdDLQ(f *cmdutil.Factory) *cobra.Command {
	cmd := cmdutil.Noun(&cobra.Command{
		Use:   "dlq",
		Short: "Inspect, replay, discard and decide on dead letters",
	})
	cmd.AddCommand(
		NewCmdLs(f, nil),
		NewCmdShow(f, nil),
		NewCmdReplay(f, nil),
		NewCmdRm(f, nil),
		NewCmdDecide(f, nil),
		NewCmdCheck(f, nil),
		NewCmdStats(f, nil),
		NewCmdSync(f, nil),
	)
	return cmd
}

// pageSize is how many rows dlqctl asks the list route for at a time.
const pageSize = 500

// Row is a dead-letter row as ls prints it in json, ndjson and yaml. The
// field names are part of the contract (README "JSON fields").
type Row struct {
	Address       string `json:"address"`
	PartitionID   string `json:"partitionId"`
	TransactionID string `json:"transactionId"`
	MessageID     string `json:"messageId"`
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	ConsumerGroup string `json:"consumerGroup"`
	ErrorMessage  string `json:"errorMessage"`
	ErrorClass    string `json:"errorClass"`
	RetryCount    int    `json:"retryCount"`
	FailedAt      string `json:"failedAt"`
	AgeSeconds    int64  `json:"ageSeconds"`
	// IsEncrypted: the payload is encrypted at rest (the list decrypted
	// it, or shows its envelope). It never depends on which kind of
	// broker answered, so a row reads the same before and after the
	// client has learnt it.
	IsEncrypted bool `json:"isEncrypted"`
	// Envelope: the list shows the stored encryption envelope, not the
	// payload (undecryptable on a current broker; an older broker's list
	// never decrypts, and dlq show tells which).
	Envelope      bool            `json:"envelope"`
	Decision      string          `json:"decision,omitempty"`
	DecisionBatch string          `json:"decisionBatch,omitempty"`
	Data          json.RawMessage `json:"data,omitempty"`
}

// AppendJSON writes the row as encoding/json would (a test holds the two
// equal): `ls -o ndjson` writes one per dead letter, and reflection was
// the larger part of its cost.
func (r Row) AppendJSON(b []byte) []byte {
	str := func(name, v string) {
		b = append(b, name...)
		b = render.AppendJSONString(b, v)
	}
	str(`{"address":`, r.Address)
	str(`,"partitionId":`, r.PartitionID)
	str(`,"transactionId":`, r.TransactionID)
	str(`,"messageId":`, r.MessageID)
	str(`,"queue":`, r.Queue)
	str(`,"partition":`, r.Partition)
	str(`,"consumerGroup":`, r.ConsumerGroup)
	str(`,"errorMessage":`, r.ErrorMessage)
	str(`,"errorClass":`, r.ErrorClass)
	b = append(b, `,"retryCount":`...)
	b = strconv.AppendInt(b, int64(r.RetryCount), 10)
	str(`,"failedAt":`, r.FailedAt)
	b = append(b, `,"ageSeconds":`...)
	b = strconv.AppendInt(b, r.AgeSeconds, 10)
	b = append(b, `,"isEncrypted":`...)
	b = strconv.AppendBool(b, r.IsEncrypted)
	b = append(b, `,"envelope":`...)
	b = strconv.AppendBool(b, r.Envelope)
	if r.Decision != "" {
		str(`,"decision":`, r.Decision)
	}
	if r.DecisionBatch != "" {
		str(`,"decisionBatch":`, r.DecisionBatch)
	}
	if len(r.Data) > 0 {
		b = append(b, `,"data":`...)
		b = render.AppendJSONRaw(b, r.Data)
	}
	return append(b, '}')
}

// lsRecord is a dead-letter row on its way to a machine format: it
// writes the JSON of toRow(r, …) straight from the broker's row, with no
// row struct and no string built in between (the hot path of
// `ls -o ndjson`; a test holds the two equal).
type lsRecord struct {
	r   client.Row
	now time.Time
	d   *ledger.Decision
	slo time.Duration // the row's triage SLO, 0 for none
}

func (x lsRecord) AppendJSON(b []byte) []byte {
	r := x.r
	str := func(name, v string) {
		b = append(b, name...)
		b = render.AppendJSONString(b, v)
	}
	b = append(b, `{"address":"`...)
	b = render.AppendJSONStringContent(b, r.PartitionID)
	b = append(b, '/')
	b = render.AppendJSONStringContent(b, r.TransactionID)
	b = append(b, '"')
	str(`,"partitionId":`, r.PartitionID)
	str(`,"transactionId":`, r.TransactionID)
	str(`,"messageId":`, r.ID)
	str(`,"queue":`, r.Queue)
	str(`,"partition":`, r.Partition)
	str(`,"consumerGroup":`, r.ConsumerGroup)
	str(`,"errorMessage":`, r.ErrorMessage)
	str(`,"errorClass":`, replay.ClassID(r.ErrorMessage))
	b = append(b, `,"retryCount":`...)
	b = strconv.AppendInt(b, int64(r.RetryCount), 10)
	b = append(b, `,"failedAt":"`...)
	b = render.AppendTimestamp(b, r.FailedAt)
	b = append(b, `","ageSeconds":`...)
	b = strconv.AppendInt(b, int64(render.SecondsSince(x.now, r.FailedAt)), 10)
	env := r.Undecryptable()
	b = append(b, `,"isEncrypted":`...)
	b = strconv.AppendBool(b, r.IsEncrypted || env)
	b = append(b, `,"envelope":`...)
	b = strconv.AppendBool(b, env)
	if x.d != nil {
		if l := decisionLabel(*x.d, r, x.now, x.slo); l != "" {
			str(`,"decision":`, l)
		}
		if x.d.BatchID != "" {
			str(`,"decisionBatch":`, x.d.BatchID)
		}
	}
	if len(r.Data) > 0 {
		b = append(b, `,"data":`...)
		b = render.AppendJSONRaw(b, r.Data)
	}
	return append(b, '}')
}

func toRow(r client.Row, now time.Time, d *ledger.Decision, slo time.Duration) Row {
	env := r.Undecryptable()
	out := Row{Address: r.Address().String(), PartitionID: r.PartitionID, TransactionID: r.TransactionID, MessageID: r.ID,
		Queue: r.Queue, Partition: r.Partition, ConsumerGroup: r.ConsumerGroup, ErrorMessage: r.ErrorMessage,
		ErrorClass: replay.ClassID(r.ErrorMessage), RetryCount: r.RetryCount, FailedAt: render.Timestamp(r.FailedAt),
		AgeSeconds: int64(render.SecondsSince(now, r.FailedAt)), IsEncrypted: r.IsEncrypted || env,
		Envelope: env, Data: r.Data}
	if d != nil {
		out.Decision, out.DecisionBatch = decisionLabel(*d, r, now, slo), d.BatchID
	}
	return out
}

// decisionLabel is the DECISION column for a row: the latest decision's
// label when it covers the row ("replay (not carried out)" once a replay
// or discard has waited longer than the row's triage SLO slo), and "back
// after replay" (or discard, hold) when the row failed after it: the
// message dead-lettered again, and that row is undecided.
func decisionLabel(d ledger.Decision, r client.Row, now time.Time, slo time.Duration) string {
	switch {
	case d.Covers(r.FailedAt, now) && d.NotCarriedOut(now, slo):
		return d.Label(now) + " (not carried out)"
	case d.Covers(r.FailedAt, now) || !d.Active(now):
		return d.Label(now)
	}
	return "back after " + d.Action
}

// triageSLO is the triage SLO of a queue's consumer group by the
// config's policies (0 when none sets one).
func triageSLO(cfg *config.Config, queue, group string) time.Duration {
	if cfg == nil {
		return 0
	}
	p, _ := cfg.PolicyFor(queue, group)
	return p.TriageSLO.D()
}

// groupName shows a consumer group to a person: queue-mode consumers'
// internal name is spelled out.
func groupName(g string) string { return client.GroupLabel(g) }

// decisions loads the latest decision per address. A ledger that cannot
// be reached only costs the DECISION column (with a warning): the DLQ is
// still worth seeing at 3am. A ledger that is misconfigured is an error.
func decisions(ctx context.Context, f *cmdutil.Factory, broker string) (map[client.Address]ledger.Decision, error) {
	ld, err := f.Ledger(ctx)
	if err == nil {
		var m map[client.Address]ledger.Decision
		if m, err = ld.LatestDecisions(ctx, broker); err == nil {
			return m, nil
		}
	}
	if errors.Is(err, ledger.ErrUnavailable) {
		fmt.Fprintf(f.IO.ErrOut, "warning: decisions not shown: %v\n", err)
		return map[client.Address]ledger.Decision{}, nil
	}
	return nil, err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
