package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

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
	// CopyOf: the address is a copy a replay published (of that dead
	// letter, by that batch), back in the DLQ; OriginalDecisions are
	// the original's.
	CopyOf            *ledger.Lineage   `json:"copyOf,omitempty"`
	OriginalDecisions []ledger.Decision `json:"originalDecisions,omitempty"`
	// Went is where the discard that took the message put it first
	// (exported to a file, replayed into another broker), as its batch
	// recorded.
	Went string `json:"went,omitempty"`
}

// ReplayedCopy is where a replay put a message, and its status there.
type ReplayedCopy struct {
	PartitionID   string `json:"partitionId,omitempty"`
	TransactionID string `json:"transactionId"`
	Queue         string `json:"queue,omitempty"`
	Status        string `json:"status,omitempty"`
	// Envelope: the copy's payload is an encryption envelope (a 2.x move
	// of a row the broker could not decrypt pushes it as it was).
	Envelope bool `json:"envelope,omitempty"`
}

// Lookup gathers everything known about one address: the broker's detail
// route and its rows in the DLQ, then the ledger's history (ld may be nil).
func Lookup(ctx context.Context, cl *client.Client, ld *ledger.Store, addr deadletter.Address, now time.Time) (ShowResult, error) {
	var rows []deadletter.Row
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
		q := client.ListQuery{Limit: PageSize, NoData: m != nil}
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
		row := ToRow(r, now, nil, 0)
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
	if !res.InDLQ && m == nil && len(res.Decisions) == 0 && res.Journal == nil && len(res.Archived) == 0 && res.CopyOf == nil {
		return res, errs.NotFoundf("no dead-letter row at %s, and the ledger knows nothing of it", addr)
	}
	if res.Queue == "" && len(res.Archived) > 0 {
		a := res.Archived[0]
		res.Queue, res.Partition, res.MessageID = a.Queue, a.Partition, a.MessageID
	}
	if len(res.Data) == 0 && len(res.Archived) > 0 {
		res.Data = res.Archived[0].Payload
	}
	res.Undecryptable = deadletter.IsEnvelope(res.Data) && (m != nil || cl.ListDecrypts())
	return res, nil
}

// FindBareID finds the address of a bare transaction id: in the DLQ
// (reading it, without payloads), else in the ledger. Several partitions
// holding it is a usage error listing them.
func FindBareID(ctx context.Context, cl *client.Client, ld *ledger.Store, txid string) (deadletter.Address, error) {
	partitions := map[deadletter.Address][]deadletter.Row{}
	for r, err := range cl.Rows(ctx, client.ListQuery{Limit: PageSize, NoData: true}) {
		if err != nil {
			return deadletter.Address{}, err
		}
		if r.TransactionID == txid {
			partitions[r.Address()] = append(partitions[r.Address()], r)
		}
	}
	if len(partitions) == 0 && ld != nil {
		known, err := ld.AddressesOf(ctx, cl.Broker(), txid)
		if err != nil {
			return deadletter.Address{}, err
		}
		for _, a := range known {
			partitions[a] = nil
		}
	}
	switch len(partitions) {
	case 0:
		return deadletter.Address{}, errs.NotFoundf("no dead letter has transaction id %q, and the ledger knows none (give PARTITION_ID/TRANSACTION_ID to look up a message that is not dead-lettered)", txid)
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
	return deadletter.Address{}, errs.Usagef("transaction id %q is in %d partitions; give one of: %s", txid, len(cands), strings.Join(cands, ", "))
}

// showHistory adds what the ledger knows of an address: decisions, its
// journal, archived rows, and where a replay put it (with its status now).
func showHistory(ctx context.Context, cl *client.Client, ld *ledger.Store, addr deadletter.Address, res *ShowResult) error {
	ds, err := ld.DecisionsFor(ctx, cl.Broker(), addr)
	if err != nil {
		return err
	}
	res.Decisions = append(res.Decisions, ds...)
	lin, err := ld.LineageOf(ctx, cl.Broker(), []deadletter.Address{addr})
	if err != nil {
		return err
	}
	if l, ok := lin[addr]; ok {
		res.CopyOf = &l
		// What was decided of the original is this copy's history too.
		if res.OriginalDecisions, err = ld.DecisionsFor(ctx, cl.Broker(), l.Original); err != nil {
			return err
		}
	}
	if res.Journal, err = ld.Entry(ctx, cl.Broker(), addr); err != nil {
		return err
	}
	if !res.InDLQ {
		if res.Archived, err = ld.ArchivedRows(ctx, cl.Broker(), ledger.ArchiveFilter{Address: &addr}); err != nil {
			return err
		}
	}
	j := res.Journal
	if j != nil && deadletter.ActionOf(j.Action).Discards() && j.State == ledger.Removed {
		if b, err := ld.Batch(ctx, j.BatchID); err == nil && b != nil {
			res.Went = b.Destination
		}
	}
	if j == nil || j.ReplayTxID == "" || !deadletter.ActionOf(j.Action).Publishes {
		return nil
	}
	cp := &ReplayedCopy{PartitionID: j.ReplayPartitionID, TransactionID: j.ReplayTxID}
	// /retry and a manual replay to the same queue land in the message's
	// own partition; --to-queue records where its copy went.
	if cp.PartitionID == "" {
		cp.PartitionID = addr.PartitionID
	}
	if m, err := cl.Get(ctx, deadletter.Address{PartitionID: cp.PartitionID, TransactionID: cp.TransactionID}); err == nil {
		cp.Status, cp.Queue, cp.Envelope = m.Status, m.Queue, deadletter.IsEnvelope(m.Payload)
	} else if errors.Is(err, client.ErrNoDeadLetterRow) {
		cp.Status = "not found"
	}
	res.ReplayedAs = cp
	return nil
}
