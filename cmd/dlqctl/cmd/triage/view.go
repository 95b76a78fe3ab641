package triage

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/gate"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// styles are attributes only (reverse, bold, faint), which NO_COLOR
// keeps; colours come from the palette, which it turns off.
type styles struct {
	bar, selected, header, faint lipgloss.Style
}

func newStyles() styles {
	return styles{
		bar:      lipgloss.NewStyle().Reverse(true),
		selected: lipgloss.NewStyle().Reverse(true),
		header:   lipgloss.NewStyle().Bold(true),
		faint:    lipgloss.NewStyle().Faint(true),
	}
}

func (m *model) View() tea.View {
	v := tea.NewView(m.render())
	v.AltScreen = true
	v.WindowTitle = "dlqctl triage"
	return v
}

// The frame: a title bar, the body, a status line and the key help.
const chrome = 3

func (m *model) bodyHeight() int { return max(m.height-chrome, 3) }

// render draws the whole screen: exactly height lines of width cells.
func (m *model) render() string {
	if m.width == 0 || m.height == 0 {
		return ""
	}
	w := m.width
	lines := make([]string, 0, m.height)
	lines = append(lines, m.st.bar.Render(fit(m.title(), w)))
	body := m.body(w, m.bodyHeight())
	lines = append(lines, body...)
	lines = append(lines, m.statusLine(w), fit(m.helpLine(w), w))
	return strings.Join(lines[:min(len(lines), m.height)], "\n")
}

// title is the bar on top; the server goes last, where a narrow
// terminal cuts it first.
func (m *model) title() string {
	n := m.rows.Len()
	count := render.Plural(n, "dead letter", "dead letters")
	if m.loading {
		count = "loading… " + commas(n) + " rows"
	}
	what := map[string][2]string{"error": {"class", "classes"}, "queue": {"queue", "queues"}, "cg": {"group", "groups"}, "partition": {"partition", "partitions"}}[m.by]
	parts := []string{"triage", count, render.Plural(len(m.groups), what[0], what[1]), "by " + m.by}
	if m.loadErr != nil && n == 0 {
		parts = []string{"triage", "the broker cannot be read"}
	}
	if f := m.filterText(); f != "" && m.screen != screenMessage {
		parts = append(parts, "filter: "+render.Clean(f))
	}
	return " " + strings.Join(append(parts, render.Clean(m.session.Server())), " · ")
}

func (m *model) statusLine(w int) string {
	switch {
	case m.filtering && m.whereErr != "" && strings.HasPrefix(m.filterText(), "?"):
		return fit(m.input.View()+"  "+m.pal.Red(render.Clean(m.whereErr)), w)
	case m.filtering:
		return fit(m.input.View(), w)
	case m.status != "" && m.statusIsError:
		return fit(m.pal.Red("error: ")+m.status, w)
	case m.status != "":
		return fit(m.status, w)
	case m.filterText() != "" && m.screen != screenMessage:
		return fit(m.st.faint.Render("filter: "+render.Clean(m.filterText())+"  (/ edits, esc clears)"), w)
	}
	return fit("", w)
}

func (m *model) helpLine(w int) string {
	m.help.SetWidth(w)
	switch md := m.modal.(type) {
	case *helpModal:
		return m.help.ShortHelpView([]keyBinding{m.keys.Cancel})
	case *holdModal:
		return m.help.ShortHelpView([]keyBinding{m.keys.Next, bind("enter", "record"), m.keys.Cancel})
	case *planModal:
		switch md.phase {
		case planning:
			return m.help.ShortHelpView([]keyBinding{m.keys.Cancel})
		case confirming:
			b := []keyBinding{m.keys.Next, bind("↑/↓", "scroll plan"), bind("enter", "run"), m.keys.Cancel}
			if md.planned.Held() > 0 {
				b = append(b, m.keys.Override)
			}
			return m.help.ShortHelpView(b)
		case executing:
			return m.help.ShortHelpView([]keyBinding{bind("ctrl+c/esc", "interrupt")})
		}
		return m.help.ShortHelpView([]keyBinding{bind("enter/esc", "close")})
	}
	if m.filtering {
		return m.help.ShortHelpView([]keyBinding{bind("enter", "keep filter"), bind("esc", "clear")})
	}
	return m.help.View(m.keys.helpFor(m.screen))
}

// body is the screen under the title: the list or the message, or the
// modal in its place.
func (m *model) body(w, h int) []string {
	switch md := m.modal.(type) {
	case *helpModal:
		return m.helpBody(w, h)
	case *holdModal:
		return m.holdBody(md, w, h)
	case *planModal:
		return m.planBody(md, w, h)
	}
	switch m.screen {
	case screenRows:
		return m.rowsBody(w, h)
	case screenMessage:
		return m.messageBody(w, h)
	}
	return m.classesBody(w, h)
}

// scopeRows are the scopes shown above the classes, breaches first, and
// how many more there are.
func (m *model) scopeRows() ([]gate.Scope, int) {
	if m.scopes == nil {
		return nil, 0
	}
	s := append([]gate.Scope(nil), m.scopes.Scopes...)
	sort.SliceStable(s, func(i, j int) bool { return len(s[i].Breaches) > 0 && len(s[j].Breaches) == 0 })
	room := min(max(m.bodyHeight()/4, 1), 6)
	if len(s) > room {
		return s[:room-1], len(s) - (room - 1)
	}
	return s, 0
}

// scopeLines are the lines the scopes take: a heading, the scopes, and
// a line for the rest.
func (m *model) scopeLines() int {
	shown, more := m.scopeRows()
	n := 1 + len(shown)
	if more > 0 || m.scopes == nil {
		n++
	}
	return n
}

func (m *model) scopesBlock(w int) []string {
	var out []string
	switch {
	case m.scopesErr != nil:
		return []string{fit(m.st.header.Render("SCOPES"), w), fit(m.pal.Red("check failed: ")+render.Clean(oneLine(m.scopesErr.Error())), w)}
	case m.scopes == nil:
		return []string{fit(m.st.header.Render("SCOPES"), w), fit(m.st.faint.Render("  checking…"), w)}
	}
	breached := 0
	for _, s := range m.scopes.Scopes {
		if len(s.Breaches) > 0 {
			breached++
		}
	}
	shown, more := m.scopeRows()
	names := make([]string, len(shown))
	nameW := 8
	for i, s := range shown {
		names[i] = s.Queue
		if s.ConsumerGroup != "" {
			names[i] += "/" + deadletter.GroupLabel(s.ConsumerGroup)
		}
		names[i] = render.Clean(names[i])
		nameW = min(max(nameW, ansi.StringWidth(names[i])), 26)
	}
	head := fmt.Sprintf("%s %5s  %-6s  CHECK: %d of %d in breach", cell("SCOPE", nameW+3, false), "DEAD", "OLDEST", breached, len(m.scopes.Scopes))
	out = append(out, fit(m.st.header.Render(head), w))
	for i, s := range shown {
		mark, verdict := m.pal.Green("✓"), m.pal.Green("ok")
		if len(s.Breaches) > 0 {
			mark, verdict = m.pal.Red("✗"), m.pal.Red(breachWords(s))
		}
		oldest := "-"
		if s.Depth > 0 {
			oldest = render.AgeOfSeconds(s.OldestAgeSeconds)
		}
		if s.OldestHeld {
			verdict += m.st.faint.Render(" (oldest on hold)")
		}
		line := fmt.Sprintf(" %s %s %5d  %-6s  %s", mark, cell(names[i], nameW, false), s.Depth, oldest, verdict)
		out = append(out, fit(line, w))
	}
	if more > 0 {
		out = append(out, fit(m.st.faint.Render(fmt.Sprintf("   … %d more scopes: dlqctl dlq check", more)), w))
	}
	return out
}

// breachWords says a scope's breaches in a few words (dlq check says
// them in full).
func breachWords(s gate.Scope) string {
	var w []string
	n := len(s.Breaches)
	if s.UndecidedPastSLO > 0 {
		w = append(w, fmt.Sprintf("%d undecided > SLO", s.UndecidedPastSLO))
		n--
	}
	if s.VanishedUndecided > 0 {
		w = append(w, fmt.Sprintf("%d vanished undecided", s.VanishedUndecided))
		n--
	}
	if n > 0 {
		age := "over max-age"
		switch {
		case s.DefaultedMaxAge:
			age = "no policy: max-age 0"
		case s.MaxAgeSeconds != nil:
			age = "over max-age " + render.AgeOfSeconds(*s.MaxAgeSeconds)
		}
		w = append([]string{age}, w...)
	}
	return strings.Join(w, ", ")
}

// listHeight is how many list rows the screen shows.
func (m *model) listHeight() int {
	h := m.bodyHeight() - 1 // the column heading
	switch m.screen {
	case screenClasses:
		h -= m.scopeLines() + 1 // and a blank line under them
	case screenRows:
		h-- // the group's heading
	}
	return max(h, 1)
}

func (m *model) classesBody(w, h int) []string {
	out := m.scopesBlock(w)
	out = append(out, fit("", w))
	lh := m.listHeight()
	var cols []column
	if m.by == "error" {
		qw := 6
		for _, g := range m.groups {
			qw = max(qw, ansi.StringWidth(render.Clean(strings.Join(g.Queues, ","))))
		}
		cols = []column{{"CLASS", 8, false}, {"ROWS", 5, true}, {"MSGS", 5, true}, {"UNDEC", 5, true}, {"OLDEST", 6, false}, {"NEWEST", 6, false},
			{"QUEUES", min(qw, max(w/4, 12)), false}, {"ERROR", 0, false}}
	} else {
		cols = []column{{strings.ToUpper(map[string]string{"queue": "queue", "cg": "queue/group", "partition": "queue/partition"}[m.by]), 26, false},
			{"ROWS", 5, true}, {"MSGS", 5, true}, {"UNDEC", 5, true}, {"OLDEST", 6, false}, {"NEWEST", 6, false}, {"EXAMPLE", 0, false}}
	}
	now := m.cfg.now()
	cellOf := func(i, c int) string {
		g := m.groups[m.classView[i]]
		switch c {
		case 0:
			if m.by == "cg" {
				q, grp, _ := strings.Cut(g.Key, "/")
				return render.Clean(q + "/" + deadletter.GroupLabel(grp))
			}
			return render.Clean(g.Key)
		case 1:
			return strconv.Itoa(g.Count)
		case 2:
			return strconv.Itoa(g.Messages)
		case 3:
			return strconv.Itoa(m.undecided(g.Key))
		case 4:
			return render.AgeSince(now, g.Oldest)
		case 5:
			return render.AgeSince(now, g.Newest)
		}
		if m.by == "error" {
			if c == 6 {
				return render.Clean(strings.Join(g.Queues, ","))
			}
			return render.Clean(g.Pattern)
		}
		return render.Clean(g.Example)
	}
	paint := func(i, c int, s string) string {
		if c != 4 {
			return s
		}
		g := m.groups[m.classView[i]]
		return m.pal.Age(s, now.Sub(g.Oldest), m.session.MaxAge(g.OldestQueue, g.OldestGroup))
	}
	out = append(out, m.table(cols, w, len(m.classView), m.classCur, lh, cellOf, paint)...)
	if len(m.classView) == 0 {
		msg := "No dead letters match."
		switch {
		case m.loadErr != nil:
			// The whole cause, over as many lines as it takes: the list is
			// empty because the DLQ could not be read, not because it is.
			lines := strings.Split(ansi.Wrap("Cannot read the DLQ: "+render.Clean(oneLine(m.loadErr.Error()))+" (R reads again)", w-4, ""), "\n")
			for i, l := range lines {
				if at := len(out) - lh + i; at < len(out) {
					out[at] = fit("  "+l, w)
				}
			}
			return pad(out, w, h)
		case m.loading:
			msg = "Reading the DLQ…"
		case m.classFilter != "":
			msg = "Nothing matches the filter."
		}
		out[len(out)-lh] = fit("  "+msg, w)
	}
	return pad(out, w, h)
}

// layout sizes what depends on the window.
func (m *model) layout() {
	m.classCur.fit(len(m.classView), m.listHeight())
	m.rowCur.fit(len(m.rowView), m.listHeight())
}
