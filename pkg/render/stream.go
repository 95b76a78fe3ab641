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
	bw := bufio.NewWriterSize(w, 64<<10)
	lines := bufio.NewReaderSize(items, 64<<10)
	name, _ := json.Marshal(key)
	open := head[:len(head)-1] // without its closing brace
	sep := []byte(",")
	if len(head) == 2 {
		sep = nil
	}
	var ind bytes.Buffer
	n := 0
	each := func(do func(item []byte) error) error {
		for {
			line, err := lines.ReadBytes('\n')
			if line = bytes.TrimSpace(line); len(line) > 0 {
				if err := do(line); err != nil {
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
	switch f {
	case JSON:
		if err := json.Indent(&ind, head, "", "  "); err != nil {
			return err
		}
		top := bytes.TrimSuffix(bytes.TrimSpace(ind.Bytes()), []byte("}"))
		bw.Write(bytes.TrimRight(top, "\n"))
		fmt.Fprintf(bw, "%s\n  %s: [", sep, name)
		err = each(func(item []byte) error {
			ind.Reset()
			if err := json.Indent(&ind, item, "    ", "  "); err != nil {
				return err
			}
			if n > 0 {
				bw.WriteByte(',')
			}
			bw.WriteString("\n    ")
			_, err := bw.Write(ind.Bytes())
			return err
		})
		if n > 0 {
			bw.WriteString("\n  ")
		}
		bw.WriteString("]\n}\n")
	case NDJSON:
		bw.Write(open)
		fmt.Fprintf(bw, "%s%s:[", sep, name)
		err = each(func(item []byte) error {
			if n > 0 {
				bw.WriteByte(',')
			}
			_, err := bw.Write(item)
			return err
		})
		bw.WriteString("]}\n")
	case YAML:
		y, yerr := yaml.JSONToYAML(head)
		if yerr != nil {
			return yerr
		}
		if len(head) > 2 {
			bw.Write(y)
		}
		k, _ := yaml.JSONToYAML([]byte(`{` + string(name) + `:0}`))
		bw.Write(bytes.TrimRight(bytes.TrimSuffix(bytes.TrimSpace(k), []byte("0")), " "))
		err = each(func(item []byte) error {
			y, err := yaml.JSONToYAML(item)
			if err != nil {
				return err
			}
			for i, l := range bytes.Split(bytes.TrimRight(y, "\n"), []byte("\n")) {
				if i == 0 {
					bw.WriteString("\n- ")
				} else {
					bw.WriteString("\n  ")
				}
				bw.Write(l)
			}
			return nil
		})
		if n == 0 {
			bw.WriteString(" []")
		}
		bw.WriteByte('\n')
	default:
		return fmt.Errorf("format %s is not a document format", f)
	}
	if err != nil {
		return err
	}
	return bw.Flush()
}
