package ledger

import "context"

// OpenAtSchema opens a ledger migrated only up to schema version n, as
// an older dlqctl left it.
func OpenAtSchema(ctx context.Context, dsn string, n int) (*Store, error) { return open(ctx, dsn, n) }
