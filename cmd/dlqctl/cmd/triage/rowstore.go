package triage

import (
	"bufio"
	"encoding/binary"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// rowStore holds the screen's rows (without payloads) outside the heap:
// each row is a fixed record in one spool and its two ids (transaction,
// message) in another, both files in TMPDIR, unlinked once open, so the
// operating system's page cache holds them, not the process (1M rows
// are about 100 MB of spool, and the screen stays at a few tens of MB).
// The texts that repeat from row to row (partition id, queue, partition,
// group, error message) are kept once each in memory, a row keeping
// their numbers. Rows are read back one at a time (At) or in index order
// (Each, EachOf), which reads the spools sequentially. Where TMPDIR
// cannot take the spools, they are kept in memory.
type rowStore struct {
	recs, ids spool
	n         int
	texts     []string          // by number
	seen      map[string]uint32 // text → number
	rec       [recSize]byte
	// last is the row At gave last (a frame asks for each of its rows
	// once a column).
	last    deadletter.Row
	lastAt  int
	hasLast bool
}

// recSize is a row's record: where its ids start in the ids spool (8),
// their lengths (4 + 4), partition id, queue, partition, group and error
// numbers (5 × 4), retries (4), encrypted (1), failed at (8).
const recSize = 8 + 4 + 4 + 5*4 + 4 + 1 + 8

func newRowStore() *rowStore {
	return &rowStore{recs: newSpool(), ids: newSpool(), seen: map[string]uint32{}}
}

// Len is how many rows are held.
func (s *rowStore) Len() int { return s.n }

// Add keeps a row and returns its index.
func (s *rowStore) Add(r deadletter.Row) int {
	off := s.ids.append([]byte(r.TransactionID))
	s.ids.append([]byte(r.ID))
	b := s.rec[:]
	binary.LittleEndian.PutUint64(b[0:], uint64(off))
	binary.LittleEndian.PutUint32(b[8:], uint32(len(r.TransactionID)))
	binary.LittleEndian.PutUint32(b[12:], uint32(len(r.ID)))
	for k, t := range []string{r.PartitionID, r.Queue, r.Partition, r.ConsumerGroup, r.ErrorMessage} {
		binary.LittleEndian.PutUint32(b[16+4*k:], s.text(t))
	}
	binary.LittleEndian.PutUint32(b[36:], uint32(int32(min(r.RetryCount, math.MaxInt32))))
	b[40] = 0
	if r.IsEncrypted {
		b[40] = 1
	}
	binary.LittleEndian.PutUint64(b[41:], uint64(r.FailedAt.UnixNano()))
	s.recs.append(b)
	s.n++
	return s.n - 1
}

// At rebuilds row i as the broker listed it (without its payload).
func (s *rowStore) At(i int) deadletter.Row {
	if s.hasLast && s.lastAt == i {
		return s.last
	}
	defer func() { s.hasLast, s.lastAt = true, i }()
	var b [recSize]byte
	s.recs.readAt(b[:], int64(i)*recSize)
	s.last = s.decode(b[:], func(off int64, n int) string {
		p := make([]byte, n)
		s.ids.readAt(p, off)
		return string(p)
	})
	return s.last
}

// decode makes a row of its record; ids reads n bytes of the ids spool
// at off.
func (s *rowStore) decode(b []byte, ids func(off int64, n int) string) deadletter.Row {
	off := int64(binary.LittleEndian.Uint64(b[0:]))
	txLen, idLen := int(binary.LittleEndian.Uint32(b[8:])), int(binary.LittleEndian.Uint32(b[12:]))
	both := ids(off, txLen+idLen)
	text := func(k int) string { return s.texts[binary.LittleEndian.Uint32(b[16+4*k:])] }
	return deadletter.Row{
		PartitionID: text(0), TransactionID: both[:txLen], ID: both[txLen:],
		Queue: text(1), Partition: text(2), ConsumerGroup: text(3), ErrorMessage: text(4),
		RetryCount: int(int32(binary.LittleEndian.Uint32(b[36:]))), IsEncrypted: b[40] == 1,
		FailedAt: time.Unix(0, int64(binary.LittleEndian.Uint64(b[41:]))).UTC(),
	}
}

// Each hands fn every row in index order, reading the spools once from
// start to end; fn returning false stops it.
func (s *rowStore) Each(fn func(i int, r deadletter.Row) bool) {
	s.scan(func(yield func(int) bool) {
		for i := range s.n {
			if !yield(i) {
				return
			}
		}
	}, fn)
}

// EachOf hands fn the rows at idx, which ascend (a group's members are
// filed as the rows come), reading the spools forward once.
func (s *rowStore) EachOf(idx []int, fn func(i int, r deadletter.Row) bool) {
	s.scan(func(yield func(int) bool) {
		for _, i := range idx {
			if !yield(i) {
				return
			}
		}
	}, fn)
}

func (s *rowStore) scan(indices func(yield func(int) bool), fn func(i int, r deadletter.Row) bool) {
	recs, ids := s.recs.reader(), s.ids.reader()
	var b [recSize]byte
	var idBuf []byte
	indices(func(i int) bool {
		if err := recs.at(b[:], int64(i)*recSize); err != nil {
			return false
		}
		r := s.decode(b[:], func(off int64, n int) string {
			if cap(idBuf) < n {
				idBuf = make([]byte, n)
			}
			idBuf = idBuf[:n]
			_ = ids.at(idBuf, off)
			return string(idBuf)
		})
		return fn(i, r)
	})
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

// Close lets the spools go.
func (s *rowStore) Close() {
	s.recs.close()
	s.ids.close()
}

// spool is bytes appended at its end and read back anywhere: a file in
// TMPDIR, unlinked once open (or, where none can be made, memory).
type spool struct {
	f    *os.File
	w    *bufio.Writer
	size int64
	// dirty: bytes appended sit in w, not yet in the file.
	dirty bool
	mem   [][]byte // without a file: blocks of memBlock
}

const memBlock = 1 << 20

func newSpool() spool {
	f, err := os.CreateTemp("", "dlqctl-triage-*")
	if err != nil {
		return spool{}
	}
	// Unlinked at once where the system allows it (elsewhere at close).
	_ = os.Remove(f.Name())
	return spool{f: f, w: bufio.NewWriterSize(f, 256<<10)}
}

// append adds p and returns where it starts.
func (sp *spool) append(p []byte) int64 {
	off := sp.size
	sp.size += int64(len(p))
	if sp.f != nil {
		_, _ = sp.w.Write(p)
		sp.dirty = true
		return off
	}
	for len(p) > 0 {
		if len(sp.mem) == 0 || len(sp.mem[len(sp.mem)-1]) == memBlock {
			sp.mem = append(sp.mem, make([]byte, 0, memBlock))
		}
		last := &sp.mem[len(sp.mem)-1]
		k := min(len(p), memBlock-len(*last))
		*last = append(*last, p[:k]...)
		p = p[k:]
	}
	return off
}

// readAt fills p from off (zeros where it cannot).
func (sp *spool) readAt(p []byte, off int64) {
	if sp.f != nil {
		if sp.dirty {
			_ = sp.w.Flush()
			sp.dirty = false
		}
		_, _ = sp.f.ReadAt(p, off)
		return
	}
	for len(p) > 0 && off < sp.size {
		blk := sp.mem[off/memBlock][off%memBlock:]
		k := copy(p, blk)
		p, off = p[k:], off+int64(k)
	}
}

// reader reads the spool forward from wherever it is asked.
func (sp *spool) reader() *spoolReader {
	if sp.f != nil && sp.dirty {
		_ = sp.w.Flush()
		sp.dirty = false
	}
	r := &spoolReader{sp: sp}
	if sp.f != nil {
		r.br = bufio.NewReaderSize(io.NewSectionReader(sp.f, 0, sp.size), 256<<10)
	}
	return r
}

type spoolReader struct {
	sp  *spool
	br  *bufio.Reader
	pos int64
}

// at reads p at off, off not before where the last read ended.
func (r *spoolReader) at(p []byte, off int64) error {
	if r.br == nil {
		r.sp.readAt(p, off)
		return nil
	}
	if off < r.pos {
		r.sp.readAt(p, off)
		return nil
	}
	if _, err := r.br.Discard(int(off - r.pos)); err != nil {
		return err
	}
	n, err := io.ReadFull(r.br, p)
	r.pos = off + int64(n)
	return err
}

func (sp *spool) close() {
	if sp.f != nil {
		name := sp.f.Name()
		_ = sp.f.Close()
		_ = os.Remove(name)
	}
	sp.mem = nil
}
