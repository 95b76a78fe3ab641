package client

import (
	"encoding/json"
	"testing"
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
