package batch

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"slices"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/dlqfile"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// File is the export file an import publishes: its name as the person
// gave it (for the batch's record) and how to read it.
type File struct {
	Name string
	Open func() (io.ReadCloser, error)
	// Label is what the batch's record calls the file's source ("file
	// NAME" unless set): a replay into another broker stages the source's
	// rows in a file of its own, which no one will look for.
	Label string
}

// fileSaid is what an import's file said of itself, read whole.
type fileSaid struct {
	label   string
	header  dlqfile.Header
	rows    int
	foreign bool
}

// Words is the selection an import is recorded with: the file, and
// where and when its rows were exported.
func (f *fileSaid) Words() string {
	from := f.header.Broker
	if f.header.Line != "" {
		from += " (" + f.header.Line + ")"
	}
	what := "dead letters"
	if f.header.Archived {
		what = "archived dead letters"
	}
	return fmt.Sprintf("%s: %s of %s exported from %s at %s", f.label, render.Plural(f.rows, "row", "rows"), what, from, render.Timestamp(f.header.ExportedAt))
}

// fillFile stages an export file's rows, each message under the address
// the ledger files it at (its own, when the file is this broker's export;
// else its foreign address), numbered in the file's order. The file is
// read to its last line before the stage is sealed: one cut short or
// altered is refused with nothing recorded or published.
func fillFile(ctx context.Context, env Env, f *File, in *input) error {
	x, said, done, err := openFile(f, env.Client.Broker())
	if err != nil {
		return err
	}
	defer done()
	// A message the journal says was imported (or restored) already is
	// left out and counted: importing a file again plans nothing twice.
	ld, broker := env.Ledger, env.Client.Broker()
	history, err := ld.HasHistory(ctx, broker)
	if err != nil {
		return err
	}
	in.unrestorable = map[string]int{}
	w, err := in.st.write(ctx, "rows")
	if err != nil {
		return err
	}
	stager := &fileStager{w: w, num: newNumbering(), done: newNumbering(), unrestorable: in.unrestorable}
	if history {
		stager.entries = func(addrs []deadletter.Address) (map[deadletter.Address]*ledger.Entry, error) {
			return ld.Entries(ctx, broker, addrs)
		}
	}
	err = w.end(ctx, func() error {
		for r, err := range x.Rows() {
			if err != nil {
				return refuseFile(f.Name, err)
			}
			said.rows++
			row := r.DeadLetter()
			if said.foreign {
				row.PartitionID = deadletter.ForeignAddress(x.Header.Broker, row.Address()).PartitionID
			}
			if err := stager.add(ctx, row); err != nil {
				return err
			}
		}
		return stager.flush(ctx)
	}())
	if err != nil {
		return err
	}
	in.file = said
	return nil
}

// openFile opens an export file to import into broker, its header read:
// done closes it.
func openFile(f *File, broker string) (x *dlqfile.Reader, said *fileSaid, done func(), err error) {
	if f == nil {
		return nil, nil, nil, errs.Usagef("an import needs a file")
	}
	rc, err := f.Open()
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, nil, nil, errs.Usagef("cannot read %s: %v", f.Name, err)
	}
	if x, err = dlqfile.NewReader(rc); err != nil {
		_ = rc.Close()
		return nil, nil, nil, refuseFile(f.Name, err)
	}
	said = &fileSaid{label: cmp.Or(f.Label, "file "+f.Name), header: x.Header, foreign: x.Header.Broker != broker}
	return x, said, func() { _ = rc.Close() }, nil
}

// fileStager stages a file's rows a page at a time, leaving out the
// messages the journal says were imported or restored already (entries,
// nil for a broker without history), counted by what was done to them.
type fileStager struct {
	w            *writer
	num, done    *numbering
	page         []deadletter.Row
	entries      func([]deadletter.Address) (map[deadletter.Address]*ledger.Entry, error)
	unrestorable map[string]int
}

func (s *fileStager) add(ctx context.Context, r deadletter.Row) error {
	if s.page = append(s.page, r); len(s.page) < 400 {
		return nil
	}
	return s.flush(ctx)
}

// flush stages the page's rows of messages not done already.
func (s *fileStager) flush(ctx context.Context) error {
	if s.entries != nil && len(s.page) > 0 {
		var addrs []deadletter.Address
		for _, r := range s.page {
			if s.num.number(r.Address(), false) == 0 && s.done.number(r.Address(), false) == 0 {
				addrs = append(addrs, r.Address())
			}
		}
		ents, err := s.entries(addrs)
		if err != nil {
			return err
		}
		for a, e := range ents {
			if deadletter.ActionOf(e.Action).Outside() && e.State == ledger.Removed && s.done.number(a, false) == 0 {
				s.done.number(a, true)
				s.unrestorable["already "+deadletter.ActionOf(e.Action).Past]++
			}
		}
	}
	for _, r := range s.page {
		if s.done.number(r.Address(), false) != 0 {
			continue
		}
		if err := s.w.add(ctx, s.num.number(r.Address(), true), r, r.Data, false, true); err != nil {
			return err
		}
	}
	s.page = s.page[:0]
	return nil
}

// refuseFile says why a file is not imported (a usage error: exit 2).
func refuseFile(name string, err error) error {
	if fe, ok := err.(*dlqfile.Error); ok {
		return errs.Usagef("%s is not imported: %s; nothing was published", name, fe.Why)
	}
	return err
}

// Rows gives every row the batch acts on, message by message in the
// stage's order, each with its message's payload: the other consumer
// groups' rows a delete takes with a message among them, the messages
// --skip-held left out and those no longer dead-lettered not. It is what
// dlq export --move writes before the discard deletes those rows.
func (p *Pending) Rows(ctx context.Context) iter.Seq2[deadletter.Row, error] {
	return func(yield func(deadletter.Row, error) bool) {
		st := p.in.st
		skipped := map[int]bool{}
		err := st.each(ctx, "reading the staged snapshot", `SELECT item FROM items WHERE skipped = 1`, nil, func(rows *sql.Rows) error {
			var n int
			err := rows.Scan(&n)
			skipped[n] = true
			return err
		})
		if err != nil {
			yield(deadletter.Row{}, err)
			return
		}
		stop := errors.New("stopped")
		err = st.chunks(ctx, planChunk, func([]placed) error { return nil }, func(chunk []placed) error {
			for _, c := range chunk {
				if skipped[c.at] || c.it.Absent {
					continue
				}
				data := c.it.Data()
				for _, r := range slices.Concat(c.it.Rows, c.it.Others) {
					r.Data = data
					if !yield(r, nil) {
						return stop
					}
				}
			}
			return nil
		})
		if err != nil && err != stop {
			yield(deadletter.Row{}, err)
		}
	}
}
