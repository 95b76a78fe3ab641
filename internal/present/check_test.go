package present_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/gate"
)

// Each kind of breach is said in words that name its facts, and -o json
// writes those words as the scope's "breaches", in the gate's order.
func TestBreachWords(t *testing.T) {
	nco := &gate.NotCarriedOut{BatchID: "20261130T031502-9f3a", Action: "replay", By: "ann", Status: "recorded", DeadLetters: 4}
	cases := []struct {
		b    gate.Breach
		want string
	}{
		{gate.Breach{Kind: gate.MaxAge, Address: "p/t", AgeSeconds: 7200, Limit: time.Hour}, "oldest dead letter p/t is 2h old (max-age 1h)"},
		{gate.Breach{Kind: gate.DefaultMaxAge, DeadLetters: 3, AgeSeconds: 90}, "3 dead letter(s), oldest 1m30s old; no policy for this queue, so it is held to max-age 0"},
		{gate.Breach{Kind: gate.TriageSLO, DeadLetters: 5, Limit: 4 * time.Hour}, "5 dead letter(s) undecided past the triage SLO of 4h"},
		{gate.Breach{Kind: gate.Unexecuted, Decision: nco, AgoSeconds: 3 * 3600, DeadLetters: 4, Limit: time.Hour},
			"decided, not carried out: batch 20261130T031502-9f3a (replay by ann, 3h ago, recorded), 4 dead letter(s) still here past the triage SLO of 1h"},
		{gate.Breach{Kind: gate.Vanished, DeadLetters: 2}, "2 dead letter(s) vanished from the broker with no recorded decision"},
	}
	var breaches []gate.Breach
	for _, c := range cases {
		if got := present.BreachText(c.b); got != c.want {
			t.Errorf("%s: %q, want %q", c.b.Kind, got, c.want)
		}
		breaches = append(breaches, c.b)
	}
	res := &gate.Result{Broker: "http://localhost:6632", Scopes: []gate.Scope{{Queue: "orders", Breaches: breaches}, {Queue: "payments"}}}
	raw, err := json.Marshal(present.DocumentOf(res))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Broker string
		Scopes []struct {
			Queue    string
			Breaches []string
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Broker != res.Broker || len(doc.Scopes) != 2 || len(doc.Scopes[0].Breaches) != len(cases) || doc.Scopes[1].Breaches == nil {
		t.Fatalf("document: %s", raw)
	}
	for i, c := range cases {
		if doc.Scopes[0].Breaches[i] != c.want {
			t.Errorf("breaches[%d] = %q", i, doc.Scopes[0].Breaches[i])
		}
	}
	if strings.Count(string(raw), `"breaches"`) != 2 {
		t.Errorf("a scope's breaches are written once: %s", raw)
	}
}
