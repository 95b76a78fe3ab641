package replay

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/render"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/itchyny/gojq"
)

// Where is a compiled --where predicate: a jq expression over a row as
// `ls -o ndjson` prints it; a row is selected when its first output is
// neither false nor null.
type Where struct {
	code *gojq.Code
	// errored counts rows the expression failed on (they are not
	// selected); envelopes, rows whose data the predicate saw was an
	// encryption envelope, not the payload.
	errored, envelopes atomic.Int64
	firstErr           atomic.Pointer[string]
}

// CompileWhere compiles a --where expression. A syntax error says where,
// in at most three lines: the message, the expression, a caret under the
// place.
func CompileWhere(expr string) (*Where, error) {
	q, err := gojq.Parse(expr)
	if err != nil {
		var pe *gojq.ParseError
		if errors.As(err, &pe) && !strings.Contains(expr, "\n") {
			at := min(max(pe.Offset-len(pe.Token), 0), len(expr))
			return nil, fmt.Errorf("invalid --where: %v at position %d\n  %s\n  %s^", err, at+1, expr, strings.Repeat(" ", len([]rune(expr[:at]))))
		}
		return nil, fmt.Errorf("invalid --where: %v", err)
	}
	code, err := gojq.Compile(q)
	if err != nil {
		return nil, fmt.Errorf("invalid --where: %v", err)
	}
	return &Where{code: code}, nil
}

// Test runs the predicate on a row's value (WhereValue).
func (w *Where) Test(v map[string]any) bool {
	it := w.code.Run(v)
	out, ok := it.Next()
	if !ok {
		return false
	}
	if err, isErr := out.(error); isErr {
		w.errored.Add(1)
		s := err.Error()
		w.firstErr.CompareAndSwap(nil, &s)
		return false
	}
	return out != nil && out != false
}

// Errored is how many rows the expression failed on, and the first error.
func (w *Where) Errored() (int, string) {
	s := ""
	if p := w.firstErr.Load(); p != nil {
		s = *p
	}
	return int(w.errored.Load()), s
}

// Envelopes is how many rows the predicate saw with an encryption
// envelope for data (the released server's list does not decrypt).
func (w *Where) Envelopes() int { return int(w.envelopes.Load()) }

// WhereValue is a row as --where sees it: the fields of `ls -o ndjson`
// (a test holds the two equal), with data decoded.
func WhereValue(r client.Row, now time.Time, decision, decisionBatch string) map[string]any {
	v := make(map[string]any, 17)
	FillWhereValue(v, r, now, decision, decisionBatch)
	return v
}

// FillWhereValue is WhereValue into a map the caller reuses.
func FillWhereValue(v map[string]any, r client.Row, now time.Time, decision, decisionBatch string) {
	env := r.Undecryptable()
	v["address"] = r.PartitionID + "/" + r.TransactionID
	v["partitionId"] = r.PartitionID
	v["transactionId"] = r.TransactionID
	v["messageId"] = r.ID
	v["queue"] = r.Queue
	v["partition"] = r.Partition
	v["consumerGroup"] = r.ConsumerGroup
	v["errorMessage"] = r.ErrorMessage
	v["errorClass"] = ClassID(r.ErrorMessage)
	v["retryCount"] = r.RetryCount
	v["failedAt"] = string(render.AppendTimestamp(nil, r.FailedAt))
	v["ageSeconds"] = int(render.SecondsSince(now, r.FailedAt)) // gojq takes int, not int64
	v["isEncrypted"] = r.IsEncrypted || env
	v["envelope"] = env
	if decision != "" {
		v["decision"] = decision
	}
	if decisionBatch != "" {
		v["decisionBatch"] = decisionBatch
	}
	if len(r.Data) > 0 {
		var d any
		if jsonv2.Unmarshal(r.Data, &d) == nil {
			v["data"] = d
		}
	}
}
