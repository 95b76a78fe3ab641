package triage

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// A stored row comes back as it went in (without a payload, which the
// screen never holds), however its texts repeat.
func TestRowStoreGivesRowsBack(t *testing.T) {
	for _, inMemory := range []bool{false, true} {
		rowStoreGivesRowsBack(t, inMemory)
	}
}

func rowStoreGivesRowsBack(t *testing.T, inMemory bool) {
	s := newRowStore()
	if inMemory { // where TMPDIR takes no spool
		s.Close()
		s.recs, s.ids = spool{}, spool{}
	}
	defer s.Close()
	const blockRows = 4096
	var in []deadletter.Row
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 123_000_000, time.UTC)
	for i := range 3*blockRows + 17 {
		in = append(in, deadletter.Row{ID: fmt.Sprintf("m-%d", i), PartitionID: fmt.Sprintf("p-%d", i%7), TransactionID: fmt.Sprintf("order:%d", i),
			Queue: []string{"orders", "payments"}[i%2], Partition: fmt.Sprint(i % 5), ConsumerGroup: []string{"billing", "__QUEUE_MODE__", ""}[i%3],
			ErrorMessage: []string{"order not found", fmt.Sprintf("timeout after %dms", i), ""}[i%3], RetryCount: i % 4, IsEncrypted: i%11 == 0,
			FailedAt: t0.Add(-time.Duration(i) * time.Minute)})
	}
	for _, r := range in {
		s.Add(r)
	}
	if s.Len() != len(in) {
		t.Fatalf("%d rows, want %d", s.Len(), len(in))
	}
	for i, want := range in {
		got := s.At(i)
		if !got.FailedAt.Equal(want.FailedAt) {
			t.Fatalf("row %d failed at %v, want %v", i, got.FailedAt, want.FailedAt)
		}
		got.FailedAt = want.FailedAt
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("row %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
	// Read forward in order, and a group's members in order.
	n := 0
	s.Each(func(i int, r deadletter.Row) bool {
		if i != n || r.TransactionID != in[i].TransactionID || r.ID != in[i].ID {
			t.Fatalf("Each gave row %d (%s) as %d", i, r.TransactionID, n)
		}
		n++
		return true
	})
	var odd []int
	for i := 1; i < len(in); i += 3 {
		odd = append(odd, i)
	}
	k := 0
	s.EachOf(odd, func(i int, r deadletter.Row) bool {
		if i != odd[k] || r.ErrorMessage != in[i].ErrorMessage || r.PartitionID != in[i].PartitionID {
			t.Fatalf("EachOf gave row %d as %+v", i, r)
		}
		k++
		return true
	})
	if n != len(in) || k != len(odd) {
		t.Fatalf("Each gave %d of %d rows, EachOf %d of %d", n, len(in), k, len(odd))
	}
	if len(s.texts) > 7+2+5+3+(3*blockRows+17)/3+2 {
		t.Fatalf("%d texts kept: repeated ones are not kept once", len(s.texts))
	}
}
