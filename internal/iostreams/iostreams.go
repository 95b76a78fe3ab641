// Package iostreams carries the standard streams and what is known about
// them (TTY or not, colour, width), so commands never touch os.Std*.
package iostreams

import (
	"bytes"
	"io"
	"os"
	"strconv"

	"github.com/mattn/go-isatty"
	"golang.org/x/term"
)

// IOStreams are the streams a command reads and writes. Data goes to Out;
// progress, prompts, warnings and summaries go to ErrOut.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	stdinTTY, stdoutTTY, stderrTTY bool
	noColor                        bool
	width                          int
}

// System returns the process's streams.
func System() *IOStreams {
	s := &IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr,
		stdinTTY:  isTerminal(os.Stdin),
		stdoutTTY: isTerminal(os.Stdout),
		stderrTTY: isTerminal(os.Stderr),
	}
	if _, ok := os.LookupEnv("NO_COLOR"); ok {
		s.noColor = true
	}
	if os.Getenv("TERM") == "dumb" {
		s.noColor = true
	}
	if s.stdoutTTY {
		if w, _, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
			s.width = w
		}
	}
	if s.width == 0 {
		if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil {
			s.width = n
		}
	}
	return s
}

func isTerminal(f *os.File) bool {
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

// Test returns streams backed by buffers, none of them a TTY.
func Test() (*IOStreams, *bytes.Buffer, *bytes.Buffer, *bytes.Buffer) {
	in, out, errOut := &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: in, Out: out, ErrOut: errOut, width: 120}, in, out, errOut
}

// IsStdoutTTY reports whether Out is a terminal.
func (s *IOStreams) IsStdoutTTY() bool { return s.stdoutTTY }

// IsStdinTTY reports whether In is a terminal.
func (s *IOStreams) IsStdinTTY() bool { return s.stdinTTY }

// IsStderrTTY reports whether ErrOut is a terminal.
func (s *IOStreams) IsStderrTTY() bool { return s.stderrTTY }

// CanPrompt reports whether a yes/no question can be asked.
func (s *IOStreams) CanPrompt() bool { return s.stdinTTY && s.stderrTTY }

// SetTTY overrides TTY detection (tests).
func (s *IOStreams) SetTTY(stdin, stdout, stderr bool) {
	s.stdinTTY, s.stdoutTTY, s.stderrTTY = stdin, stdout, stderr
}

// SetNoColor turns colour off (--no-color).
func (s *IOStreams) SetNoColor(v bool) { s.noColor = s.noColor || v }

// ColorEnabled reports whether Out gets colour: only on a TTY and only
// when neither NO_COLOR nor --no-color asked otherwise.
func (s *IOStreams) ColorEnabled() bool { return s.stdoutTTY && !s.noColor }

// ColorEnabledStderr is ColorEnabled for ErrOut.
func (s *IOStreams) ColorEnabledStderr() bool { return s.stderrTTY && !s.noColor }

// TerminalWidth is Out's width, 0 when unknown (not a TTY and no COLUMNS).
func (s *IOStreams) TerminalWidth() int { return s.width }

// SetWidth overrides the width (tests).
func (s *IOStreams) SetWidth(w int) { s.width = w }
