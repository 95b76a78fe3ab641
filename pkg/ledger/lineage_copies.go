package ledger

import (
	"context"
	"strings"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Lineage is where a dead letter that is a replay's copy came from: the
// address the journal replayed, the batch that did, and the copy's
// generation (its original's is one less).
type Lineage struct {
	Original   deadletter.Address `json:"original"`
	BatchID    string             `json:"batchId"`
	Generation int                `json:"generation"`
	// Action is what published the copy: a replay, a restore of what a
	// discard archived, or an import of another broker's export.
	Action string `json:"action"`
}

// MayBeCopy reports whether a transaction id can be a copy's without
// asking the ledger: a derived id (a replay's dlqr-…, a restore's
// dlqa-…, an import's dlqi-…) or the broker's move (dlq:<row id>). The 0.x /retry endpoint mints ids of no shape: where
// the journal holds such copies (HasEndpointCopies), callers ask
// LineageOf of every id.
func MayBeCopy(txid string) bool {
	return strings.HasPrefix(txid, "dlqr-") || strings.HasPrefix(txid, "dlq:") || strings.HasPrefix(txid, "dlqa-") || strings.HasPrefix(txid, "dlqi-")
}

// HasEndpointCopies reports whether the journal holds a copy the 0.x
// /retry endpoint published for the broker.
func (s *Store) HasEndpointCopies(ctx context.Context, broker string) (bool, error) {
	var some int
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT COUNT(*) FROM (SELECT 1 FROM journal WHERE broker = ? AND via = 'endpoint' AND replay_txid <> '' LIMIT 1) x`), broker).Scan(&some)
	return some > 0, s.wrap("reading the journal", err)
}

// LineageOf finds which of addrs are copies a replay published, and what of:
// the journal entry whose replay went out under the address's
// transaction id into its partition. 400 ids a statement, by the journal's
// index on the ids its replays were published as.
func (s *Store) LineageOf(ctx context.Context, broker string, addrs []deadletter.Address) (map[deadletter.Address]Lineage, error) {
	out := map[deadletter.Address]Lineage{}
	if len(addrs) == 0 {
		return out, nil
	}
	want := make(map[deadletter.Address]bool, len(addrs))
	ids := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if !want[a] {
			want[a] = true
			ids = append(ids, a.TransactionID)
		}
	}
	const chunk = 400
	for start := 0; start < len(ids); start += chunk {
		part := ids[start:min(start+chunk, len(ids))]
		q := `SELECT partition_id, transaction_id, replay_partition_id, replay_txid, batch_id, generation, action FROM journal
			WHERE broker = ? AND replay_txid IN (?` + strings.Repeat(", ?", len(part)-1) + `)`
		args := make([]any, 0, len(part)+1)
		args = append(args, broker)
		for _, id := range part {
			args = append(args, id)
		}
		rows, err := s.db.QueryContext(ctx, s.rebind(q), args...)
		if err != nil {
			return nil, s.wrap("reading the journal", err)
		}
		for rows.Next() {
			var orig deadletter.Address
			var part, txid string
			var l Lineage
			if err := rows.Scan(&orig.PartitionID, &orig.TransactionID, &part, &txid, &l.BatchID, &l.Generation, &l.Action); err != nil {
				rows.Close()
				return nil, s.wrap("reading the journal", err)
			}
			if part == "" {
				part = orig.PartitionID // an in-place copy: its original's partition
			}
			copyAddr := deadletter.Address{PartitionID: part, TransactionID: txid}
			if want[copyAddr] {
				l.Original, l.Generation = orig, l.Generation+1
				out[copyAddr] = l
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, s.wrap("reading the journal", err)
		}
	}
	return out, nil
}
