package policy

import (
	"testing"
	"time"
)

// A rule sets what it names and inherits the rest: a queue's group from
// the queue, the queue from "*"; the first rule for a scope is the one.
func TestForLayersRules(t *testing.T) {
	s := Set{
		{Queue: "orders", Policy: Policy{Owner: "billing", MaxAge: time.Hour, TriageSLO: 4 * time.Hour}},
		{Queue: "orders", ConsumerGroup: "shipping", Policy: Policy{Owner: "shipping", MaxAge: 30 * time.Minute}},
		{Queue: "orders", ConsumerGroup: "shipping", Policy: Policy{Owner: "ignored"}},
		{Queue: "*", ConsumerGroup: "audit", Policy: Policy{TriageSLO: time.Minute}},
		{Queue: "*", Policy: Policy{MaxAge: 24 * time.Hour}},
	}
	for _, c := range []struct {
		q, g string
		want Policy
	}{
		{"orders", "shipping", Policy{Owner: "shipping", MaxAge: 30 * time.Minute, TriageSLO: 4 * time.Hour}},
		{"orders", "", Policy{Owner: "billing", MaxAge: time.Hour, TriageSLO: 4 * time.Hour}},
		{"payments", "audit", Policy{MaxAge: 24 * time.Hour, TriageSLO: time.Minute}},
		{"payments", "", Policy{MaxAge: 24 * time.Hour}},
	} {
		if got, ok := s.For(c.q, c.g); !ok || got != c.want {
			t.Errorf("%s/%s: %+v, want %+v", c.q, c.g, got, c.want)
		}
	}
	if _, ok := (Set{}).For("q", "g"); ok {
		t.Error("an empty set applies to nothing")
	}
	if !s.Names("orders") || s.Names("payments") {
		t.Error("Names is for rules that name the queue itself")
	}
}
