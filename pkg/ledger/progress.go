package ledger

import (
	"context"
	"time"
)

// Progress is how far a batch got, as the ledger knows it from anywhere:
// its journal's counts (what every run of it did) and what its latest run
// said of itself at its last beat (who runs it, since when, its pace).
type Progress struct {
	BatchID string `json:"batchId"`
	Action  string `json:"action"`
	Status  string `json:"status"`
	Size    int    `json:"size"`
	// Done: published or removed (or found gone); Failed: refused, or its
	// outcome unknown; Skipped: deliberately left; Left: the rest.
	Done    int `json:"done"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
	Left    int `json:"left"`
	Run     Run `json:"run"`
	// Rate is the latest run's pace, addresses a second from its start to
	// its last beat; EstimatedEnd, when what is left would be done at it
	// (zero when either is unknown).
	Rate         float64   `json:"rate"`
	EstimatedEnd time.Time `json:"estimatedEnd,omitzero"`
}

// ProgressOf reads a batch's progress. A hold has none.
func (s *Store) ProgressOf(ctx context.Context, b *Batch) (*Progress, error) {
	p := &Progress{BatchID: b.ID, Action: b.Action, Status: b.Shown(), Size: b.Size}
	counts, err := s.BatchOutcome(ctx, b.ID)
	if err != nil {
		return nil, err
	}
	for k, n := range counts {
		switch k {
		case Pending, Inflight:
		case Failed, Unknown:
			p.Failed += n
		case Skipped:
			p.Skipped += n
		default: // published, or removed with its outcome
			p.Done += n
		}
	}
	p.Left = max(0, p.Size-p.Done-p.Failed-p.Skipped)
	if p.Run, err = s.RunOf(ctx, b.ID); err != nil {
		return nil, err
	}
	if r := p.Run; !r.Started.IsZero() && r.LastBeat.After(r.Started) && r.Done > 0 {
		p.Rate = float64(r.Done) / r.LastBeat.Sub(r.Started).Seconds()
		if b.Status == StatusRunning && !b.Stale {
			p.EstimatedEnd = r.LastBeat.Add(time.Duration(float64(p.Left) / p.Rate * float64(time.Second)))
		}
	}
	return p, nil
}
