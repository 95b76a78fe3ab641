package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Topology is what the broker says of its queues and their consumer
// groups: the queue list (/api/v1/resources/queues) and the
// consumer-groups route, whichever it has.
type Topology struct {
	// Groups lists each queue's consumer groups, by queue name; a queue
	// the broker lists without naming groups has none here.
	Groups map[string][]string
	// Listed: the broker listed its queues. A broker with neither route
	// says nothing, and names cannot be checked against it.
	Listed bool
}

// Queues are the queue names, sorted.
func (t *Topology) Queues() []string {
	out := make([]string, 0, len(t.Groups))
	for q := range t.Groups {
		out = append(out, q)
	}
	sort.Strings(out)
	return out
}

// Has reports whether the broker listed queue q.
func (t *Topology) Has(q string) bool {
	_, ok := t.Groups[q]
	return ok
}

// Topology reads the broker's queue list and its consumer groups. A
// broker without the routes answers an empty, unlisted topology; a
// refused token is an error.
func (c *Client) Topology(ctx context.Context) (*Topology, error) {
	t := &Topology{Groups: map[string][]string{}}
	add := func(q, g string) {
		gs := t.Groups[q]
		if g != "" && !slices.Contains(gs, g) {
			gs = append(gs, g)
		}
		t.Groups[q] = gs
	}
	qs, err := c.Queues(ctx)
	switch {
	case errors.Is(err, ErrUnauthorized), errors.Is(err, ErrForbidden):
		return nil, err
	case err == nil:
		t.Listed = len(qs) > 0
		for _, q := range qs {
			add(q.Name, "")
			for _, g := range q.ConsumerGroups {
				add(q.Name, g)
			}
		}
	}
	cgs, err := c.ConsumerGroups(ctx)
	switch {
	case errors.Is(err, ErrUnauthorized), errors.Is(err, ErrForbidden):
		return nil, err
	case err == nil:
		for _, g := range cgs {
			add(g.Queue, g.Name)
		}
		if len(cgs) > 0 {
			t.Listed = true
		}
	}
	for q := range t.Groups {
		slices.Sort(t.Groups[q])
	}
	return t, nil
}

// ErrUnknownName: a --queue or --cg names nothing the broker has.
var ErrUnknownName = errors.New("unknown name")

// UnknownNameError is a queue or consumer group the broker does not
// have, with the names it does have that are closest.
type UnknownNameError struct {
	What    string // "queue" or "consumer group"
	Name    string
	Queue   string // for a group: the queue it was looked for in
	Suggest []string
	Known   []string
}

func (e *UnknownNameError) Error() string {
	where := "the broker"
	if e.Queue != "" {
		where = "queue " + e.Queue
	}
	msg := fmt.Sprintf("no %s %q on %s", e.What, e.Name, where)
	switch {
	case len(e.Suggest) > 0:
		msg += " (did you mean " + strings.Join(e.Suggest, " or ") + "?)"
	case len(e.Known) > 0:
		known := e.Known
		if len(known) > 10 {
			known = append(slices.Clip(known[:10]), fmt.Sprintf("… %d more", len(e.Known)-10))
		}
		msg += "; it has " + strings.Join(known, ", ")
	}
	return msg
}

func (e *UnknownNameError) Unwrap() error { return ErrUnknownName }

// CheckNames makes sure each queue, and the consumer group (of those
// queues, or of any when none is named), is one the broker has: listed
// by it, or holding dead letters. A name it does not have is an
// *UnknownNameError. Against a broker that lists nothing, a name with no
// dead letters cannot be told from a typo and passes.
func (c *Client) CheckNames(ctx context.Context, topo *Topology, queues []string, group string) error {
	for _, q := range queues {
		if q == "" || topo.Has(q) {
			continue
		}
		if found, err := c.hasRows(ctx, ListQuery{Queue: q}, func(r deadletter.Row) bool { return r.Queue == q }); err != nil || found {
			return err
		}
		if !topo.Listed {
			continue
		}
		return &UnknownNameError{What: "queue", Name: q, Suggest: Closest(q, topo.Queues()), Known: topo.Queues()}
	}
	if group == "" {
		return nil
	}
	var known []string
	scope := slices.DeleteFunc(slices.Clone(queues), func(q string) bool { return q == "" })
	if len(scope) == 0 {
		scope = topo.Queues()
	}
	for _, q := range scope {
		for _, g := range topo.Groups[q] {
			if g == group {
				return nil
			}
			if !slices.Contains(known, g) {
				known = append(known, g)
			}
		}
	}
	q := ""
	if len(queues) == 1 {
		q = queues[0]
	}
	lq := ListQuery{Queue: q, ConsumerGroup: group}
	if found, err := c.hasRows(ctx, lq, func(r deadletter.Row) bool { return r.ConsumerGroup == group && (q == "" || r.Queue == q) }); err != nil || found {
		return err
	}
	if !topo.Listed || len(known) == 0 {
		return nil
	}
	slices.Sort(known)
	return &UnknownNameError{What: "consumer group", Name: group, Queue: q, Suggest: Closest(group, known), Known: known}
}

// hasRows reports whether the list holds a row that match accepts,
// reading no further than the first one (a broker that answers in one
// body is not read whole).
func (c *Client) hasRows(ctx context.Context, q ListQuery, match func(deadletter.Row) bool) (bool, error) {
	q.Limit, q.NoData = 1, true
	found := false
	_, err := c.ListEach(ctx, q, func(r deadletter.Row) bool {
		found = match(r)
		return !found
	})
	return found, err
}

// Closest returns the names nearest to name: the same but for case,
// then those within a small edit distance, then those that contain it or
// that it contains. At most three.
func Closest(name string, names []string) []string {
	type cand struct {
		s string
		d int
	}
	var cs []cand
	low := strings.ToLower(name)
	for _, n := range names {
		ln := strings.ToLower(n)
		d := editDistance(low, ln)
		switch {
		case ln == low:
			d = 0
		case d <= max(2, len(name)/3):
		case len(low) >= 3 && (strings.Contains(ln, low) || strings.Contains(low, ln)):
			d = 3
		default:
			continue
		}
		cs = append(cs, cand{n, d})
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d || cs[i].d == cs[j].d && cs[i].s < cs[j].s })
	var out []string
	for _, c := range cs {
		if len(out) == 3 {
			break
		}
		out = append(out, c.s)
	}
	return out
}

// editDistance is the Levenshtein distance between a and b, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
