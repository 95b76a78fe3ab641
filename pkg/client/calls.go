package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/dlqctl/dlqctl/pkg/duration"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// PartitionID is the id of a queue's partition, read from the broker's
// list of its messages (Queen 1.x's GET /api/v1/messages: a push's answer
// on 1.6 and 2.x names no partition, QUEEN-1X-CONTRACT.md 7): "" when
// the partition holds no message the list shows.
func (c *Client) PartitionID(ctx context.Context, queue, partition string) (string, error) {
	const path = "/api/v1/messages"
	q := url.Values{"queue": {queue}, "partition": {partition}, "limit": {"1"}}
	body, err := c.do(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return "", err
	}
	var page struct {
		Messages []Message `json:"messages"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		// A bare array is read too.
		if json.Unmarshal(body, &page.Messages) != nil {
			return "", c.badBody(http.MethodGet, path, body, err)
		}
	}
	for _, m := range page.Messages {
		if (m.Queue == "" || m.Queue == queue) && (m.Partition == "" || m.Partition == partition) && m.PartitionID != "" {
			return m.PartitionID, nil
		}
	}
	return "", nil
}

// Get fetches one message's detail. The payload comes from `payload` (or
// `data` on servers that name it so).
func (c *Client) Get(ctx context.Context, a deadletter.Address) (*Message, error) {
	path, err := messagePath(a, "")
	if err != nil {
		return nil, err
	}
	body, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, err
	}
	var m struct {
		Message
		Data   json.RawMessage `json:"data"`
		Groups json.RawMessage `json:"consumerGroups"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, c.badBody(http.MethodGet, path, body, err)
	}
	if len(m.Message.Payload) == 0 || string(m.Message.Payload) == "null" {
		m.Message.Payload = m.Data
	}
	var names []string
	var consumers []struct {
		Name     string `json:"name"`
		Group    string `json:"group"`
		Consumed bool   `json:"consumed"`
	}
	switch {
	case json.Unmarshal(m.Groups, &names) == nil:
		m.Message.FailedGroups = names
	case json.Unmarshal(m.Groups, &consumers) == nil:
		for _, g := range consumers {
			name := g.Name
			if name == "" {
				name = g.Group
			}
			if name == "" {
				continue
			}
			m.Message.Groups = append(m.Message.Groups, GroupConsumed{Name: name, Consumed: g.Consumed})
			if !g.Consumed {
				m.Message.PendingGroups = append(m.Message.PendingGroups, name)
			}
		}
	}
	return &m.Message, nil
}

// Delete removes the dead-letter row(s) at an address. ErrNoDeadLetterRow
// means there was none (already gone). On older servers DELETE removes the
// message itself, live or not: callers confirm the address is dead-lettered
// first.
func (c *Client) Delete(ctx context.Context, a deadletter.Address) error {
	_, err := c.Deleted(ctx, a)
	return err
}

// Deleted is Delete, and how many rows the broker says it removed: 2.x
// answers deleted:<n>; -1 where the broker does not say.
func (c *Client) Deleted(ctx context.Context, a deadletter.Address) (int, error) {
	path, err := messagePath(a, "")
	if err != nil {
		return -1, err
	}
	body, err := c.do(ctx, http.MethodDelete, path, nil, nil)
	if err != nil {
		return -1, err
	}
	var r struct {
		Success *bool  `json:"success"`
		Message string `json:"message"`
		Deleted *int   `json:"deleted"`
	}
	if len(bytes.TrimSpace(body)) > 0 && json.Unmarshal(body, &r) == nil && r.Success != nil && !*r.Success {
		if strings.Contains(strings.ToLower(r.Message), "not found") {
			return -1, &HTTPError{Method: http.MethodDelete, URL: c.shown + path, Status: 200, Body: c.snippet(body), Kind: ErrNoDeadLetterRow}
		}
		return -1, &HTTPError{Method: http.MethodDelete, URL: c.shown + path, Status: 200, Body: c.snippet(body), Kind: ErrUnavailable}
	}
	if r.Deleted != nil && *r.Deleted >= 0 {
		return *r.Deleted, nil
	}
	return -1, nil
}

// Push publishes items; never retried, since a lost answer cannot tell
// whether the broker wrote them. Each result is in item order.
func (c *Client) Push(ctx context.Context, items []PushItem) ([]PushResult, error) {
	payload, err := json.Marshal(map[string]any{"items": items})
	if err != nil {
		return nil, err
	}
	body, err := c.do(ctx, http.MethodPost, "/api/v1/push", nil, payload)
	if err != nil {
		return nil, err
	}
	var res []PushResult
	if err := json.Unmarshal(body, &res); err != nil {
		// Some servers wrap the array.
		var w struct {
			Results *[]PushResult `json:"results"`
		}
		if json.Unmarshal(body, &w) != nil || w.Results == nil {
			return nil, c.badBody(http.MethodPost, "/api/v1/push", body, err)
		}
		res = *w.Results
	}
	if len(res) != len(items) {
		return nil, c.badBody(http.MethodPost, "/api/v1/push", body, fmt.Errorf("%d results for %d items", len(res), len(items)))
	}
	return res, nil
}

// Retry calls the replay endpoint. ErrRouteMissing means the broker has no
// /retry route (fall back to the manual path); ErrNoDeadLetterRow means the
// address is not dead-lettered.
func (c *Client) Retry(ctx context.Context, a deadletter.Address) (*RetryResult, error) {
	path, err := messagePath(a, "/retry")
	if err != nil {
		return nil, err
	}
	body, err := c.do(ctx, http.MethodPost, path, nil, nil)
	if err != nil {
		return nil, err
	}
	var r RetryResult
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, c.badBody(http.MethodPost, path, body, err)
	}
	if !r.Success {
		return &r, &HTTPError{Method: http.MethodPost, URL: c.shown + path, Status: 200, Body: c.snippet(body), Kind: ErrUnavailable}
	}
	return &r, nil
}

// ProbeAddress is an address no broker holds: asking /retry for it tells
// whether the route exists without touching anything.
var ProbeAddress = deadletter.Address{PartitionID: "00000000-0000-0000-0000-000000000000", TransactionID: "dlqctl-route-probe"}

// HasRetryRoute asks whether the broker has the /retry endpoint, with a
// call for an address that cannot exist: a broker with the route answers
// "no dead-letter row"; one without answers a bare 404. Anything else
// (no answer, an error) is reported as false with the error, so a caller
// in doubt takes the manual path.
func (c *Client) HasRetryRoute(ctx context.Context) (bool, error) {
	_, err := c.Retry(ctx, ProbeAddress)
	switch {
	case errors.Is(err, ErrNoDeadLetterRow):
		return true, nil
	case errors.Is(err, ErrRouteMissing):
		return false, nil
	case err == nil:
		return true, nil
	}
	return false, err
}

// Health calls GET /health.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	body, err := c.do(ctx, http.MethodGet, "/health", nil, nil)
	if err != nil {
		return nil, err
	}
	var h Health
	if err := json.Unmarshal(body, &h); err != nil {
		return nil, c.badBody(http.MethodGet, "/health", body, err)
	}
	return &h, nil
}

// Queues lists the broker's queues. Both a bare array and {"queues": [...]}
// are accepted.
func (c *Client) Queues(ctx context.Context) ([]Queue, error) {
	body, err := c.do(ctx, http.MethodGet, "/api/v1/resources/queues", nil, nil)
	if err != nil {
		return nil, err
	}
	var qs []Queue
	if err := json.Unmarshal(body, &qs); err == nil {
		return qs, nil
	}
	var w struct {
		Queues []Queue `json:"queues"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, c.badBody(http.MethodGet, "/api/v1/resources/queues", body, err)
	}
	return w.Queues, nil
}

// ConsumerGroups lists the broker's (group, queue) pairs from
// /api/v1/consumer-groups: the released server's bare array, or an object
// wrapping it. A broker without the route has none to tell (nil, nil).
func (c *Client) ConsumerGroups(ctx context.Context) ([]ConsumerGroup, error) {
	const path = "/api/v1/consumer-groups"
	body, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if errors.Is(err, ErrRouteMissing) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var list []consumerGroupWire
	if err := json.Unmarshal(body, &list); err != nil {
		var w struct {
			ConsumerGroups []consumerGroupWire `json:"consumerGroups"`
			Groups         []consumerGroupWire `json:"groups"`
		}
		if err := json.Unmarshal(body, &w); err != nil {
			return nil, c.badBody(http.MethodGet, path, body, err)
		}
		list = append(w.ConsumerGroups, w.Groups...)
	}
	out := make([]ConsumerGroup, 0, len(list))
	for _, g := range list {
		q := g.QueueName
		if q == "" {
			q = g.Queue
		}
		if q == "" && len(g.Topics) > 0 {
			q = g.Topics[0]
		}
		if g.Name != "" && q != "" {
			cg := ConsumerGroup{Name: g.Name, Queue: q}
			if g.MaxTimeLag.ok {
				cg.Lag = &Lag{MaxTime: duration.Seconds(g.MaxTimeLag.v), State: g.State}
				if g.TotalLag.ok {
					n := int(g.TotalLag.v)
					cg.Lag.Messages = &n
				}
			}
			out = append(out, cg)
		}
	}
	return out, nil
}

type consumerGroupWire struct {
	Name      string   `json:"name"`
	QueueName string   `json:"queueName"`
	Queue     string   `json:"queue"`
	Topics    []string `json:"topics"`
	// The lag, where the broker reports it (seconds, messages, state).
	MaxTimeLag looseNumber `json:"maxTimeLag"`
	TotalLag   looseNumber `json:"totalLag"`
	State      string      `json:"state"`
}

// looseNumber is a JSON number that may arrive as a string (a database's
// numeric, quoted) or null; anything else reads as absent rather than
// failing the whole answer.
type looseNumber struct {
	v  float64
	ok bool
}

func (n *looseNumber) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
		n.v, n.ok = f, true
	}
	return nil
}

// DLQDepths reads the broker's per-queue dead-letter depth from its
// Prometheus metrics (queen_dlq_depth_by_queue{queue}), which a contract
// server exports: a depth without paging. The released server has no such
// metric: the map is then empty, and so it is on any error (a probe does
// without it).
func (c *Client) DLQDepths(ctx context.Context) map[string]int {
	out := map[string]int{}
	resp, err := c.send(ctx, http.MethodGet, "/metrics/prometheus", nil, nil)
	if err != nil {
		return out
	}
	defer resp.close()
	body, err := io.ReadAll(io.LimitReader(resp.body, 16<<20))
	if err != nil {
		return out
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return out
	}
	if f := fams["queen_dlq_depth_by_queue"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "queue" {
					continue
				}
				switch {
				case m.GetGauge() != nil:
					out[l.GetValue()] = int(m.GetGauge().GetValue())
				case m.GetUntyped() != nil:
					out[l.GetValue()] = int(m.GetUntyped().GetValue())
				}
			}
		}
	}
	return out
}
