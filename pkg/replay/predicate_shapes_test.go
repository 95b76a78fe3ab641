package replay_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Over predicate shapes: no predicate selects rows it should not without
// being refused (at parse), stopped (its result not true or false), or
// warned about (rows it failed on, a field no row has). Each case says
// which, and how many rows a predicate that runs selects.
func TestPredicateShapes(t *testing.T) {
	now := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	var rows []deadletter.Row
	for i := range 10 {
		data := fmt.Sprintf(`{"amount":%d,"to":"u%d@x"}`, i*100, i)
		if i%5 == 0 {
			data = fmt.Sprintf(`{"amount":%d}`, i*100) // no "to"
		}
		rows = append(rows, deadletter.Row{PartitionID: "p", TransactionID: fmt.Sprint(i), Queue: "orders", RetryCount: i % 3,
			FailedAt: now.Add(-time.Duration(i) * time.Hour), Data: json.RawMessage(data)})
	}
	const (
		refused = -1 // compile error
		stopped = -2 // fatal on a row
	)
	for _, c := range []struct {
		expr    string
		want    int // rows selected, or refused / stopped
		errored int // rows left out with a note
		absent  bool
	}{
		{".data.amount == 300", 1, 0, false},
		{".data.amount >= 500", 5, 0, false},
		{".data.amount = 300", refused, 0, false},
		{".data.amount |= 1", refused, 0, false},
		{".retryCount += 1", refused, 0, false},
		{"(.data.amount = 1) and true", refused, 0, false},
		{".data.amount", stopped, 0, false},
		{".data", stopped, 0, false},
		{".data.nope", stopped, 0, false},
		{`"yes"`, stopped, 0, false},
		{"empty", stopped, 0, false},
		{"select(.retryCount == 1)", stopped, 0, false},
		{".data.version < 4", 10, 0, true},
		{".data.version == null", 10, 0, false},
		{`.data.to | startswith("u")`, 8, 2, false},
		{".retryCount == 1 or .data.amount == 0", 4, 0, false},
		{"true", 10, 0, false},
	} {
		sel := &deadletter.Selection{Where: c.expr, WhereNow: now}
		err := sel.Compile()
		if c.want == refused {
			if err == nil {
				t.Errorf("%s: compiled", c.expr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		n := 0
		for _, r := range rows {
			if sel.Match(r) {
				n++
			}
		}
		p := sel.WherePredicate()
		errored, _ := p.Errored()
		switch {
		case c.want == stopped && sel.WhereErr() == nil:
			t.Errorf("%s: not stopped (%d selected)", c.expr, n)
		case c.want == stopped:
		case sel.WhereErr() != nil:
			t.Errorf("%s: stopped: %v", c.expr, sel.WhereErr())
		case n != c.want || errored != c.errored || (len(p.Absent()) > 0) != c.absent:
			t.Errorf("%s: %d selected, %d errored, absent %v; want %d, %d, %v", c.expr, n, errored, p.Absent(), c.want, c.errored, c.absent)
		}
	}
}
