package triage

import (
	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/inspect"
)

func (m *model) key(k tea.KeyPressMsg) tea.Cmd {
	if k.String() == "ctrl+c" {
		if m.run != nil {
			m.run.cancel()
			m.setStatus("Interrupting: calls in flight finish, then the batch can be resumed.")
			return nil
		}
		return tea.Quit
	}
	switch md := m.modal.(type) {
	case *helpModal:
		if key.Matches(k, m.keys.Help, m.keys.Back, m.keys.Quit) {
			m.modal = nil
		}
		return nil
	case *holdModal:
		return m.holdKey(md, k)
	case *planModal:
		return m.planKey(md, k)
	}
	if m.filtering {
		return m.filterKey(k)
	}
	return m.screenKey(k)
}

// screenKey handles a key on a screen with no modal open and no filter
// being typed.
func (m *model) screenKey(k tea.KeyPressMsg) tea.Cmd {
	switch {
	case key.Matches(k, m.keys.Quit):
		return tea.Quit
	case key.Matches(k, m.keys.Help):
		m.modal = &helpModal{}
	case key.Matches(k, m.keys.Refresh):
		m.setStatus("")
		cmd := m.reload()
		if m.screen == screenMessage {
			return tea.Batch(cmd, m.openMessage(m.msg.addr))
		}
		return cmd
	case key.Matches(k, m.keys.Filter) && m.screen != screenMessage:
		m.filtering = true
		m.input.SetValue(m.filterText())
		m.input.CursorEnd()
		return m.input.Focus()
	case key.Matches(k, m.keys.Group) && m.screen == screenClasses:
		m.nextGrouping()
	case key.Matches(k, m.keys.Hold):
		if t, ok := m.target(); ok {
			return m.openHold(t)
		}
	case key.Matches(k, m.keys.Replay), key.Matches(k, m.keys.Discard):
		if t, ok := m.target(); ok {
			verb := deadletter.ActReplay.Verb
			if key.Matches(k, m.keys.Discard) {
				verb = deadletter.ActDiscard.Verb
			}
			m.modal = &planModal{verb: verb, t: t}
			return m.plan(verb, t)
		}
	case key.Matches(k, m.keys.Open):
		return m.open()
	case key.Matches(k, m.keys.Back):
		m.back()
	default:
		m.move(k)
	}
	return nil
}

// nextGrouping groups the classes screen by the next grouping.
func (m *model) nextGrouping() {
	next := inspect.GroupBys[0]
	for i, b := range inspect.GroupBys {
		if b == m.by {
			next = inspect.GroupBys[(i+1)%len(inspect.GroupBys)]
		}
	}
	m.classFilter = ""
	m.regroup(next)
}

// openHold opens the hold form for a target.
func (m *model) openHold(t target) tea.Cmd {
	hm := &holdModal{t: t, until: m.newInput("until ", "24h"), why: m.newInput("why   ", ""), owner: m.newInput("owner ", "")}
	hm.until.Placeholder = "24h, 2d or an RFC 3339 time"
	hm.why.Placeholder = "recorded in the ledger"
	hm.owner.Placeholder = "the team that owns the follow-up (optional)"
	hm.form = form{fields: []*textinput.Model{&hm.until, &hm.why, &hm.owner}}
	m.modal = hm
	return hm.form.start(0)
}

// open drills down: from a class to its rows, from a row to its message.
func (m *model) open() tea.Cmd {
	switch m.screen {
	case screenClasses:
		if g, ok := m.currentGroup(); ok {
			m.screen, m.classKey, m.rowCur, m.rowFilter = screenRows, g.Key, cursor{}, ""
			m.refilter()
		}
	case screenRows:
		if r, ok := m.currentRow(); ok {
			return m.openMessage(r.Address())
		}
	}
	return nil
}

// back goes up a screen, or, on the classes, clears the filter.
func (m *model) back() {
	switch m.screen {
	case screenMessage:
		m.screen, m.msg = screenRows, nil
	case screenRows:
		m.screen = screenClasses
	default:
		m.classFilter = ""
		m.refilter()
	}
}

// move moves the cursor, or scrolls the message.
func (m *model) move(k tea.KeyPressMsg) {
	if m.screen == screenMessage {
		switch {
		case key.Matches(k, m.keys.Top):
			m.msg.page.vp.GotoTop()
		case key.Matches(k, m.keys.Bottom):
			m.msg.page.vp.GotoBottom()
		default:
			m.msg.page.update(k)
		}
		return
	}
	c, n := &m.classCur, len(m.classView)
	if m.screen == screenRows {
		c, n = &m.rowCur, len(m.rowView)
	}
	h := m.listHeight()
	switch {
	case key.Matches(k, m.keys.Up):
		c.move(-1, n, h)
	case key.Matches(k, m.keys.Down):
		c.move(1, n, h)
	case key.Matches(k, m.keys.PageUp):
		c.move(-h, n, h)
	case key.Matches(k, m.keys.PageDown):
		c.move(h, n, h)
	case key.Matches(k, m.keys.Top):
		c.move(-n, n, h)
	case key.Matches(k, m.keys.Bottom):
		c.move(n, n, h)
	}
}

func (m *model) filterText() string {
	if m.screen == screenRows {
		return m.rowFilter
	}
	return m.classFilter
}

func (m *model) filterKey(k tea.KeyPressMsg) tea.Cmd {
	switch k.String() {
	case "enter":
		m.filtering = false
		m.input.Blur()
		return nil
	case "esc":
		m.filtering = false
		m.input.Blur()
		m.input.SetValue("")
	}
	var cmd tea.Cmd
	if m.filtering {
		m.input, cmd = m.input.Update(k)
	}
	if m.screen == screenRows {
		m.rowFilter = m.input.Value()
	} else {
		m.classFilter = m.input.Value()
	}
	m.refilter()
	return cmd
}

func (m *model) openMessage(addr deadletter.Address) tea.Cmd {
	m.msg = &message{addr: addr, loading: true, page: newPager()}
	m.screen = screenMessage
	m.layout()
	return func() tea.Msg {
		res, err := m.session.Show(m.ctx, addr)
		return showMsg{addr: addr, res: res, err: err}
	}
}
