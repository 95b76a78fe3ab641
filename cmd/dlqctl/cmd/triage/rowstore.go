package triage

import (
	"math"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// rowStore holds the screen's rows (without payloads) in little memory: a
// row's own ids (transaction and message) end to end in one string, and
// the texts that repeat from row to row (partition id, queue, partition,
// group, error message) once each, the row keeping their numbers. A
// deadletter.Row was about 1.2 KB with its strings; a stored one is its two
// ids and 64 bytes. Rows are kept in fixed blocks, so that growing never
// copies them all. Rows are rebuilt on demand (At), which allocates
// nothing.
type rowStore struct {
	blocks [][]storedRow
	n      int
	texts  []string          // by number
	seen   map[string]uint32 // text → number
}

// blockRows is how many rows a block holds.
const blockRows = 4096

type storedRow struct {
	ids       string // transactionId then messageId
	txEnd     uint32 // where the first ends in ids
	pid       uint32
	queue     uint32
	partition uint32
	group     uint32
	errText   uint32
	retries   int32
	encrypted bool
	failedAt  int64 // unix nanoseconds
}

func newRowStore() *rowStore {
	return &rowStore{seen: map[string]uint32{}}
}

// Len is how many rows are held.
func (s *rowStore) Len() int { return s.n }

// Add keeps a row and returns its index.
func (s *rowStore) Add(r deadletter.Row) int {
	if s.n%blockRows == 0 {
		s.blocks = append(s.blocks, make([]storedRow, 0, blockRows))
	}
	b := &s.blocks[len(s.blocks)-1]
	*b = append(*b, storedRow{
		ids: r.TransactionID + r.ID, txEnd: uint32(len(r.TransactionID)), pid: s.text(r.PartitionID),
		queue: s.text(r.Queue), partition: s.text(r.Partition), group: s.text(r.ConsumerGroup), errText: s.text(r.ErrorMessage),
		retries: int32(min(r.RetryCount, math.MaxInt32)), encrypted: r.IsEncrypted, failedAt: r.FailedAt.UnixNano(),
	})
	s.n++
	return s.n - 1
}

// At rebuilds row i as the broker listed it (without its payload).
func (s *rowStore) At(i int) deadletter.Row {
	x := &s.blocks[i/blockRows][i%blockRows]
	return deadletter.Row{
		PartitionID: s.texts[x.pid], TransactionID: x.ids[:x.txEnd], ID: x.ids[x.txEnd:],
		Queue: s.texts[x.queue], Partition: s.texts[x.partition], ConsumerGroup: s.texts[x.group], ErrorMessage: s.texts[x.errText],
		RetryCount: int(x.retries), IsEncrypted: x.encrypted, FailedAt: time.Unix(0, x.failedAt).UTC(),
	}
}

// text numbers a text, keeping one copy of it (the row's strings share
// the page's allocation, which must not be held by a kept text).
func (s *rowStore) text(t string) uint32 {
	if n, ok := s.seen[t]; ok {
		return n
	}
	t = strings.Clone(t)
	n := uint32(len(s.texts))
	s.texts = append(s.texts, t)
	s.seen[t] = n
	return n
}
