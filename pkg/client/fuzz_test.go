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

func FuzzIsEnvelope(f *testing.F) {
	f.Add([]byte(`{"encrypted":"x","iv":"y","authTag":"z"}`))
	f.Add([]byte(` {"encrypted":"x","iv":"y","authTag":"z","extra":1}`))
	f.Add([]byte(`{"a":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if !IsEnvelope(b) {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%q called an envelope but is not a JSON object: %v", b, err)
		}
		_, e := m["encrypted"]
		_, i := m["iv"]
		_, a := m["authTag"]
		if len(m) != 3 || !e || !i || !a {
			t.Fatalf("%q called an envelope with keys %v", b, m)
		}
	})
}
