package batch

import (
	"context"
	"slices"
)

// RecordForTest records a planned batch and reads all of it as a run
// does, a claim at a time, without running it (what a run archives as it
// reads is archived): the batch's id.
func (p *Pending) RecordForTest(ctx context.Context) (string, error) {
	b, err := p.record(ctx, "tester")
	if err != nil {
		return "", err
	}
	src := p.source()
	pos := make([]int32, src.Len())
	for i := range pos {
		pos[i] = int32(i)
	}
	for claim := range slices.Chunk(pos, 256) {
		if _, err := src.Load(ctx, claim); err != nil {
			return b.ID, err
		}
	}
	return b.ID, nil
}
