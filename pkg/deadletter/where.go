package deadletter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/jq"
	"github.com/dlqctl/dlqctl/pkg/render"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/itchyny/gojq"
)

// Where is a compiled --where predicate: a jq expression over a row as
// `ls -o ndjson` prints it, which must yield true or false. It runs
// under jq's budget (pkg/jq) and the context it is bound to (Bind): a
// result that is not a boolean, an evaluation over its budget, or an
// interrupt is fatal (Err), and ends the read that runs it; an error of
// jq's own on a row (a field of the wrong type, say) leaves that row out,
// and is counted and said with the first such row.
type Where struct {
	prog *jq.Program
	ctx  context.Context
	// errored counts rows the expression failed on (they are not
	// selected); envelopes, rows whose data the predicate saw was an
	// encryption envelope, not the payload.
	errored, envelopes atomic.Int64
	firstErr           atomic.Pointer[string]
	fatal              atomic.Pointer[error]
	// paths are the row's fields the predicate reads (.data.version),
	// and whether any row evaluated had each (non-null); evaluated counts
	// the rows.
	paths     []wherePath
	evaluated atomic.Int64
}

// wherePath is a field a predicate reads, and what it is compared with.
type wherePath struct {
	names   []string
	text    string
	compare string // "< 4", when the path is compared with a constant
	present atomic.Bool
}

// CompileWhere compiles a --where expression. A syntax error says where,
// in at most three lines: the message, the expression, a caret under the
// place. An update (= for ==) is refused.
func CompileWhere(expr string) (*Where, error) {
	p, err := jq.Compile("--where", expr, jq.Predicate)
	if err != nil {
		return nil, err
	}
	w := &Where{prog: p, ctx: context.Background()}
	for _, rp := range rowPaths(p.Query()) {
		w.paths = append(w.paths, wherePath{names: rp.names, text: rp.text, compare: rp.compare})
	}
	return w, nil
}

// Bind makes the predicate run under ctx: cancelling it (SIGINT) stops
// an evaluation at once.
func (w *Where) Bind(ctx context.Context) { w.ctx = ctx }

// SetBudget changes each evaluation's budget (tests).
func (w *Where) SetBudget(b jq.Budget) { w.prog.SetBudget(b) }

// Test runs the predicate on a row's value (WhereValue). A fatal error
// (see Where) makes it, and every later test, false: the caller reads Err.
func (w *Where) Test(v map[string]any) bool {
	if w.fatal.Load() != nil {
		return false
	}
	on := "row " + fmt.Sprint(v["address"])
	w.evaluated.Add(1)
	for i := range w.paths {
		if p := &w.paths[i]; !p.present.Load() && lookupPath(v, p.names) != nil {
			p.present.Store(true)
		}
	}
	out, ok, err := w.prog.First(w.ctx, v, on)
	switch {
	case err != nil && w.ctx.Err() != nil:
		w.fail(w.ctx.Err()) // interrupted: the command says so (exit 130)
		return false
	case errors.Is(err, jq.ErrBudget):
		w.fail(errs.Usagef("%w", err))
		return false
	case err != nil:
		w.errored.Add(1)
		s := on + ": " + err.Error()
		w.firstErr.CompareAndSwap(nil, &s)
		return false
	}
	b, isBool := out.(bool)
	if !ok || !isBool {
		w.fail(errs.Usagef("--where %s gave %s on %s, not true or false: a predicate compares (==, <, …) or tests (has, startswith, …); it is refused rather than taken as a yes",
			quote(w.prog.Expr()), describe(out, ok), on))
		return false
	}
	return b
}

func (w *Where) fail(err error) {
	w.fatal.CompareAndSwap(nil, &err)
}

// Err is the fatal error the predicate met, if any: the read that runs
// it must end with it (exit 2; 130 when interrupted).
func (w *Where) Err() error {
	if w == nil {
		return nil
	}
	if p := w.fatal.Load(); p != nil {
		return *p
	}
	return nil
}

// Absent names the fields the predicate reads that were null on every
// row it ran on: a misspelt field, or a field this data does not have,
// which makes a comparison true or false for every row alike.
func (w *Where) Absent() []string {
	n := w.evaluated.Load()
	if w == nil || n == 0 {
		return nil
	}
	var out []string
	for i := range w.paths {
		p := &w.paths[i]
		if p.present.Load() || strings.HasSuffix(p.compare, " null") {
			continue // a comparison with null asks about null on purpose
		}
		s := fmt.Sprintf("no row has %s: it is null on all %d rows --where ran on", p.text, n)
		if p.compare != "" {
			s += fmt.Sprintf(", and null %s is %v in jq, so it decided every row alike", p.compare, nullCompares(p.compare))
		}
		out = append(out, s)
	}
	return out
}

// Reads reports whether the predicate reads a field of the row (.data,
// or a path under it) where its input is the row.
func (w *Where) Reads(field string) bool {
	for i := range w.paths {
		if w.paths[i].names[0] == field {
			return true
		}
	}
	return false
}

// Errored is how many rows the expression failed on, and the first error.
func (w *Where) Errored() (int, string) {
	s := ""
	if p := w.firstErr.Load(); p != nil {
		s = *p
	}
	return int(w.errored.Load()), s
}

// describe is a jq result as a person reads its type: "an object", "the
// number 8001", "nothing".
func describe(v any, ok bool) string {
	if !ok {
		return "nothing"
	}
	switch x := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return fmt.Sprintf("the string %q", render.Truncate(x, 40))
	}
	return fmt.Sprintf("the number %v", v)
}

// quote is an expression as it would be typed in a shell.
func quote(expr string) string { return "'" + strings.ReplaceAll(expr, "'", `'\''`) + "'" }

// Envelopes is how many rows the predicate saw with an encryption
// envelope for data (the released server's list does not decrypt).
func (w *Where) Envelopes() int { return int(w.envelopes.Load()) }

// FillWhereValue fills v (a map the caller reuses) with a row as --where
// sees it: the fields of ls -o ndjson, with data decoded.
func FillWhereValue(v map[string]any, r Row, now time.Time, decision, decisionBatch string) {
	env := r.Undecryptable()
	v["address"] = r.PartitionID + "/" + r.TransactionID
	v["partitionId"] = r.PartitionID
	v["transactionId"] = r.TransactionID
	v["messageId"] = r.ID
	v["queue"] = r.Queue
	v["partition"] = r.Partition
	v["consumerGroup"] = r.ConsumerGroup
	v["errorMessage"] = r.ErrorMessage
	v["errorClass"] = ClassID(r.ErrorMessage)
	v["retryCount"] = r.RetryCount
	v["failedAt"] = render.Timestamp(r.FailedAt)
	v["ageSeconds"] = int(render.SecondsSince(now, r.FailedAt)) // gojq takes int, not int64
	v["isEncrypted"] = r.IsEncrypted || env
	v["envelope"] = env
	if decision != "" {
		v["decision"] = decision
	}
	if decisionBatch != "" {
		v["decisionBatch"] = decisionBatch
	}
	if len(r.Data) > 0 {
		var d any
		if jsonv2.Unmarshal(r.Data, &d) == nil {
			v["data"] = d
		}
	}
}

// rowPath is a field of the row a predicate reads where its input is the
// row itself (not after a pipe, nor inside a function's argument).
type rowPath struct {
	names         []string
	text, compare string
}

// rowPaths are the dotted paths (.data.version) a query reads of its
// input, with the constant each is compared with, if any. What the query
// reads after a pipe or inside a function is read of something else (an
// element, a value), and is not looked at.
func rowPaths(q *gojq.Query) []rowPath {
	var out []rowPath
	var visit func(q *gojq.Query)
	visit = func(q *gojq.Query) {
		if q == nil {
			return
		}
		switch q.Op {
		case gojq.OpPipe:
			visit(q.Left) // the right side reads the left's output
			return
		case gojq.OpLt, gojq.OpLe, gojq.OpGt, gojq.OpGe, gojq.OpEq, gojq.OpNe:
			if p, ok := pathOf(q.Left.Term); ok {
				if c, ok := constant(q.Right.Term); ok {
					p.compare = q.Op.String() + " " + c
				}
				out = append(out, p)
			} else {
				visit(q.Left)
			}
			if p, ok := pathOf(q.Right.Term); ok {
				if c, ok := constant(q.Left.Term); ok {
					p.compare = flip(q.Op).String() + " " + c
				}
				out = append(out, p)
			} else {
				visit(q.Right)
			}
			return
		}
		if q.Left != nil || q.Right != nil {
			visit(q.Left)
			visit(q.Right)
			return
		}
		if q.Term == nil {
			return
		}
		if p, ok := pathOf(q.Term); ok {
			out = append(out, p)
			return
		}
		if q.Term.Type == gojq.TermTypeQuery && len(q.Term.SuffixList) == 0 {
			visit(q.Term.Query)
		}
		if q.Term.Type == gojq.TermTypeFunc && q.Term.Func != nil && (q.Term.Func.Name == "not" || q.Term.Func.Name == "select") {
			for _, a := range q.Term.Func.Args {
				visit(a)
			}
		}
	}
	visit(q)
	seen := map[string]bool{}
	kept := out[:0]
	for _, p := range out {
		if !seen[p.text+p.compare] {
			seen[p.text+p.compare] = true
			kept = append(kept, p)
		}
	}
	return kept
}

// pathOf reads a term that is a path of names only: .a, .a.b, .["a"].
func pathOf(t *gojq.Term) (rowPath, bool) {
	if t == nil || t.Type != gojq.TermTypeIndex || t.Index == nil {
		return rowPath{}, false
	}
	var names []string
	add := func(ix *gojq.Index) bool {
		switch {
		case ix == nil || ix.IsSlice || ix.Start != nil:
			return false
		case ix.Name != "":
			names = append(names, ix.Name)
		case ix.Str != nil && ix.Str.Queries == nil:
			names = append(names, ix.Str.Str)
		default:
			return false
		}
		return true
	}
	if !add(t.Index) {
		return rowPath{}, false
	}
	for _, s := range t.SuffixList {
		if s.Iter || !add(s.Index) {
			return rowPath{}, false
		}
	}
	return rowPath{names: names, text: "." + strings.Join(names, ".")}, true
}

// constant is a number or string term, as written.
func constant(t *gojq.Term) (string, bool) {
	switch {
	case t == nil || len(t.SuffixList) > 0:
	case t.Type == gojq.TermTypeNumber:
		return t.Number, true
	case t.Type == gojq.TermTypeNull:
		return "null", true
	case t.Type == gojq.TermTypeString && t.Str != nil && t.Str.Queries == nil:
		return fmt.Sprintf("%q", t.Str.Str), true
	}
	return "", false
}

// flip is the comparison with its sides swapped (4 > .x is .x < 4).
func flip(op gojq.Operator) gojq.Operator {
	switch op {
	case gojq.OpLt:
		return gojq.OpGt
	case gojq.OpGt:
		return gojq.OpLt
	case gojq.OpLe:
		return gojq.OpGe
	case gojq.OpGe:
		return gojq.OpLe
	}
	return op
}

// nullCompares is what null OP CONSTANT gives in jq: null sorts before
// every number and string.
func nullCompares(compare string) bool {
	op, _, _ := strings.Cut(compare, " ")
	switch op {
	case "<", "<=", "!=":
		return true
	}
	return false
}

// lookupPath is the value at a path of names in a row's value, nil when
// a step is missing.
func lookupPath(v map[string]any, names []string) any {
	var cur any = v
	for _, n := range names {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[n]
	}
	return cur
}
