package dlq

import (
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// ToRowForTest and LsRecordForTest expose the two ways a row is written,
// for the test that holds them equal.
func ToRowForTest(r client.Row, now time.Time, d *ledger.Decision, slo time.Duration) Row {
	return toRow(r, now, d, slo)
}

func LsRecordForTest(r client.Row, now time.Time, d *ledger.Decision, slo time.Duration) []byte {
	return lsRecord{r: r, now: now, d: d, slo: slo}.AppendJSON(nil)
}
