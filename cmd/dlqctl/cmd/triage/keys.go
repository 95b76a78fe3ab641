package triage

import "charm.land/bubbles/v2/key"

// keys is the screen's key map; the help line and the ? screen are drawn
// from it, so what they say is what the keys do.
type keys struct {
	Up, Down, PageUp, PageDown, Top, Bottom key.Binding
	Open, Back                              key.Binding
	Hold, Replay, Discard                   key.Binding
	Filter, Group, Refresh, Help, Quit      key.Binding
	// In the forms.
	Next, Submit, Cancel, Override key.Binding
}

func newKeys() keys {
	b := func(help, desc string, ks ...string) key.Binding {
		return key.NewBinding(key.WithKeys(ks...), key.WithHelp(help, desc))
	}
	return keys{
		Up:       b("↑/k", "up", "up", "k"),
		Down:     b("↓/j", "down", "down", "j"),
		PageUp:   b("pgup", "page up", "pgup", "ctrl+b"),
		PageDown: b("pgdn", "page down", "pgdown", "ctrl+f", "space"),
		Top:      b("home", "first", "home"),
		Bottom:   b("end/G", "last", "end", "G"),
		Open:     b("enter", "open", "enter"),
		Back:     b("esc", "back", "esc", "backspace", "left"),
		Hold:     b("h", "hold", "h"),
		Replay:   b("r", "replay", "r"),
		Discard:  b("x", "discard", "x"),
		Filter:   b("/", "filter", "/"),
		Group:    b("g", "group by", "g"),
		Refresh:  b("R", "refresh", "R"),
		Help:     b("?", "help", "?"),
		Quit:     b("q", "quit", "q", "ctrl+c"),
		Next:     b("tab", "next field", "tab", "shift+tab"),
		Submit:   b("enter", "confirm", "enter"),
		Cancel:   b("esc", "cancel", "esc"),
		Override: b("ctrl+o", "override holds", "ctrl+o"),
	}
}

// screenHelp is the key map of one screen, for bubbles/help.
type screenHelp struct {
	short []key.Binding
	full  [][]key.Binding
}

func (h screenHelp) ShortHelp() []key.Binding  { return h.short }
func (h screenHelp) FullHelp() [][]key.Binding { return h.full }

// helpFor is the help of a screen.
func (k keys) helpFor(s screen) screenHelp {
	move := []key.Binding{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom}
	act := []key.Binding{k.Hold, k.Replay, k.Discard}
	other := []key.Binding{k.Filter, k.Group, k.Refresh, k.Help, k.Quit}
	switch s {
	case screenMessage:
		return screenHelp{
			short: []key.Binding{k.Back, k.Hold, k.Replay, k.Discard, k.Refresh, k.Help, k.Quit},
			full:  [][]key.Binding{{k.Up, k.Down, k.PageUp, k.PageDown}, {k.Back}, act, {k.Refresh, k.Help, k.Quit}},
		}
	case screenRows:
		return screenHelp{
			short: []key.Binding{k.Open, k.Back, k.Hold, k.Replay, k.Discard, k.Filter, k.Help, k.Quit},
			full:  [][]key.Binding{move, {k.Open, k.Back}, act, other},
		}
	}
	return screenHelp{
		short: []key.Binding{k.Open, k.Hold, k.Replay, k.Discard, k.Filter, k.Group, k.Refresh, k.Help, k.Quit},
		full:  [][]key.Binding{move, {k.Open, k.Back}, act, other},
	}
}

type keyBinding = key.Binding

// bind is a binding shown in a form's help line only.
func bind(keys, desc string) key.Binding {
	return key.NewBinding(key.WithKeys(keys), key.WithHelp(keys, desc))
}
