package present

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// Batch writes a recorded batch for people (decisions show): its
// decision, manifest with each address's state, the partitions an
// ordered replay left waiting, and its audit.
func Batch(w io.Writer, d *batch.Details, now time.Time, again func(args ...string) string) error {
	b := d.Batch
	kv := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "%-12s %s\n", k+":", render.Clean(v))
		}
	}
	kv("Batch", b.ID)
	kv("Broker", b.Broker)
	kv("Action", b.Action)
	by := b.By
	if b.Author != "" && b.Author != b.By {
		by += " (recorded by " + Identity(b.Author, d.Vouched) + ")"
	}
	kv("By", by)
	kv("At", render.Timestamp(b.At))
	kv("Why", b.Why)
	kv("Owner", b.Owner)
	if !b.Until.IsZero() {
		kv("Until", render.Timestamp(b.Until))
	}
	kv("Selection", b.Selection)
	kv("Destination", b.Destination)
	kv("Size", strconv.Itoa(b.Size))
	kv("Status", b.Status)
	if b.Stale {
		heard := "never"
		if t := b.LastBeat(); !t.IsZero() {
			heard = render.AgeSince(now, t) + " ago"
		}
		kv("Run", fmt.Sprintf("gone: the ledger says running, but its process has exited or stopped saying it is alive (last heard from %s). Resume with: %s",
			heard, again("dlq", resumeVerb(b), "--batch", b.ID, "--yes")))
	}
	if d.Progress != nil {
		kv("Progress", Progress(d.Progress, now))
	}
	switch ap := d.Approval; {
	case ap != nil:
		kv("Approved", fmt.Sprintf("%s by %s: %s", render.Timestamp(ap.At), Approver(ap, d.Vouched), ap.Why))
	case b.NeedsApproval:
		not := b.By
		if b.Author != "" && b.Author != b.By {
			not += " or " + Identity(b.Author, d.Vouched)
		}
		kv("Approval", fmt.Sprintf("awaiting a second person's approval (not %s): %s", not, again("decisions", "approve", b.ID, "--why", "…")))
	}
	if !b.ExecutedAt.IsZero() {
		kv("Executed", render.Timestamp(b.ExecutedAt))
	}
	kv("Outcome", render.Counts(b.Outcome))
	if v := d.Verification; v != nil {
		kv("Verified", fmt.Sprintf("%s by %s: %s", render.Timestamp(v.At), v.By, render.Counts(v.Counts)))
	}
	if err := manifest(w, d); err != nil {
		return err
	}
	if len(d.BlockedPartitions) > 0 {
		fmt.Fprintln(w, "\nHeld back (ordered replay):")
		for _, x := range d.BlockedPartitions {
			fmt.Fprintf(w, "  partition %s/%s: %d message(s) wait behind %s (%s)\n", render.Clean(x.Queue), render.Clean(x.Partition), x.Messages,
				render.Clean(x.Address.String()), render.Clean(x.Reason))
		}
	}
	fmt.Fprintln(w, "\nAudit:")
	for _, a := range d.Audit {
		fmt.Fprintf(w, "  %s  %-22s %s  %s\n", render.Timestamp(a.At), a.Kind, render.Clean(a.By), render.Clean(a.Detail))
	}
	return nil
}

// manifest writes a batch's manifest as a table, each address with its
// journal state ("-": no run reached it).
func manifest(w io.Writer, d *batch.Details) error {
	state := map[deadletter.Address]string{}
	for _, e := range d.Journal {
		state[e.Address] = e.State
	}
	fmt.Fprintln(w, "\nManifest:")
	c := render.Clean
	rows := make([][]string, 0, len(d.Manifest))
	for _, m := range d.Manifest {
		st := state[m.Address]
		if st == "" {
			st = "-"
		}
		groups := make([]string, len(m.Groups))
		for i, g := range m.Groups {
			groups[i] = deadletter.GroupLabel(g)
		}
		rows = append(rows, []string{c(m.Address.String()), c(m.Queue), c(strings.Join(groups, ",")), render.Timestamp(m.FailedAt), st, render.Truncate(c(m.Error), 60)})
	}
	return render.WriteTable(w, []string{"ADDRESS", "QUEUE", "CG", "FAILED-AT", "STATE", "ERROR"}, rows)
}

// resumeVerb is the command that carries on with a batch.
func resumeVerb(b *ledger.Batch) string { return deadletter.VerbOf(b.Action) }

// Unvouched says what an approval on a ledger that authenticates nobody
// (SQLite) is worth.
const Unvouched = "this ledger is SQLite, which authenticates nobody: it records the operating system's account that ran dlqctl, and cannot vouch for it (anyone who can write its file can write any name). A team that relies on four eyes shares a PostgreSQL ledger, where the database records each person's role (docs/configuration.md)."

// Identity says who the ledger knows someone as: a database role it
// vouches for, or an operating system's account it cannot.
func Identity(who string, vouched bool) string {
	if vouched {
		return "database role " + render.Clean(who)
	}
	return "operating-system account " + render.Clean(who) + ", unvouched"
}

// Recorder says who recorded something: the name given, and the
// identity the ledger knows where it says more.
func Recorder(by, who string, vouched bool) string {
	if who == "" || vouched && who == by {
		return render.Clean(by)
	}
	return render.Clean(by) + " (" + Identity(who, vouched) + ")"
}

// Approver says who approved a batch: the name recorded, and the
// identity the ledger knows where it says more.
func Approver(a *ledger.Approval, vouched bool) string {
	switch {
	case a == nil:
		return "-"
	case a.Approver == "":
		return render.Clean(a.By)
	case vouched && a.Approver == a.By:
		return render.Clean(a.By) + " (the database role this ledger authenticated)"
	}
	return render.Clean(a.By) + " (" + Identity(a.Approver, vouched) + ")"
}
