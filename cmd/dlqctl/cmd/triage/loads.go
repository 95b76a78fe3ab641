package triage

import (
	"context"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// reload reads everything again: the rows, the decisions, the scopes.
func (m *model) reload() tea.Cmd {
	if m.cancelLoad != nil {
		m.cancelLoad()
	}
	m.gen++
	m.decGen++
	ctx, cancel := context.WithCancel(m.ctx)
	m.cancelLoad = cancel
	if m.rows != nil {
		m.rows.Close()
	}
	m.rows, m.members, m.withDecision, m.grouper, m.groups, m.grouped = newRowStore(), map[string][]int{}, map[string][]int{}, inspect.NewGrouper(m.by), nil, 0
	m.dec, m.counts = map[deadletter.Address]ledger.Decision{}, nil
	m.loading, m.loadErr = true, nil
	m.refilter()
	return tea.Batch(m.streamRows(ctx, m.gen), m.loadScopes(m.decGen))
}

func (m *model) streamRows(ctx context.Context, gen int) tea.Cmd {
	ch := make(chan rowsMsg, 2)
	go func() {
		defer close(ch)
		send := func(msg rowsMsg) bool {
			select {
			case ch <- msg:
				return true
			case <-ctx.Done():
				return false
			}
		}
		// Each row's decision is looked up as it passes, and handed over
		// with it (the screen keeps it; the lookup forgets it).
		decs := m.session.Decisions()
		msgFor := func(rows []deadletter.Row) rowsMsg {
			msg := rowsMsg{gen: gen, rows: rows, dec: map[deadletter.Address]ledger.Decision{}, decErr: decs.Err()}
			for _, r := range rows {
				if d, ok := decs.Take(r.Address()); ok {
					msg.dec[r.Address()] = d
				}
			}
			return msg
		}
		batch, size := make([]deadletter.Row, 0, firstChunk), firstChunk
		listing, err := m.session.List(ctx, m.cfg.sel, decs)
		if err != nil {
			send(rowsMsg{gen: gen, done: true, err: err})
			return
		}
		for r, err := range listing.Rows() {
			r.Data = nil // the screen keeps rows without payloads
			if err != nil {
				msg := msgFor(batch)
				msg.done, msg.err = true, err
				send(msg)
				return
			}
			if batch = append(batch, r); len(batch) == size {
				size = chunk
				if !send(msgFor(batch)) {
					return
				}
				batch = make([]deadletter.Row, 0, chunk)
			}
		}
		msg := msgFor(batch)
		msg.done = true
		send(msg)
	}()
	var next tea.Cmd
	next = func() tea.Msg {
		msg, ok := <-ch
		if !ok {
			return nil
		}
		msg.next = next
		return msg
	}
	return next
}

// lookupDecisions reads the decisions of some addresses again (after a
// decision on them); the answer is merged into what the screen has.
func (m *model) lookupDecisions(gen int, addrs []deadletter.Address) tea.Cmd {
	return func() tea.Msg {
		dec, err := m.session.DecisionsFor(m.ctx, addrs)
		return decisionsMsg{gen: gen, dec: dec, err: err}
	}
}

func (m *model) loadScopes(gen int) tea.Cmd {
	var queues []string
	if m.cfg.base.Queue != "" {
		queues = []string{m.cfg.base.Queue}
	}
	return func() tea.Msg {
		res, err := m.session.Check(m.ctx, queues)
		return scopesMsg{gen: gen, res: res, err: err}
	}
}

// addRows counts arriving rows into their groups; the groups' figures
// are made again when enough has come (see grouped) or the load is done.
func (m *model) addRows(rows []deadletter.Row, done bool) {
	for _, r := range rows {
		i := m.rows.Add(r)
		m.member(m.grouper.Add(r), i, r.Address())
	}
	n := m.rows.Len()
	if done || m.groups == nil || n-m.grouped >= max(chunk, m.grouped/8) || time.Since(m.groupedAt) >= time.Second {
		m.makeGroups()
	}
}

// member files row i of group k.
func (m *model) member(k string, i int, a deadletter.Address) {
	m.members[k] = append(m.members[k], i)
	if _, ok := m.dec[a]; ok {
		m.withDecision[k] = append(m.withDecision[k], i)
	}
}

// makeGroups makes the groups' figures from what is loaded.
func (m *model) makeGroups() {
	m.groups, m.counts = m.grouper.Groups(), nil
	m.grouped, m.groupedAt, m.made = m.rows.Len(), time.Now(), m.made+1
	m.refilter()
}

// fileDecisions files again which members have a decision, after
// decisions were read again.
func (m *model) fileDecisions() {
	m.withDecision = map[string][]int{}
	for k, idx := range m.members {
		m.rows.EachOf(idx, func(i int, r deadletter.Row) bool {
			if _, ok := m.dec[r.Address()]; ok {
				m.withDecision[k] = append(m.withDecision[k], i)
			}
			return true
		})
	}
}

// regroup groups the loaded rows another way.
func (m *model) regroup(by string) {
	m.by = by
	m.grouper, m.members, m.withDecision = inspect.NewGrouper(by), map[string][]int{}, map[string][]int{}
	m.rows.Each(func(i int, r deadletter.Row) bool {
		m.member(m.grouper.Add(r), i, r.Address())
		return true
	})
	m.classCur = cursor{}
	m.makeGroups()
}

// whereMatch is the row filter "?EXPR": a jq predicate over each row as
// dlq ls -o ndjson prints it, without data: the screen does not hold
// payloads, and says so of an expression that reads .data. An expression
// that does not compile keeps every row and says why; one that stops
// (not true or false, over jq's budget) keeps none and says why.
func (m *model) whereMatch(expr string) func(deadletter.Row) bool {
	if expr != m.rowWhereText {
		m.rowWhereText = expr
		m.rowWhere, m.whereErr = nil, ""
		if strings.TrimSpace(expr) != "" {
			w, err := deadletter.CompileWhere(expr)
			switch {
			case err != nil:
				m.whereErr = strings.SplitN(err.Error(), "\n", 2)[0]
			case w.Reads("data"):
				m.whereErr = "the screen holds no payloads: .data is null here (dlq ls --where sees them)"
			}
			if w != nil {
				w.Bind(m.ctx)
			}
			m.rowWhere = w
		}
	}
	if m.rowWhere == nil {
		return func(deadletter.Row) bool { return true }
	}
	now := m.cfg.now()
	v := map[string]any{}
	return func(r deadletter.Row) bool {
		label, batch := "", ""
		if d, ok := m.dec[r.Address()]; ok {
			label, batch = inspect.DecisionLabel(d, r, now, m.session.TriageSLO(r.Queue, r.ConsumerGroup)), d.BatchID
		}
		clear(v)
		deadletter.FillWhereValue(v, r, now, label, batch)
		ok := m.rowWhere.Test(v)
		if err := m.rowWhere.Err(); err != nil && m.whereErr == "" {
			m.whereErr = strings.SplitN(err.Error(), "\n", 2)[0]
		}
		return ok
	}
}

// refilter recomputes what the lists show, keeping the cursor on the
// same group when it is still there.
func (m *model) refilter() {
	keep := ""
	if i := m.classCur.pos; i < len(m.classView) && m.classView[i] < len(m.groups) {
		keep = m.groups[m.classView[i]].Key
	}
	m.classView = m.classView[:0]
	f := strings.ToLower(m.classFilter)
	keepClass := func(i int) bool {
		g := m.groups[i]
		return f == "" || strings.Contains(strings.ToLower(g.Key+" "+g.Pattern+" "+strings.Join(g.Queues, ",")), f)
	}
	if expr, ok := strings.CutPrefix(m.classFilter, "?"); ok {
		// A jq predicate: the classes that have a row it is true for.
		match := m.whereMatch(expr)
		keepClass = func(i int) bool {
			found := false
			m.rows.EachOf(m.members[m.groups[i].Key], func(_ int, r deadletter.Row) bool {
				found = match(r)
				return !found
			})
			return found
		}
	}
	for i := range m.groups {
		if keepClass(i) {
			m.classView = append(m.classView, i)
		}
	}
	for vi, gi := range m.classView {
		if m.groups[gi].Key == keep {
			m.classCur.pos = vi
		}
	}
	m.classCur.fit(len(m.classView), m.listHeight())

	m.rowView, m.rowWidths = m.rowView[:0], [2]int{}
	f = strings.ToLower(m.rowFilter)
	match := func(r deadletter.Row) bool {
		return f == "" || strings.Contains(strings.ToLower(r.Queue+" "+r.Partition+" "+r.ConsumerGroup+" "+r.ErrorMessage+" "+r.TransactionID+" "+r.PartitionID), f)
	}
	if expr, ok := strings.CutPrefix(m.rowFilter, "?"); ok {
		match = m.whereMatch(expr)
	}
	m.rows.EachOf(m.members[m.classKey], func(i int, r deadletter.Row) bool {
		if match(r) {
			m.rowView = append(m.rowView, i)
			m.rowWidths[0] = max(m.rowWidths[0], len(r.Queue))
			m.rowWidths[1] = max(m.rowWidths[1], len(deadletter.GroupLabel(r.ConsumerGroup)))
		}
		return true
	})
	m.rowCur.fit(len(m.rowView), m.listHeight())
}
