package render

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// Stream writes records one at a time in a machine format, so output
// starts before the last record is known and memory stays flat:
// json writes one array, ndjson a record a line, yaml one list.
type Stream struct {
	w     *bufio.Writer
	f     Format
	n     int
	flush bool
	buf   []byte // reused by records that append their own JSON
}

// NewStream starts a stream; f must be JSON, NDJSON or YAML.
func NewStream(w io.Writer, f Format) *Stream {
	return &Stream{w: bufio.NewWriterSize(w, 64<<10), f: f}
}

// FlushEach makes every record reach the writer at once (a human
// watching a pipe); otherwise writes are buffered.
func (s *Stream) FlushEach() { s.flush = true }

// Write adds one record.
func (s *Stream) Write(v any) error {
	var b []byte
	if a, ok := v.(JSONAppender); ok {
		s.buf = a.AppendJSON(s.buf[:0])
		b = s.buf
	} else {
		var err error
		if b, err = json.Marshal(v); err != nil {
			return err
		}
	}
	switch s.f {
	case NDJSON:
		s.w.Write(b)
		s.w.WriteByte('\n')
	case JSON:
		if s.n == 0 {
			s.w.WriteString("[\n")
		} else {
			s.w.WriteString(",\n")
		}
		var ind bytes.Buffer
		if err := json.Indent(&ind, b, "  ", "  "); err != nil {
			return err
		}
		s.w.WriteString("  ")
		s.w.Write(ind.Bytes())
	case YAML:
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		first := true
		for _, line := range bytes.SplitAfter(bytes.TrimRight(y, "\n"), []byte("\n")) {
			if first {
				s.w.WriteString("- ")
				first = false
			} else {
				s.w.WriteString("  ")
			}
			s.w.Write(line)
		}
		s.w.WriteByte('\n')
	default:
		return fmt.Errorf("format %s is not a stream format", s.f)
	}
	s.n++
	if s.flush {
		return s.w.Flush()
	}
	return nil
}

// Close ends the stream (an empty json stream is "[]").
func (s *Stream) Close() error {
	switch s.f {
	case JSON:
		if s.n == 0 {
			s.w.WriteString("[]\n")
		} else {
			s.w.WriteString("\n]\n")
		}
	case YAML:
		if s.n == 0 {
			s.w.WriteString("[]\n")
		}
	}
	return s.w.Flush()
}

// Abort ends a stream cut short (an interrupt, a failed read): what was
// written reaches the writer, and a JSON array is left open, so what
// was printed cannot pass for the whole answer.
func (s *Stream) Abort() error { return s.w.Flush() }

// Document writes one value as a whole document in a machine format.
func Document(w io.Writer, f Format, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	switch f {
	case JSON:
		var ind bytes.Buffer
		if err := json.Indent(&ind, b, "", "  "); err != nil {
			return err
		}
		ind.WriteByte('\n')
		_, err = w.Write(ind.Bytes())
		return err
	case NDJSON:
		_, err = w.Write(append(b, '\n'))
		return err
	case YAML:
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	}
	return fmt.Errorf("format %s is not a document format", f)
}
