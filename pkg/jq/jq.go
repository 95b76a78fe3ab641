// Package jq runs the jq expressions people type (--where, --transform,
// triage's /? filter) so that a typo or an endless expression cannot take
// the command with it: a syntax error says where, with a caret; an update
// where a predicate is meant (= for ==) is refused before anything runs;
// and every evaluation runs under a budget of time and heap, and stops at
// once when the command is interrupted.
package jq

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/itchyny/gojq"
)

// Budget is what one evaluation, on one row or payload, may take.
type Budget struct {
	// Time is how long it may run.
	Time time.Duration
	// Heap is how far the process's heap may grow above what it was when
	// the evaluation began.
	Heap uint64
}

// DefaultBudget: a predicate or transform takes microseconds a row; one
// that takes a quarter of a second, or grows the heap by 256 MiB, is
// endless or exploding (def f: f; f, [range(1e12)]).
var DefaultBudget = Budget{Time: 250 * time.Millisecond, Heap: 256 << 20}

// BudgetHelp says the budget, for a flag's help.
func BudgetHelp() string {
	return fmt.Sprintf("each evaluation may take %s and grow the heap by %d MiB (DLQCTL_JQ_BUDGET sets the time)", DefaultBudget.Time, DefaultBudget.Heap>>20)
}

// ErrBudget is an evaluation stopped for going past its budget.
var ErrBudget = errors.New("over its budget")

// BudgetError says which evaluation went past the budget, and how.
type BudgetError struct {
	Flag, Expr, On, How string
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%s %s stopped on %s: it %s (an endless or exploding expression?)", e.Flag, quote(e.Expr), e.On, e.How)
}

func (e *BudgetError) Unwrap() error { return ErrBudget }

// Program is a compiled expression.
type Program struct {
	flag, expr string
	code       *gojq.Code
	query      *gojq.Query
	budget     Budget
}

// Kind says what an expression is for: a predicate yields true or false
// and changes nothing; a transform yields the new payload.
type Kind int

// The kinds.
const (
	Predicate Kind = iota + 1
	Transform
)

// Compile parses and compiles expr for flag ("--where", "--transform").
// A syntax error shows the expression with a caret under the place; a
// predicate that updates its input (=, |=, +=, …) is refused, since it
// yields the row, which is neither true nor false.
func Compile(flag, expr string, kind Kind) (*Program, error) {
	q, err := gojq.Parse(expr)
	if err != nil {
		var pe *gojq.ParseError
		if errors.As(err, &pe) && !strings.Contains(expr, "\n") {
			at := min(max(pe.Offset-len(pe.Token), 0), len(expr))
			return nil, fmt.Errorf("invalid %s: %v at position %d\n  %s\n  %s^", flag, err, at+1, expr, strings.Repeat(" ", len([]rune(expr[:at]))))
		}
		return nil, fmt.Errorf("invalid %s: %v", flag, err)
	}
	if kind == Predicate {
		if op, ok := update(q); ok {
			hint := "a predicate compares (==, !=, <, …); it does not change the row"
			if op == gojq.OpAssign {
				hint = "did you mean ==? " + hint
			}
			return nil, fmt.Errorf("invalid %s %s: %q is an update, which yields the row itself (taken as true for every row): %s", flag, quote(expr), op.String(), hint)
		}
	}
	code, err := gojq.Compile(q)
	if err != nil {
		return nil, fmt.Errorf("invalid %s: %v", flag, err)
	}
	return &Program{flag: flag, expr: expr, code: code, query: q, budget: DefaultBudget}, nil
}

// SetBudget changes the budget of each evaluation.
func (p *Program) SetBudget(b Budget) { p.budget = b }

// Expr is the expression as it was typed.
func (p *Program) Expr() string { return p.expr }

// Query is the parsed expression.
func (p *Program) Query() *gojq.Query { return p.query }

// First runs the program on v under the budget and the context and
// returns its first output (ok false when it yielded nothing). on names
// the input in errors ("row ADDR"). An error of jq's own is returned as
// it is; a budget overrun is a *BudgetError; an interrupted context
// returns its error.
func (p *Program) First(ctx context.Context, v any, on string) (out any, ok bool, err error) {
	ctx, done := watch(ctx, p.budget)
	defer done()
	it := p.code.RunWithContext(ctx, v)
	out, ok = it.Next()
	if e, isErr := out.(error); isErr {
		return nil, false, p.why(ctx, e, on)
	}
	return out, ok, nil
}

// One runs the program on v and returns its only output: none, or more
// than one, is an error.
func (p *Program) One(ctx context.Context, v any, on string) (any, error) {
	ctx, done := watch(ctx, p.budget)
	defer done()
	it := p.code.RunWithContext(ctx, v)
	out, ok := it.Next()
	if !ok {
		return nil, fmt.Errorf("the expression yielded nothing")
	}
	if e, isErr := out.(error); isErr {
		return nil, p.why(ctx, e, on)
	}
	if more, ok := it.Next(); ok {
		if e, isErr := more.(error); isErr {
			return nil, p.why(ctx, e, on)
		}
		return nil, fmt.Errorf("the expression yielded more than one value")
	}
	return out, nil
}

// why turns an error out of the evaluation into what stopped it: the
// budget, the command's interrupt, or jq's own.
func (p *Program) why(ctx context.Context, err error, on string) error {
	if ctx.Err() == nil {
		return err
	}
	if how := context.Cause(ctx); errors.Is(how, errOverTime) || errors.Is(how, errOverHeap) {
		return &BudgetError{Flag: p.flag, Expr: p.expr, On: on, How: how.Error()}
	}
	return context.Cause(ctx)
}

// update finds an update operator (=, |=, +=, …) anywhere in a query.
func update(q *gojq.Query) (gojq.Operator, bool) {
	var found gojq.Operator
	ok := false
	walk(reflect.ValueOf(q), func(q *gojq.Query) {
		switch q.Op {
		case gojq.OpAssign, gojq.OpModify, gojq.OpUpdateAdd, gojq.OpUpdateSub, gojq.OpUpdateMul, gojq.OpUpdateDiv, gojq.OpUpdateMod, gojq.OpUpdateAlt:
			if !ok {
				found, ok = q.Op, true
			}
		}
	})
	return found, ok
}

var queryType = reflect.TypeFor[*gojq.Query]()

// walk calls f on every *gojq.Query under v: the AST's fields, followed
// by reflection, so a construct gojq adds is walked too.
func walk(v reflect.Value, f func(*gojq.Query)) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		if v.Type() == queryType {
			f(v.Interface().(*gojq.Query))
		}
		walk(v.Elem(), f)
	case reflect.Struct:
		for i := range v.NumField() {
			walk(v.Field(i), f)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			walk(v.Index(i), f)
		}
	}
}

// quote is an expression as it would be typed in a shell.
func quote(expr string) string { return "'" + strings.ReplaceAll(expr, "'", `'\''`) + "'" }
