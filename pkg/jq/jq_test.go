package jq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/pkg/jq"
)

// Updates where a predicate is meant are refused before anything runs,
// anywhere in the expression; a transform may update.
func TestPredicatesDoNotUpdate(t *testing.T) {
	for _, expr := range []string{".data.amount = 300", ".a |= 1", ".n += 1", ".x //= 2", "(.a = 1) and true", ".data | .x = 1", "[.a = 1] | length > 0"} {
		_, err := jq.Compile("--where", expr, jq.Predicate)
		if err == nil || !strings.Contains(err.Error(), "update") {
			t.Errorf("%s: %v", expr, err)
		}
		if strings.Contains(expr, " = ") && !strings.Contains(err.Error(), "did you mean ==?") {
			t.Errorf("%s: no hint: %v", expr, err)
		}
		if _, err := jq.Compile("--transform", expr, jq.Transform); err != nil {
			t.Errorf("transform %s: %v", expr, err)
		}
	}
	for _, ok := range []string{".data.amount == 300", ".a != 1", ".n >= 1", `.s == "a=b"`, "(.a // 1) <= 2"} {
		if _, err := jq.Compile("--where", ok, jq.Predicate); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// A syntax error shows the expression and a caret under the place.
func TestSyntaxErrorHasACaret(t *testing.T) {
	_, err := jq.Compile("--where", ".data.orderId ==", jq.Predicate)
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 || lines[1] != "  .data.orderId ==" || !strings.HasSuffix(lines[2], "^") {
		t.Fatalf("%q", err)
	}
}

// Endless and exploding expressions are stopped by the budget, and an
// interrupt stops an evaluation at once.
func TestBudgetStopsEndlessExpressions(t *testing.T) {
	for _, expr := range []string{"def f: f; f", "last(range(1e12))", "until(false; .)", "[range(1e12)] | length > 0", "[limit(1e9; repeat(\"xxxxxxxxxxxxxxxx\"))] | length"} {
		p, err := jq.Compile("--where", expr, jq.Predicate)
		if err != nil {
			t.Fatal(err)
		}
		p.SetBudget(jq.Budget{Time: 100 * time.Millisecond, Heap: 64 << 20})
		start := time.Now()
		_, _, err = p.First(context.Background(), map[string]any{}, "row p/t")
		var be *jq.BudgetError
		if !errors.As(err, &be) || !errors.Is(err, jq.ErrBudget) || !strings.Contains(err.Error(), "row p/t") {
			t.Errorf("%s: %v", expr, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: stopped after %s", expr, d)
		}
	}
	p, _ := jq.Compile("--where", "def f: f; f", jq.Predicate)
	p.SetBudget(jq.Budget{Time: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, _, err := p.First(ctx, nil, "row"); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted: %v", err)
	}
}
