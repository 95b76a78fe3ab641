package batch

import (
	"context"
	"encoding/json"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// Details is a recorded batch with all the ledger knows of it
// (`decisions show`; its -o json).
type Details struct {
	Batch    *ledger.Batch         `json:"batch"`
	Manifest []ledger.ManifestItem `json:"manifest"`
	Journal  []ledger.Entry        `json:"journal"`
	Audit    []ledger.AuditEntry   `json:"audit"`
	// BlockedPartitions are the partitions of an ordered replay whose
	// later messages wait behind one that was not replayed.
	BlockedPartitions []replay.Blocked `json:"blockedPartitions,omitempty"`
	// Verification is the last decisions verify of a replay batch.
	Verification *ledger.Verification `json:"lastVerification,omitempty"`
	// Approval is the second person's approval of a batch that needs one.
	Approval *ledger.Approval `json:"approval,omitempty"`
	// Vouched: the ledger vouches for who recorded and approved (the
	// database's roles, on PostgreSQL); on SQLite it cannot.
	Vouched bool `json:"identitiesVouched"`
	// Progress is a running (or interrupted) batch's: how far it got,
	// its run's pace and who runs it.
	Progress *ledger.Progress `json:"progress,omitempty"`
}

// Batches are the recorded batches a filter picks, each as Shown makes
// it.
func Batches(ctx context.Context, ld *ledger.Store, filter ledger.BatchFilter) ([]ledger.Batch, error) {
	batches, err := ld.Batches(ctx, filter)
	if err != nil {
		return nil, err
	}
	for i := range batches {
		if err := shown(ctx, ld, &batches[i]); err != nil {
			return nil, err
		}
	}
	return batches, nil
}

// Describe reads a recorded batch (an id or a unique prefix of one) with
// its manifest, journal, audit, last verification and approval, and the
// partitions an ordered replay left waiting.
func Describe(ctx context.Context, ld *ledger.Store, id string) (*Details, error) {
	b, err := ld.Batch(ctx, id)
	if err != nil {
		return nil, err
	}
	d := &Details{Batch: b, Vouched: ld.Vouches()}
	if err := shown(ctx, ld, b); err != nil {
		return nil, err
	}
	if d.Manifest, err = ld.Manifest(ctx, b.ID); err != nil {
		return nil, err
	}
	if d.Journal, err = ld.BatchEntries(ctx, b.ID); err != nil {
		return nil, err
	}
	if d.Audit, err = ld.AuditFor(ctx, b.ID); err != nil {
		return nil, err
	}
	if d.BlockedPartitions, err = blocked(ctx, ld, b, d.Manifest); err != nil {
		return nil, err
	}
	if d.Verification, err = ld.LastVerification(ctx, b.ID); err != nil {
		return nil, err
	}
	if b.NeedsApproval {
		if d.Approval, err = ld.ApprovalOf(ctx, b.ID); err != nil {
			return nil, err
		}
	}
	if !ledger.IsHold(b.Action) && (b.Status == ledger.StatusRunning || b.Status == ledger.StatusInterrupted) {
		if d.Progress, err = ld.ProgressOf(ctx, b); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// shown makes a batch what decisions ls and show print: a running batch
// whose run is gone is interrupted (with stale: true), its outcome is
// read from its journal now, and the counts add up to its size.
func shown(ctx context.Context, ld *ledger.Store, b *ledger.Batch) error {
	if err := ld.Tally(ctx, b); err != nil {
		return err
	}
	b.Status = b.Shown()
	return nil
}

// blocked reads an ordered replay batch's manifest (in replay order)
// against each address's journal.
func blocked(ctx context.Context, ld *ledger.Store, b *ledger.Batch, man []ledger.ManifestItem) ([]replay.Blocked, error) {
	var set struct {
		Order string `json:"order"`
	}
	_ = json.Unmarshal(b.Settings, &set)
	if !deadletter.ActionOf(b.Action).Ordered || set.Order != replay.OrderPartition {
		return nil, nil
	}
	items := make([]replay.Item, len(man))
	journal := make(map[deadletter.Address]*ledger.Entry, len(man))
	for i, m := range man {
		items[i] = replay.Item{Address: m.Address, Queue: m.Queue, Partition: m.Partition}
		e, err := ld.Entry(ctx, b.Broker, m.Address)
		if err != nil {
			return nil, err
		}
		journal[m.Address] = e
	}
	return replay.BlockedChains(items, b.Destination, journal), nil
}
