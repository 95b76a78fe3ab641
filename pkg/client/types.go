// Package client is a typed HTTP client for the Queen broker's dead-letter
// API (see docs/broker.md). It pages, retries idempotent calls, redacts the
// bearer token from every trace, and maps the broker's many ways of saying
// "no" onto typed errors.
package client

import (
	"encoding/json"
	"time"
)

// Message is the detail of one message (GET /api/v1/messages/{p}/{t}).
type Message struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	Status        string          `json:"status"`
	Payload       json.RawMessage `json:"payload"`
	IsEncrypted   bool            `json:"isEncrypted"`
	RetryCount    int             `json:"retryCount"`
	ErrorMessage  string          `json:"errorMessage"`
	CreatedAt     *time.Time      `json:"createdAt,omitempty"`
	// FailedGroups are the consumer groups that dead-lettered it, and
	// PendingGroups those that have not consumed it, where the broker's
	// detail says (the contract names the former, the released server
	// lists every group with whether it consumed).
	FailedGroups  []string `json:"-"`
	PendingGroups []string `json:"-"`
	// Groups are the consumer groups reading its partition and whether
	// each has consumed it, where the broker says (0.x, 1.6, 2.x): its
	// status alone can say completed while a group has not (the 0.x
	// server calls a message completed once queue mode consumed it).
	Groups []GroupConsumed `json:"-"`
}

// GroupConsumed is whether a consumer group consumed a message.
type GroupConsumed struct {
	Name     string `json:"name"`
	Consumed bool   `json:"consumed"`
}

// PushItem is one message to publish.
type PushItem struct {
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition,omitempty"`
	Payload       json.RawMessage `json:"payload"`
	TransactionID string          `json:"transactionId,omitempty"`
}

// PushResult is the broker's answer for one pushed item.
type PushResult struct {
	Index         int    `json:"index"`
	TransactionID string `json:"transaction_id"`
	MessageID     string `json:"message_id"`
	PartitionID   string `json:"partition_id,omitempty"`
	Status        string `json:"status"`
	QueueName     string `json:"queueName,omitempty"`
	Error         string `json:"error,omitempty"`
}

// Accepted reports whether the broker holds the message now (queued, or
// already held under that transaction id).
func (p PushResult) Accepted() bool { return p.Status == "queued" || p.Duplicate() }

// Duplicate reports whether the broker had a message of this transaction
// id already, and kept that one.
func (p PushResult) Duplicate() bool { return p.Status == "duplicate" }

// Buffered reports an answer of a broker whose database is down: it kept
// the message in a local file to write later. That is not yet durable in
// the broker, so a replay does not delete the dead letter on it.
func (p PushResult) Buffered() bool { return p.Status == "buffered" }

// RetryResult is the answer of the /retry endpoint.
type RetryResult struct {
	Success       bool        `json:"success"`
	Queue         string      `json:"queue"`
	Partition     string      `json:"partition"`
	ReplayedAs    *PushResult `json:"replayedAs"`
	DLQRowRemoved bool        `json:"dlqRowRemoved"`
	Error         string      `json:"error,omitempty"`
}

// Health is GET /health.
type Health struct {
	Status   string `json:"status"`
	Database string `json:"database"`
	Version  any    `json:"version,omitempty"`
	// Sandbox is the instance id a dlqctl sandbox says it is ("" for any
	// other broker): a context that names a sandbox talks to it alone.
	Sandbox string `json:"dlqctlSandbox,omitempty"`
}

// ConsumerGroup is one (group, queue) pair of GET /api/v1/consumer-groups.
type ConsumerGroup struct {
	Name  string `json:"name"`
	Queue string `json:"queue"`
	// Lag is the group's lag on the queue, where the broker reports it
	// (the released server does; the seed contract has no lag).
	Lag *Lag `json:"lag,omitempty"`
}

// Lag is how far a consumer group is behind on a queue.
type Lag struct {
	// MaxTime is the age of the oldest message the group has not
	// consumed yet, its worst partition's.
	MaxTime time.Duration `json:"-"`
	// Messages is the number of messages not consumed yet, nil where the
	// broker does not count them (queue-mode groups on the released server).
	Messages *int `json:"messages"`
	// State is the broker's word for it: Stable, Lagging (past 300 s),
	// Dead (never consumed).
	State string `json:"state"`
}

// Queue is one entry of GET /api/v1/resources/queues.
type Queue struct {
	Name              string   `json:"name"`
	RetryLimit        int      `json:"retryLimit"`
	DeadLetterQueue   *bool    `json:"deadLetterQueue,omitempty"`
	EncryptionEnabled bool     `json:"encryptionEnabled"`
	ConsumerGroups    []string `json:"consumerGroups,omitempty"`
}
