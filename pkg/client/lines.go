package client

// Does is what a Queen release line does to dead letters: every decision
// dlqctl takes by the line reads it here, and so does the sandbox, which
// speaks each line. A line is one row of the table (lines); a sixth is a
// sixth row.
type Does struct {
	// Name is the line as people are told it; Flag, how the sandbox's
	// --server-version names it.
	Name, Flag string
	// Version is what the line's /health says (every 0.x server says
	// 1.0.0), and Engine its engine ("" for 0.x, which names a server):
	// the sandbox answers with them.
	Version, Engine string

	// Moves: a dead letter is replayed by the broker's move (POST
	// /api/v1/dlq/{id}/replay): one row, its copy under dlq:<row id>, in
	// one step; list rows carry the row's own id; Queen's console replays
	// the same way.
	Moves bool
	// Retry: POST /api/v1/messages/{p}/{t}/retry exists. Before the move,
	// a push under a fresh id then a delete of every group's rows; where
	// the line moves, the move of one row at the address.
	Retry bool
	// Traces: POST /api/v1/traces records an event for any message.
	Traces bool
	// KeepsMessageOnDelete: DELETE of an address removes its dead-letter
	// rows only; 0.x deletes the message itself, live or not.
	KeepsMessageOnDelete bool
	// Pages: the list applies limit and offset; 0.x answers every
	// matching row in one body, limit ignored.
	Pages bool
	// MaxPage is the largest limit served (a larger one is clamped); 0
	// for none.
	MaxPage int
	// FullTotal: the list's total counts every matching row; else the
	// page's (or, 0.x, no total at all).
	FullTotal bool
	// Decrypts: list rows come decrypted where the broker has the key;
	// 0.x lists the envelope and only the detail route decrypts.
	Decrypts bool
	// DecimalPartitions: partition ids are decimal numbers, not UUIDs.
	DecimalPartitions bool
	// DedupWindowed: a pushed transaction id is deduplicated within the
	// queue's dedupWindowSeconds only; elsewhere for as long as the
	// message is held.
	DedupWindowed bool
	// JSONErrors: failures are HTTP statuses with JSON bodies (a missing
	// route is 404 code no_such_route); 0.x answers 200 with an error key,
	// and an HTML 404 for a route it lacks.
	JSONErrors bool
	// Raft: a clustered broker: 409 refusals, 503 no_leader with
	// Retry-After, an in-doubt commit's 503, standby clusters (2.1).
	Raft bool
	// Maintenance: a move may meet push maintenance (503, nothing
	// touched).
	Maintenance bool
	// EmptyFilterIsName: an empty queue= or consumerGroup= is the name ""
	// and matches nothing; elsewhere it is no filter.
	EmptyFilterIsName bool
	// NegativeLimit is what a negative limit is taken for; 0: refused.
	NegativeLimit int
	// MovesEnvelopes: a move of a row the broker cannot decrypt pushes the
	// envelope as the copy; elsewhere it is rolled back.
	MovesEnvelopes bool
	// CompletedByQueueMode: a message of a queue with queue mode is
	// completed once queue mode consumed it, whatever its other groups
	// did; elsewhere once every named group has.
	CompletedByQueueMode bool
}

// lines is the table, one row a line; LineUnknown's row is the most
// careful line dlqctl knows (no move, pages of at most 1000, a delete
// that may take the message).
var lines = [...]Does{
	LineUnknown: {Name: "unknown", Pages: true, MaxPage: MaxPage},
	Line0x:      {Name: "0.x", Flag: "0.15", Version: "1.0.0", CompletedByQueueMode: true},
	Line1: {Name: "1.0–1.5", Flag: "1.5", Version: "1.5.3", Engine: "segments-rust", Retry: true, Traces: true, KeepsMessageOnDelete: true,
		Pages: true, Decrypts: true, JSONErrors: true},
	Line16: {Name: "1.6", Flag: "1.6", Version: "1.6.0", Engine: "segments-rust", Moves: true, Retry: true, Traces: true, KeepsMessageOnDelete: true,
		Pages: true, Decrypts: true, DedupWindowed: true, JSONErrors: true, Maintenance: true, NegativeLimit: 500},
	Line2: {Name: "2.x", Flag: "2.2", Version: "2.2.0", Engine: "raft", Moves: true, Retry: true, Traces: true, KeepsMessageOnDelete: true,
		Pages: true, MaxPage: MaxPage, FullTotal: true, Decrypts: true, DecimalPartitions: true, DedupWindowed: true, JSONErrors: true,
		Raft: true, EmptyFilterIsName: true, NegativeLimit: 100, MovesEnvelopes: true},
}

// Does is what the line does (LineUnknown's row for a line dlqctl does
// not know).
func (l Line) Does() Does {
	if l < 0 || int(l) >= len(lines) {
		return lines[LineUnknown]
	}
	return lines[l]
}

// Lines are the lines in the field, oldest first.
func Lines() []Line { return []Line{Line0x, Line1, Line16, Line2} }
