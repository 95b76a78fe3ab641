package deadletter

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
)

// Actions a batch takes on its dead letters. A restore re-publishes
// what a discard archived; an import, what an export file holds.
const (
	Replay  = "replay"
	Discard = "discard"
	Restore = "restore"
	Import  = "import"
)

// RestoreTxID is the transaction id a restore publishes an archived dead
// letter under: derived from its address alone, so restoring the same
// row again (another batch, a resume, a second person) is a duplicate
// the broker drops, never a second copy. Only [a-z0-9-]: every broker
// takes it in a path.
func RestoreTxID(a Address) string {
	h := sha256.Sum256([]byte("restore\x00" + a.PartitionID + "/" + a.TransactionID))
	return "dlqa-" + hex.EncodeToString(h[:12])
}

// ImportTxID is the transaction id an import publishes a message of
// another broker's export under: derived from the address the import
// files it under (ForeignAddress: the source broker's identity and the
// row's address), so importing the same file again (a rerun, a resume,
// a second person) is a duplicate the destination drops.
func ImportTxID(a Address) string {
	h := sha256.Sum256([]byte("import\x00" + a.PartitionID + "/" + a.TransactionID))
	return "dlqi-" + hex.EncodeToString(h[:12])
}

// foreignPrefix starts the partition id of an address filed for another
// broker's message: a broker's own partition ids never do.
const foreignPrefix = "imported:"

// ForeignAddress is the address a destination's ledger files a message
// of another broker's under (an import of that broker's export): its
// address there, qualified by a digest of that broker's identity, so it
// never meets an address of the destination's own, nor the same address
// exported from a third broker.
func ForeignAddress(source string, a Address) Address {
	h := sha256.Sum256([]byte(source))
	return Address{PartitionID: foreignPrefix + hex.EncodeToString(h[:6]) + ":" + a.PartitionID, TransactionID: a.TransactionID}
}

// Foreign reports whether an address is another broker's message
// (ForeignAddress): no call to this broker names it.
func (a Address) Foreign() bool { return strings.HasPrefix(a.PartitionID, foreignPrefix) }

var reReplayID = regexp.MustCompile(`^dlqr-([0-9]+)-[0-9a-f]{24}$`)

// Generation returns the generation of a replay of this dead letter: one
// more than the generation its own transaction id carries (a dead letter
// that is itself a failed replay), 1 for an original message. A copy the
// broker's move made (dlq:<row id>) carries none: it is at least a second
// generation, and the journal may know more (Generations).
func Generation(txid string) int {
	if m := reReplayID.FindStringSubmatch(txid); m != nil {
		if g, err := strconv.Atoi(m[1]); err == nil {
			return g + 1
		}
	}
	if strings.HasPrefix(txid, "dlq:") {
		return 2
	}
	return 1
}

// IsReplayID reports whether a transaction id was minted by dlqctl's
// manual replay path (a dead letter with one is a replay that failed again).
func IsReplayID(txid string) bool { return reReplayID.MatchString(txid) }

// The journal's outcomes for an address a batch removed from the DLQ:
// replayed (its copy published), duplicate (the broker had the copy
// already), discarded, or gone (it left while the batch acted on it, with
// no copy of the batch's).
const (
	OutcomeReplayed  = "replayed"
	OutcomeDuplicate = "duplicate"
	OutcomeDiscarded = "discarded"
	OutcomeGone      = "gone"
)

// OutcomeRestored is the journal's outcome for an archived dead letter a
// restore published again (or found the broker had already).
const OutcomeRestored = "restored"

// OutcomeImported is the journal's outcome for another broker's message
// an import published (or found the broker had already).
const OutcomeImported = "imported"

// OutcomeMovedElsewhere is the journal's outcome for an address another
// hand replayed while a batch held it (the broker's console, another
// tool): its copy is in the broker, not of this batch's making.
const OutcomeMovedElsewhere = "movedElsewhere"
