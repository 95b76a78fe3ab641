package render

import (
	"time"

	"charm.land/lipgloss/v2"
)

// Palette is the one set of styles, bound to one output. With colour off
// every method returns its text unchanged.
type Palette struct {
	on                       bool
	red, yellow, green, bold lipgloss.Style
}

// NewPalette returns the styles; colour is on only when the caller, who
// knows the output (a terminal, NO_COLOR, --no-color), asks. The colours
// are the terminal's own 16, so they follow the user's theme and need no
// downsampling.
func NewPalette(color bool) *Palette {
	return &Palette{on: color,
		red:    lipgloss.NewStyle().Foreground(lipgloss.BrightRed),
		yellow: lipgloss.NewStyle().Foreground(lipgloss.BrightYellow),
		green:  lipgloss.NewStyle().Foreground(lipgloss.BrightGreen),
		bold:   lipgloss.NewStyle().Bold(true),
	}
}

// On reports whether the palette colours.
func (p *Palette) On() bool { return p.on }

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
