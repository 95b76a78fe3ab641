// Package replay plans and executes replays and discards: it snapshots a
// selection into a frozen manifest, plans it, and executes it rate-limited
// and idempotently against interfaces for the broker, the ledger and the
// clock. It does no I/O of its own.
package replay
