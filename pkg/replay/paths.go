package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Paths a replay can take.
const (
	ViaAuto     = "auto"
	ViaEndpoint = "endpoint"
	ViaManual   = "manual"
	// ViaMove is the broker's own move (Queen 1.6, 2.x): what auto takes
	// there. The journal records it as the path an address took.
	ViaMove = "move"
)

// PathOn is the path a replay asked to go via takes on a broker of
// release rel: on a broker that moves (Queen 1.6, 2.x) every path but the
// manual one is the move (its /retry is the move by address; the move by
// row id is the same step, addressed exactly). ok is false for the move
// asked of a broker that has none.
func PathOn(rel client.Release, via string) (path string, ok bool) {
	switch {
	case via == ViaRestore:
		return via, true
	case rel.Moves() && via != ViaManual:
		return ViaMove, true
	}
	return via, via != ViaMove
}

// Generations are the generations of dead letters whose transaction ids
// do not say them: copies the /retry endpoint published under ids the
// broker minted (ledger.CopyGenerations).
type Generations map[deadletter.Address]int

// Of is an address's generation: the one recorded for it, else the one
// its transaction id carries.
func (g Generations) Of(a deadletter.Address) int {
	if n, ok := g[a]; ok {
		return n
	}
	return deadletter.Generation(a.TransactionID)
}

// ReplayTxID derives the transaction id a manual replay pushes with, from
// the dead-letter address and the generation. It differs from the
// original (which dedup would drop) and is the same on every retry, so a
// repeated push comes back "duplicate". Only [a-z0-9-] are used: every
// broker can take it in a path.
func ReplayTxID(a deadletter.Address, gen int) string {
	h := sha256.Sum256([]byte(a.PartitionID + "/" + a.TransactionID + "/" + strconv.Itoa(gen)))
	return fmt.Sprintf("dlqr-%d-%s", gen, hex.EncodeToString(h[:12]))
}
