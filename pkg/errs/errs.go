// Package errs classifies the domain's errors by what the person who
// asked can do about them: correct the request (Usage), or look for
// something that is not there (NotFound). The CLI maps each kind to its
// exit code; the text is the whole message, nothing is prefixed to it.
package errs

import (
	"errors"
	"fmt"
)

// Kind is what an error asks of the person who made the request.
type Kind int

// The kinds.
const (
	// Usage: the request cannot be carried out as asked (exit 2).
	Usage Kind = iota + 1
	// NotFound: what was named is not there (exit 5).
	NotFound
	// Flag: a flag's value cannot be used (exit 2, and the command's
	// --help is pointed at).
	Flag
)

// Error is an error of a kind.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Usagef is a Usage error.
func Usagef(format string, a ...any) error {
	return &Error{Kind: Usage, Err: fmt.Errorf(format, a...)}
}

// Flagf is a Flag error.
func Flagf(format string, a ...any) error {
	return &Error{Kind: Flag, Err: fmt.Errorf(format, a...)}
}

// NotFoundf is a NotFound error.
func NotFoundf(format string, a ...any) error {
	return &Error{Kind: NotFound, Err: fmt.Errorf(format, a...)}
}

// KindOf is err's kind, 0 when it has none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}
