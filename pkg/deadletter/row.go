// Package deadletter is dlqctl's model of a dead-letter queue, shared by
// the client, the ledger and every use case: a row and the address of
// its message, failure classes, the selection the selection flags make
// (with its --where predicate), and the identity a broker's history is
// filed under. It does no I/O of its own but resolving a host name
// (SameAddress).
package deadletter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Row is one dead-letter row as the list route returns it. A message that
// several consumer groups dead-lettered has several rows under one Address.
type Row struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	ConsumerGroup string          `json:"consumerGroup"`
	ErrorMessage  string          `json:"errorMessage"`
	RetryCount    int             `json:"retryCount"`
	Data          json.RawMessage `json:"data,omitempty"`
	IsEncrypted   bool            `json:"isEncrypted,omitempty"`
	FailedAt      time.Time       `json:"failedAt"`
}

// Address names the message a row belongs to.
func (r Row) Address() Address {
	return Address{PartitionID: r.PartitionID, TransactionID: r.TransactionID}
}

// Undecryptable reports whether the row's payload is a stored encryption
// envelope rather than the message: replaying it would publish garbage.
func (r Row) Undecryptable() bool { return IsEnvelope(r.Data) }

// IsEnvelope reports whether a payload is an encryption envelope: an
// object whose keys are exactly encrypted, iv and authTag (a key given
// twice is one key). A payload whose text never names authTag is none,
// which is most of them, and is not decoded.
func IsEnvelope(data json.RawMessage) bool {
	d := bytes.TrimSpace(data)
	if len(d) == 0 || d[0] != '{' || !bytes.Contains(d, []byte("authTag")) && bytes.IndexByte(d, '\\') < 0 {
		return false
	}
	var m map[string]jsontext.Value
	if jsonv2.Unmarshal(d, &m, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)) != nil || len(m) != 3 {
		return false
	}
	for _, k := range []string{"encrypted", "iv", "authTag"} {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

// Address is PARTITION_ID/TRANSACTION_ID, the key of a dead-lettered message.
type Address struct {
	PartitionID   string
	TransactionID string
}

func (a Address) String() string { return a.PartitionID + "/" + a.TransactionID }

// MarshalText writes the PARTITION_ID/TRANSACTION_ID form.
func (a Address) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText reads the PARTITION_ID/TRANSACTION_ID form (an empty
// text is the zero address).
func (a *Address) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*a = Address{}
		return nil
	}
	p, err := ParseAddress(string(b))
	if err != nil {
		return err
	}
	*a = p
	return nil
}

// ParseAddress parses PARTITION_ID/TRANSACTION_ID. The transaction id may
// itself contain slashes only if the partition id does not, so the split is
// at the first slash.
func ParseAddress(s string) (Address, error) {
	s = strings.TrimSpace(s)
	p, t, ok := strings.Cut(s, "/")
	if !ok || p == "" || t == "" {
		return Address{}, fmt.Errorf("invalid address %q: want PARTITION_ID/TRANSACTION_ID", s)
	}
	if strings.ContainsAny(p, " \t\r\n?#%") {
		return Address{}, fmt.Errorf("invalid address %q: partition id has a space or one of ?#%%", s)
	}
	return Address{PartitionID: p, TransactionID: t}, nil
}

// noTxIDPrefix starts the transaction id dlqctl gives a row the broker
// lists without one; a space in it keeps every call from naming it.
const noTxIDPrefix = "(none: row "

// NoTransactionID is the placeholder transaction id of a row listed with
// none (Queen 1.x allows it): "(none: row <row id>)".
func NoTransactionID(rowID string) string { return noTxIDPrefix + rowID + ")" }

// PathSafe reports whether the address can be put in a URL path on a
// broker that does not percent-decode path segments.
func (a Address) PathSafe() bool { return a.Unreachable() == "" }

// Unreachable says why no API call can name the address, or "" when one
// can: the released server does not percent-decode path segments, so a
// space, /, %, ?, # or non-ASCII cannot be sent, and a "." or ".." segment
// would name another path altogether.
func (a Address) Unreachable() string {
	if strings.HasPrefix(a.TransactionID, noTxIDPrefix) {
		return "the broker lists this row with no transaction id, so no route can name it; Queen's console (the move by row id) can replay it"
	}
	for _, part := range []struct{ name, v string }{{"partition id", a.PartitionID}, {"transaction id", a.TransactionID}} {
		switch {
		case part.v == "":
			return "the " + part.name + " is empty"
		case part.v == "." || part.v == "..":
			return fmt.Sprintf("the %s is %q, which a URL path reads as a directory step", part.name, part.v)
		case !SafeSegment(part.v):
			return "the " + part.name + " has characters the broker cannot take in a path (space, /, %, ?, # or non-ASCII)"
		}
	}
	return ""
}

// SafeSegment reports whether s can be one segment of a URL path on a
// broker that does not percent-decode path segments.
func SafeSegment(s string) bool {
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("._~:-@!$&'()*+,;=", c):
		default:
			return false
		}
	}
	return true
}

// QueueModeGroup is the consumer group the broker gives queue-mode
// consumers (those that name no group).
const QueueModeGroup = "__QUEUE_MODE__"

// QueueModeLabel is what people are shown for QueueModeGroup. Machine
// formats (JSON, NDJSON, YAML, Prometheus labels) keep QueueModeGroup,
// and --cg takes either.
const QueueModeLabel = "(queue mode)"

// GroupLabel is a consumer group as people are shown it.
func GroupLabel(g string) string {
	if g == QueueModeGroup {
		return QueueModeLabel
	}
	return g
}

// GroupName is a consumer group as the broker names it, from what a
// person typed (the label of the queue-mode group, or a name).
func GroupName(typed string) string {
	if typed == QueueModeLabel {
		return QueueModeGroup
	}
	return typed
}
