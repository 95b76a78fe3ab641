package deadletter_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// An address is PARTITION_ID/TRANSACTION_ID, split at the first slash; it
// reads back what it writes, and refuses what no broker could name.
func TestAddresses(t *testing.T) {
	for in, want := range map[string]deadletter.Address{
		"p1/t1":          {PartitionID: "p1", TransactionID: "t1"},
		"  p1/t/with/  ": {PartitionID: "p1", TransactionID: "t/with/"},
		"p:1/order:9:v2": {PartitionID: "p:1", TransactionID: "order:9:v2"},
	} {
		got, err := deadletter.ParseAddress(in)
		if err != nil || got != want {
			t.Errorf("ParseAddress(%q) = %v, %v; want %v", in, got, err, want)
		}
		var back deadletter.Address
		text, _ := got.MarshalText()
		if err := back.UnmarshalText(text); err != nil || back != got {
			t.Errorf("%v read back as %v (%v)", got, back, err)
		}
	}
	for _, bad := range []string{"", "p1", "/t1", "p1/", "p 1/t", "p?/t", "p#/t", "p%/t"} {
		if _, err := deadletter.ParseAddress(bad); err == nil || !strings.Contains(err.Error(), "invalid address") {
			t.Errorf("ParseAddress(%q): %v, want a refusal", bad, err)
		}
	}
	var zero deadletter.Address
	if err := zero.UnmarshalText(nil); err != nil || zero != (deadletter.Address{}) {
		t.Errorf("an empty text is the zero address: %v, %v", zero, err)
	}
	for a, why := range map[deadletter.Address]string{
		{PartitionID: "p", TransactionID: "t-1.x~"}:                             "",
		{PartitionID: "p", TransactionID: "a b"}:                                "characters the broker cannot take",
		{PartitionID: "p", TransactionID: "é"}:                                  "characters the broker cannot take",
		{PartitionID: "..", TransactionID: "t"}:                                 "directory step",
		{PartitionID: "", TransactionID: "t"}:                                   "is empty",
		{PartitionID: "p", TransactionID: deadletter.NoTransactionID("row-17")}: "no transaction id",
	} {
		got := a.Unreachable()
		if why == "" && (got != "" || !a.PathSafe()) || why != "" && (!strings.Contains(got, why) || a.PathSafe()) {
			t.Errorf("%q: unreachable %q, want %q", a, got, why)
		}
	}
}

// A restore's and an import's copy ids are derived from the address
// alone (a rerun is a duplicate the broker drops), differ between the
// two, and take every broker's path; an address of another broker's
// export never meets one of this broker's, nor the same address of a
// third broker.
func TestDerivedIDs(t *testing.T) {
	a := deadletter.Address{PartitionID: "p1", TransactionID: "order:1"}
	b := deadletter.Address{PartitionID: "p1", TransactionID: "order:2"}
	if deadletter.RestoreTxID(a) != deadletter.RestoreTxID(a) || deadletter.RestoreTxID(a) == deadletter.RestoreTxID(b) {
		t.Error("RestoreTxID is not a function of the address alone")
	}
	if deadletter.RestoreTxID(a)[5:] == deadletter.ImportTxID(a)[5:] {
		t.Error("a restore and an import of one address share an id")
	}
	for _, id := range []string{deadletter.RestoreTxID(a), deadletter.ImportTxID(a)} {
		if len(id) != 29 || !deadletter.SafeSegment(id) || !(strings.HasPrefix(id, "dlqa-") || strings.HasPrefix(id, "dlqi-")) {
			t.Errorf("derived id %q", id)
		}
	}
	x := deadletter.ForeignAddress("http://localhost:6641", a)
	y := deadletter.ForeignAddress("http://localhost:6642", a)
	if !x.Foreign() || a.Foreign() || x == y || x.TransactionID != a.TransactionID || !strings.HasSuffix(x.PartitionID, ":"+a.PartitionID) {
		t.Errorf("foreign addresses %v and %v of %v", x, y, a)
	}
	if x != deadletter.ForeignAddress("http://localhost:6641", a) {
		t.Error("ForeignAddress is not a function of its arguments")
	}
}

// A replay's copy carries its generation; a copy the broker's move made
// is at least a second one; an original is the first.
func TestGenerations(t *testing.T) {
	for txid, want := range map[string]int{
		"order:1":                          1,
		"dlqr-1-0123456789abcdef01234567":  2,
		"dlqr-4-0123456789abcdef01234567":  5,
		"dlqr-1-0123456789abcdef0123456":   1, // one digit short: not ours
		"dlq:00000000-0000-0000-0000-0001": 2,
	} {
		if got := deadletter.Generation(txid); got != want {
			t.Errorf("Generation(%q) = %d, want %d", txid, got, want)
		}
		if deadletter.IsReplayID(txid) != (strings.HasPrefix(txid, "dlqr-") && want > 1) {
			t.Errorf("IsReplayID(%q) = %v", txid, deadletter.IsReplayID(txid))
		}
	}
}

// Each action is named once, by the ledger's name and by the command that
// runs it; a name that is none of theirs does nothing, and resumes as a
// replay does.
func TestActions(t *testing.T) {
	names, verbs := map[string]bool{}, map[string]bool{}
	for _, a := range deadletter.Actions() {
		if names[a.Name] || verbs[a.Verb] {
			t.Errorf("%s named twice", a.Name)
		}
		names[a.Name], verbs[a.Verb] = true, true
		if deadletter.ActionNamed(a.Name) != a || deadletter.ActionNamed(a.Verb) != a || deadletter.ActionOf(a.Name) != a || deadletter.VerbOf(a.Name) != a.Verb {
			t.Errorf("%s is not found by its names", a.Name)
		}
		if a.Outside() && (a.Deletes || a.Ordered) {
			t.Errorf("%s comes from outside the DLQ and deletes or orders", a.Name)
		}
		if a.Title == "" || a.Past == "" || a.Doing == "" {
			t.Errorf("%s has no words", a.Name)
		}
	}
	if deadletter.ActionNamed("hold") != nil {
		t.Error("a hold is a decision, not a batch action")
	}
	if o := deadletter.ActionOf("hold"); o == nil || o.Publishes || o.Deletes || o.Outside() || o.Past != "hold" {
		t.Errorf("ActionOf(hold) = %+v", o)
	}
	if deadletter.VerbOf("hold") != "replay" {
		t.Error("an unknown name resumes as a replay")
	}
	if !deadletter.ActRestore.Outside() || !deadletter.ActImport.Outside() || deadletter.ActReplay.Outside() || deadletter.ActDiscard.Outside() {
		t.Error("Outside: the archive and a file are outside the DLQ, the DLQ is not")
	}
	for _, a := range deadletter.Actions() {
		if got, want := a.Discards(), a == deadletter.ActDiscard; got != want {
			t.Errorf("%s.Discards() = %v", a.Name, got)
		}
		if got, want := a.Republishes(), a == deadletter.ActReplay; got != want {
			t.Errorf("%s.Republishes() = %v", a.Name, got)
		}
	}
	if o := deadletter.ActionOf("hold"); o.Discards() || o.Republishes() {
		t.Error("a hold neither discards nor republishes")
	}
}

// Every criterion narrows; a time filter is a half-open interval; the
// selection says itself as a command line would type it; a bad one is
// refused at Compile.
func TestSelection(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	row := deadletter.Row{PartitionID: "p1", TransactionID: "t1", Queue: "orders", ConsumerGroup: "billing", Partition: "7",
		ErrorMessage: "order 12 not found", FailedAt: at}
	other := row
	other.ErrorMessage, other.TransactionID = "timeout after 5000ms", "t2"
	for name, c := range map[string]struct {
		sel       deadletter.Selection
		row, rest bool
	}{
		"queue":           {deadletter.Selection{Queue: "orders"}, true, true},
		"another queue":   {deadletter.Selection{Queue: "payments"}, false, false},
		"group":           {deadletter.Selection{ConsumerGroup: "billing"}, true, true},
		"partition":       {deadletter.Selection{Partition: "8"}, false, false},
		"error":           {deadletter.Selection{Error: "not found$"}, true, false},
		"class":           {deadletter.Selection{Class: deadletter.ClassID("order 99 not found")}, true, false},
		"failed after":    {deadletter.Selection{FailedAfter: at}, true, true},
		"failed before":   {deadletter.Selection{FailedBefore: at}, false, false},
		"address":         {deadletter.Selection{Addresses: []deadletter.Address{{PartitionID: "p1", TransactionID: "t2"}}}, false, true},
		"where":           {deadletter.Selection{Where: `.errorMessage | test("timeout")`}, false, true},
		"where, and more": {deadletter.Selection{Queue: "orders", Where: `.consumerGroup == "billing"`}, true, true},
	} {
		s := c.sel
		if err := s.Compile(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Match(row) != c.row || s.Match(other) != c.rest {
			t.Errorf("%s: matches %v and %v, want %v and %v", name, s.Match(row), s.Match(other), c.row, c.rest)
		}
	}
	s := deadletter.Selection{Queue: "orders", Error: "not found", Limit: 5, Where: ".x == 1", Addresses: []deadletter.Address{{PartitionID: "p", TransactionID: "t"}}}
	if got, want := s.String(), `--queue orders --error 'not found' --where '.x == 1' --limit 5 p/t`; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if (&deadletter.Selection{Where: ".x"}).Empty() || !(&deadletter.Selection{}).Empty() || (&deadletter.Selection{All: true}).Empty() {
		t.Error("Empty")
	}
	if (&deadletter.Selection{Where: ".x", All: true}).Narrowed() || !(&deadletter.Selection{Queue: "q", Where: ".x"}).Narrowed() {
		t.Error("Narrowed: --where and --all do not narrow; a queue does")
	}
	if !(&deadletter.Selection{Addresses: []deadletter.Address{{PartitionID: "p", TransactionID: "t"}}}).OnlyAddresses() ||
		(&deadletter.Selection{Queue: "q", Addresses: []deadletter.Address{{PartitionID: "p", TransactionID: "t"}}}).OnlyAddresses() {
		t.Error("OnlyAddresses")
	}
	if !(&deadletter.Selection{ConsumerGroup: "g"}).RowLevel() || (&deadletter.Selection{Queue: "q"}).RowLevel() {
		t.Error("RowLevel: a group picks rows, a queue whole messages")
	}
	for _, bad := range []deadletter.Selection{{Error: "("}, {Limit: -1}, {FailedAfter: at, FailedBefore: at}, {Where: ".x |= 1"}} {
		if err := bad.Compile(); err == nil {
			t.Errorf("%+v compiled", bad)
		}
	}
	// A destructive selection whose filters select everything in scope
	// needs --all; a scope alone, explicit addresses or --all do not.
	ev := deadletter.Selection{Queue: "orders", Error: "."}
	if err := ev.Everything("dlq rm", 10, 10); err == nil || !strings.Contains(err.Error(), "pass --all") || !strings.Contains(err.Error(), "of queue orders") {
		t.Errorf("Everything: %v", err)
	}
	for _, ok := range []struct {
		s       deadletter.Selection
		in, got int
	}{{ev, 10, 9}, {deadletter.Selection{Queue: "orders"}, 10, 10}, {deadletter.Selection{Error: ".", All: true}, 10, 10}} {
		if err := ok.s.Everything("dlq rm", ok.in, ok.got); err != nil {
			t.Errorf("%+v: %v", ok.s, err)
		}
	}
	if err := ev.Everything("", 10, 10); err != nil {
		t.Errorf("a read is never refused: %v", err)
	}
}

// --failed-after and --failed-before: RFC 3339, or a duration ago.
func TestParseTime(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2026-12-01T10:00:00Z":      time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		"2026-12-01T11:00:00+01:00": time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		"2h":                        now.Add(-2 * time.Hour),
		"3d":                        now.Add(-72 * time.Hour),
	} {
		if got, err := deadletter.ParseTime(in, now); err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := deadletter.ParseTime("yesterday", now); err == nil || !strings.Contains(err.Error(), "RFC 3339") {
		t.Errorf("ParseTime(yesterday): %v", err)
	}
}

// --from-file reads addresses a line, ls -o ndjson rows, and an export
// (its first and last lines name no row); blank lines and comments are
// skipped; a bad line is named by its number.
func TestReadAddresses(t *testing.T) {
	in := strings.Join([]string{
		"# addresses to replay",
		"p1/t1",
		"",
		`{"address":"p2/t2","queue":"orders"}`,
		`{"partitionId":"p3","transactionId":"t/3"}`,
		`{"dlqctlExport":1,"broker":"http://localhost:6632"}`,
		`{"dlqctlExportEnd":true,"rows":2,"sha256":"00"}`,
	}, "\n")
	got, err := deadletter.ReadAddresses(strings.NewReader(in))
	want := []deadletter.Address{{PartitionID: "p1", TransactionID: "t1"}, {PartitionID: "p2", TransactionID: "t2"}, {PartitionID: "p3", TransactionID: "t/3"}}
	if err != nil || len(got) != len(want) {
		t.Fatalf("ReadAddresses = %v, %v", got, err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("address %d: %v, want %v", i, got[i], want[i])
		}
	}
	for in, line := range map[string]string{"p1/t1\nnot an address": "line 2", "p1/t1\n{\"address\":": "line 2", "\n\n{}": "line 3"} {
		if _, err := deadletter.ReadAddresses(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), line) {
			t.Errorf("%q: %v, want an error naming %s", in, err, line)
		}
	}
}

// An encryption envelope is an object of exactly encrypted, iv and
// authTag; a payload that only mentions them is a payload.
func TestEnvelopes(t *testing.T) {
	for data, want := range map[string]bool{
		`{"encrypted":"x","iv":"y","authTag":"z"}`:               true,
		`{"authTag":"z","iv":"y","encrypted":"x"}`:               true,
		`{"encrypted":"x","iv":"y","authTag":"z","extra":1}`:     false,
		`{"note":"authTag"}`:                                     false,
		`"authTag"`:                                              false,
		`{"encrypted":"x","iv":"y"}`:                             false,
		`{"encrypted":"x","iv":"y","authTag":"z","authTag":"w"}`: true,
	} {
		if got := deadletter.IsEnvelope(json.RawMessage(data)); got != want {
			t.Errorf("IsEnvelope(%s) = %v, want %v", data, got, want)
		}
		r := deadletter.Row{Data: json.RawMessage(data)}
		if r.Undecryptable() != want {
			t.Errorf("Undecryptable(%s) = %v", data, r.Undecryptable())
		}
	}
}

// A class id is the same for texts that differ only in their ids, and
// has the form IsClassID knows.
func TestClassIDs(t *testing.T) {
	a, b := deadletter.ClassID("order 12 not found"), deadletter.ClassID("order 98765 not found")
	if a != b || !deadletter.IsClassID(a) || a == deadletter.ClassID("timeout after 5000ms") {
		t.Errorf("class ids %q %q", a, b)
	}
	for _, s := range []string{"", "1234567", "123456789", "ABCDEF12", "1234567g"} {
		if deadletter.IsClassID(s) {
			t.Errorf("IsClassID(%q)", s)
		}
	}
	if deadletter.GroupLabel(deadletter.QueueModeGroup) != deadletter.QueueModeLabel || deadletter.GroupName(deadletter.QueueModeLabel) != deadletter.QueueModeGroup || deadletter.GroupName("billing") != "billing" {
		t.Error("the queue-mode group's label and name")
	}
}
