package sandbox

import (
	"encoding/json"
	"flag"
	"os"
	"testing"
	"time"
)

var updateSeed = flag.Bool("update-seed", false, "rewrite testdata/sandbox.json from GenerateSeed")

const seedPath = "../../testdata/sandbox.json"

// TestSeedFile keeps testdata/sandbox.json what GenerateSeed(240, 1) makes
// and checks it is as realistic as the sandbox promises.
func TestSeedFile(t *testing.T) {
	want, err := json.MarshalIndent(GenerateSeed(240, 1), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	if *updateSeed {
		if err := os.WriteFile(seedPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(seedPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s is stale: go test ./internal/sandbox -run TestSeedFile -update-seed", seedPath)
	}
	b := New(nil)
	if err := b.Load(got); err != nil {
		t.Fatal(err)
	}
	rows := b.DeadLetterRows()
	queues, groups, classes := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var undecryptable, multi int
	var minAge, maxAge time.Duration = time.Hour * 1e4, 0
	perAddr := map[string]int{}
	for _, d := range GenerateSeed(240, 1).DeadLetters {
		queues[d.Queue] = true
		groups[d.ConsumerGroup] = true
		classes[d.Error[:min(len(d.Error), 8)]] = true
		if d.Undecryptable {
			undecryptable++
		}
		age, _ := time.ParseDuration(d.Age)
		minAge, maxAge = min(minAge, age), max(maxAge, age)
		perAddr[d.Queue+d.Partition+d.TransactionID]++
	}
	for _, n := range perAddr {
		if n > 1 {
			multi++
		}
	}
	switch {
	case len(rows) < 200:
		t.Errorf("%d dead letters, want at least 200", len(rows))
	case len(queues) < 3:
		t.Errorf("%d queues, want at least 3", len(queues))
	case len(groups) < 2:
		t.Errorf("%d consumer groups, want at least 2", len(groups))
	case len(classes) < 5:
		t.Errorf("%d error shapes, want at least 5", len(classes))
	case undecryptable == 0:
		t.Error("no undecryptable envelope")
	case multi == 0:
		t.Error("no message dead-lettered by two groups")
	case minAge > 10*time.Minute || maxAge < 48*time.Hour:
		t.Errorf("ages %s..%s, want minutes to days", minAge, maxAge)
	}
}
