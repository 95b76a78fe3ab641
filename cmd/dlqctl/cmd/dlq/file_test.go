package dlq_test

// Dead letters out to a file and into another broker: dlq export (with
// --move) and dlq import, between brokers of different Queen lines, each
// with a ledger of its own (environments that cannot see each other).
// Judged by what each broker holds.

import (
	"bytes"
	"compress/gzip"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testutil"
)

// exported exports src's orders with --move into a file and returns the
// file and each exported message's row, by payload.
func exported(t *testing.T, src *sandbox.Broker, cli *testutil.CLI) (string, map[string]sandbox.Row) {
	t.Helper()
	rows := map[string]sandbox.Row{}
	for _, r := range src.DeadLetterRows() {
		if r.Queue == "orders" {
			rows[compact(r.Payload)] = r
		}
	}
	file := filepath.Join(t.TempDir(), "orders.ndjson.gz")
	_, stderr, code := cli.Exec("dlq", "export", file, "--queue", "orders", "--move", "--why", "moving to the new cluster", "--yes", "--rate", "0")
	if code != 0 || !strings.Contains(stderr, "Exported ") || !strings.Contains(stderr, " discarded") {
		t.Fatalf("export --move: exit %d\n%s", code, stderr)
	}
	for _, r := range src.DeadLetterRows() {
		if r.Queue == "orders" {
			t.Fatalf("export --move left %s/%s in the DLQ", r.PartitionID, r.TransactionID)
		}
	}
	return file, rows
}

// An export moved into a broker of another line (or the same): each
// message is live there once, with its payload, queue and partition; a
// second import publishes nothing and says so.
func TestExportImportRoundTripAcrossLines(t *testing.T) {
	for _, pair := range [][2]sandbox.Line{{sandbox.Queen015, sandbox.Queen22}, {sandbox.Queen16, sandbox.Queen16}, {sandbox.Queen22, sandbox.Queen015}, {sandbox.Queen15, sandbox.Queen15}} {
		t.Run(pair[0].String()+"→"+pair[1].String(), func(t *testing.T) {
			src, srcCLI := onLine(t, pair[0])
			dst, dstCLI := onLine(t, pair[1])
			file, rows := exported(t, src, srcCLI)
			before := len(dst.LiveMessages())
			out, stderr, code := dstCLI.Exec("dlq", "import", file, "--dry-run")
			if code != 0 || !strings.Contains(out, "Import plan: ") || !strings.Contains(out, "from the file") || !strings.Contains(out, "source: file "+file+": ") || !strings.Contains(out, " exported from http://") || mutating(dst) != 0 {
				t.Fatalf("dry run: exit %d, %d writes\n%s%s", code, mutating(dst), out, stderr)
			}
			_, stderr, code = dstCLI.Exec("dlq", "import", file, "--why", "moved from the old cluster", "--yes", "--rate", "0")
			if code != 0 || !strings.Contains(stderr, " imported") {
				t.Fatalf("import: exit %d\n%s", code, stderr)
			}
			live := map[string][]sandbox.Live{}
			for _, m := range dst.LiveMessages() {
				live[compact(m.Payload)] = append(live[compact(m.Payload)], m)
			}
			if n := len(dst.LiveMessages()) - before; n != len(rows) {
				t.Errorf("%d messages published, want %d", n, len(rows))
			}
			for p, r := range rows {
				ms := live[p]
				if len(ms) != 1 {
					t.Errorf("%s/%s is live %d times", r.PartitionID, r.TransactionID, len(ms))
					continue
				}
				if m := ms[0]; m.Queue != r.Queue || m.Partition != r.Partition || !strings.HasPrefix(m.TransactionID, "dlqi-") {
					t.Errorf("%s/%s imported as %s in %s/%s", r.PartitionID, r.TransactionID, m.TransactionID, m.Queue, m.Partition)
				}
			}
			dst.ResetCalls()
			_, stderr, code = dstCLI.Exec("dlq", "import", file, "--why", "once more", "--yes", "--rate", "0")
			if code != 0 || !strings.Contains(stderr, "Nothing to import") || !strings.Contains(stderr, "already imported") || mutating(dst) != 0 {
				t.Fatalf("a second import: exit %d, %d writes\n%s", code, mutating(dst), stderr)
			}
			// decisions verify finds every copy in the destination (none
			// missing; nothing consumes them there).
			out, stderr, code = dstCLI.Exec("decisions", "verify", "last")
			m := regexp.MustCompile(`orders\s+0\s+(\d+)\s+0\s+0\s`).FindStringSubmatch(out)
			if code > 1 || m == nil || m[1] != strconv.Itoa(len(rows)) {
				t.Fatalf("verify: exit %d, want %d pending and none missing\n%s%s", code, len(rows), out, stderr)
			}
		})
	}
}

// A file cut short at any byte, or with any byte changed, is refused
// with a sentence and exit 2, and nothing reaches the broker.
func TestACutOrAlteredFileIsRefused(t *testing.T) {
	src, srcCLI := onLine(t, sandbox.Queen16)
	file, _ := exported(t, src, srcCLI)
	zipped, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(zipped))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	dst, dstCLI := onLine(t, sandbox.Queen22)
	rng := rand.New(rand.NewPCG(62, 2))
	try := func(name string, b []byte, want string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := dstCLI.Exec("dlq", "import", path, "--why", "x", "--yes", "--rate", "0")
		if code != 2 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "nothing was published") || mutating(dst) != 0 {
			t.Fatalf("%s: exit %d, %d writes\n%s", name, code, mutating(dst), stderr)
		}
	}
	for range 8 {
		try("cut.ndjson", plain[:rng.IntN(len(plain))], "cut short")
		try("cut.ndjson.gz", zipped[:rng.IntN(len(zipped))], "cut short")
		b := bytes.Clone(plain)
		i := rng.IntN(len(b) - 1) // the last newline's loss is a cut
		b[i] ^= 0x04
		try("altered.ndjson", b, "altered")
	}
	try("v2.ndjson", bytes.Replace(plain, []byte(`{"dlqctlExport":1,`), []byte(`{"dlqctlExport":2,`), 1), "version 2")
	if out, _, _ := dstCLI.Exec("decisions", "ls"); strings.Contains(out, "import") {
		t.Fatalf("a refused file recorded a batch:\n%s", out)
	}
}

// export never replaces a file (a moved DLQ's only copy may be in it),
// and a plain export changes nothing in the broker.
func TestExportNeitherReplacesAFileNorChangesTheBroker(t *testing.T) {
	b, cli := onLine(t, sandbox.Queen22)
	file := filepath.Join(t.TempDir(), "all.ndjson")
	depth := b.Depth()
	_, stderr, code := cli.Exec("dlq", "export", file, "--all")
	if code != 0 || b.Depth() != depth || mutating(b) != 0 || !strings.Contains(stderr, "Exported 240 rows") {
		t.Fatalf("export: exit %d, depth %d → %d, %d writes\n%s", code, depth, b.Depth(), mutating(b), stderr)
	}
	before, _ := os.ReadFile(file)
	_, stderr, code = cli.Exec("dlq", "export", file, "--queue", "orders", "--move", "--why", "x", "--yes")
	if code != 2 || !strings.Contains(stderr, "the file exists") || b.Depth() != depth {
		t.Fatalf("export over a file: exit %d, depth %d\n%s", code, b.Depth(), stderr)
	}
	if after, _ := os.ReadFile(file); !bytes.Equal(before, after) {
		t.Fatal("the file was changed")
	}
	out, _, code := cli.Exec("dlq", "export", "-", "--class", "3ce87dde")
	if code != 0 || !strings.HasPrefix(out, `{"dlqctlExport":1,"broker":"`) || !strings.Contains(out, `"dlqctlExportEnd":true`) {
		t.Fatalf("export to stdout: exit %d\n%s", code, out)
	}
}
