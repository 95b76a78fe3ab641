package dlq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/dlqfile"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// IntoFlags are replay's flags for a destination in another broker.
type IntoFlags struct {
	Context   string
	Server    string
	TokenFile string
	Keep      bool
}

// Another broker is any of these.
func (i IntoFlags) set() bool { return i.Context != "" || i.Server != "" }

func addIntoFlags(fl *pflag.FlagSet, i *IntoFlags) {
	fl.StringVar(&i.Context, "to-context", "", "publish into the broker of this context of the config (its server, token and ledger), then delete from this one what it holds")
	fl.StringVar(&i.Server, "to-server", "", "publish into the broker at this URL (with --to-token-file's token, or none), then delete from this one what it holds")
	fl.StringVar(&i.TokenFile, "to-token-file", "", "file holding the bearer token of --to-server's broker (this broker's token is never sent there)")
	fl.BoolVar(&i.Keep, "keep", false, "with --to-context or --to-server: copy, leaving the dead letters in this broker (staging)")
}

// intoRefused are the replay flags a replay into another broker does not
// take: it is an import there (a push under an id derived from this
// broker and the address), so the broker's move, the generation count of
// this broker's copies and the canary that watches them do not apply.
var intoRefused = []string{"via", "max-failures", "max-generation", "retry-unknown", "canary", "canary-wait", "max-refailures", "order", "batch"}

func validateInto(cmd *cobra.Command, i IntoFlags, s batch.Settings) error {
	fl := cmd.Flags()
	switch {
	case i.Context != "" && i.Server != "":
		return cmdutil.FlagErrorf("--to-context and --to-server both name the destination: give one")
	case i.TokenFile != "" && i.Server == "":
		return cmdutil.FlagErrorf("--to-token-file goes with --to-server (a context has its own token)")
	case !i.set() && (i.Keep || s.ToPartition != ""):
		return cmdutil.FlagErrorf("--keep and --to-partition are for a replay into another broker (--to-context or --to-server)")
	case !i.set():
		return nil
	}
	for _, name := range intoRefused {
		if fl.Changed(name) {
			if name == "batch" {
				return cmdutil.FlagErrorf("a replay into another broker is resumed by running it again (what the destination holds is not published twice); --batch resumes a batch of one broker")
			}
			return cmdutil.FlagErrorf("--%s is not for a replay into another broker: there each message is a push under an id derived from this broker and its address", name)
		}
	}
	return nil
}

// replayInto replays a selection into another broker: the selected rows
// are staged in a private export file, imported into the destination as
// a batch there (each message under dlqi-<source, address>, so a rerun or
// a second person publishes nothing twice), and then, unless --keep,
// deleted from this broker as a discard batch of exactly the messages the
// destination's journal says it holds. A run killed anywhere is taken up
// by running the same command again.
func replayInto(ctx context.Context, f *cmdutil.Factory, o *ReplayOptions) error {
	g, src, dst, err := intoBrokers(f, o.Into)
	if err != nil {
		return err
	}
	defer g.Close()
	sel, err := o.Selection.BuildRequired(f, o.Args, "dlq replay")
	if err != nil {
		return err
	}
	sel.Acting = "dlq replay"
	dir, err := os.MkdirTemp("", "dlqctl-replay-into-")
	if err != nil {
		return fmt.Errorf("staging the dead letters: %w", err)
	}
	defer os.RemoveAll(dir)
	staged := filepath.Join(dir, "rows.ndjson")
	st, err := stageInto(ctx, f, src, sel, o, staged)
	if err != nil {
		return err
	}
	if st.messages == 0 {
		fmt.Fprintln(f.IO.ErrOut, "Nothing to replay: no dead letter matches.")
		return nil
	}
	if err := destinationQueues(ctx, dst, st.queues, o.Exec.Settings.ToQueue); err != nil {
		return err
	}
	importErr := execute(ctx, g, intoImport(o, sel, staged))
	switch {
	case o.Exec.DryRun:
		if importErr == nil && !o.Into.Keep {
			fmt.Fprintf(f.IO.ErrOut, "Then the messages %s holds would be deleted from %s, archived in the ledger first (--keep leaves them there).\n", dst.Broker(), src.Broker())
		}
		return importErr
	case !importedSome(f, src, dst, importErr), o.Into.Keep:
		return importErr
	}
	if err := deleteHeld(ctx, f, g, o, sel, src, dst, st); err != nil {
		return err
	}
	return importErr
}

// intoBrokers are the destination's factory, this broker's client and
// the destination's; the destination may not be this broker, however its
// URL is spelt.
func intoBrokers(f *cmdutil.Factory, into IntoFlags) (*cmdutil.Factory, *client.Client, *client.Client, error) {
	g, err := f.ForDestination(into.Context, into.Server, into.TokenFile)
	if err != nil {
		return nil, nil, nil, err
	}
	src, err := f.Client()
	if err == nil {
		var dst *client.Client
		if dst, err = g.Client(); err == nil {
			if src.Broker() == dst.Broker() || sameServer(src.Server(), dst.Server()) {
				err = cmdutil.FlagErrorf("the destination is this broker (%s): replay without --to-context or --to-server, or name another broker", src.Broker())
			} else {
				return g, src, dst, nil
			}
		}
	}
	g.Close()
	return nil, nil, nil, err
}

// intoImport is the import batch that publishes the staged file into the
// destination, with the replay's settings that apply there.
func intoImport(o *ReplayOptions, sel *deadletter.Selection, staged string) execSpec {
	return execSpec{verb: "import", doing: "replay",
		flags: &ExecFlags{Why: o.Exec.Why, By: o.Exec.By, Yes: o.Exec.Yes, DryRun: o.Exec.DryRun, given: o.Exec.given},
		base:  batch.Request{Action: deadletter.Import, Settings: intoSettings(o.Exec.Settings)},
		file:  &batch.File{Name: staged, Label: "replay of " + sel.String() + " from another broker", Open: func() (io.ReadCloser, error) { return os.Open(staged) }},
	}
}

// intoSettings are the replay's settings that apply to the import into
// another broker (the path, the generations and the order are this
// broker's: validateInto refused them).
func intoSettings(s batch.Settings) batch.Settings {
	return batch.Settings{Rate: s.Rate, Burst: s.Burst, Concurrency: s.Concurrency, ToQueue: s.ToQueue, ToPartition: s.ToPartition,
		Transform: s.Transform, MaxLag: s.MaxLag, Window: s.Window, NoTrace: s.NoTrace}
}

// importedSome reports whether the import ended in a way that leaves
// messages to delete here: done, or done with some failed (exit 1).
// Awaiting approval, refused, interrupted or unreachable, nothing is
// deleted, and the person is told how to go on.
func importedSome(f *cmdutil.Factory, src, dst *client.Client, importErr error) bool {
	var ex *cmdutil.ExitError
	switch {
	case importErr == nil, errors.As(importErr, &ex) && ex.Code == cmdutil.ExitBreach:
		return true
	case errors.As(importErr, &ex) && ex.Code == cmdutil.ExitAwaiting:
		fmt.Fprintf(f.IO.ErrOut, "Nothing was deleted from %s. Once the import is approved and run there, run this command again: it deletes here what %s then holds, and publishes nothing twice.\n", src.Broker(), dst.Broker())
	default:
		fmt.Fprintf(f.IO.ErrOut, "Nothing was deleted from %s. Run the same command again to go on: what %s holds is not published twice.\n", src.Broker(), dst.Broker())
	}
	return false
}

// deleteHeld discards here, archived first, exactly the staged messages
// the destination's journal says it holds.
func deleteHeld(ctx context.Context, f, g *cmdutil.Factory, o *ReplayOptions, sel *deadletter.Selection, src, dst *client.Client, st *staged) error {
	held, batches, err := heldByDestination(ctx, g, dst, src.Broker(), st.addresses)
	if err != nil {
		return err
	}
	if len(held) == 0 {
		fmt.Fprintf(f.IO.ErrOut, "Nothing to delete from %s: %s holds none of these messages.\n", src.Broker(), dst.Broker())
		return nil
	}
	// The selection read again, narrowed to what the destination holds:
	// one listing, not a GET an address.
	del := *sel
	del.Addresses, del.Acting = held, "dlq replay"
	if err := del.Compile(); err != nil {
		return err
	}
	rm := rmSpec(&RmOptions{Exec: ExecFlags{Why: o.Exec.Why, By: o.Exec.By, Yes: true, OverrideHold: o.Exec.OverrideHold, Settings: batch.Settings{Burst: 1}}})
	rm.built = &del
	// The deletes go at the import's --concurrency, unpaced: the copies
	// are published already, and a delete reaches no consumer.
	rm.base.Settings.Concurrency = o.Exec.Settings.Concurrency
	rm.doing = "delete"
	rm.base.Words = "the messages of " + sel.String() + " that " + dst.Broker() + " holds"
	rm.base.Also = "replayed into it first"
	rm.base.Went = "replayed into " + dst.Broker() + " by import batch " + strings.Join(batches, ", ")
	return execute(ctx, f, rm)
}

// staged is what stageInto wrote: the messages, their addresses in the
// order read, and their queues.
type staged struct {
	rows, messages int
	addresses      []deadletter.Address
	queues         []string
}

// stageInto writes the selected rows of src, with their payloads, to the
// export file path. A message under an active hold is refused, left out
// (--skip-held) or taken (--override-hold), as a replay in one broker
// does.
func stageInto(ctx context.Context, f *cmdutil.Factory, src *client.Client, sel *deadletter.Selection, o *ReplayOptions, path string) (*staged, error) {
	cfg, err := f.Config()
	if err != nil {
		return nil, err
	}
	rel, err := src.Release(ctx)
	if err != nil {
		return nil, err
	}
	dc, err := decisionsFor(ctx, f, src.Broker())
	if err != nil {
		return nil, err
	}
	now := f.Now()
	listing, err := inspect.List(ctx, src, sel, dc, inspect.ListOptions{Policies: cfg.PolicySetFor(f.ContextName()), Now: now})
	if err != nil {
		return nil, err
	}
	h := dlqfile.Header{Broker: src.Broker(), Line: rel.Name(), ExportedAt: now.UTC(), Selection: sel.String()}
	held, err := writeStage(ctx, path, h, listing.Rows(), &payloads{cl: src}, inspect.HeldBy(dc.Lookup(), now))
	if err != nil {
		return nil, err
	}
	if len(held) > 0 && !o.Exec.OverrideHold && !o.Exec.SkipHeld {
		return nil, cmdutil.UsageError(fmt.Errorf("%s under an active hold; pass --override-hold to replay them anyway, or --skip-held to leave them out", render.Plural(len(held), "message is", "messages are")))
	}
	if o.Exec.SkipHeld && len(held) > 0 {
		// A hold covers every row of its message, which may have been
		// read before the held one: the file is written again without.
		if err := rewriteWithout(path, h, held); err != nil {
			return nil, err
		}
	}
	st, err := summarize(path)
	if err != nil {
		return nil, err
	}
	if n := len(held); n > 0 && o.Exec.SkipHeld {
		fmt.Fprintf(f.IO.ErrOut, "%s under an active hold left out (--skip-held).\n", render.Plural(n, "message", "messages"))
	}
	return st, nil
}

// writeStage writes rows, each with its payload, to a new export file at
// path, and says which messages a hold covers.
func writeStage(ctx context.Context, path string, h dlqfile.Header, rows iter.Seq2[deadletter.Row, error], pl *payloads, heldBy func(deadletter.Row) (string, bool)) (map[deadletter.Address]bool, error) {
	w, err := dlqfile.Create(path, h)
	if err != nil {
		return nil, err
	}
	held := map[deadletter.Address]bool{}
	for r, err := range rows {
		if err == nil {
			err = pl.fill(ctx, &r)
		}
		if err == nil {
			err = w.Add(dlqfile.RowOf(r))
		}
		if err != nil {
			w.Abort()
			return nil, err
		}
		if _, ok := heldBy(r); ok {
			held[r.Address()] = true
		}
	}
	return held, w.Close()
}

// rewriteWithout writes the export file at path again without the rows
// of the messages in drop.
func rewriteWithout(path string, h dlqfile.Header, drop map[deadletter.Address]bool) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	r, err := dlqfile.NewReader(in)
	if err != nil {
		return err
	}
	next := path + ".kept"
	w, err := dlqfile.Create(next, h)
	if err != nil {
		return err
	}
	for row, err := range r.Rows() {
		if err == nil && !drop[row.DeadLetter().Address()] {
			err = w.Add(row)
		}
		if err != nil {
			w.Abort()
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return os.Rename(next, path)
}

// summarize reads back the staged file: its messages in order, and their
// queues.
func summarize(path string) (*staged, error) {
	in, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	r, err := dlqfile.NewReader(in)
	if err != nil {
		return nil, err
	}
	st := &staged{}
	seen, queues := map[deadletter.Address]bool{}, map[string]bool{}
	for row, err := range r.Rows() {
		if err != nil {
			return nil, err
		}
		a := row.DeadLetter().Address()
		st.rows++
		if !seen[a] {
			seen[a] = true
			st.addresses = append(st.addresses, a)
		}
		queues[row.DeadLetter().Queue] = true
	}
	st.messages = len(st.addresses)
	for q := range queues {
		st.queues = append(st.queues, q)
	}
	sort.Strings(st.queues)
	return st, nil
}

// destinationQueues refuses a replay into a broker that lacks a queue it
// would publish to.
func destinationQueues(ctx context.Context, dst *client.Client, queues []string, toQueue string) error {
	qs, err := dst.Queues(ctx)
	if err != nil {
		return err
	}
	has := map[string]bool{}
	for _, q := range qs {
		has[q.Name] = true
	}
	if toQueue != "" {
		queues = []string{toQueue}
	}
	var lack []string
	for _, q := range queues {
		if !has[q] {
			lack = append(lack, q)
		}
	}
	if len(lack) > 0 {
		return cmdutil.UsageError(fmt.Errorf("%s has no queue %s: create it there first (or --to-queue one it has); nothing was published", dst.Broker(), strings.Join(lack, ", ")))
	}
	return nil
}

// heldByDestination are the addresses of src whose import the
// destination's journal records as done (the messages the destination
// holds, by this run or an earlier one), and the import batches that
// published them.
func heldByDestination(ctx context.Context, g *cmdutil.Factory, dst *client.Client, source string, addrs []deadletter.Address) ([]deadletter.Address, []string, error) {
	ld, err := g.Ledger(ctx)
	if err != nil {
		return nil, nil, err
	}
	var out []deadletter.Address
	by := map[string]bool{}
	for chunk := range slices.Chunk(addrs, 400) {
		foreign := make([]deadletter.Address, len(chunk))
		of := map[deadletter.Address]deadletter.Address{}
		for i, a := range chunk {
			foreign[i] = deadletter.ForeignAddress(source, a)
			of[foreign[i]] = a
		}
		ents, err := ld.Entries(ctx, dst.Broker(), foreign)
		if err != nil {
			return nil, nil, err
		}
		for fa, e := range ents {
			// Held: published there from a file (the import this
			// command made), and done.
			if deadletter.ActionOf(e.Action).From == deadletter.FromFile && e.State == ledger.Removed {
				out = append(out, of[fa])
				by[e.BatchID] = true
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	batches := slices.Sorted(maps.Keys(by))
	return out, batches, nil
}

// sameServer: two URLs that reach one broker however they are spelt.
func sameServer(a, b string) bool {
	ia, err1 := deadletter.Identity(a)
	ib, err2 := deadletter.Identity(b)
	return err1 == nil && err2 == nil && ia == ib
}
