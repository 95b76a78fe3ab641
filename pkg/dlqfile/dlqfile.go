// Package dlqfile is the export file: dead letters written out of a
// broker (dlq export) to be read back into one (dlq import). It is
// NDJSON, gzip when its name ends in .gz: a first line that says what
// the file is and where its rows came from, one line a dead-letter row
// (the fields of ls -o ndjson, the payload among them, the failure time
// at the broker's own precision), and a last line with the number of
// rows and the SHA-256 of every byte before it. A file that lacks its
// last line was cut short; one whose digest differs was altered; a
// reader refuses both before it has given a single row to act on, when
// the caller reads it through to the end first (dlq import stages the
// whole file before it plans).
package dlqfile

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Version is the export format this dlqctl writes and reads.
const Version = 1

// Header is a file's first line.
type Header struct {
	// Export is the format's version; its key names the file as an
	// export (a line of ls -o ndjson has no such key).
	Export int `json:"dlqctlExport"`
	// Broker is the source broker's identity as the ledger files it
	// (deadletter.Identity: no credentials, query or fragment), Line the
	// Queen line it ran (Queen 0.x, 1.6, 2.2 …).
	Broker string `json:"broker"`
	Line   string `json:"line,omitempty"`
	// ExportedAt is when the export began.
	ExportedAt time.Time `json:"exportedAt"`
	// Selection is the selection that chose the rows, as a batch records
	// one; Archived: the rows are the ledger's archive (ls --archived),
	// not the DLQ's.
	Selection string `json:"selection"`
	Archived  bool   `json:"archived,omitempty"`
}

// Row is one dead-letter row of the file: the fields ls -o ndjson
// writes (dlq replay --from-file reads an export's addresses as it
// reads ls's), with the failure time as the broker gave it.
type Row struct {
	Address       string          `json:"address"`
	PartitionID   string          `json:"partitionId"`
	TransactionID string          `json:"transactionId"`
	MessageID     string          `json:"messageId"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	ConsumerGroup string          `json:"consumerGroup"`
	ErrorMessage  string          `json:"errorMessage"`
	ErrorClass    string          `json:"errorClass"`
	RetryCount    int             `json:"retryCount"`
	FailedAt      time.Time       `json:"failedAt"`
	IsEncrypted   bool            `json:"isEncrypted"`
	Envelope      bool            `json:"envelope"`
	Data          json.RawMessage `json:"data,omitempty"`
}

// RowOf is a dead-letter row as the file writes it.
func RowOf(r deadletter.Row) Row {
	env := r.Undecryptable()
	return Row{Address: r.Address().String(), PartitionID: r.PartitionID, TransactionID: r.TransactionID, MessageID: r.ID,
		Queue: r.Queue, Partition: r.Partition, ConsumerGroup: r.ConsumerGroup, ErrorMessage: r.ErrorMessage,
		ErrorClass: deadletter.ClassID(r.ErrorMessage), RetryCount: r.RetryCount, FailedAt: r.FailedAt,
		IsEncrypted: r.IsEncrypted || env, Envelope: env, Data: r.Data}
}

// DeadLetter is the row the file holds, as the broker listed it.
func (r Row) DeadLetter() deadletter.Row {
	return deadletter.Row{ID: r.MessageID, TransactionID: r.TransactionID, PartitionID: r.PartitionID, Queue: r.Queue,
		Partition: r.Partition, ConsumerGroup: r.ConsumerGroup, ErrorMessage: r.ErrorMessage, RetryCount: r.RetryCount,
		Data: r.Data, IsEncrypted: r.IsEncrypted, FailedAt: r.FailedAt}
}

// trailer is a file's last line.
type trailer struct {
	End    bool   `json:"dlqctlExportEnd"`
	Rows   int    `json:"rows"`
	SHA256 string `json:"sha256"`
}

// Writer writes an export: the header when made, a line a row, and the
// last line on Close.
type Writer struct {
	out   io.Writer
	gz    *gzip.Writer
	sum   hash.Hash
	rows  int
	buf   bytes.Buffer
	close func(ok bool) error
}

// NewWriter writes an export to w, gzip-compressed when gz.
func NewWriter(w io.Writer, h Header, gz bool) (*Writer, error) {
	x := &Writer{out: w, sum: sha256.New(), close: func(bool) error { return nil }}
	if gz {
		x.gz = gzip.NewWriter(w)
		x.out = x.gz
	}
	h.Export = Version
	return x, x.line(h)
}

// Create writes an export to the file at path, gzip when its name ends
// in .gz: into a temporary file beside it, put in place only once Close
// has written the last line and synced it, so path never holds part of
// an export. It never replaces a file: an earlier export may be the only
// copy of dead letters a move deleted. Abort drops the temporary file.
func Create(path string, h Header) (*Writer, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, ErrExists
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.part")
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(f, 256<<10)
	w, err := NewWriter(bw, h, Compressed(path))
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	w.close = func(ok bool) error {
		if !ok {
			f.Close()
			return os.Remove(f.Name())
		}
		err := bw.Flush()
		if err == nil {
			err = f.Chmod(0o600)
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			// A link puts it in place only where nothing is: an export
			// made meanwhile is not replaced.
			err = os.Link(f.Name(), path)
			if errors.Is(err, fs.ErrExist) {
				err = ErrExists
			}
		}
		os.Remove(f.Name())
		if err != nil {
			return err
		}
		return syncDir(dir)
	}
	return w, nil
}

// ErrExists refuses to write an export over a file.
var ErrExists = errors.New("the file exists: an export never replaces one (it may be the only copy of what a move deleted); choose another name, or remove it first")

// Compressed reports whether a file of that name is written gzip.
func Compressed(path string) bool { return strings.HasSuffix(strings.ToLower(path), ".gz") }

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}

// Add writes a row.
func (w *Writer) Add(r Row) error {
	w.rows++
	return w.line(r)
}

func (w *Writer) line(v any) error {
	w.buf.Reset()
	enc := json.NewEncoder(&w.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	w.sum.Write(w.buf.Bytes())
	_, err := w.out.Write(w.buf.Bytes())
	return err
}

// Close writes the last line (the count and the digest) and, for a
// file, syncs it and puts it in place.
func (w *Writer) Close() error {
	t := trailer{End: true, Rows: w.rows, SHA256: hex.EncodeToString(w.sum.Sum(nil))}
	b, _ := json.Marshal(t)
	_, err := w.out.Write(append(b, '\n'))
	if err == nil && w.gz != nil {
		err = w.gz.Close()
	}
	if err != nil {
		_ = w.close(false)
		return err
	}
	return w.close(true)
}

// Abort drops what was written (a file's temporary file).
func (w *Writer) Abort() { _ = w.close(false) }

// Error is a file refused: cut short, altered, of another version, or
// no export at all. It says so in a sentence.
type Error struct{ Why string }

func (e *Error) Error() string { return e.Why }

// Reader reads an export.
type Reader struct {
	Header Header
	br     *bufio.Reader
	sum    hash.Hash
	line   int
	done   bool
	gz     bool
}

// NewReader reads an export's first line from r (gzip or not, told by
// its first bytes), refusing what is no export or of a version this
// dlqctl does not read.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	gz := false
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, &Error{Why: "the file is gzip but cannot be read as gzip: it was cut short or altered (" + err.Error() + ")"}
		}
		br, gz = bufio.NewReaderSize(zr, 256<<10), true
	}
	x := &Reader{br: br, sum: sha256.New(), gz: gz}
	first, err := x.next()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Why: "the file is empty: it is no dlqctl export"}
		}
		return nil, err
	}
	var probe struct {
		Export *int `json:"dlqctlExport"`
	}
	if json.Unmarshal(first, &probe) != nil || probe.Export == nil {
		return nil, &Error{Why: "the first line is not a dlqctl export's (dlq export writes one; ls -o ndjson does not)"}
	}
	if *probe.Export != Version {
		return nil, &Error{Why: fmt.Sprintf("the file is export version %d; this dlqctl reads version %d (use the dlqctl that wrote it, or a newer one)", *probe.Export, Version)}
	}
	if err := json.Unmarshal(first, &x.Header); err != nil {
		return nil, &Error{Why: "the first line is an export's but cannot be read: " + err.Error()}
	}
	x.sum.Write(first)
	return x, nil
}

// next reads one line, its newline included; io.EOF at the end, an
// Error for a last line without its newline (cut short).
func (x *Reader) next() ([]byte, error) {
	b, err := x.br.ReadBytes('\n')
	x.line++
	switch {
	case err == io.EOF && len(b) == 0:
		return nil, io.EOF
	case err == io.EOF, errors.Is(err, io.ErrUnexpectedEOF):
		return nil, cutShort()
	case err != nil && x.gz:
		// A read error past the gzip header is the stream's (a checksum,
		// a corrupt block): the file's bytes are not what was written.
		return nil, &Error{Why: "the file's gzip stream is damaged (" + err.Error() + "): it was cut short or altered"}
	case err != nil:
		return nil, err
	}
	return b, nil
}

func cutShort() error {
	return &Error{Why: "the file ends before its last line: it was cut short (an export not finished, or a copy not whole)"}
}

// Rows gives the file's rows, and at its end checks the last line: the
// count and the digest of everything before it. A file cut short or
// altered ends with an Error (after the rows before the fault: read the
// whole file before acting on any).
func (x *Reader) Rows() iter.Seq2[Row, error] {
	return func(yield func(Row, error) bool) {
		n := 0
		for {
			b, err := x.next()
			if errors.Is(err, io.EOF) {
				yield(Row{}, cutShort())
				return
			}
			if err != nil {
				yield(Row{}, err)
				return
			}
			var end trailer
			if bytes.Contains(b, []byte(`"dlqctlExportEnd"`)) && json.Unmarshal(b, &end) == nil && end.End {
				// The last line is outside the digest: it must be exactly
				// the line a writer writes (json's keys match in any case).
				if canon, _ := json.Marshal(end); !bytes.Equal(b, append(canon, '\n')) {
					yield(Row{}, &Error{Why: "the file's last line is not as an export writes it: it was altered"})
					return
				}
				if err := x.finish(end, n); err != nil {
					yield(Row{}, err)
				}
				return
			}
			x.sum.Write(b)
			var r Row
			if err := json.Unmarshal(b, &r); err != nil || r.PartitionID == "" || r.TransactionID == "" {
				why := "it names no address"
				if err != nil {
					why = err.Error()
				}
				yield(Row{}, &Error{Why: fmt.Sprintf("line %d is not a dead-letter row (%s): the file was altered", x.line, why)})
				return
			}
			n++
			if !yield(r, nil) {
				return
			}
		}
	}
}

// finish checks the last line and that nothing follows it.
func (x *Reader) finish(end trailer, n int) error {
	switch {
	case end.Rows != n:
		return &Error{Why: fmt.Sprintf("the file says it holds %d rows and holds %d: it was altered after the export", end.Rows, n)}
	case end.SHA256 != hex.EncodeToString(x.sum.Sum(nil)):
		return &Error{Why: "the file's digest does not match what it holds: it was altered after the export"}
	}
	switch _, err := x.next(); {
	case err == nil:
		return &Error{Why: "the file goes on after its last line: it was altered (or two exports were joined)"}
	case !errors.Is(err, io.EOF):
		var fe *Error
		if errors.As(err, &fe) && fe.Why == cutShort().Error() {
			return &Error{Why: "the file goes on after its last line: it was altered (or two exports were joined)"}
		}
		return err
	}
	x.done = true
	return nil
}

// Complete reports whether the file was read to its last line and found
// whole.
func (x *Reader) Complete() bool { return x.done }
