package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// A list answer is read with the JSON library's streaming decoder as it
// arrives: the decoder validates the answer and walks its members, and
// each row's members are picked out as they pass, so no row is read
// twice and no body is held whole.

// listOptions read an answer as brokers send it: a name sent twice keeps
// its last value, and text is taken as sent, invalid UTF-8 included.
var listOptions = json.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))

// decodeList reads a list answer: {"messages":[row…], "total":n, …}. An
// answer with no messages key (or messages: null) is an empty page; one
// with an "error" key is the broker's refusal.
func decodeList(lr *limitReader, noData bool, visit func(deadletter.Row) bool) (pageInfo, int, error) {
	var info pageInfo
	dec := jsontext.NewDecoder(lr, listOptions)
	if k := dec.PeekKind(); k != '{' {
		if _, err := dec.ReadToken(); err != nil {
			return info, 0, err
		}
		return info, 0, fmt.Errorf("the answer is %s, not an object", kindName(k))
	}
	if _, err := dec.ReadToken(); err != nil {
		return info, 0, err
	}
	n := 0
	for dec.PeekKind() != '}' {
		lr.mark = lr.read
		tok, err := dec.ReadToken()
		if err != nil {
			return info, n, err
		}
		name := tok.String()
		if name == "messages" {
			if err := readRows(dec, lr, &info, &n, noData, visit); err != nil || info.stopped {
				return info, n, err
			}
			continue
		}
		v, err := dec.ReadValue()
		if err != nil {
			return info, n, err
		}
		switch name {
		case "total":
			if t, err := strconv.Atoi(string(v)); err == nil {
				info.total = &t
			}
		case "success":
			info.failed = info.failed || v.Kind() == 'f'
			info.succeeded = info.succeeded || v.Kind() == 't'
		case "value":
			info.valueNull = info.valueNull || v.Kind() == 'n'
			info.value = info.value || v.Kind() != 'n'
		case "error":
			text := string(v)
			if v.Kind() == '"' {
				text = string(unquote(v))
			}
			return info, n, &HTTPError{Kind: errorKind(text), bodyBytes: []byte(`{"error":` + string(v) + `}`)}
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return info, n, err
	}
	return info, n, info.notAListing()
}

// readRows reads the answer's messages (an array, or null), handing each
// row to visit and counting it in n.
func readRows(dec *jsontext.Decoder, lr *limitReader, info *pageInfo, n *int, noData bool, visit func(deadletter.Row) bool) error {
	switch k := dec.PeekKind(); k {
	case 'n':
		info.messagesNull = true
		_, err := dec.ReadToken()
		return err
	case '[':
	default:
		return wrongKind(dec, "array", k)
	}
	info.hadMessages = true
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	for dec.PeekKind() != ']' {
		lr.mark = lr.read
		r, err := decodeRow(dec, noData)
		if err != nil {
			return fmt.Errorf("row %d: %w", *n, err)
		}
		*n++
		if !visit(r) {
			info.stopped = true
			return nil
		}
	}
	_, err := dec.ReadToken()
	return err
}

// decodeRow reads the row at the decoder. It takes rows as real servers
// send them: ids may be numbers, text and data may be null, failedAt may
// be missing (createdAt, the seed contract's alias, stands for it). The
// row's text shares one allocation.
func decodeRow(dec *jsontext.Decoder, noData bool) (deadletter.Row, error) {
	var r deadletter.Row
	if k := dec.PeekKind(); k != '{' {
		return r, wrongKind(dec, "object", k)
	}
	if _, err := dec.ReadToken(); err != nil {
		return r, err
	}
	var buf [256]byte
	text := buf[:0]
	var spans [7][2]int
	var times [2][40]byte // failedAt's and createdAt's text, as sent
	var failedAt, createdAt jsontext.Value
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil {
			return r, err
		}
		f := -1
		switch string(unquote(name)) {
		case "id":
			f = 0
		case "transactionId":
			f = 1
		case "partitionId":
			f = 2
		case "queue":
			f = 3
		case "partition":
			f = 4
		case "consumerGroup":
			f = 5
		case "errorMessage":
			f = 6
		case "retryCount":
			r.RetryCount, err = readCount(dec)
		case "isEncrypted":
			var v jsontext.Value
			v, err = dec.ReadValue()
			r.IsEncrypted = v.Kind() == 't'

		case "data":
			if noData || dec.PeekKind() == 'n' {
				err = dec.SkipValue()
				break
			}
			var v jsontext.Value
			v, err = dec.ReadValue()
			r.Data = bytes.Clone(v)
		case "failedAt":
			failedAt, err = readTime(dec, name, failedAt, times[0][:0])
		case "createdAt":
			createdAt, err = readTime(dec, name, createdAt, times[1][:0])
		default:
			err = dec.SkipValue()
		}
		if err != nil {
			return r, err
		}
		if f >= 0 {
			start := len(text)
			if text, err = appendText(text, dec); err != nil {
				return r, fmt.Errorf("%s: %w", unquote(name), err)
			}
			spans[f] = [2]int{start, len(text)}
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return r, err
	}
	all := string(text)
	for f, p := range []*string{&r.ID, &r.TransactionID, &r.PartitionID, &r.Queue, &r.Partition, &r.ConsumerGroup, &r.ErrorMessage} {
		*p = all[spans[f][0]:spans[f][1]]
	}
	if failedAt == nil {
		failedAt = createdAt
	}
	if failedAt != nil {
		t, err := parseTimestamp(unquote(failedAt))
		if err != nil {
			return r, fmt.Errorf("failedAt: %w", err)
		}
		r.FailedAt = t
	}
	if r.TransactionID == "" && r.ID != "" && r.PartitionID != "" {
		// 1.x allows a row with no transaction id (the column is
		// nullable): it is listed and counted, under an address that says
		// so and that no call is sent for (Address.Unreachable).
		r.TransactionID = deadletter.NoTransactionID(r.ID)
	}
	if r.PartitionID == "" || r.TransactionID == "" {
		return deadletter.Row{}, errors.New("dead-letter row without partitionId or transactionId")
	}
	return r, nil
}

// appendText appends the text value at the decoder: a string's content,
// a number's digits (ids may be numbers), nothing for null.
func appendText(b []byte, dec *jsontext.Decoder) ([]byte, error) {
	v, err := dec.ReadValue()
	if err != nil {
		return b, err
	}
	switch v.Kind() {
	case '"':
		if bytes.IndexByte(v, '\\') < 0 {
			return append(b, v[1:len(v)-1]...), nil
		}
		return jsontext.AppendUnquote(b, v)
	case '0':
		return append(b, v...), nil
	case 'n':
		return b, nil
	}
	return b, fmt.Errorf("want text, got %s", kindName(v.Kind()))
}

// readCount reads a count: a whole number, or null (0).
func readCount(dec *jsontext.Decoder) (int, error) {
	v, err := dec.ReadValue()
	switch {
	case err != nil:
		return 0, err
	case v.Kind() == 'n':
		return 0, nil
	case v.Kind() != '0':
		return 0, fmt.Errorf("want a count, got %s", kindName(v.Kind()))
	}
	return strconv.Atoi(string(v))
}

// readTime reads a time member into buf: RFC 3339 text (returned
// quoted, parsed once the row is read) or null (the one before it
// stands). A number
// could be seconds, milliseconds or microseconds since any epoch, and
// read as none of them it would be year 1, the oldest dead letter there
// is: it is refused.
func readTime(dec *jsontext.Decoder, name, before jsontext.Value, buf []byte) (jsontext.Value, error) {
	v, err := dec.ReadValue()
	switch {
	case err != nil:
		return nil, err
	case v.Kind() == 'n':
		return before, nil
	case v.Kind() == '"':
		return append(buf, v...), nil
	}
	shown := string(v)
	if len(shown) > 40 {
		shown = shown[:40] + "…"
	}
	return nil, fmt.Errorf("%s %s is not a timestamp dlqctl can read: it reads RFC 3339 text (\"2026-07-30T09:41:02.517Z\")", unquote(name), shown)
}

// wrongKind is the error for a value of another kind than the one
// wanted (the decoder's own when it is not JSON at all).
func wrongKind(dec *jsontext.Decoder, want string, got jsontext.Kind) error {
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	return fmt.Errorf("want a JSON %s, got %s", want, kindName(got))
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "no value"
}

// unquote is a JSON string's content (v itself when it is not a string).
func unquote(v jsontext.Value) []byte {
	if len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1]
	}
	b, err := jsontext.AppendUnquote(nil, v)
	if err != nil {
		return v
	}
	return b
}

// limitReader fails a read once more than max bytes (and the decoder's
// read-ahead) have been read since mark: one row, or one member of the
// answer, cannot make dlqctl hold an unbounded body.
type limitReader struct {
	r    io.Reader
	read int64
	mark int64
	max  int64
}

func (l *limitReader) Read(b []byte) (int, error) {
	if l.read-l.mark > l.max+64<<10 {
		return 0, errValueTooLarge
	}
	n, err := l.r.Read(b)
	l.read += int64(n)
	return n, err
}

// parseTimestamp reads the broker's timestamps (RFC 3339), in UTC.
func parseTimestamp(b []byte) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}

// notAListing is the error of an answer that is not a list of dead
// letters: one that says it failed (success:false, with a 200), or one
// with no messages that is none of the empty forms brokers send
// (messages null; the 0.x server's {"success":true,"value":null}).
// Either is never an empty DLQ.
func (i pageInfo) notAListing() error {
	switch {
	case i.failed:
		return errors.New("the broker answered success:false: it is not a list of dead letters")
	case i.hadMessages || i.messagesNull || i.succeeded && i.valueNull && !i.value:
		return nil
	}
	return errors.New("the answer has no messages: it is not a list of dead letters")
}
