package client

import (
	"context"
	"encoding/json"
	"net/http"
)

// TraceEvent is one event for the broker's traces of a message (Queen
// 1.x, 2.x): nothing checks that the message exists, and a trace never
// changes delivery. Queen's console shows a message's traces.
type TraceEvent struct {
	PartitionID   string   `json:"partitionId"`
	TransactionID string   `json:"transactionId"`
	EventType     string   `json:"eventType,omitempty"`
	TraceNames    []string `json:"traceNames,omitempty"`
	Data          any      `json:"data"`
}

// Trace records a trace event (POST /api/v1/traces). It is tried once:
// a trace is worth less than the time a retry would cost the caller.
func (c *Client) Trace(ctx context.Context, ev TraceEvent) error {
	payload, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, http.MethodPost, "/api/v1/traces", nil, payload)
	return err
}
