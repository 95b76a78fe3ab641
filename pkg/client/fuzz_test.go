package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
	"testing/iotest"
)

func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"6f1c/order:8812:v3", "a/b/c", "/x", "x/", "", " p / t ", "p/t with space", "ü/ß"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			return
		}
		if a.PartitionID == "" || a.TransactionID == "" {
			t.Fatalf("%q parsed to an empty part: %+v", s, a)
		}
		b, err := ParseAddress(a.String())
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

// IsEnvelope scans instead of decoding: it says what decoding says.
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
		if got, want := IsEnvelope(b), envelopeByDecoding(b); got != want {
			t.Fatalf("IsEnvelope(%q) = %v, decoding says %v", b, got, want)
		}
	})
}

// Listing a released server's encrypted rows asks about each: an
// envelope (or a payload that is not one) costs no allocation.
func TestIsEnvelopeAllocatesNothing(t *testing.T) {
	// json.Valid takes its scanner from a sync.Pool, which the race
	// detector empties at random: there, a scanner made again now and then
	// is allowed (decoding into a map made several allocations a call).
	most := 0.0
	if raceOn {
		most = 2
	}
	env := []byte(`{"encrypted":"9f8e7d6c5b4a","iv":"00112233","authTag":"aabbccdd"}`)
	plain := []byte(`{"orderId":8812,"note":"authTag"}`)
	if n := testing.AllocsPerRun(100, func() {
		if !IsEnvelope(env) || IsEnvelope(plain) {
			t.Fatal("wrong answer")
		}
	}); n > most {
		t.Fatalf("%v allocations a call, want at most %v", n, most)
	}
}

// The list scanner reads what the jsontext decoder it replaced read: the
// same rows, in the same order, up to the same place, and refuses what
// it refused, however the answer arrives (a byte at a time, in a buffer
// smaller than a row).
func FuzzScannerIsTheDecoder(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"id":"1","transactionId":"t","partitionId":"p","failedAt":"2026-07-30T09:41:02.517Z","data":{"a":[1,2.5e-3,true,null,"x\"y"]}}],"total":1}`,
		`{"messages":[{"id":7,"transactionId":"t\u00e9","partitionId":"p","createdAt":"2026-07-30T09:41:02.517Z","errorMessage":null,"retryCount":3,"isEncrypted":true},{"transactionId":"u","partitionId":"p"}]}`,
		` { "pagination" : {"limit":100} , "messages" : [ ] } `,
		`{"success":true,"value":null}`, `{"messages":null}`, `{"error":"Message not found"}`, `{"error":{"a":1}}`,
		`{"messages":[{"transactionId":"t","partitionId":"p","createdAt":"bad"}]}`, `[`, `<html>`, `[1,2,3]`, `"x"`, ``, `{`, `{"messages":[1]}`,
		`{"messages":[{"transactionId":"t","partitionId":"p","retryCount":1e3}]}`, `{"messages":[{"transactionId":"t","partitionId":"p"},]}`,
		`{"messages":[{"transactionId":"t","partitionId":"p","data":"\ud800"}],"x":-0.5E+2}`, `{"a":01}`, `{"a":tru}`, `{"a":"\x01"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		type result struct {
			rows  []Row
			info  pageInfo
			n     int
			err   error
			total int
		}
		collect := func(decode func(visit func(Row) bool) (pageInfo, int, error)) result {
			var r result
			r.info, r.n, r.err = decode(func(row Row) bool {
				r.rows = append(r.rows, row)
				return true
			})
			if r.info.total != nil {
				r.total = *r.info.total
			}
			return r
		}
		want := collect(func(visit func(Row) bool) (pageInfo, int, error) {
			return refDecodeList(&refLimiter{r: bytes.NewReader(body), max: MaxRow}, false, visit)
		})
		for _, r := range []io.Reader{bytes.NewReader(body), iotest.OneByteReader(bytes.NewReader(body)), iotest.HalfReader(bytes.NewReader(body))} {
			got := collect(func(visit func(Row) bool) (pageInfo, int, error) {
				return decodeList(&listReader{r: r, max: MaxRow, buf: make([]byte, 8)}, false, visit)
			})
			if (got.err == nil) != (want.err == nil) {
				t.Fatalf("%q: scanner error %v, decoder error %v", body, got.err, want.err)
			}
			var gh, wh *HTTPError
			if errors.As(want.err, &wh) != errors.As(got.err, &gh) || wh != nil && (wh.Kind != gh.Kind || string(wh.bodyBytes) != string(gh.bodyBytes)) {
				t.Fatalf("%q: scanner error %v, decoder error %v", body, got.err, want.err)
			}
			// What the answer said besides its rows counts only when it was read whole.
			if got.n != want.n || want.err == nil && (got.total != want.total || (got.info.total == nil) != (want.info.total == nil) || got.info.hadMessages != want.info.hadMessages) {
				t.Fatalf("%q: scanner %d rows, total %v, messages %v; decoder %d, %v, %v", body, got.n, got.info.total, got.info.hadMessages, want.n, want.info.total, want.info.hadMessages)
			}
			// PlainText is the scanner's own: never true when encoding/json
			// would escape a byte of the row's strings, and true whenever
			// they are ASCII it writes as they are (past ASCII it may say
			// false: those bytes are looked at when written).
			for i := range got.rows {
				r := &got.rows[i]
				plain, ascii := true, true
				for _, s := range []string{r.ID, r.TransactionID, r.PartitionID, r.Queue, r.Partition, r.ConsumerGroup, r.ErrorMessage} {
					j, _ := json.Marshal(s)
					plain = plain && string(j) == `"`+s+`"`
					for k := 0; k < len(s); k++ {
						ascii = ascii && s[k] < 0x80
					}
				}
				if r.PlainText() && !plain || plain && ascii && !r.PlainText() {
					t.Fatalf("%q: row %d says PlainText %v; its strings are plain: %v, ASCII: %v", body, i, r.PlainText(), plain, ascii)
				}
				r.plain = false
			}
			if !reflect.DeepEqual(got.rows, want.rows) {
				t.Fatalf("%q: scanner rows %+v, decoder rows %+v", body, got.rows, want.rows)
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
