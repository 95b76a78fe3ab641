package replay

import (
	"context"
	"encoding/json"
	"iter"
	"slices"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Lister pages dead-letter rows; *client.Client is one.
type Lister interface {
	Rows(ctx context.Context, q client.ListQuery) iter.Seq2[deadletter.Row, error]
}

// Item is one address of a batch with its dead-letter rows.
type Item struct {
	Address deadletter.Address `json:"address"`
	Queue   string             `json:"queue"`
	// Partition is the partition name.
	Partition string `json:"partition"`
	// Rows are the rows that matched the selection (one per consumer
	// group and failure), newest first.
	Rows []deadletter.Row `json:"rows"`
	// Others are the address's rows that did not match (another group's,
	// another class's): the delete that acts on the address removes them
	// too, so the batch accounts for them.
	Others []deadletter.Row `json:"others,omitempty"`
	// Payload, when Checked, is the message as the detail route returned
	// it (decrypted where the list showed an envelope).
	Payload json.RawMessage `json:"-"`
	Checked bool            `json:"-"`
	// Absent: a recorded batch's address that is no longer dead-lettered
	// (executed later): nothing is sent for it.
	Absent bool `json:"-"`
}

// Newest returns the item's newest selected row.
func (it Item) Newest() deadletter.Row { return it.Rows[0] }

// AllRows are the selected rows and the others.
func (it Item) AllRows() []deadletter.Row { return append(slices.Clip(it.Rows), it.Others...) }

// Envelope reports whether the list showed the payload as an encryption
// envelope: the released server's list never decrypts, so that alone
// does not make it undecryptable.
func (it Item) Envelope() bool { return it.Rows[0].Undecryptable() }

// Undecryptable reports whether the payload is known to be an envelope the
// broker cannot decrypt: the detail route said so (Checked), or the list
// of a broker that decrypts showed one.
func (it Item) Undecryptable() bool {
	if it.Checked {
		return deadletter.IsEnvelope(it.Payload)
	}
	return it.Envelope()
}

// Data is the payload to publish: the checked one, else the list's.
func (it Item) Data() json.RawMessage {
	if it.Checked {
		return it.Payload
	}
	return it.Rows[0].Data
}

// Groups lists the consumer groups that dead-lettered the message (every
// row of the address, selected or not).
func (it Item) Groups() []string {
	var g []string
	for _, r := range it.AllRows() {
		if !slices.Contains(g, r.ConsumerGroup) {
			g = append(g, r.ConsumerGroup)
		}
	}
	return g
}
