package render

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
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
	enc   *jsontext.Encoder // ndjson's, a record a line
}

// recordOptions write a record through the JSON library as encoding/json
// writes it (fields left out, map keys in order, HTML characters and
// invalid UTF-8 escaped), so a record reads the same in every format and
// in every command.
var recordOptions = jsonv1.DefaultOptionsV1()

// NewStream starts a stream; f must be JSON, NDJSON or YAML.
func NewStream(w io.Writer, f Format) *Stream {
	s := &Stream{w: bufio.NewWriterSize(w, 64<<10), f: f}
	if f == NDJSON {
		s.enc = jsontext.NewEncoder(s.w, recordOptions)
	}
	return s
}

// FlushEach makes every record reach the writer at once (a human
// watching a pipe); otherwise writes are buffered.
func (s *Stream) FlushEach() { s.flush = true }

// Write adds one record.
func (s *Stream) Write(v any) error {
	switch s.f {
	case NDJSON:
		if err := jsonv2.MarshalEncode(s.enc, v); err != nil {
			return err
		}
	case JSON, YAML:
		b, err := jsonv2.Marshal(v, recordOptions)
		if err != nil {
			return err
		}
		if err := s.writeRecord(b); err != nil {
			return err
		}
	default:
		return fmt.Errorf("format %s is not a stream format", s.f)
	}
	return s.wrote()
}

// wrote counts a record written, and flushes it when each is to be.
func (s *Stream) wrote() error {
	s.n++
	if s.flush {
		return s.w.Flush()
	}
	return nil
}

// writeRecord writes a record's JSON as an element of the json array or
// the yaml list.
func (s *Stream) writeRecord(b []byte) error {
	if s.f == JSON {
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
		_, err := s.w.Write(ind.Bytes())
		return err
	}
	return writeYAMLItem(s.w, b)
}

// writeYAMLItem writes one JSON value as an element of a YAML list.
func writeYAMLItem(w *bufio.Writer, item []byte) error {
	y, err := yaml.JSONToYAML(item)
	if err != nil {
		return err
	}
	for i, line := range bytes.SplitAfter(bytes.TrimRight(y, "\n"), []byte("\n")) {
		if i == 0 {
			w.WriteString("- ")
		} else {
			w.WriteString("  ")
		}
		w.Write(line)
	}
	return w.WriteByte('\n')
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

// DocumentWithList writes v as Document does, with one more field, key,
// whose value is the list of JSON values in items, one a line (a spool
// a command wrote as it went): the list is copied through a line at a
// time, never held. v must marshal to an object without key; the list
// comes last.
func DocumentWithList(w io.Writer, f Format, v any, key string, items io.Reader) error {
	head, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(head) < 2 || head[0] != '{' {
		return fmt.Errorf("a %T is not an object", v)
	}
	l := &listDoc{w: bufio.NewWriterSize(w, 64<<10), lines: bufio.NewReaderSize(items, 64<<10), head: head}
	l.name, _ = json.Marshal(key)
	if len(head) > 2 {
		l.sep = ","
	}
	switch f {
	case JSON:
		err = l.json()
	case NDJSON:
		err = l.ndjson()
	case YAML:
		err = l.yaml()
	default:
		return fmt.Errorf("format %s is not a document format", f)
	}
	if err != nil {
		return err
	}
	return l.w.Flush()
}

// listDoc is a document whose last field's list is read from lines.
type listDoc struct {
	w     *bufio.Writer
	lines *bufio.Reader
	head  []byte // the document without the list
	name  []byte // the list's key, quoted
	sep   string // "," when the head has fields
}

// each gives do every item, counting from 0.
func (l *listDoc) each(do func(n int, item []byte) error) error {
	for n := 0; ; {
		line, err := l.lines.ReadBytes('\n')
		if line = bytes.TrimSpace(line); len(line) > 0 {
			if err := do(n, line); err != nil {
				return err
			}
			n++
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (l *listDoc) json() error {
	var ind bytes.Buffer
	if err := json.Indent(&ind, l.head, "", "  "); err != nil {
		return err
	}
	top := bytes.TrimSuffix(bytes.TrimSpace(ind.Bytes()), []byte("}"))
	l.w.Write(bytes.TrimRight(top, "\n"))
	fmt.Fprintf(l.w, "%s\n  %s: [", l.sep, l.name)
	some := false
	err := l.each(func(n int, item []byte) error {
		ind.Reset()
		if err := json.Indent(&ind, item, "    ", "  "); err != nil {
			return err
		}
		if n > 0 {
			l.w.WriteByte(',')
		}
		some = true
		l.w.WriteString("\n    ")
		_, err := l.w.Write(ind.Bytes())
		return err
	})
	if some {
		l.w.WriteString("\n  ")
	}
	l.w.WriteString("]\n}\n")
	return err
}

func (l *listDoc) ndjson() error {
	l.w.Write(l.head[:len(l.head)-1]) // without its closing brace
	fmt.Fprintf(l.w, "%s%s:[", l.sep, l.name)
	err := l.each(func(n int, item []byte) error {
		if n > 0 {
			l.w.WriteByte(',')
		}
		_, err := l.w.Write(item)
		return err
	})
	l.w.WriteString("]}\n")
	return err
}

func (l *listDoc) yaml() error {
	y, err := yaml.JSONToYAML(l.head)
	if err != nil {
		return err
	}
	if len(l.head) > 2 {
		l.w.Write(y)
	}
	k, _ := yaml.JSONToYAML([]byte(`{` + string(l.name) + `:0}`))
	l.w.Write(bytes.TrimRight(bytes.TrimSuffix(bytes.TrimSpace(k), []byte("0")), " "))
	some := false
	err = l.each(func(n int, item []byte) error {
		if !some {
			some = true
			l.w.WriteByte('\n')
		}
		return writeYAMLItem(l.w, item)
	})
	if !some {
		l.w.WriteString(" []\n")
	}
	return err
}
