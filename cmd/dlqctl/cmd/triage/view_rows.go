package triage

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// groupCounts are a group's figures that take a pass over its rows:
// counted when first drawn after the rows or the decisions changed, and
// again once a second old (a hold ends, a decision passes its SLO).
type groupCounts struct {
	at              time.Time
	undecided, held int
	heldBy          []string
	haveUndecided   bool
	haveHeld        bool
}

func (m *model) countsOf(key string) *groupCounts {
	if m.counts == nil {
		m.counts = map[string]*groupCounts{}
	}
	now := m.cfg.now()
	c := m.counts[key]
	if c == nil || now.Sub(c.at) > time.Second || now.Before(c.at) {
		c = &groupCounts{at: now}
		m.counts[key] = c
	}
	return c
}

// undecided counts a group's rows no active decision covers.
func (m *model) undecided(key string) int {
	c := m.countsOf(key)
	if c.haveUndecided {
		return c.undecided
	}
	now := m.cfg.now()
	// Rows without a decision are undecided; the others are looked at.
	n := len(m.members[key]) - len(m.withDecision[key])
	m.rows.EachOf(m.withDecision[key], func(_ int, r deadletter.Row) bool {
		if d, ok := m.dec[r.Address()]; inspect.Undecided(d, ok, r, now, m.session.TriageSLO(r.Queue, r.ConsumerGroup)) {
			n++
		}
		return true
	})
	c.undecided, c.haveUndecided = n, true
	return n
}

// held says how many of a group's rows are under an active hold, and
// who the holds are with (owners, else who recorded them).
func (m *model) held(key string) (int, []string) {
	c := m.countsOf(key)
	if !c.haveHeld {
		c.held, c.heldBy = m.countHeld(key)
		c.haveHeld = true
	}
	return c.held, c.heldBy
}

func (m *model) countHeld(key string) (int, []string) {
	if len(m.dec) == 0 {
		return 0, nil
	}
	now := m.cfg.now()
	n := 0
	var who []string
	m.rows.EachOf(m.withDecision[key], func(_ int, r deadletter.Row) bool {
		d, ok := m.dec[r.Address()]
		if !ok || !d.Holds(r.FailedAt, now) {
			return true
		}
		n++
		if h := d.Holder(); !slices.Contains(who, h) {
			who = append(who, h)
		}
		return true
	})
	sort.Strings(who)
	return n, who
}

func (m *model) rowsBody(w, h int) []string {
	var head string
	g, ok := m.grouper.Lookup(m.classKey)
	if ok && m.by == "error" {
		head = fmt.Sprintf("class %s · %s · %s", g.Key, render.Clean(g.Pattern), render.Plural(g.Count, "row", "rows"))
	} else if ok {
		head = fmt.Sprintf("%s %s · %s", m.by, render.Clean(g.Key), render.Plural(g.Count, "row", "rows"))
	}
	if n, who := m.held(m.classKey); ok && n > 0 {
		head += fmt.Sprintf(" · %d held by %s", n, render.Clean(strings.Join(who, ", ")))
	}
	if !ok {
		head = "gone: no dead letter is in " + render.Clean(m.classKey) + " now"
	}
	out := []string{fit(m.st.header.Render(head), w)}
	// Names get the room they need (up to a quarter of the width each);
	// the error text takes the rest.
	cols := []column{{"AGE", 6, false}, {"QUEUE", min(max(m.rowWidths[0], 5), max(w/4, 10)), false}, {"PARTITION", 9, false},
		{"GROUP", min(max(m.rowWidths[1], 5), max(w/5, 10)), false}, {"ERROR", 0, false}, {"DECISION", 14, false}}
	now := m.cfg.now()
	cellOf := func(i, c int) string {
		r := m.rows.At(m.rowView[i])
		switch c {
		case 0:
			return render.AgeSince(now, r.FailedAt)
		case 1:
			return render.Clean(r.Queue)
		case 2:
			return render.Clean(r.Partition)
		case 3:
			return render.Clean(deadletter.GroupLabel(r.ConsumerGroup))
		case 4:
			return present.ErrorText(render.Clean(r.ErrorMessage))
		}
		if d, ok := m.dec[r.Address()]; ok {
			if l := inspect.DecisionLabel(d, r, now, m.session.TriageSLO(r.Queue, r.ConsumerGroup)); l != "" {
				return l
			}
		}
		return "-"
	}
	paint := func(i, c int, s string) string {
		if c != 0 {
			return s
		}
		r := m.rows.At(m.rowView[i])
		return m.pal.Age(s, now.Sub(r.FailedAt), m.session.MaxAge(r.Queue, r.ConsumerGroup))
	}
	lh := m.listHeight()
	out = append(out, m.table(cols, w, len(m.rowView), m.rowCur, lh, cellOf, paint)...)
	if len(m.rowView) == 0 && m.rowFilter != "" {
		out[len(out)-lh] = fit("  Nothing matches the filter.", w)
	}
	return pad(out, w, h)
}

func (m *model) messageBody(w, h int) []string {
	head := m.st.header.Render("message " + render.Clean(m.msg.addr.String()))
	if m.msg.loading {
		return pad([]string{fit(head, w), fit(m.st.faint.Render("  reading…"), w)}, w, h)
	}
	text := m.msg.page.lines(w, h-1)
	if m.msg.page.more() {
		head += m.st.faint.Render("  ↓ more")
	}
	return pad(append([]string{fit(head, w)}, text...), w, h)
}
