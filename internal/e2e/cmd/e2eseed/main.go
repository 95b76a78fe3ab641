// Command e2eseed seeds a broker (a real Queen server, or a sandbox) with
// the sandbox seed's dead letters through the broker's own API:
//
//	go run ./internal/e2e/cmd/e2eseed -server http://localhost:6632 -prefix demo-
//
// It prints the queue names it used. See internal/e2e for what the API
// can and cannot make.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/internal/e2e"
	"github.com/dlqctl/dlqctl/internal/sandbox"
)

func main() {
	server := flag.String("server", "http://localhost:6632", "broker URL")
	prefix := flag.String("prefix", fmt.Sprintf("e2e-%d-", time.Now().Unix()), "prefix of every queue name")
	seedFile := flag.String("seed", "", "seed file (default: the built-in testdata/sandbox.json)")
	n := flag.Int("n", 0, "generate this many dead letters (sandbox.GenerateSeed) instead of reading a seed")
	flag.Parse()
	raw := dlqctl.SandboxSeed
	if *n > 0 {
		raw, _ = json.Marshal(sandbox.GenerateSeed(*n, 1))
	}
	if *seedFile != "" {
		b, err := os.ReadFile(*seedFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2eseed:", err)
			os.Exit(2)
		}
		raw = b
	}
	var seed sandbox.Seed
	if err := json.Unmarshal(raw, &seed); err != nil {
		fmt.Fprintln(os.Stderr, "e2eseed: reading the seed:", err)
		os.Exit(2)
	}
	l := &e2e.Loader{Server: *server, Token: os.Getenv("DLQCTL_TOKEN")}
	start := time.Now()
	got, err := l.Seed(context.Background(), seed, *prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2eseed:", err)
		os.Exit(1)
	}
	fmt.Printf("seeded %d dead-letter rows (%d messages) in %s\n", got.Rows, got.Messages, time.Since(start).Round(time.Millisecond))
	for from, to := range got.Queues {
		fmt.Printf("  %s -> %s\n", from, to)
	}
}
