package triage

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/dlq"
	"github.com/dlqctl/dlqctl/pkg/ledger"
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
	n := len(m.rows)
	count := plural(n, "dead letter", "dead letters")
	if m.loading {
		count = "loading… " + commas(n) + " rows"
	}
	what := map[string][2]string{"error": {"class", "classes"}, "queue": {"queue", "queues"}, "cg": {"group", "groups"}, "partition": {"partition", "partitions"}}[m.by]
	parts := []string{"triage", count, plural(len(m.groups), what[0], what[1]), "by " + m.by}
	if m.loadErr != nil && n == 0 {
		parts = []string{"triage", "the broker cannot be read"}
	}
	if f := m.filterText(); f != "" && m.screen != screenMessage {
		parts = append(parts, "filter: "+render.Clean(f))
	}
	return " " + strings.Join(append(parts, render.Clean(m.wf.Server())), " · ")
}

func (m *model) statusLine(w int) string {
	switch {
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

// ---- classes ----

// scopeRows are the scopes shown above the classes, breaches first, and
// how many more there are.
func (m *model) scopeRows() ([]dlq.Scope, int) {
	if m.scopes == nil {
		return nil, 0
	}
	s := append([]dlq.Scope(nil), m.scopes.Scopes...)
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
			names[i] += "/" + dlq.GroupName(s.ConsumerGroup)
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
func breachWords(s dlq.Scope) string {
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
				return render.Clean(q + "/" + dlq.GroupName(grp))
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
		return m.pal.Age(s, now.Sub(g.Oldest), m.wf.MaxAge(g.OldestQueue, g.OldestGroup))
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

// undecided counts a group's rows no active decision covers; counted
// when first drawn after the rows or the decisions changed.
func (m *model) undecided(key string) int {
	if n, ok := m.undecCache[key]; ok {
		return n
	}
	now := m.cfg.now()
	n := 0
	for _, i := range m.members[key] {
		r := m.rows[i]
		if d, ok := m.dec[r.Address()]; !ok || !d.Covers(r.FailedAt, now) || d.NotCarriedOut(now, m.wf.TriageSLO(r.Queue, r.ConsumerGroup)) {
			n++
		}
	}
	if m.undecCache == nil {
		m.undecCache = map[string]int{}
	}
	m.undecCache[key] = n
	return n
}

// held says how many of a group's rows are under an active hold, and
// who the holds are with (owners, else who recorded them).
func (m *model) held(key string) (int, []string) {
	now := m.cfg.now()
	n := 0
	var who []string
	for _, i := range m.members[key] {
		r := m.rows[i]
		d, ok := m.dec[r.Address()]
		if !ok || d.Action != ledger.ActionHold || !d.Covers(r.FailedAt, now) {
			continue
		}
		n++
		h := d.Owner
		if h == "" {
			h = d.By
		}
		if !slices.Contains(who, h) {
			who = append(who, h)
		}
	}
	sort.Strings(who)
	return n, who
}

// ---- one group's rows ----

func (m *model) rowsBody(w, h int) []string {
	var head string
	g, ok := m.grouper.Lookup(m.classKey)
	if ok && m.by == "error" {
		head = fmt.Sprintf("class %s · %s · %s", g.Key, render.Clean(g.Pattern), plural(g.Count, "row", "rows"))
	} else if ok {
		head = fmt.Sprintf("%s %s · %s", m.by, render.Clean(g.Key), plural(g.Count, "row", "rows"))
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
		r := m.rows[m.rowView[i]]
		switch c {
		case 0:
			return render.AgeSince(now, r.FailedAt)
		case 1:
			return render.Clean(r.Queue)
		case 2:
			return render.Clean(r.Partition)
		case 3:
			return render.Clean(dlq.GroupName(r.ConsumerGroup))
		case 4:
			return render.Clean(r.ErrorMessage)
		}
		if d, ok := m.dec[r.Address()]; ok {
			if l := dlq.DecisionLabel(d, r, now, m.wf.TriageSLO(r.Queue, r.ConsumerGroup)); l != "" {
				return l
			}
		}
		return "-"
	}
	paint := func(i, c int, s string) string {
		if c != 0 {
			return s
		}
		r := m.rows[m.rowView[i]]
		return m.pal.Age(s, now.Sub(r.FailedAt), m.wf.MaxAge(r.Queue, r.ConsumerGroup))
	}
	lh := m.listHeight()
	out = append(out, m.table(cols, w, len(m.rowView), m.rowCur, lh, cellOf, paint)...)
	if len(m.rowView) == 0 && m.rowFilter != "" {
		out[len(out)-lh] = fit("  Nothing matches the filter.", w)
	}
	return pad(out, w, h)
}

// ---- one message ----

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

// ---- modals ----

func (m *model) helpBody(w, h int) []string {
	m.help.SetWidth(w - 4)
	lines := []string{"Keys", ""}
	lines = append(lines, strings.Split(m.help.FullHelpView(m.keys.helpFor(m.screen).FullHelp()), "\n")...)
	lines = append(lines, "",
		"In a plan: tab moves between rate and why, enter runs, ctrl+o acts",
		"on messages under a hold all the same (--override-hold), esc",
		"cancels. While a batch runs, ctrl+c or esc interrupts it (calls in",
		"flight finish; it resumes with dlq replay --batch); ctrl+c quits.",
		"",
		"h, r and x act on the class under the cursor (with the selection",
		"dlqctl triage was given), or on one message in a class or open.",
		"Nothing is written before its plan is shown and confirmed; every",
		"decision is recorded in the ledger as its dlq command records it.")
	return box("Help", lines, w, h)
}

func (m *model) holdBody(hm *holdModal, w, h int) []string {
	lines := []string{
		"Hold " + hm.t.words,
		"",
		"Under investigation: dlq check stops counting these dead letters as",
		"undecided until then. Recorded with who, when and why.",
		"",
		hm.until.View(),
		hm.why.View(),
		hm.owner.View(),
		"",
		m.st.faint.Render("same as: " + dlq.CommandLine(append([]string{"dlqctl", "dlq", "decide"}, hm.args()...)...)),
	}
	if hm.busy {
		lines = append(lines, "Recording…")
	}
	if hm.err != "" {
		lines = append(lines, m.pal.Red("error: ")+hm.err)
	}
	return box("Hold", lines, w, h)
}

func (m *model) planBody(pm *planModal, w, h int) []string {
	verb := map[string]string{"replay": "Replay", "rm": "Discard"}[pm.verb]
	title := verb + " " + pm.t.words
	inner := h - 2
	var lines []string
	switch pm.phase {
	case planning:
		lines = []string{"Planning: reading the selection, as dlq " + pm.verb + " --dry-run does…"}
	case confirming:
		formLen := 4
		if pm.err != "" {
			formLen++
		}
		lines = pm.page.lines(w-4, max(inner-formLen, 1))
		rule := strings.Repeat("─", max(w-4, 1))
		if pm.page.more() {
			rule = fit("── more below: ↑/↓ pgup/pgdn scroll "+rule, w-4)
		}
		lines = append(lines, rule, pm.rate.View(), pm.why.View(),
			m.st.faint.Render("same as: "+dlq.CommandLine(append(append([]string{"dlqctl", "dlq", pm.verb}, pm.t.args...), m.runFlags(pm)...)...)))
		if pm.err != "" {
			lines = append(lines, m.pal.Red("error: ")+pm.err)
		}
	case executing:
		total := max(pm.planned.Messages(), 1)
		pm.bar.SetWidth(max(w-6, 10))
		lines = []string{
			map[string]string{"replay": "Replaying", "rm": "Discarding"}[pm.verb] + " " + plural(pm.planned.Messages(), "message", "messages") + "…",
			"",
			pm.bar.ViewAs(float64(pm.done) / float64(total)),
			fmt.Sprintf("%d of %d done", pm.done, pm.planned.Messages()),
			"",
			"ctrl+c or esc interrupts: calls in flight finish, and the batch",
			"resumes with " + dlq.CommandLine("dlqctl", "dlq", pm.verb, "--batch", pm.planned.BatchID(), "--yes") + ".",
		}
	case finished:
		if pm.result != "" {
			lines = pm.page.lines(w-4, max(inner-1, 1))
		}
		if pm.err != "" {
			lines = append(lines, m.pal.Red("error: ")+pm.err)
		}
	}
	return box(title, lines, w, h)
}

// runFlags are the flags the form adds to the command line.
func (m *model) runFlags(pm *planModal) []string {
	f := []string{"--rate", strings.TrimSpace(pm.rate.Value()), "--why", pm.why.Value()}
	if pm.override {
		f = append(f, "--override-hold")
	}
	return append(f, "--yes")
}

// layout sizes what depends on the window.
func (m *model) layout() {
	m.classCur.fit(len(m.classView), m.listHeight())
	m.rowCur.fit(len(m.rowView), m.listHeight())
}

// ---- drawing ----

// column is a list column; width 0 takes what the others leave.
type column struct {
	title string
	width int
	right bool
}

// table draws a list window: a heading and h rows from cur.top, the row
// under the cursor marked and reversed. paint colours a cell (not on the
// cursor row, where colours would cut the reverse video).
func (m *model) table(cols []column, w, n int, cur cursor, h int, cellOf func(i, c int) string, paint func(i, c int, s string) string) []string {
	fixed := 2
	for _, c := range cols {
		fixed += c.width + 1
	}
	flex := max(w-fixed+1, 8)
	widths := make([]int, len(cols))
	for i, c := range cols {
		widths[i] = c.width
		if c.width == 0 {
			widths[i] = flex
		}
	}
	line := func(cells []string) string {
		return "  " + strings.Join(cells, " ")
	}
	head := make([]string, len(cols))
	for i, c := range cols {
		head[i] = cell(c.title, widths[i], c.right)
	}
	out := []string{fit(m.st.header.Render(line(head)), w)}
	for r := cur.top; r < cur.top+h; r++ {
		if r >= n {
			out = append(out, fit("", w))
			continue
		}
		cells := make([]string, len(cols))
		for c := range cols {
			cells[c] = cell(cellOf(r, c), widths[c], cols[c].right)
		}
		if r == cur.pos {
			out = append(out, m.st.selected.Render(fit("›"+line(cells)[1:], w)))
			continue
		}
		for c := range cols {
			cells[c] = paint(r, c, cells[c])
		}
		out = append(out, fit(line(cells), w))
	}
	return out
}

// box draws lines in a bordered box of w×h cells.
func box(title string, lines []string, w, h int) []string {
	inner := max(w-4, 1)
	t := ansi.Truncate(" "+title+" ", inner, "…")
	out := []string{"╭─" + t + strings.Repeat("─", max(w-3-ansi.StringWidth(t), 0)) + "╮"}
	for i := 0; i < h-2; i++ {
		l := ""
		if i < len(lines) {
			l = lines[i]
		}
		out = append(out, "│ "+fit(l, inner)+" │")
	}
	out = append(out, "╰"+strings.Repeat("─", max(w-2, 0))+"╯")
	return out
}

// viewLines splits a component's view into lines of width w.
func viewLines(v string, w int) []string {
	lines := strings.Split(v, "\n")
	for i, l := range lines {
		lines[i] = fit(l, w)
	}
	return lines
}

// cell fits a plain cell's text to width, aligned.
func cell(s string, w int, right bool) string {
	s = ansi.Truncate(s, w, "…")
	gap := strings.Repeat(" ", max(w-ansi.StringWidth(s), 0))
	if right {
		return gap + s
	}
	return s + gap
}

// fit cuts or pads a (possibly styled) line to exactly w cells.
func fit(s string, w int) string {
	if ansi.StringWidth(s) > w {
		s = ansi.Truncate(s, w, "…")
	}
	return s + strings.Repeat(" ", max(w-ansi.StringWidth(s), 0))
}

// pad makes lines exactly h lines of w cells.
func pad(lines []string, w, h int) []string {
	for len(lines) < h {
		lines = append(lines, fit("", w))
	}
	return lines[:h]
}

// commas writes 12345 as 12,345.
func commas(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
