package deadletter

// Action is what a batch does to the dead letters it covers, with
// everything the layers say of it in one place: its name (as the ledger
// and the journal record it), the command that runs it, its words, and
// what it does to the broker. The engine, the plan and the front ends
// read these, rather than each translating a name of their own; a new
// action is a new value here.
type Action struct {
	// Name is the action as the ledger records it (replay, discard,
	// restore).
	Name string
	// Verb is the dlq command that runs it (replay, rm, restore).
	Verb string
	// Title heads its plan and asks the question ("Replay plan:",
	// "Replay 12 messages?"); Doing says it under way ("Replaying").
	Title, Doing string
	// Past is said of a message it was done to (replayed, discarded,
	// restored).
	Past string
	// Publishes: it publishes copies into a broker (they reach the
	// destination's consumer groups, get a lineage trace, are verified).
	Publishes bool
	// Deletes: it removes dead-letter rows, each archived first.
	Deletes bool
	// From is where its messages come from: the DLQ (""), the ledger's
	// archive (a restore) or an export file (an import). From outside the
	// DLQ no hold reaches them and nothing is deleted.
	From string
	// Ordered: it keeps each partition's order (a replay's --order).
	Ordered bool
	// Generations: a copy of it is a new generation of its message
	// (replays, capped by --max-generation).
	Generations bool
}

// Where an action's messages come from (Action.From).
const (
	FromDLQ     = ""
	FromArchive = "archive"
	FromFile    = "file"
)

// Outside reports whether the action's messages come from outside the
// DLQ (the archive, a file): it publishes them again, deletes nothing,
// and no hold reaches them.
func (a *Action) Outside() bool { return a.From != FromDLQ }

// Discards reports whether the action removes dead letters for good
// (each archived first), publishing nothing: a restore takes what it
// archived back.
func (a *Action) Discards() bool { return a.Deletes && !a.Publishes }

// Runs reports whether a command of this action runs (executes or
// resumes) a recorded batch of the named action: one of its own, and for
// a restore a discard's, whose archived messages it publishes again.
func (a *Action) Runs(batchAction string) bool {
	b := ActionNamed(batchAction)
	return b == a || a.From == FromArchive && b != nil && b.Discards()
}

// BatchesRun are the names of the actions whose batches a command of
// this action runs (Runs).
func (a *Action) BatchesRun() []string {
	var names []string
	for _, b := range Actions() {
		if a.Runs(b.Name) {
			names = append(names, b.Name)
		}
	}
	return names
}

// Republishes reports whether the action publishes the DLQ's own
// messages again (a replay): its rows are ones another hand (a broker's
// console) may move while it works, and it may run a canary first.
func (a *Action) Republishes() bool { return a.Publishes && a.From == FromDLQ }

// The actions a batch takes.
var (
	ActReplay = &Action{Name: Replay, Verb: "replay", Title: "Replay", Doing: "Replaying", Past: "replayed",
		Publishes: true, Deletes: true, Ordered: true, Generations: true}
	ActDiscard = &Action{Name: Discard, Verb: "rm", Title: "Discard", Doing: "Discarding", Past: "discarded", Deletes: true}
	ActRestore = &Action{Name: Restore, Verb: "restore", Title: "Restore", Doing: "Restoring", Past: "restored",
		Publishes: true, From: FromArchive}
	ActImport = &Action{Name: Import, Verb: "import", Title: "Import", Doing: "Importing", Past: "imported",
		Publishes: true, From: FromFile}
)

// Actions are the actions a batch can take, in the order they are told.
func Actions() []*Action { return []*Action{ActReplay, ActDiscard, ActRestore, ActImport} }

// ActionNamed is the action of a name, as the ledger records it, or as
// the command that runs it is called; nil for none (a hold is a decision,
// not a batch action).
func ActionNamed(name string) *Action {
	for _, a := range Actions() {
		if a.Name == name || a.Verb == name {
			return a
		}
	}
	return nil
}

// ActionOf is ActionNamed, and for a name that is none of theirs an
// action of that name that publishes, deletes and orders nothing: never
// nil, so a caller asks what it does without asking first whether it is.
func ActionOf(name string) *Action {
	if a := ActionNamed(name); a != nil {
		return a
	}
	return &Action{Name: name, Verb: name, Title: name, Doing: name, Past: name}
}

// VerbOf is the dlq command that runs the action of that name ("replay"
// where the name is none of theirs: the command that resumes the most).
func VerbOf(name string) string {
	if a := ActionNamed(name); a != nil {
		return a.Verb
	}
	return ActReplay.Verb
}
