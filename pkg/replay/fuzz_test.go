package replay

import (
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

func FuzzNormalizeError(f *testing.F) {
	for _, s := range []string{"order 8812 not found", `field "email" invalid`, "card 4f2a1b3c declined", "6f1c0a4e-1111-4222-8333-444455556666 gone", "", "timeout after 30000ms", "x'y'z", "0xdeadbeef"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := deadletter.NormalizeError(s)
		if again := deadletter.NormalizeError(n); again != n {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, n, again)
		}
		if strings.ContainsAny(n, "0123456789") {
			t.Fatalf("%q normalised to %q, which still has digits", s, n)
		}
		if deadletter.ClassID(s) != deadletter.ClassID(n) || len(deadletter.ClassID(s)) != 8 {
			t.Fatalf("class of %q differs from its pattern's", s)
		}
	})
}

func TestNormalizeError(t *testing.T) {
	same := [][2]string{
		{"order 8812 not found", "order 91 not found"},
		{`duplicate charge id "ch_1"`, `duplicate charge id "ch_999999"`},
		{"card 4f2a1b3c declined", "card 00000001 declined"},
		{"lookup 6f1c0a4e-1111-4222-8333-444455556666 failed", "lookup 00000000-0000-0000-0000-000000000000 failed"},
		{"timeout after 30000ms", "timeout after 5000ms"},
	}
	for _, p := range same {
		if deadletter.ClassID(p[0]) != deadletter.ClassID(p[1]) {
			t.Errorf("%q and %q are one class: %q vs %q", p[0], p[1], deadletter.NormalizeError(p[0]), deadletter.NormalizeError(p[1]))
		}
	}
	if deadletter.ClassID("order 1 not found") == deadletter.ClassID("unknown payload version 1") {
		t.Error("different errors share a class")
	}
	if deadletter.NormalizeError("") != "(no error message)" {
		t.Error("empty error")
	}
}

func FuzzReadAddresses(f *testing.F) {
	f.Add("p/t\n# comment\n\n{\"address\":\"p/u\"}\n{\"partitionId\":\"p\",\"transactionId\":\"v\"}\n")
	f.Add("{bad json\n")
	f.Fuzz(func(t *testing.T, s string) {
		addrs, err := deadletter.ReadAddresses(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, a := range addrs {
			if a.PartitionID == "" || a.TransactionID == "" {
				t.Fatalf("empty address from %q", s)
			}
		}
	})
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2h", "3d", "1d12h", "2026-07-30T09:41:02Z", "yesterday", "-5m", "99999999999d"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		if _, err := deadletter.ParseTime(s, now); err != nil && !strings.Contains(err.Error(), "invalid time") {
			t.Fatalf("unclear error for %q: %v", s, err)
		}
	})
}

func TestReplayTxID(t *testing.T) {
	a := deadletter.Address{PartitionID: "6f1c", TransactionID: "order:8812:v3"}
	id := ReplayTxID(a, 1)
	if id != ReplayTxID(a, 1) || id == ReplayTxID(a, 2) || id == a.TransactionID {
		t.Fatal("the replay id must be deterministic per address and generation, and differ from the original")
	}
	if !(deadletter.Address{PartitionID: "p", TransactionID: id}).PathSafe() || !deadletter.IsReplayID(id) {
		t.Fatalf("%q is not a path-safe replay id", id)
	}
	if deadletter.Generation(a.TransactionID) != 1 || deadletter.Generation(id) != 2 || deadletter.Generation(ReplayTxID(a, 5)) != 6 {
		t.Fatal("generation arithmetic")
	}
}

func TestSelection(t *testing.T) {
	row := deadletter.Row{PartitionID: "p", TransactionID: "t", Queue: "orders", Partition: "8812", ConsumerGroup: "billing",
		ErrorMessage: "order 8812 not found", FailedAt: time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)}
	cases := []struct {
		sel  deadletter.Selection
		want bool
	}{
		{deadletter.Selection{All: true}, true},
		{deadletter.Selection{Queue: "orders", ConsumerGroup: "billing", Partition: "8812"}, true},
		{deadletter.Selection{Queue: "payments"}, false},
		{deadletter.Selection{Error: "not found$"}, true},
		{deadletter.Selection{Error: "^timeout"}, false},
		{deadletter.Selection{Class: deadletter.ClassID("order 1 not found")}, true},
		{deadletter.Selection{FailedAfter: row.FailedAt.Add(-time.Minute), FailedBefore: row.FailedAt.Add(time.Minute)}, true},
		{deadletter.Selection{FailedBefore: row.FailedAt}, false},
		{deadletter.Selection{Addresses: []deadletter.Address{{PartitionID: "p", TransactionID: "t"}}}, true},
		{deadletter.Selection{Addresses: []deadletter.Address{{PartitionID: "q", TransactionID: "t"}}}, false},
	}
	for i, c := range cases {
		if err := c.sel.Compile(); err != nil {
			t.Fatal(err)
		}
		if got := c.sel.Match(row); got != c.want {
			t.Errorf("case %d (%s): %v", i, c.sel.String(), got)
		}
	}
	s := deadletter.Selection{Queue: "orders", Error: "it's broken"}
	if s.String() != `--queue orders --error 'it'\''s broken'` {
		t.Fatalf("String() = %s", s.String())
	}
}
