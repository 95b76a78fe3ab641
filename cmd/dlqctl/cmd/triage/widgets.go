package triage

import (
	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/textinput"
	"charm.land/bubbles/v2/viewport"
	tea "charm.land/bubbletea/v2"

	"github.com/charmbracelet/x/ansi"
)

func (m *model) newInput(prompt, value string) textinput.Model {
	ti := textinput.New()
	ti.Prompt = prompt
	ti.SetValue(value)
	// The width bounds what is shown (the input scrolls); the placeholder
	// needs one too, or only its first letter shows.
	ti.SetWidth(max(m.width-6-ansi.StringWidth(prompt), 20))
	s := textinput.DefaultDarkStyles()
	s.Cursor.Blink = false
	if !m.cfg.color {
		s.Focused = textinput.StyleState{}
		s.Blurred = textinput.StyleState{}
		s.Cursor.Color = nil
	}
	ti.SetStyles(s)
	return ti
}

// form is a modal's text fields, one in focus; tab goes round them. A
// field that opens pre-filled (hold's until 4h) is selected, as in any
// form: the first text typed replaces it, backspace clears it, and an
// arrow or home/end keeps it and edits from there.
type form struct {
	fields []*textinput.Model
	focus  int
	// picked: the field still holds its pre-filled value, untouched.
	picked map[int]bool
}

// start focuses field i.
func (f *form) start(i int) tea.Cmd {
	if f.picked == nil {
		f.picked = map[int]bool{}
		for j, in := range f.fields {
			if in.Value() != "" {
				f.pick(j, true)
			}
		}
	}
	f.focus = i
	return f.fields[i].Focus()
}

// pick marks field i selected or not, and shows it (reversed text).
func (f *form) pick(i int, on bool) {
	in := f.fields[i]
	if f.picked[i] == on {
		return
	}
	f.picked[i] = on
	st := in.Styles()
	st.Focused.Text = st.Focused.Text.Reverse(on)
	in.SetStyles(st)
}

// next moves the focus to the next field.
func (f *form) next() tea.Cmd {
	f.fields[f.focus].Blur()
	return f.start((f.focus + 1) % len(f.fields))
}

// update hands a message to the field in focus.
func (f *form) update(msg tea.Msg) tea.Cmd {
	in := f.fields[f.focus]
	if _, ok := msg.(tea.PasteMsg); ok && f.picked[f.focus] {
		f.pick(f.focus, false)
		in.SetValue("") // pasted text replaces the selection
	}
	if k, ok := msg.(tea.KeyPressMsg); ok && f.picked[f.focus] {
		f.pick(f.focus, false)
		switch {
		case k.Text != "":
			in.SetValue("") // typed text replaces the selection
		case k.Code == tea.KeyBackspace || k.Code == tea.KeyDelete:
			in.SetValue("")
			return nil
		}
	}
	var cmd tea.Cmd
	*in, cmd = in.Update(msg)
	return cmd
}

// cursor is a list position and the first row shown.
type cursor struct{ pos, top int }

func (c *cursor) move(d, n, h int) {
	c.pos += d
	c.fit(n, h)
}

func (c *cursor) fit(n, h int) {
	if n == 0 {
		c.pos, c.top = 0, 0
		return
	}
	c.pos = min(max(c.pos, 0), n-1)
	h = max(h, 1)
	if c.pos < c.top {
		c.top = c.pos
	}
	if c.pos >= c.top+h {
		c.top = c.pos - h + 1
	}
	c.top = min(max(c.top, 0), max(n-h, 0))
}

// pager is scrollable text: a viewport, with the text word-wrapped to its
// width (the viewport's own soft wrap cuts words in two).
type pager struct {
	vp        viewport.Model
	text      string
	wrappedAt int
}

func newPager() pager {
	vp := viewport.New()
	// h, r and x act; only the arrows, pages and ctrl keys scroll.
	vp.KeyMap.Left = key.NewBinding(key.WithKeys("ctrl+left"))
	vp.KeyMap.Right = key.NewBinding(key.WithKeys("ctrl+right"))
	vp.KeyMap.HalfPageUp = key.NewBinding(key.WithKeys("ctrl+u"))
	vp.KeyMap.HalfPageDown = key.NewBinding(key.WithKeys("ctrl+d"))
	vp.KeyMap.PageDown = key.NewBinding(key.WithKeys("pgdown", "space", "ctrl+f"))
	vp.KeyMap.PageUp = key.NewBinding(key.WithKeys("pgup", "ctrl+b"))
	return pager{vp: vp, wrappedAt: -1}
}

func (p *pager) set(text string) { p.text, p.wrappedAt = text, -1 }

func (p *pager) update(k tea.KeyPressMsg) { p.vp, _ = p.vp.Update(k) }

// lines are the w×h window of the text.
func (p *pager) lines(w, h int) []string {
	p.vp.SetWidth(w)
	p.vp.SetHeight(h)
	if p.wrappedAt != w {
		p.vp.SetContent(ansi.Wrap(p.text, w, ""))
		p.wrappedAt = w
	}
	return viewLines(p.vp.View(), w)
}

// more reports whether text is below the window.
func (p *pager) more() bool { return !p.vp.AtBottom() }
