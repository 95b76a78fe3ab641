package dlq

import (
	"context"
	"io"
	"os"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/spf13/cobra"
)

// ImportOptions are `dlq import`'s flags.
type ImportOptions struct {
	Exec ExecFlags
	File string
}

// NewCmdImport publishes the dead letters of an export file.
func NewCmdImport(f *cmdutil.Factory) *cobra.Command {
	o := &ImportOptions{}
	return newBatchCmd(batchCommand{action: deadletter.Import, exec: &o.Exec, cmd: &cobra.Command{
		Use:   "import FILE",
		Short: "Publish the dead letters of an export file into this broker, each once",
		Long: `Import publishes the messages an export file holds (dlq export wrote it, from
this broker or another, of any Queen line) into this broker: to each message's
own queue and partition, or --to-queue, --to-partition. The file is read to
its last line before anything is planned: one cut short, altered after the
export (its digest), or of a version this dlqctl does not read is refused
with a sentence, and nothing is published. - reads the file from stdin.

Like a replay it is a batch recorded in the ledger with who and why, planned
before anything is sent (--dry-run prints the plan), at --rate with at most
--concurrency calls in flight, journaled message by message. Each message is
published under a transaction id derived from the source broker's identity
and its address (dlqi-…; a file of this broker's own is a restore from the
file, dlqa-…), so importing the same file again (a rerun, a resume after a
crash, a second person) publishes nothing twice: the journal says it was
imported, and by which batch. Resume with --batch ID; decisions verify
follows the copies.`,
		Example: `  $ dlqctl dlq import orders.ndjson.gz --dry-run
  $ dlqctl --context queen-2 dlq import orders.ndjson.gz --why "migrated from the 0.x cluster" --yes
  $ dlqctl --context staging dlq import prod-dlq.ndjson.gz --to-queue orders-repro --why "reproduce INC-231" --yes`,
		Args: cobra.MaximumNArgs(1),
	}, check: func(_ *cobra.Command, args []string) error {
		switch {
		case len(args) == 0 && o.Exec.BatchID == "":
			return cmdutil.FlagErrorf("dlq import needs the export file to read (or --batch ID to resume one)")
		case len(args) == 1 && o.Exec.BatchID != "":
			return cmdutil.FlagErrorf("--batch resumes a recorded import, which holds its messages; it takes no file")
		}
		return nil
	}, run: func(ctx context.Context, args []string) error {
		if len(args) == 1 {
			o.File = args[0]
		}
		return execute(ctx, f, importSpec(f, o))
	}})
}

// importSpec is what import's flags ask of execute.
func importSpec(f *cmdutil.Factory, o *ImportOptions) execSpec {
	sp := execSpec{verb: "import", flags: &o.Exec, base: batch.Request{
		Action:   deadletter.Import,
		Settings: o.Exec.Settings,
	}}
	if o.File != "" {
		name := o.File
		sp.file = &batch.File{Name: name, Open: func() (io.ReadCloser, error) {
			if name == "-" {
				return io.NopCloser(f.IO.In), nil
			}
			return os.Open(name)
		}}
	}
	return sp
}
