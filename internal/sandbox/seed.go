package sandbox

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Seed is the sandbox's seed file (testdata/sandbox.json). Ages are
// relative to the moment the sandbox starts, so a seed stays realistic
// whenever it is loaded.
type Seed struct {
	Queues      []SeedQueue      `json:"queues"`
	DeadLetters []SeedDeadLetter `json:"deadLetters"`
}

// SeedQueue declares a queue.
type SeedQueue struct {
	Name           string   `json:"name"`
	Encrypted      bool     `json:"encrypted,omitempty"`
	RetryLimit     int      `json:"retryLimit"`
	ConsumerGroups []string `json:"consumerGroups"`
}

// SeedDeadLetter is one dead-letter row; Age is a Go duration before now.
type SeedDeadLetter struct {
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	TransactionID string          `json:"transactionId"`
	ConsumerGroup string          `json:"consumerGroup"`
	Error         string          `json:"error"`
	RetryCount    int             `json:"retryCount"`
	Age           string          `json:"age"`
	Data          json.RawMessage `json:"data"`
	Undecryptable bool            `json:"undecryptable,omitempty"`
}

// Load adds a seed's queues and dead letters.
func (b *Broker) Load(raw []byte) error {
	var s Seed
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("reading seed: %w", err)
	}
	for _, q := range s.Queues {
		b.AddQueue(q.Name, q.Encrypted, q.RetryLimit, q.ConsumerGroups...)
	}
	now := b.now()
	dls := make([]DeadLetter, 0, len(s.DeadLetters))
	for i, d := range s.DeadLetters {
		age, err := time.ParseDuration(d.Age)
		if err != nil {
			return fmt.Errorf("seed dead letter %d: bad age %q: %w", i, d.Age, err)
		}
		dls = append(dls, DeadLetter{Queue: d.Queue, Partition: d.Partition, TransactionID: d.TransactionID,
			ConsumerGroup: d.ConsumerGroup, Error: d.Error, RetryCount: d.RetryCount, FailedAt: now.Add(-age),
			Data: d.Data, Undecryptable: d.Undecryptable})
	}
	b.AddDeadLetters(dls...)
	return nil
}

// GenerateSeed builds a realistic seed of n dead letters from a fixed
// random source: three queues, several consumer groups, a handful of
// failure classes, ages from minutes to days, an encrypted queue with a
// few undecryptable envelopes, and some messages dead-lettered by two
// groups. testdata/sandbox.json is GenerateSeed(240, 1).
func GenerateSeed(n int, seed uint64) Seed {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := Seed{Queues: []SeedQueue{
		{Name: "orders", RetryLimit: 3, ConsumerGroups: []string{"billing", "shipping"}},
		{Name: "payments", RetryLimit: 5, ConsumerGroups: []string{"ledger", "fraud"}},
		{Name: "notifications", Encrypted: true, RetryLimit: 3, ConsumerGroups: []string{"__QUEUE_MODE__"}},
	}}
	errs := map[string][]func() string{
		"orders": {
			func() string { return fmt.Sprintf("order %d not found", 1000+rng.IntN(9000)) },
			func() string { return fmt.Sprintf("unknown payload version %d", 3+rng.IntN(3)) },
			func() string {
				return fmt.Sprintf("timeout calling inventory-service after %dms", []int{5000, 10000, 30000}[rng.IntN(3)])
			},
		},
		"payments": {
			func() string {
				return fmt.Sprintf("card %08x declined: insufficient funds", rng.Uint32())
			},
			func() string { return fmt.Sprintf("connection refused: payments-db:%d", 5432) },
			func() string { return fmt.Sprintf("duplicate charge id %q", fmt.Sprintf("ch_%06d", rng.IntN(1e6))) },
		},
		"notifications": {
			func() string {
				return fmt.Sprintf("validation failed: field %q invalid", []string{"email", "phone", "locale"}[rng.IntN(3)])
			},
			func() string { return "" },
		},
	}
	for i := 0; len(s.DeadLetters) < n; i++ {
		q := s.Queues[rng.IntN(len(s.Queues))]
		part := fmt.Sprintf("%d", 1000+rng.IntN(40))
		var tx string
		var data any
		switch q.Name {
		case "orders":
			id := 10000 + i
			tx = fmt.Sprintf("order:%d:v%d", id, 1+rng.IntN(3))
			data = map[string]any{"orderId": id, "customer": part, "amount": float64(rng.IntN(50000)) / 100, "currency": "EUR"}
		case "payments":
			tx = fmt.Sprintf("pay-%06d", 500000+i)
			data = map[string]any{"paymentId": tx, "orderId": 10000 + rng.IntN(i+1), "cents": rng.IntN(90000)}
		default:
			tx = fmt.Sprintf("notif.%d.%04x", i, rng.IntN(1<<16))
			data = map[string]any{"to": fmt.Sprintf("user%d@example.com", i), "template": "receipt", "seq": i}
		}
		raw, _ := json.Marshal(data)
		// Ages spread log-uniformly from 2 minutes to 9 days.
		age := time.Duration(float64(2*time.Minute) * math.Pow(6480, rng.Float64())).Round(time.Second)
		mk := func(group string, age time.Duration) SeedDeadLetter {
			fs := errs[q.Name]
			return SeedDeadLetter{Queue: q.Name, Partition: part, TransactionID: tx, ConsumerGroup: group,
				Error: fs[rng.IntN(len(fs))](), RetryCount: q.RetryLimit, Age: age.String(), Data: raw}
		}
		d := mk(q.ConsumerGroups[rng.IntN(len(q.ConsumerGroups))], age)
		if q.Encrypted && rng.IntN(12) == 0 {
			d.Undecryptable = true
			d.Error = "decryption failed: key rotated"
		}
		s.DeadLetters = append(s.DeadLetters, d)
		// One in eight messages failed in both groups of its queue.
		if len(q.ConsumerGroups) > 1 && rng.IntN(8) == 0 && len(s.DeadLetters) < n {
			other := q.ConsumerGroups[0]
			if other == d.ConsumerGroup {
				other = q.ConsumerGroups[1]
			}
			s.DeadLetters = append(s.DeadLetters, mk(other, age-time.Duration(rng.IntN(60))*time.Second))
		}
	}
	return s
}

// Fill adds n generated dead letters (GenerateSeed(n, seed)) directly,
// for benchmarks and large-DLQ tests.
func (b *Broker) Fill(n int, seed uint64) {
	s := GenerateSeed(n, seed)
	for _, q := range s.Queues {
		b.AddQueue(q.Name, q.Encrypted, q.RetryLimit, q.ConsumerGroups...)
	}
	now := b.now()
	dls := make([]DeadLetter, len(s.DeadLetters))
	for i, d := range s.DeadLetters {
		age, _ := time.ParseDuration(d.Age)
		dls[i] = DeadLetter{Queue: d.Queue, Partition: d.Partition, TransactionID: d.TransactionID,
			ConsumerGroup: d.ConsumerGroup, Error: d.Error, RetryCount: d.RetryCount, FailedAt: now.Add(-age),
			Data: d.Data, Undecryptable: d.Undecryptable}
	}
	b.AddDeadLetters(dls...)
}

// FillChains adds, to queue "orders", `parts` partitions (p0, p1, …) of
// `per` messages each, enqueued in order (message i before i+1, so their
// ids sort that way) but failed in a shuffled order (a later version can
// fail first): the shape ordered replay is about. Each payload names its
// place, {"p":P,"i":I}. Places listed in undecryptable get an envelope
// nobody can decrypt.
func (b *Broker) FillChains(parts, per int, seed uint64, undecryptable ...[2]int) {
	b.fillChains(parts, per, seed, false, undecryptable)
}

// FillChainsFailedInOrder is FillChains with each partition's messages
// failing in their enqueue order: on a line whose list says nothing of
// the enqueue order (1.6 lists random row ids, and createdAt is the
// failure), the first failure is the order a replay can keep.
func (b *Broker) FillChainsFailedInOrder(parts, per int, seed uint64) {
	b.fillChains(parts, per, seed, true, nil)
}

func (b *Broker) fillChains(parts, per int, seed uint64, inOrder bool, undecryptable [][2]int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	b.AddQueue("orders", false, 3, "billing")
	base := b.now().Add(-time.Hour)
	var dls []DeadLetter
	for p := 0; p < parts; p++ {
		for i := 0; i < per; i++ {
			undec := false
			for _, u := range undecryptable {
				undec = undec || u == [2]int{p, i}
			}
			failed := base.Add(time.Minute + time.Duration(rng.IntN(per*10+1))*time.Second)
			if inOrder {
				failed = base.Add(time.Minute + time.Duration(i)*time.Second + time.Duration(p)*time.Millisecond)
			}
			dls = append(dls, DeadLetter{Queue: "orders", Partition: fmt.Sprintf("p%d", p), TransactionID: fmt.Sprintf("o-%d-%d", p, i),
				ConsumerGroup: "billing", Error: "stale version", EnqueuedAt: base.Add(time.Duration(i) * time.Second),
				FailedAt: failed,
				Data:     json.RawMessage(fmt.Sprintf(`{"p":%d,"i":%d}`, p, i)), Undecryptable: undec})
		}
	}
	b.AddDeadLetters(dls...)
}
