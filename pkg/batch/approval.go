package batch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// Four eyes for large batches (config approval: {min-messages: N}): a
// fresh replay or discard of more than N messages is recorded awaiting
// approval, not run (Run's Result.Awaiting); `decisions approve` by
// someone other than its author approves its plan (Approve); `--batch`
// runs it once approved, and only as approved (Refusal): a changed
// destination or transform, or a changed manifest, needs a new approval.

// AwaitingError: the batch awaits a second person's approval.
type AwaitingError struct{ BatchID, By string }

func (e *AwaitingError) Error() string {
	return fmt.Sprintf("batch %s awaits approval by someone other than %s", e.BatchID, e.By)
}

// ChangedError: the plan is not the one approved; What is the setting
// that changed since, 0 for the manifest.
type ChangedError struct {
	BatchID string
	What    Given
}

func (e *ChangedError) Error() string { return e.Words(e.What.String()) }

// Words is the refusal with the setting that changed called name.
func (e *ChangedError) Words(name string) string {
	if e.What == 0 {
		name = "the manifest"
	}
	return fmt.Sprintf("batch %s was approved for another plan (%s changed since)", e.BatchID, name)
}

// StricterThreshold is the approval threshold of two (each 0 for none):
// the one that asks a second person sooner. The team's, in the ledger,
// binds everyone; a person's own config may only ask for more approval.
func StricterThreshold(a, b int) int {
	switch {
	case a <= 0:
		return max(b, 0)
	case b <= 0:
		return a
	}
	return min(a, b)
}

// planDigest binds an approval: the manifest's digest and what decides
// where the copies go and what they carry.
func planDigest(manifest string, st Settings) string {
	parts := []string{manifest}
	for _, s := range settingsTable {
		// to-partition came after the approvals that bind the rest: it
		// joins the digest only when set.
		if v := s.value(&st); s.binds && (v != "" || s.given != GivenToPartition) {
			parts = append(parts, v)
		}
	}
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:])
}

// loadApproval reads a recorded batch's approval and manifest digest.
func (p *Pending) loadApproval(ctx context.Context) error {
	b := p.in.batch
	if !b.NeedsApproval {
		return nil
	}
	var err error
	if p.approval, err = p.env.Ledger.ApprovalOf(ctx, b.ID); err != nil {
		return err
	}
	p.manifestDigest, err = p.env.Ledger.ManifestDigest(ctx, b.ID)
	return err
}

// approvalRefusal is why a recorded batch that needs approval cannot run
// as asked, or nil.
func (p *Pending) approvalRefusal() error {
	b := p.in.batch
	if b == nil || !b.NeedsApproval {
		return nil
	}
	if p.approval == nil {
		return &AwaitingError{BatchID: b.ID, By: b.By}
	}
	if planDigest(p.manifestDigest, p.settings) != p.approval.Digest {
		var rec Settings
		_ = json.Unmarshal(b.Settings, &rec)
		var what Given // the manifest
		switch {
		case rec.ToQueue != p.settings.ToQueue:
			what = GivenToQueue
		case rec.Transform != p.settings.Transform:
			what = GivenTransform
		case rec.ToPartition != p.settings.ToPartition:
			what = GivenToPartition
		}
		return &ChangedError{BatchID: b.ID, What: what}
	}
	return nil
}

// awaits reports whether a fresh batch is to be recorded awaiting
// approval rather than run.
func (p *Pending) awaits() bool {
	return p.in.batch == nil && p.env.needsApproval(p.req.Action, p.Messages())
}

// needsApproval reports whether a fresh batch of the action over that
// many messages waits for a second person's approval: the one rule, for
// a batch a run records and one dlq decide does (a hold acts on nothing,
// and never waits).
func (env Env) needsApproval(action string, messages int) bool {
	return !ledger.IsHold(action) && env.ApprovalAbove > 0 && messages > env.ApprovalAbove
}

// Approve is decisions approve: someone other than the batch's author
// approves the plan of a batch awaiting approval, as it was recorded. by
// is the name the approval is recorded under where the ledger cannot
// vouch for one (ledger.Store.Approve); the approval is returned as
// recorded.
func Approve(ctx context.Context, ld *ledger.Store, id, by, why string, now time.Time) (*ledger.Batch, *ledger.Approval, error) {
	if strings.TrimSpace(why) == "" {
		return nil, nil, ErrNoReason
	}
	b, err := ld.Batch(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	var st Settings
	_ = json.Unmarshal(b.Settings, &st)
	m, err := ld.ManifestDigest(ctx, b.ID)
	if err != nil {
		return nil, nil, err
	}
	if b, err = ld.Approve(ctx, b.ID, by, why, planDigest(m, st), now); err != nil {
		return nil, nil, err
	}
	a, err := ld.ApprovalOf(ctx, b.ID)
	return b, a, err
}
