package ledger

import "context"

// OpenAtSchema opens a ledger migrated only up to schema version n, as
// an older dlqctl left it.
func OpenAtSchema(ctx context.Context, dsn string, n int) (*Store, error) { return open(ctx, dsn, n) }

// SetHoldsReadDirect sets holdsReadDirect (0: HoldsInForce looks every
// hold's addresses up in current_decisions) and returns what it was.
func SetHoldsReadDirect(n int) int {
	old := holdsReadDirect
	holdsReadDirect = n
	return old
}
