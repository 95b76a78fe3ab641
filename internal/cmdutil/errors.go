// Package cmdutil holds what every command shares: the factory of lazy
// dependencies, the error types and their exit codes, the selection flags.
package cmdutil

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlqctl/dlqctl/internal/config"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// Exit codes (PRODUCT.md "Output and exit codes").
const (
	ExitOK       = 0
	ExitBreach   = 1 // check found a breach; a batch finished with failures
	ExitUsage    = 2
	ExitBroker   = 3
	ExitAuth     = 4
	ExitNotFound = 5
	// ExitAwaiting: a replay or discard is recorded awaiting a second
	// person's approval, and nothing was run (a script's "replay &&
	// notify replayed" must not go on).
	ExitAwaiting    = 6
	ExitInterrupted = 130
)

// ExitError carries an exit code. Silent ones have already said what
// they had to say (a check that printed its breaches).
type ExitError struct {
	Code   int
	Err    error
	Silent bool
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// FlagError is a usage error: it prints the hint to see --help, exit 2.
type FlagError struct{ Err error }

func (e *FlagError) Error() string { return e.Err.Error() }
func (e *FlagError) Unwrap() error { return e.Err }

// FlagErrorf builds a usage error.
func FlagErrorf(format string, a ...any) error { return &FlagError{Err: fmt.Errorf(format, a...)} }

// UsageError wraps err as a usage error (exit 2) without the help hint.
func UsageError(err error) error { return &ExitError{Code: ExitUsage, Err: err} }

// ErrBreach is returned after output that reports breaches or failures.
var ErrBreach = &ExitError{Code: ExitBreach, Silent: true}

// ErrInterrupted: SIGINT; whatever was to be said (how to resume) is said.
var ErrInterrupted = &ExitError{Code: ExitInterrupted, Silent: true}

// ExitCode maps an error to the exit code of PRODUCT.md.
func ExitCode(err error) int {
	var ee *ExitError
	var fe *FlagError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		return ee.Code
	case errors.As(err, &fe), errs.KindOf(err) == errs.Usage, errs.KindOf(err) == errs.Flag:
		return ExitUsage
	case errs.KindOf(err) == errs.NotFound:
		return ExitNotFound
	case errors.Is(err, context.Canceled):
		return ExitInterrupted
	case errors.Is(err, client.ErrUnauthorized), errors.Is(err, client.ErrForbidden), errors.Is(err, ledger.ErrRefused):
		return ExitAuth
	case errors.Is(err, client.ErrNoDeadLetterRow), errors.Is(err, ledger.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, config.ErrInvalid), errors.Is(err, ledger.ErrBadDSN), errors.Is(err, client.ErrUnknownName),
		errors.Is(err, ledger.ErrNotCancellable):
		return ExitUsage
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrBadResponse), errors.Is(err, client.ErrRouteMissing),
		errors.Is(err, ledger.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return ExitBroker
	}
	return ExitBroker
}
