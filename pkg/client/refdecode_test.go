package client

// The list decoder this package had before its own scanner (scan.go):
// jsontext validated each row, then a second pass picked out its fields.
// FuzzScannerIsTheDecoder holds the scanner to it.

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// refLimiter fails once more than max bytes (and some read-ahead) have
// been read since mark: one row, or one top-level value, cannot make
// dlqctl hold an unbounded body.
type refLimiter struct {
	r    io.Reader
	read int64
	mark int64
	max  int64
}

func (l *refLimiter) Read(b []byte) (int, error) {
	if l.read-l.mark > l.max+64<<10 {
		return 0, errValueTooLarge
	}
	n, err := l.r.Read(b)
	l.read += int64(n)
	return n, err
}

// decodeList reads a list answer token by token: {"messages":[row…],
// "total":n, …}. An answer with no messages key (or messages: null) is an
// empty page; one with an "error" key is the broker's refusal.
func refDecodeList(lr *refLimiter, noData bool, visit func(Row) bool) (pageInfo, int, error) {
	var info pageInfo
	dec := jsontext.NewDecoder(lr, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if k := dec.PeekKind(); k != '{' {
		_, err := dec.ReadToken()
		if err == nil {
			err = fmt.Errorf("the answer is a JSON %s, not an object", refKindName(k))
		}
		return info, 0, err
	}
	if _, err := dec.ReadToken(); err != nil {
		return info, 0, err
	}
	n := 0
	for dec.PeekKind() != '}' {
		lr.mark = lr.read
		name, err := dec.ReadValue()
		if err != nil {
			return info, n, err
		}
		key := string(unquoteName(name)) // a copy: the bytes are the decoder's
		switch key {
		case "messages":
			if dec.PeekKind() == 'n' {
				if _, err := dec.ReadToken(); err != nil {
					return info, n, err
				}
				info.messagesNull = true
				continue
			}
			if _, err := refExpect(dec, '['); err != nil {
				return info, n, err
			}
			info.hadMessages = true
			for dec.PeekKind() != ']' {
				lr.mark = lr.read
				var r Row
				if err := refDecodeRow(dec, &r, noData); err != nil {
					return info, n, fmt.Errorf("row %d: %w", n, err)
				}
				n++
				if !visit(r) {
					return info, n, nil
				}
			}
			if _, err := dec.ReadToken(); err != nil {
				return info, n, err
			}
		case "total":
			v, err := dec.ReadValue()
			if err != nil {
				return info, n, err
			}
			if t, err := strconv.Atoi(string(v)); err == nil {
				info.total = &t
			}
		case "success", "value":
			v, err := dec.ReadValue()
			if err != nil {
				return info, n, err
			}
			switch {
			case key == "value" && string(v) == "null":
				info.valueNull = true
			case key == "value":
				info.value = true
			case string(v) == "false":
				info.failed = true
			case string(v) == "true":
				info.succeeded = true
			}
		case "error":
			v, err := dec.ReadValue()
			if err != nil {
				return info, n, err
			}
			text := string(v)
			if v.Kind() == '"' {
				text = string(unquote(v))
			}
			return info, n, &HTTPError{Kind: errorKind(text), bodyBytes: []byte(`{"error":` + string(v) + `}`)}
		default:
			if err := dec.SkipValue(); err != nil {
				return info, n, err
			}
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return info, n, err
	}
	return info, n, info.notAListing()
}

func refKindName(k jsontext.Kind) string {
	switch k {
	case '[':
		return "array"
	case '"':
		return "string"
	case '0':
		return "number"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "value"
}

func refExpect(dec *jsontext.Decoder, k jsontext.Kind) (jsontext.Token, error) {
	if got := dec.PeekKind(); got != k {
		_, err := dec.ReadToken()
		if err == nil {
			err = fmt.Errorf("want a JSON %s, got a %s", refKindName(k), refKindName(got))
		}
		return jsontext.Token{}, err
	}
	return dec.ReadToken()
}

// decodeRow reads one row: the decoder validates it as JSON in one
// pass, then a scanner that may trust that picks out the fields. It
// tolerates the field variations of real servers: failedAt may be missing
// (createdAt is its alias on the seed contract), data and errorMessage
// may be null, ids may be numbers.
func refDecodeRow(dec *jsontext.Decoder, r *Row, noData bool) error {
	if k := dec.PeekKind(); k != '{' {
		_, err := dec.ReadToken()
		if err == nil {
			err = fmt.Errorf("want a JSON object, got a %s", refKindName(k))
		}
		return err
	}
	raw, err := dec.ReadValue()
	if err != nil {
		return err
	}
	return refScanRow(raw, r, noData)
}

// scanRow picks a row's fields out of a valid JSON object. Its strings
// share one allocation: the row's text fields are gathered in a buffer
// and made into one string, which each field slices.
func refScanRow(raw []byte, r *Row, noData bool) error {
	var created time.Time
	type span struct {
		field      rowField
		start, end int
	}
	var spans [10]span
	ns := 0
	var text [512]byte
	buf := text[:0]
	i := skipSpace(raw, 1)
	for i < len(raw) && raw[i] != '}' {
		// A name, a colon, a value.
		end := stringEnd(raw, i)
		name := raw[i+1 : end-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			name = unquote(raw[i:end])
		}
		field := rowFieldOf(name)
		i = skipSpace(raw, end)
		i = skipSpace(raw, i+1) // the colon
		vend := valueEnd(raw, i)
		v := jsontext.Value(raw[i:vend])
		switch field {
		case fData:
			if !noData && v.Kind() != 'n' {
				r.Data = bytes.Clone(v)
			}
		case fID, fTransactionID, fPartitionID, fQueue, fPartition, fConsumerGroup, fErrorMessage:
			start := len(buf)
			switch v.Kind() {
			case '"':
				if bytes.IndexByte(v, '\\') < 0 {
					buf = append(buf, v[1:len(v)-1]...)
				} else if u, err := jsontext.AppendUnquote(buf, v); err == nil {
					buf = u
				}
			case '0':
				buf = append(buf, v...)
			}
			if ns < len(spans) {
				spans[ns] = span{field, start, len(buf)}
				ns++
			}
		case fRetryCount:
			if v.Kind() == '0' {
				n, err := strconv.Atoi(string(v))
				if err != nil {
					return fmt.Errorf("retryCount %s: %v", v, err)
				}
				r.RetryCount = n
			}
		case fIsEncrypted:
			r.IsEncrypted = v.Kind() == 't'
		case fFailedAt, fCreatedAt:
			if v.Kind() != '"' && v.Kind() != 'n' {
				return notATimestamp(name, v)
			}
			if v.Kind() == '"' {
				t, err := parseTimestamp(unquote(v))
				if err != nil {
					return fmt.Errorf("%s: %v", name, err)
				}
				if field == fFailedAt {
					r.FailedAt = t
				} else {
					created = t
				}
			}
		}
		i = skipSpace(raw, vend)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
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
		r.TransactionID = NoTransactionID(r.ID)
	}
	if r.PartitionID == "" || r.TransactionID == "" {
		return fmt.Errorf("dead-letter row without partitionId or transactionId")
	}
	return nil
}

// unquoteName returns a name's text; names without escapes (all of the
// broker's) are returned without copying.
func unquoteName(v jsontext.Value) []byte {
	if len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1]
	}
	return unquote(v)
}
