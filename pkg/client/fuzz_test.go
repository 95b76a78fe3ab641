package client

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"testing"
	"testing/iotest"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"6f1c/order:8812:v3", "a/b/c", "/x", "x/", "", " p / t ", "p/t with space", "ü/ß"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := deadletter.ParseAddress(s)
		if err != nil {
			return
		}
		if a.PartitionID == "" || a.TransactionID == "" {
			t.Fatalf("%q parsed to an empty part: %+v", s, a)
		}
		b, err := deadletter.ParseAddress(a.String())
		if err != nil || b != a {
			t.Fatalf("%q: round trip %+v -> %q -> %+v, %v", s, a, a.String(), b, err)
		}
	})
}

func FuzzDecodePage(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"id":"1","transactionId":"t","partitionId":"p","failedAt":"2026-07-30T09:41:02.517Z","data":{"a":1}}],"total":1}`,
		`{"success":true,"value":null}`, `{"messages":null}`, `{"messages":[{"transactionId":"t"}]}`,
		`{"messages":[{"transactionId":"t","partitionId":"p","createdAt":"bad"}]}`, `[`, `<html>`, `{"messages":[{"transactionId":"t","partitionId":"p","data":{"encrypted":"x","iv":"y","authTag":"z"}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := decodePage(body)
		if err != nil {
			return
		}
		for _, r := range p.Rows {
			if r.PartitionID == "" || r.TransactionID == "" {
				t.Fatalf("a row without an address was accepted: %+v", r)
			}
			_ = r.Undecryptable()
			if _, err := json.Marshal(r); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// IsEnvelope, which decodes only payloads that name authTag, says what
// decoding every payload says.
func FuzzIsEnvelope(f *testing.F) {
	for _, s := range []string{
		`{"encrypted":"x","iv":"y","authTag":"z"}`,
		` {"encrypted":"x","iv":"y","authTag":"z","extra":1}`,
		`{"a":1}`,
		`{ "iv" : "y" , "authTag" : {"a":[1,"}"]}, "encrypted" : null }`,
		`{"encrypted":"x","iv":"y","authTag":"z","iv":"w"}`,
		`{"encrypted":"x","iv":"y"}`,
		`{"encrypted":"x","iv":"y","authTag":"z"`,
		`{"encrypted":"x","iv":"y","authTag":"z"} x`,
		`{"encrypted":"x","\u0069v":"y","authTag":"z"}`,
		`{"encrypted":"x\"","iv":"y","authTag":"z"}`,
		`["encrypted","iv","authTag"]`,
		`{"data":{"encrypted":"x","iv":"y","authTag":"z"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The definition: an object of exactly the three keys, as
		// encoding/json decodes it.
		var m map[string]json.RawMessage
		want := json.Unmarshal(b, &m) == nil && len(m) == 3
		for _, k := range []string{"encrypted", "iv", "authTag"} {
			_, ok := m[k]
			want = want && ok
		}
		if got := deadletter.IsEnvelope(b); got != want {
			t.Fatalf("IsEnvelope(%q) = %v, decoding says %v", b, got, want)
		}
	})
}

// A list answer reads the same however it arrives: whole, a byte at a
// time, or in halves of what was asked.
func FuzzListReadsAlikeHoweverItArrives(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"id":"1","transactionId":"t","partitionId":"p","failedAt":"2026-07-30T09:41:02.517Z","data":{"a":[1,2.5e-3,true,null,"x\"y"]}}],"total":1}`,
		`{"messages":[{"id":7,"transactionId":"t\u00e9","partitionId":"p","createdAt":"2026-07-30T09:41:02.517Z","errorMessage":null,"retryCount":3,"isEncrypted":true},{"transactionId":"u","partitionId":"p"}]}`,
		` { "pagination" : {"limit":100} , "messages" : [ ] } `,
		`{"success":true,"value":null}`, `{"messages":null}`, `{"error":"Message not found"}`, `{"error":{"a":1}}`,
		`{"messages":[{"transactionId":"t","partitionId":"p","createdAt":"bad"}]}`, `[`, `<html>`, `[1,2,3]`, `"x"`, ``, `{`, `{"messages":[1]}`,
		`{"messages":[{"transactionId":"t","partitionId":"p","retryCount":1e3}]}`, `{"messages":[{"transactionId":"t","partitionId":"p"},]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		read := func(r io.Reader) (rows []deadletter.Row, total *int, err error) {
			info, _, err := decodeList(&limitReader{r: r, max: MaxRow}, false, func(row deadletter.Row) bool {
				rows = append(rows, row)
				return true
			})
			return rows, info.total, err
		}
		want, wantTotal, wantErr := read(bytes.NewReader(body))
		for _, r := range []io.Reader{iotest.OneByteReader(bytes.NewReader(body)), iotest.HalfReader(bytes.NewReader(body))} {
			got, total, err := read(r)
			if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(total, wantTotal) {
				t.Fatalf("%q: in pieces %d rows, total %v, error %v; whole %d rows, total %v, error %v", body, len(got), total, err, len(want), wantTotal, wantErr)
			}
		}
	})
}

// FuzzListAnswers holds the list decoder to what a listing is: an
// answer it takes for a page of no rows is one of the empty forms
// brokers send (messages [] or null, or the 0.x server's
// {"success":true,"value":null}), as encoding/json reads it; any other
// shape (success:false, no messages, messages that are not an array) is
// an error, never an empty DLQ.
func FuzzListAnswers(f *testing.F) {
	for _, s := range []string{
		`{"success":false,"message":"database unavailable"}`, `{}`, `{"messages":{}}`, `{"messages":[]}`, `{"messages":null}`,
		`{"success":true,"value":null}`, `{"success":true,"value":0}`, `{"value":null}`, `{"total":0,"pagination":{}}`,
		`{"messages":[],"success":false}`, `{"success":true}`, `{"messages":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := decodePage(body)
		if err != nil || len(p.Rows) > 0 {
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			t.Fatalf("%q: taken for an empty page, but encoding/json reads no object", body)
		}
		trim := func(k string) string { return string(bytes.TrimSpace(m[k])) }
		msgs, hasMsgs := m["messages"]
		switch {
		case trim("success") == "false":
			t.Fatalf("%q: success:false taken for an empty page", body)
		case hasMsgs && (trim("messages") == "null" || bytes.HasPrefix(bytes.TrimSpace(msgs), []byte("["))):
		case !hasMsgs && trim("success") == "true" && trim("value") == "null":
		default:
			t.Fatalf("%q: not a listing, taken for an empty page", body)
		}
	})
}

// decodePage decodes a whole list answer held in memory .
func decodePage(body []byte) (Page, error) {
	var p Page
	info, _, err := decodeList(&limitReader{r: bytes.NewReader(body), max: MaxRow}, false, func(r deadletter.Row) bool {
		p.Rows = append(p.Rows, r)
		return true
	})
	p.Total = info.total
	return p, err
}

// A list answer of the wrong shape says what was wanted and what came.
func TestListOfTheWrongShape(t *testing.T) {
	for body, want := range map[string]string{
		`{"messages":{}}`:  "want a JSON array, got an object",
		`{"messages":[1]}`: "row 0: want a JSON object, got a number",
		`[]`:               "the answer is an array, not an object",
	} {
		if _, err := decodePage([]byte(body)); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}
