package render

import (
	"io"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// Palette is the one set of styles, bound to one output. With colour off
// every method returns its text unchanged.
type Palette struct {
	on                              bool
	red, yellow, green, faint, bold lipgloss.Style
}

// NewPalette binds the styles to w; colour is on only when asked.
func NewPalette(w io.Writer, color bool) *Palette {
	r := lipgloss.NewRenderer(w)
	if color {
		r.SetColorProfile(termenv.ANSI256)
	} else {
		r.SetColorProfile(termenv.Ascii)
	}
	return &Palette{on: color,
		red:    r.NewStyle().Foreground(lipgloss.Color("9")),
		yellow: r.NewStyle().Foreground(lipgloss.Color("11")),
		green:  r.NewStyle().Foreground(lipgloss.Color("10")),
		bold:   r.NewStyle().Bold(true),
	}
}

func (p *Palette) apply(s lipgloss.Style, text string) string {
	if !p.on || text == "" {
		return text
	}
	return s.Render(text)
}

// Red marks a breach or failure.
func (p *Palette) Red(s string) string { return p.apply(p.red, s) }

// Yellow marks a warning.
func (p *Palette) Yellow(s string) string { return p.apply(p.yellow, s) }

// Green marks success.
func (p *Palette) Green(s string) string { return p.apply(p.green, s) }

// Bold emphasises.
func (p *Palette) Bold(s string) string { return p.apply(p.bold, s) }

// Age colours an age against a queue's max-age: red past it, yellow past
// half of it, plain otherwise or when there is no threshold.
func (p *Palette) Age(text string, age, maxAge time.Duration) string {
	switch {
	case maxAge <= 0:
		return text
	case age > maxAge:
		return p.Red(text)
	case age > maxAge/2:
		return p.Yellow(text)
	}
	return p.Green(text)
}
