package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/dlqctl/dlqctl/pkg/wordscan"
)

// A list answer is read by a scanner of its own rather than a general
// JSON decoder: one pass over each row both validates it (as
// encoding/json/jsontext does with invalid UTF-8 and duplicate names
// allowed) and picks out its fields. The general decoder's pass, then a
// second one over the bytes it returned, cost twice what the transfer of
// the row did (BenchmarkLsNDJSON).

// errShort: the bytes at hand end inside the value being scanned; more of
// the answer is needed (at its end: it was cut short).
var errShort = errors.New("unexpected end of JSON input")

// syntaxError is an answer that is not JSON, and where it stops being so.
type syntaxError struct {
	at  int64 // offset in the answer
	msg string
}

func (e *syntaxError) Error() string { return fmt.Sprintf("invalid JSON at byte %d: %s", e.at, e.msg) }

// scanError is a syntaxError at an index of the bytes being scanned.
type scanError struct {
	i   int
	msg string
}

func (e *scanError) Error() string { return e.msg }

func bad(i int, format string, args ...any) error {
	return &scanError{i, fmt.Sprintf(format, args...)}
}

// maxDepth is how deeply values may nest, as jsontext allows.
const maxDepth = 10000

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func skipWS(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// scanString returns the index after the string that starts at b[i]
// ('"'), and whether it holds escapes.
func scanString(b []byte, i int) (int, bool, error) {
	esc := false
	j := i + 1
	for {
		j = wordscan.StringEnd(b, j)
		if j >= len(b) {
			return 0, esc, errShort
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1, esc, nil
		case c == '\\':
			esc = true
			if j+1 >= len(b) {
				return 0, esc, errShort
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				for k := j + 2; k < j+6; k++ {
					if k >= len(b) {
						return 0, esc, errShort
					}
					if !isHex(b[k]) {
						return 0, esc, bad(k, "invalid escape sequence in a string")
					}
				}
				j += 6
			default:
				return 0, esc, bad(j, "invalid escape sequence in a string")
			}
		default:
			return 0, esc, bad(j, "invalid control character in a string")
		}
	}
}

// scanNumber returns the index after the number at b[i]. A number is
// known to end only at the byte after it: one that reaches the end of b
// is short.
func scanNumber(b []byte, i int) (int, error) {
	j := i
	if b[j] == '-' {
		j++
	}
	digits := func() (int, error) {
		start := j
		for j < len(b) && isDigit(b[j]) {
			j++
		}
		switch {
		case j >= len(b):
			return 0, errShort
		case j == start:
			return 0, bad(j, "invalid number")
		}
		return j, nil
	}
	if j >= len(b) {
		return 0, errShort
	}
	switch {
	case b[j] == '0':
		j++
	case b[j] >= '1' && b[j] <= '9':
		if _, err := digits(); err != nil {
			return 0, err
		}
	default:
		return 0, bad(j, "invalid number")
	}
	if j >= len(b) {
		return 0, errShort
	}
	if b[j] == '.' {
		j++
		if _, err := digits(); err != nil {
			return 0, err
		}
	}
	if b[j] == 'e' || b[j] == 'E' {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if _, err := digits(); err != nil {
			return 0, err
		}
	}
	return j, nil
}

func scanLiteral(b []byte, i int, lit string) (int, error) {
	for k := 0; k < len(lit); k++ {
		switch {
		case i+k >= len(b):
			return 0, errShort
		case b[i+k] != lit[k]:
			return 0, bad(i+k, "invalid literal (want %s)", lit)
		}
	}
	return i + len(lit), nil
}

// scanValue returns the index after the value at b[i], nested depth
// deep (the answer's own object is 1).
func scanValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, errShort
	}
	switch c := b[i]; {
	case c == '"':
		end, _, err := scanString(b, i)
		return end, err
	case c == '{', c == '[':
		return scanContainer(b, i, depth+1)
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	case c == '-' || isDigit(c):
		return scanNumber(b, i)
	}
	return 0, bad(i, "invalid character %q at the start of a value", b[i])
}

// scanContainer returns the index after the object or array at b[i].
func scanContainer(b []byte, i, depth int) (int, error) {
	if depth > maxDepth {
		return 0, bad(i, "values nest more than %d deep", maxDepth)
	}
	object := b[i] == '{'
	closer := byte(']')
	if object {
		closer = '}'
	}
	i = skipWS(b, i+1)
	if i >= len(b) {
		return 0, errShort
	}
	if b[i] == closer {
		return i + 1, nil
	}
	for {
		var err error
		if object {
			if i, err = scanName(b, i); err != nil {
				return 0, err
			}
		}
		if i, err = scanValue(b, i, depth); err != nil {
			return 0, err
		}
		if i, err = afterMember(b, i, closer); err != nil || b[i-1] == closer {
			return i, err
		}
	}
}

// scanName scans a name and its colon at b[i], returning the index of
// the value.
func scanName(b []byte, i int) (int, error) {
	end, _, err := nameEnd(b, i)
	if err != nil {
		return 0, err
	}
	return colon(b, end)
}

func nameEnd(b []byte, i int) (int, bool, error) {
	if i >= len(b) {
		return 0, false, errShort
	}
	if b[i] != '"' {
		return 0, false, bad(i, "invalid character %q where a name was expected", b[i])
	}
	return scanString(b, i)
}

func colon(b []byte, i int) (int, error) {
	i = skipWS(b, i)
	switch {
	case i >= len(b):
		return 0, errShort
	case b[i] != ':':
		return 0, bad(i, "invalid character %q after a name (want ':')", b[i])
	}
	i = skipWS(b, i+1)
	if i >= len(b) {
		return 0, errShort
	}
	return i, nil
}

// afterMember reads what follows a member of a container closed by
// closer: a comma (the index of the next member is returned) or the
// closer (the index after it).
func afterMember(b []byte, i int, closer byte) (int, error) {
	i = skipWS(b, i)
	switch {
	case i >= len(b):
		return 0, errShort
	case b[i] == closer:
		return i + 1, nil
	case b[i] != ',':
		return 0, bad(i, "invalid character %q after a value (want ',' or '%c')", b[i], closer)
	}
	i = skipWS(b, i+1)
	switch {
	case i >= len(b):
		return 0, errShort
	case b[i] == closer:
		return 0, bad(i, "invalid character '%c' after a comma", closer)
	}
	return i, nil
}

// kindAt names the JSON value that starts with c, for errors.
func kindAt(c byte) string {
	switch {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == '-' || isDigit(c):
		return "number"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	}
	return ""
}

// rowNames are the names a row's members have, by first letter, each
// with its closing quote: knownName matches them without scanning them
// as strings.
var rowNames = func() (t [256][]knownField) {
	for _, n := range []string{"id", "transactionId", "partitionId", "queue", "partition", "consumerGroup", "errorMessage",
		"retryCount", "data", "isEncrypted", "failedAt", "createdAt", "producerSub"} {
		t[n[0]] = append(t[n[0]], knownField{n + `"`, rowFieldOf([]byte(n))})
	}
	return t
}()

type knownField struct {
	quoted string // the name and its closing quote
	field  rowField
}

// knownName matches the name at b[i] against rowNames: its field and the
// index after its closing quote, or -1 when it is another name (or one
// spelled with an escape), which the caller scans.
func knownName(b []byte, i int) (rowField, int) {
	if i+1 >= len(b) || b[i] != '"' {
		return fOther, -1
	}
	for _, k := range rowNames[b[i+1]] {
		if end := i + 1 + len(k.quoted); end <= len(b) && string(b[i+1:end]) == k.quoted {
			return k.field, end
		}
	}
	return fOther, -1
}

// scanRow validates the row (an object) at b[i], nested depth deep, and
// picks out its fields. Its strings share one allocation: the row's text
// fields are gathered in a buffer and made into one string, which each
// field slices. It tolerates the field variations of real servers:
// failedAt may be missing (createdAt is its alias on the seed contract),
// data and errorMessage may be null, ids may be numbers.
func scanRow(b []byte, i, depth int, r *Row, noData bool) (int, error) {
	type span struct {
		field      rowField
		start, end int
	}
	var spans [10]span
	ns := 0
	var text [512]byte
	buf := text[:0]
	var created time.Time
	var createdText []byte // createdAt as sent: failedAt is usually the same text
	if depth > maxDepth {
		return 0, bad(i, "values nest more than %d deep", maxDepth)
	}
	i = skipWS(b, i+1)
	if i >= len(b) {
		return 0, errShort
	}
	if b[i] == '}' {
		i++
	} else {
		for {
			field, nend := knownName(b, i)
			var name []byte
			if nend < 0 {
				var nesc bool
				var err error
				if nend, nesc, err = nameEnd(b, i); err != nil {
					return 0, err
				}
				if name = b[i+1 : nend-1]; nesc {
					name = unquote(b[i:nend])
				}
				field = rowFieldOf(name)
			} else {
				name = b[i+1 : nend-1]
			}
			var err error
			if i, err = colon(b, nend); err != nil {
				return 0, err
			}
			start, vesc := i, false
			if b[i] == '"' {
				i, vesc, err = scanString(b, i)
			} else {
				i, err = scanValue(b, i, depth)
			}
			if err != nil {
				return 0, err
			}
			v := b[start:i]
			switch field {
			case fData:
				if !noData && v[0] != 'n' {
					r.Data = bytes.Clone(v)
				}
			case fID, fTransactionID, fPartitionID, fQueue, fPartition, fConsumerGroup, fErrorMessage:
				from := len(buf)
				switch {
				case v[0] == '"' && !vesc:
					buf = append(buf, v[1:len(v)-1]...)
				case v[0] == '"':
					if u, err := jsontext.AppendUnquote(buf, v); err == nil {
						buf = u
					}
				case v[0] == '-' || isDigit(v[0]):
					buf = append(buf, v...)
				}
				if ns < len(spans) {
					spans[ns] = span{field, from, len(buf)}
					ns++
				}
			case fRetryCount:
				if v[0] == '-' || isDigit(v[0]) {
					n, err := strconv.Atoi(string(v))
					if err != nil {
						return 0, fmt.Errorf("retryCount %s: %v", v, err)
					}
					r.RetryCount = n
				}
			case fIsEncrypted:
				r.IsEncrypted = v[0] == 't'
			case fFailedAt, fCreatedAt:
				if v[0] != '"' && v[0] != 'n' {
					return 0, notATimestamp(name, v)
				}
				if v[0] == '"' {
					text := v[1 : len(v)-1]
					if vesc {
						text = unquote(v)
					}
					if field == fFailedAt && createdText != nil && bytes.Equal(text, createdText) {
						r.FailedAt = created
						break
					}
					t, err := parseTimestamp(text)
					if err != nil {
						return 0, fmt.Errorf("%s: %v", name, err)
					}
					if field == fFailedAt {
						r.FailedAt = t
					} else {
						created, createdText = t, text
					}
				}
			}
			if i, err = afterMember(b, i, '}'); err != nil {
				return 0, err
			}
			if b[i-1] == '}' {
				break
			}
		}
	}
	r.plain = wordscan.SafeEnd(buf, 0) == len(buf)
	all := string(buf)
	for _, sp := range spans[:ns] {
		v := all[sp.start:sp.end]
		switch sp.field {
		case fID:
			r.ID = v
		case fTransactionID:
			r.TransactionID = v
		case fPartitionID:
			r.PartitionID = v
		case fQueue:
			r.Queue = v
		case fPartition:
			r.Partition = v
		case fConsumerGroup:
			r.ConsumerGroup = v
		case fErrorMessage:
			r.ErrorMessage = v
		}
	}
	if r.FailedAt.IsZero() {
		r.FailedAt = created
	}
	if r.TransactionID == "" && r.ID != "" && r.PartitionID != "" {
		// 1.x allows a row with no transaction id (the column is
		// nullable): it is listed and counted, under an address that says
		// so and that no call is sent for (Address.Unreachable).
		r.TransactionID = NoTransactionID(r.ID)
	}
	if r.PartitionID == "" || r.TransactionID == "" {
		return 0, fmt.Errorf("dead-letter row without partitionId or transactionId")
	}
	return i, nil
}

// listBuf is the size of the buffer a list answer is read through, and
// bufPool keeps them from one answer to the next.
const listBuf = 64 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, listBuf); return &b }}

// listReader reads a list answer as it streams: a buffer holds the value
// being scanned (a row, or a member of the answer besides its rows) and
// what has arrived after it, never more of the answer than that.
type listReader struct {
	r    io.Reader
	max  int64 // the most one value may take
	buf  []byte
	pos  int   // the next byte to scan
	n    int   // bytes in buf
	base int64 // the answer's offset of buf[0]
	read int64 // bytes read
	eof  bool
}

// more reads more of the answer, keeping buf[keep:] (the value being
// scanned starts there) at the front of the buffer. The scan of a value
// that was short starts again from the value's start, so more reads at
// least as much again as it holds (and 4 KiB): a value arriving in small
// pieces is scanned a few times over, not once a piece.
func (l *listReader) more(keep int) error {
	if l.eof {
		return &syntaxError{l.base + int64(l.n), "the answer ends in the middle of a value"}
	}
	if keep > 0 {
		copy(l.buf, l.buf[keep:l.n])
		l.n -= keep
		l.pos -= keep
		l.base += int64(keep)
	}
	limit := int(min(l.max+64<<10, math.MaxInt32))
	want := min(l.n+max(l.n, 4<<10), limit)
	if want <= l.n {
		return errValueTooLarge
	}
	if want > len(l.buf) {
		l.buf = append(l.buf, make([]byte, max(want, 2*len(l.buf))-len(l.buf))...)
	}
	for l.n < want {
		k, err := l.r.Read(l.buf[l.n:])
		l.n += k
		l.read += int64(k)
		switch {
		case err == io.EOF:
			// A space after the last byte ends a number there (a number
			// is known to end only at the byte after it).
			l.eof = true
			l.buf = append(l.buf[:l.n], ' ')
			l.n++
			return nil
		case err != nil:
			return err
		}
	}
	return nil
}

// scan runs f on the bytes at hand from pos, reading more of the answer
// for as long as f finds them short; f returns the index after what it
// scanned, which becomes pos.
func (l *listReader) scan(f func(b []byte, i int) (int, error)) error {
	for {
		end, err := f(l.buf[:l.n], l.pos)
		switch {
		case err == nil:
			l.pos = end
			return nil
		case err == errShort:
			if err := l.more(l.pos); err != nil {
				return err
			}
		default:
			var se *scanError
			if errors.As(err, &se) {
				return &syntaxError{l.base + int64(se.i), se.msg}
			}
			return err
		}
	}
}

// peek returns the next byte that is not white space, reading as needed.
func (l *listReader) peek() (byte, error) {
	err := l.scan(func(b []byte, i int) (int, error) {
		i = skipWS(b, i)
		if i >= len(b) {
			return 0, errShort
		}
		return i, nil
	})
	if err != nil {
		return 0, err
	}
	return l.buf[l.pos], nil
}

// value scans the value at pos and returns its bytes (the buffer's: good
// until the next scan).
func (l *listReader) value(depth int) ([]byte, error) {
	start := 0
	if err := l.scan(func(b []byte, i int) (int, error) {
		start = i
		return scanValue(b, i, depth)
	}); err != nil {
		return nil, err
	}
	return l.buf[start:l.pos], nil
}

// sep reads what follows a member of a container closed by closer,
// and reports whether that was the closer.
func (l *listReader) sep(closer byte) (bool, error) {
	err := l.scan(func(b []byte, i int) (int, error) { return afterMember(b, i, closer) })
	return err == nil && l.buf[l.pos-1] == closer, err
}

// decodeList reads a list answer: {"messages":[row…], "total":n, …}. An
// answer with no messages key (or messages: null) is an empty page; one
// with an "error" key is the broker's refusal.
func decodeList(l *listReader, noData bool, visit func(Row) bool) (pageInfo, int, error) {
	var info pageInfo
	if l.buf == nil {
		l.buf = *bufPool.Get().(*[]byte)
		defer func() {
			// A buffer grown for a large row goes, not back to the pool.
			if b := l.buf; cap(b) <= listBuf {
				bufPool.Put(&b)
			}
			l.buf = nil
		}()
	}
	c, err := l.peek()
	if err != nil {
		return info, 0, err
	}
	if c != '{' {
		if k := kindAt(c); k != "" {
			return info, 0, fmt.Errorf("the answer is a JSON %s, not an object", k)
		}
		return info, 0, &syntaxError{l.base + int64(l.pos), fmt.Sprintf("invalid character %q at the start of the answer", c)}
	}
	l.pos++
	if c, err = l.peek(); err != nil {
		return info, 0, err
	}
	n := 0
	for done := c == '}'; !done; {
		var name []byte
		if err := l.scan(func(b []byte, i int) (int, error) {
			end, esc, err := nameEnd(b, i)
			if err != nil {
				return 0, err
			}
			if name = b[i+1 : end-1]; esc {
				name = unquote(b[i:end])
			}
			return colon(b, end)
		}); err != nil {
			return info, n, err
		}
		switch string(name) {
		case "messages":
			if l.buf[l.pos] == 'n' {
				info.messagesNull = true
			}
			if more, err := l.rows(&info, &n, noData, visit); err != nil || !more {
				return info, n, err
			}
		case "success", "value":
			v, err := l.value(1)
			if err != nil {
				return info, n, err
			}
			switch {
			case string(name) == "value" && string(v) == "null":
				info.valueNull = true
			case string(name) == "value":
				info.value = true
			case string(v) == "false":
				info.failed = true
			case string(v) == "true":
				info.succeeded = true
			}
		case "total":
			v, err := l.value(1)
			if err != nil {
				return info, n, err
			}
			if t, err := strconv.Atoi(string(v)); err == nil {
				info.total = &t
			}
		case "error":
			v, err := l.value(1)
			if err != nil {
				return info, n, err
			}
			text := string(v)
			if v[0] == '"' {
				text = string(unquote(v))
			}
			return info, n, &HTTPError{Kind: errorKind(text), bodyBytes: []byte(`{"error":` + string(v) + `}`)}
		default:
			if _, err := l.value(1); err != nil {
				return info, n, err
			}
		}
		if done, err = l.sep('}'); err != nil {
			return info, n, err
		}
	}
	return info, n, info.notAListing()
}

// notAListing is the error of an answer that is not a list of dead
// letters: one that says it failed (success:false, with a 200), or one
// with no messages that is none of the empty forms brokers send
// (messages null; the 0.x server's {"success":true,"value":null}).
// Either is never an empty DLQ.
func (i pageInfo) notAListing() error {
	switch {
	case i.failed:
		return fmt.Errorf("the broker answered success:false: it is not a list of dead letters")
	case i.hadMessages || i.messagesNull || i.succeeded && i.valueNull && !i.value:
		return nil
	}
	return fmt.Errorf("the answer has no messages: it is not a list of dead letters")
}

// rows reads the answer's messages (an array, or null) at pos, handing
// each row to visit and counting it in n; it reports false when visit
// stopped the read.
func (l *listReader) rows(info *pageInfo, n *int, noData bool, visit func(Row) bool) (bool, error) {
	switch c := l.buf[l.pos]; {
	case c == 'n':
		_, err := l.value(1)
		return true, err
	case c != '[' && kindAt(c) != "":
		return false, fmt.Errorf("want a JSON array, got a %s", kindAt(c))
	case c != '[':
		_, err := l.value(1)
		return false, err
	}
	info.hadMessages = true
	l.pos++
	c, err := l.peek()
	if err != nil {
		return false, err
	}
	if c == ']' {
		l.pos++
		return true, nil
	}
	for {
		if c := l.buf[l.pos]; c != '{' {
			err := fmt.Errorf("want a JSON object, got a %s", kindAt(c))
			if kindAt(c) == "" {
				_, err = l.value(2)
			}
			return false, fmt.Errorf("row %d: %w", *n, err)
		}
		var r Row
		if err := l.scan(func(b []byte, i int) (int, error) {
			r = Row{}
			return scanRow(b, i, 3, &r, noData)
		}); err != nil {
			return false, fmt.Errorf("row %d: %w", *n, err)
		}
		*n++
		if !visit(r) {
			return false, nil
		}
		if end, err := l.sep(']'); err != nil || end {
			return err == nil, err
		}
	}
}
