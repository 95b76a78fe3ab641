// Package e2e seeds a broker with a sandbox seed's dead letters through
// the broker's own API, the way consumers make them: configure each
// queue, push each message, pop it as each of the queue's consumer groups
// and ack it "dlq" (with the seed's error) where the seed has that group
// fail it, "completed" where not. It works on a real Queen server and on
// the sandbox alike, so the end-to-end scripts can run against either,
// as often as wanted: every seeding names its queues with a fresh prefix.
//
// What the API cannot make is left out: a row's age (every row fails now)
// and undecryptable envelopes (that needs a rotated key on the server).
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Seeded says what a seeding made.
type Seeded struct {
	// Queues maps each seed queue name to its name on the broker.
	Queues map[string]string
	// Rows is the number of dead-letter rows made; Messages of messages.
	Rows, Messages int
}

// Loader talks to one broker.
type Loader struct {
	Server string
	Token  string
	HTTP   *http.Client
}

// Seed loads seed into the broker with every queue named prefix+name.
func (l *Loader) Seed(ctx context.Context, seed sandbox.Seed, prefix string) (*Seeded, error) {
	if l.HTTP == nil {
		l.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	out := &Seeded{Queues: map[string]string{}}
	groups := map[string][]string{}
	for _, q := range seed.Queues {
		name := prefix + q.Name
		out.Queues[q.Name] = name
		groups[q.Name] = q.ConsumerGroups
		opts := map[string]any{"retryLimit": q.RetryLimit}
		if q.Encrypted {
			opts["encryptionEnabled"] = true
		}
		if err := l.call(ctx, http.MethodPost, "/api/v1/configure", nil, map[string]any{"queue": name, "options": opts}, nil); err != nil {
			return nil, fmt.Errorf("configuring %s: %w", name, err)
		}
	}
	type msgKey struct{ queue, partition, txid string }
	fails := map[msgKey]map[string]string{} // message -> group -> error
	var order []msgKey
	payload := map[msgKey]json.RawMessage{}
	for _, d := range seed.DeadLetters {
		if d.Undecryptable {
			continue
		}
		k := msgKey{d.Queue, d.Partition, d.TransactionID}
		if fails[k] == nil {
			fails[k] = map[string]string{}
			order = append(order, k)
			payload[k] = d.Data
		}
		fails[k][d.ConsumerGroup] = d.Error
	}
	// Push every message, a hundred at a time.
	for start := 0; start < len(order); start += 100 {
		var items []map[string]any
		for _, k := range order[start:min(start+100, len(order))] {
			items = append(items, map[string]any{"queue": out.Queues[k.queue], "partition": k.partition, "payload": payload[k], "transactionId": k.txid})
		}
		var res []client.PushResult
		if err := l.call(ctx, http.MethodPost, "/api/v1/push", nil, map[string]any{"items": items}, &res); err != nil {
			return nil, fmt.Errorf("pushing: %w", err)
		}
		for _, r := range res {
			if r.Status != "queued" && r.Status != "duplicate" {
				return nil, fmt.Errorf("push of %s answered %q %s", r.TransactionID, r.Status, r.Error)
			}
		}
	}
	out.Messages = len(order)
	// Consume each partition as each group, failing what the seed says.
	parts := map[[2]string]bool{}
	for _, k := range order {
		parts[[2]string{k.queue, k.partition}] = true
	}
	keys := make([][2]string, 0, len(parts))
	for p := range parts {
		keys = append(keys, p)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+"/"+keys[i][1] < keys[j][0]+"/"+keys[j][1] })
	for _, p := range keys {
		for _, g := range groups[p[0]] {
			n, err := l.consume(ctx, out.Queues[p[0]], p[1], g, func(txid string) (string, bool) {
				e, ok := fails[msgKey{p[0], p[1], txid}][g]
				return e, ok
			})
			if err != nil {
				return nil, fmt.Errorf("consuming %s/%s as %s: %w", p[0], p[1], g, err)
			}
			out.Rows += n
		}
	}
	return out, nil
}

// consume pops one partition as one group until it is empty, acking each
// message dlq (with its error) when fail says so, completed otherwise.
// It returns how many it dead-lettered.
func (l *Loader) consume(ctx context.Context, queue, partition, group string, fail func(txid string) (string, bool)) (int, error) {
	dead := 0
	for round := 0; round < 100; round++ {
		q := url.Values{"batch": {"1000"}}
		if group != deadletter.QueueModeGroup {
			q.Set("consumerGroup", group)
		}
		var page struct {
			LeaseID  string `json:"leaseId"`
			Messages []struct {
				TransactionID string `json:"transactionId"`
				PartitionID   string `json:"partitionId"`
				LeaseID       string `json:"leaseId"`
			} `json:"messages"`
		}
		path := "/api/v1/pop/queue/" + url.PathEscape(queue) + "/partition/" + url.PathEscape(partition)
		if err := l.call(ctx, http.MethodGet, path, q, nil, &page); err != nil {
			return dead, err
		}
		if len(page.Messages) == 0 {
			return dead, nil
		}
		// One ack call for the page, as consumers do.
		var acks []map[string]any
		for _, m := range page.Messages {
			lease := m.LeaseID
			if lease == "" {
				lease = page.LeaseID
			}
			ack := map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": lease, "status": "completed"}
			if e, ok := fail(m.TransactionID); ok {
				ack["status"], ack["error"] = "dlq", e
				dead++
			}
			acks = append(acks, ack)
		}
		body := map[string]any{"acknowledgments": acks}
		if group != deadletter.QueueModeGroup {
			body["consumerGroup"] = group
		}
		var res []struct {
			Success       bool    `json:"success"`
			Error         *string `json:"error"`
			TransactionID string  `json:"transactionId"`
		}
		if err := l.call(ctx, http.MethodPost, "/api/v1/ack/batch", nil, body, &res); err != nil {
			return dead, err
		}
		for _, r := range res {
			if !r.Success {
				msg := "refused"
				if r.Error != nil {
					msg = *r.Error
				}
				return dead, fmt.Errorf("ack of %s: %s", r.TransactionID, msg)
			}
		}
	}
	return dead, fmt.Errorf("the partition never ran dry")
}

func (l *Loader) call(ctx context.Context, method, path string, q url.Values, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	u := strings.TrimRight(l.Server, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if l.Token != "" {
		req.Header.Set("Authorization", "Bearer "+l.Token)
	}
	resp, err := l.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: HTTP %d: %.200s", method, path, resp.StatusCode, raw)
	}
	var e struct {
		Error *string `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != nil {
		return fmt.Errorf("%s %s: %s", method, path, *e.Error)
	}
	if out != nil && len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: %v: %.200s", method, path, err, raw)
		}
	}
	return nil
}
