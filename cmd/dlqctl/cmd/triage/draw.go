package triage

import (
	"strconv"
	"strings"

	"github.com/charmbracelet/x/ansi"
)

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
