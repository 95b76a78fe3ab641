package dlq

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/dlqfile"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// ExportOptions are `dlq export`'s flags.
type ExportOptions struct {
	Selection cmdutil.SelectionFlags
	Archived  bool
	Move      bool
	// Exec are the flags of the discard --move runs (why, yes, rate,
	// holds); DryRun is also a plain export's.
	Exec ExecFlags
	File string
	Args []string
}

// NewCmdExport writes dead letters to a file.
func NewCmdExport(f *cmdutil.Factory) *cobra.Command {
	o := &ExportOptions{}
	cmd := &cobra.Command{
		Use:   "export FILE [ADDRESS...] [selection flags]",
		Short: "Write dead letters to a file dlq import reads back, gzip when FILE ends in .gz",
		Long: `Export writes the dead letters a selection chooses (its flags, addresses,
--from-file; --archived for the ledger's archive) to FILE as NDJSON, gzip when
the name ends in .gz, - for stdout: a first line naming the source broker, its
Queen line, the selection and the time; a line a row with the fields of
ls -o ndjson (payload, error, failure time, consumer group, address); and a
last line with the number of rows and the SHA-256 of everything before it,
so dlq import refuses a file cut short or altered. The file appears only
once it is whole and synced (it is written beside FILE, then renamed).

--move discards what it exported, as dlq rm does (a batch recorded with who
and why, every row archived in the ledger first, at --rate), and only once
the file is complete and synced: a move killed before then deleted nothing;
one killed after resumes with the dlq rm --batch line it prints. --dry-run
says what would be written (and, with --move, the discard's plan).`,
		Example: `  $ dlqctl dlq export orders.ndjson.gz --queue orders
  $ dlqctl dlq export - --class 1a2b3c4d | gzip > class.ndjson.gz
  $ dlqctl dlq export before-purge.ndjson.gz --queue notifications --failed-before 30d --move --why "purge, kept on disk" --yes`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.File, o.Args = args[0], args[1:]
			switch {
			case o.Move && o.Archived:
				return cmdutil.FlagErrorf("--move discards from the DLQ; --archived exports the ledger's archive, which nothing deletes")
			case o.Move && o.File == "-":
				return cmdutil.FlagErrorf("--move needs a file it can sync before it deletes: not stdout")
			case !o.Move && (o.Exec.Why != "" || o.Exec.Yes || o.Exec.OverrideHold || o.Exec.SkipHeld):
				return cmdutil.FlagErrorf("--why, --yes, --override-hold and --skip-held are for --move (an export alone changes nothing)")
			}
			if o.Move {
				if err := validateExec(&o.Exec); err != nil {
					return err
				}
			}
			return exportRun(cmd.Context(), f, o)
		},
	}
	cmdutil.AddSelectionFlags(cmd, &o.Selection, true)
	fl := cmd.Flags()
	fl.BoolVar(&o.Archived, "archived", false, "export the ledger's archive (what replay, rm and sync kept), not the DLQ")
	fl.BoolVar(&o.Move, "move", false, "discard the exported dead letters once the file is complete and synced (archived first, recorded as a batch)")
	fl.BoolVar(&o.Exec.DryRun, "dry-run", false, "say what would be written (and, with --move, discarded); write nothing")
	fl.StringVar(&o.Exec.Why, "why", "", "why the exported dead letters are discarded (--move; recorded in the ledger)")
	fl.BoolVarP(&o.Exec.Yes, "yes", "y", false, "do not ask for confirmation (--move)")
	addSettingFlags(cmd, &o.Exec, deadletter.Discard, map[batch.Given]string{batch.GivenRate: "; for --move", batch.GivenBurst: "; for --move"})
	fl.BoolVar(&o.Exec.OverrideHold, "override-hold", false, "export and discard messages under an active hold all the same (--move)")
	fl.BoolVar(&o.Exec.SkipHeld, "skip-held", false, "leave messages under an active hold out of the file and the discard (--move)")
	return cmd
}

func exportRun(ctx context.Context, f *cmdutil.Factory, o *ExportOptions) error {
	if o.Move {
		return execute(ctx, f, moveSpec(f, o))
	}
	sel, err := o.Selection.BuildRequired(f, o.Args, "dlq export")
	if err != nil {
		return err
	}
	cl, err := f.Client()
	if err != nil {
		return err
	}
	out, err := openExport(ctx, f, cl, o, sel.String())
	if err != nil {
		return err
	}
	rows, messages := 0, map[deadletter.Address]struct{}{}
	add := func(r deadletter.Row) error {
		rows++
		messages[r.Address()] = struct{}{}
		if out == nil {
			return nil
		}
		return out.Add(dlqfile.RowOf(r))
	}
	if err := exportRows(ctx, f, cl, o.Archived, sel, add); err != nil {
		if out != nil {
			out.Abort()
		}
		return err
	}
	return closeExport(f, o, out, rows, len(messages))
}

// exportRows gives add each row the selection chooses, with its payload:
// the DLQ's as ls lists them, or the archive's (--archived).
func exportRows(ctx context.Context, f *cmdutil.Factory, cl *client.Client, archived bool, sel *deadletter.Selection, add func(deadletter.Row) error) error {
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	now, policies := f.Now(), cfg.PolicySetFor(f.ContextName())
	if archived {
		ld, err := f.Ledger(ctx)
		if err != nil {
			return err
		}
		return inspect.EachArchived(ctx, ld, cl.Broker(), sel, policies, now, func(a inspect.ArchivedRow) error { return add(a.Row()) })
	}
	dc, err := decisionsFor(ctx, f, cl.Broker())
	if err != nil {
		return err
	}
	listing, err := inspect.List(ctx, cl, sel, dc, inspect.ListOptions{Policies: policies, Now: now})
	if err != nil {
		return err
	}
	pl := &payloads{cl: cl}
	for r, err := range listing.Rows() {
		if err == nil {
			err = pl.fill(ctx, &r)
		}
		if err != nil {
			return err
		}
		if err := add(r); err != nil {
			return err
		}
	}
	if n := pl.gets; n > 0 {
		fmt.Fprintf(f.IO.ErrOut, "note: %s fetched with one GET each: this broker's list shows them encrypted\n", render.Plural(n, "payload", "payloads"))
	}
	if err := dc.Err(); err != nil && sel.Where != "" {
		// --where chose some rows without their decisions: the file would
		// not be the selection.
		return err
	}
	for _, n := range listing.Notes() {
		fmt.Fprintln(f.IO.ErrOut, "note: "+n)
	}
	return nil
}

// payloads gives an exported row its payload where the list shows the
// encryption envelope instead (the C++ 0.x server's list never
// decrypts): one GET a message, whose detail route decrypts, as a
// replay's plan does. On a broker whose list decrypts, an envelope is a
// payload the broker cannot decrypt, and stays one (an import leaves it
// out, said).
type payloads struct {
	cl   *client.Client
	last deadletter.Address
	data json.RawMessage
	gets int
}

func (p *payloads) fill(ctx context.Context, r *deadletter.Row) error {
	if p.cl.ListDecrypts() || !deadletter.IsEnvelope(r.Data) {
		return nil
	}
	if a := r.Address(); a != p.last {
		m, err := p.cl.Get(ctx, a)
		if err != nil {
			return fmt.Errorf("fetching the payload of %s, which the list shows encrypted: %w", a, err)
		}
		p.last, p.data = a, m.Payload
		p.gets++
	}
	r.Data, r.IsEncrypted = p.data, true
	return nil
}

// openExport starts the file (nil on a dry run, which writes nothing).
func openExport(ctx context.Context, f *cmdutil.Factory, cl *client.Client, o *ExportOptions, selection string) (*dlqfile.Writer, error) {
	if o.Exec.DryRun {
		return nil, nil
	}
	rel, err := cl.Release(ctx)
	if err != nil {
		return nil, err
	}
	h := dlqfile.Header{Broker: cl.Broker(), Line: rel.Name(), ExportedAt: f.Now().UTC(), Selection: selection, Archived: o.Archived}
	if o.File == "-" {
		var out io.Writer = f.IO.Out
		return dlqfile.NewWriter(out, h, false)
	}
	w, err := dlqfile.Create(o.File, h)
	if err != nil {
		return nil, cmdutil.UsageError(fmt.Errorf("%s: %v", o.File, err))
	}
	return w, nil
}

// closeExport finishes the file and says what it holds.
func closeExport(f *cmdutil.Factory, o *ExportOptions, out *dlqfile.Writer, rows, messages int) error {
	what := render.Plural(rows, "row", "rows") + " (" + render.Plural(messages, "message", "messages") + ")"
	if out == nil {
		fmt.Fprintf(f.IO.ErrOut, "Dry run: would write %s to %s; nothing was written.\n", what, fileName(o.File))
		return nil
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", fileName(o.File), err)
	}
	fmt.Fprintf(f.IO.ErrOut, "Exported %s to %s.\n", what, fileName(o.File))
	return nil
}

func fileName(name string) string {
	if name == "-" {
		return "stdout"
	}
	return name
}

// moveSpec is the discard --move runs: the file is written from the
// planned batch's rows, complete and synced, before the batch is
// recorded and its first row deleted.
func moveSpec(f *cmdutil.Factory, o *ExportOptions) execSpec {
	sp := rmSpec(&RmOptions{Selection: o.Selection, Exec: o.Exec, Args: o.Args})
	sp.doing = "export"
	sp.base.Also = "exported to " + o.File + " first"
	sp.base.Went = "exported to " + o.File
	write := func(ctx context.Context, p *batch.Planned) error {
		cl, err := f.Client()
		if err != nil {
			return err
		}
		out, err := openExport(ctx, f, cl, o, p.Chosen())
		if err != nil {
			return err
		}
		rows, messages := 0, map[deadletter.Address]struct{}{}
		for r, err := range p.Rows(ctx) {
			if err == nil && out != nil {
				err = out.Add(dlqfile.RowOf(r))
			}
			if err != nil {
				if out != nil {
					out.Abort()
				}
				return err
			}
			rows++
			messages[r.Address()] = struct{}{}
		}
		return closeExport(f, o, out, rows, len(messages))
	}
	sp.before, sp.planned = write, write
	return sp
}
