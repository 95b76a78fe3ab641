package gate

import "time"

// Scope is one checked queue and consumer group.
type Scope struct {
	Queue            string  `json:"queue"`
	ConsumerGroup    string  `json:"consumerGroup"`
	Owner            string  `json:"owner,omitempty"`
	Depth            int     `json:"depth"`
	OldestAgeSeconds float64 `json:"oldestAgeSeconds"`
	OldestAddress    string  `json:"oldestAddress,omitempty"`
	OldestHeld       bool    `json:"oldestHeld"`
	// OldestFailedAt is when the oldest dead letter failed (zero when
	// there is none); OldestUnheldFailedAt, the oldest not under an active
	// hold, the one max-age is judged on (zero when every row is held).
	// A failedAt after now counts as long before now as it is after.
	OldestFailedAt       time.Time `json:"-"`
	OldestUnheldFailedAt time.Time `json:"-"`
	// OldestHold is the hold on the oldest dead letter, if any.
	OldestHold       *HoldInfo `json:"oldestHold,omitempty"`
	MaxAgeSeconds    *float64  `json:"maxAgeSeconds"`
	TriageSLOSeconds *float64  `json:"triageSloSeconds"`
	DefaultedMaxAge  bool      `json:"defaultedMaxAge"` // no threshold configured: held to max-age 0
	// UndecidedPastSLO counts the dead letters past the triage SLO that
	// no decision covers, or whose replay or discard decision was not
	// carried out within it (DecidedNotCarriedOut of them, by batch in
	// NotCarriedOut).
	UndecidedPastSLO     int             `json:"undecidedPastSlo"`
	DecidedNotCarriedOut int             `json:"decidedNotCarriedOut"`
	NotCarriedOut        []NotCarriedOut `json:"notCarriedOut,omitempty"`
	VanishedUndecided    int             `json:"vanishedUndecided"`
	// FailedAhead counts the dead letters whose failedAt is after the
	// check's clock, by up to AheadSeconds: a broker's clock running
	// ahead. Each counts as old as it is ahead.
	FailedAhead  int     `json:"failedAhead,omitempty"`
	AheadSeconds float64 `json:"aheadSeconds,omitempty"`
	// FailedAgain are the scope's dead letters that are a batch's
	// replayed copies, back in the DLQ (undecided), by batch: of the
	// rows the check read (on a paging broker, those past the SLO).
	FailedAgain []FailedAgain `json:"failedAgainAfterReplay,omitempty"`
	// Breaches are why the scope fails the check, as facts; the front
	// ends put them into words (dlq check -o json writes those words as
	// "breaches").
	Breaches []Breach `json:"-"`
	// Requests and Bytes are what this scope cost to read. On a broker
	// that answers a queue in one body, that one read serves every scope
	// of the queue and is counted on the first of them.
	Requests int   `json:"requests"`
	Bytes    int64 `json:"bytes"`
}

// FailedAgain counts a batch's copies back in a scope's DLQ.
type FailedAgain struct {
	BatchID     string `json:"batchId"`
	DeadLetters int    `json:"deadLetters"`
}

// HoldInfo names a hold: who recorded it, for which team, until when.
type HoldInfo struct {
	BatchID string    `json:"batchId"`
	By      string    `json:"by"`
	Owner   string    `json:"owner,omitempty"`
	Until   time.Time `json:"until,omitzero"`
	Why     string    `json:"why"`
}

// Holder is who the hold is with: its owner, else who recorded it.
func (h *HoldInfo) Holder() string {
	if h.Owner != "" {
		return h.Owner
	}
	return h.By
}

// A BreachKind names one reason a scope fails the check.
type BreachKind string

const (
	// MaxAge: the oldest dead letter neither decided nor held, at Address,
	// is AgeSeconds old, past the scope's max-age (Limit).
	MaxAge BreachKind = "maxAge"
	// DefaultMaxAge: the queue has no policy, so its DeadLetters are held
	// to a max-age of 0; the oldest is AgeSeconds old.
	DefaultMaxAge BreachKind = "defaultMaxAge"
	// TriageSLO: DeadLetters have waited past the triage SLO (Limit) with
	// no decision.
	TriageSLO BreachKind = "triageSlo"
	// Unexecuted: a replay or discard was decided (Decision, AgoSeconds ago)
	// and its DeadLetters are still here past the triage SLO (Limit).
	Unexecuted BreachKind = "notCarriedOut"
	// Vanished: DeadLetters left the broker with no recorded decision.
	Vanished BreachKind = "vanished"
)

// Breach is one reason a scope fails the check; which fields are set
// depends on its Kind.
type Breach struct {
	Kind        BreachKind
	Address     string
	AgeSeconds  float64 // seconds, exact however old (a Duration saturates at 292 years)
	Limit       time.Duration
	DeadLetters int
	Decision    *NotCarriedOut
	AgoSeconds  float64
}

// NotCarriedOut is a replay or discard decision that was not carried out
// within the triage SLO, and how many of a scope's dead letters it
// leaves undecided.
type NotCarriedOut struct {
	BatchID     string    `json:"batchId"`
	Action      string    `json:"action"`
	By          string    `json:"by"`
	At          time.Time `json:"at"`
	Status      string    `json:"status"`
	DeadLetters int       `json:"deadLetters"`
}

// Result is a check's answer (`dlq check -o json`).
type Result struct {
	Broker    string   `json:"broker"`
	CheckedAt string   `json:"checkedAt"`
	OK        bool     `json:"ok"`
	Scopes    []Scope  `json:"scopes"`
	Notes     []string `json:"notes,omitempty"`
	Requests  int      `json:"requests"`
	Bytes     int64    `json:"bytes"`
	// Hidden counts the scopes left out: no dead letter, and neither a
	// policy nor --queue names their queue (--all-scopes shows them).
	Hidden int `json:"hiddenScopes,omitempty"`
	// ReadWhole: every row of the DLQ was streamed past Visit.
	ReadWhole bool `json:"-"`
}
