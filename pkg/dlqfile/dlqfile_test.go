package dlqfile_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/dlqfile"
)

func rows(n int) []deadletter.Row {
	at := time.Date(2026, 12, 6, 5, 38, 54, 73957000, time.UTC)
	var out []deadletter.Row
	for i := range n {
		out = append(out, deadletter.Row{ID: fmt.Sprintf("m-%d", i), PartitionID: "6f1c0a4e-0000-4000-8000-000000000001",
			TransactionID: fmt.Sprintf("order:%d", i), Queue: "orders", Partition: "p" + fmt.Sprint(i%3), ConsumerGroup: "billing",
			ErrorMessage: "timeout after 30s <&>", RetryCount: i, FailedAt: at.Add(time.Duration(i) * time.Microsecond),
			Data: json.RawMessage(fmt.Sprintf(`{"orderId":%d,"note":"ü \u2028 <b>"}`, i))})
	}
	return out
}

func write(t *testing.T, rs []deadletter.Row, gz bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := dlqfile.NewWriter(&buf, dlqfile.Header{Broker: "http://localhost:6632", Line: "Queen 2.2", Selection: "--queue orders"}, gz)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if err := w.Add(dlqfile.RowOf(r)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// read reads a whole file; the error is the first one met.
func read(b []byte) (*dlqfile.Reader, []deadletter.Row, error) {
	x, err := dlqfile.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	var out []deadletter.Row
	for r, err := range x.Rows() {
		if err != nil {
			return x, out, err
		}
		out = append(out, r.DeadLetter())
	}
	return x, out, nil
}

func TestRoundTrip(t *testing.T) {
	for _, gz := range []bool{false, true} {
		want := rows(25)
		x, got, err := read(write(t, want, gz))
		if err != nil {
			t.Fatalf("gz %v: %v", gz, err)
		}
		if !x.Complete() || x.Header.Broker != "http://localhost:6632" || x.Header.Line != "Queen 2.2" || x.Header.Export != dlqfile.Version {
			t.Fatalf("gz %v: header %+v complete %v", gz, x.Header, x.Complete())
		}
		if len(got) != len(want) {
			t.Fatalf("gz %v: %d rows, want %d", gz, len(got), len(want))
		}
		for i := range want {
			w, g := want[i], got[i]
			if !g.FailedAt.Equal(w.FailedAt) || g.Address() != w.Address() || g.Queue != w.Queue || g.Partition != w.Partition ||
				g.ID != w.ID || g.ConsumerGroup != w.ConsumerGroup || g.ErrorMessage != w.ErrorMessage || g.RetryCount != w.RetryCount {
				t.Fatalf("gz %v: row %d\n got %+v\nwant %+v", gz, i, g, w)
			}
			var a, b any
			if json.Unmarshal(g.Data, &a) != nil || json.Unmarshal(w.Data, &b) != nil || fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("gz %v: row %d payload %s, want %s", gz, i, g.Data, w.Data)
			}
		}
	}
}

// Every prefix of a file is refused with a sentence, and so is every
// file with one byte changed: nothing of either may be acted on.
func TestCutOrAlteredFilesAreRefused(t *testing.T) {
	for _, gz := range []bool{false, true} {
		full := write(t, rows(4), gz)
		for n := range len(full) {
			_, _, err := read(full[:n])
			var fe *dlqfile.Error
			if !errors.As(err, &fe) {
				t.Fatalf("gz %v: cut at byte %d of %d: %v, want a refusal", gz, n, len(full), err)
			}
		}
		// Compressed, some bytes say nothing of the content (the gzip
		// header's time and OS, the last deflate byte's unused bits): a
		// change there must leave the rows exactly as exported.
		_, whole, _ := read(full)
		for i := range len(full) {
			for _, flip := range []byte{0x01, 0x20} {
				b := bytes.Clone(full)
				b[i] ^= flip
				_, got, err := read(b)
				var fe *dlqfile.Error
				switch {
				case errors.As(err, &fe):
				case gz && err == nil && fmt.Sprint(got) == fmt.Sprint(whole):
				default:
					t.Fatalf("gz %v: byte %d ^ %#x: %v, want a refusal", gz, i, flip, err)
				}
			}
		}
	}
}

func TestRefusalsSaySo(t *testing.T) {
	full := write(t, rows(2), false)
	cases := map[string]struct {
		file []byte
		want string
	}{
		"cut":       {full[:len(full)-5], "cut short"},
		"altered":   {bytes.Replace(full, []byte(`"orderId":1`), []byte(`"orderId":7`), 1), "altered"},
		"version":   {bytes.Replace(full, []byte(`"dlqctlExport":1`), []byte(`"dlqctlExport":9`), 1), "version 9; this dlqctl reads version 1"},
		"ls output": {[]byte(`{"address":"p/t","partitionId":"p","transactionId":"t"}` + "\n"), "not a dlqctl export"},
		"empty":     {nil, "empty"},
		"joined":    {append(bytes.Clone(full), full...), "goes on after its last line"},
	}
	for name, c := range cases {
		_, _, err := read(c.file)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// A file is in place only once whole: an aborted export leaves nothing,
// and a finished one is the only file in its directory.
func TestCreateIsAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dlq.ndjson.gz")
	w, err := dlqfile.Create(path, dlqfile.Header{Broker: "b"})
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Add(dlqfile.RowOf(rows(1)[0]))
	w.Abort()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("an aborted export left %v", ents)
	}
	w, err = dlqfile.Create(path, dlqfile.Header{Broker: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows(3) {
		_ = w.Add(dlqfile.RowOf(r))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "dlq.ndjson.gz" {
		t.Fatalf("directory holds %v", ents)
	}
	if _, err := dlqfile.Create(path, dlqfile.Header{Broker: "b"}); !errors.Is(err, dlqfile.ErrExists) {
		t.Fatalf("a second export to the same name: %v, want ErrExists", err)
	}
	b, _ := os.ReadFile(path)
	if b[0] != 0x1f || b[1] != 0x8b {
		t.Fatal("a .gz name is not written gzip")
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600 (payloads)", fi.Mode().Perm())
	}
	if _, got, err := read(b); err != nil || len(got) != 3 {
		t.Fatalf("%d rows, %v", len(got), err)
	}
}

// An export's rows are addresses to --from-file, as ls -o ndjson's are.
func TestFromFileReadsAnExport(t *testing.T) {
	addrs, err := deadletter.ReadAddresses(bytes.NewReader(write(t, rows(3), false)))
	if err != nil || len(addrs) != 3 || addrs[2].TransactionID != "order:2" {
		t.Fatalf("%v %v", addrs, err)
	}
}
