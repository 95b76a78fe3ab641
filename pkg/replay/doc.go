// Package replay is the run engine: it takes a batch's items a claim at a
// time from a Source, publishes or deletes each one rate-limited, journaled
// and idempotent against interfaces for the broker, the ledger and the
// clock, and reports what each address came to. What a batch is and what
// it will do (its stage and plan) are pkg/batch's. It does no I/O of its own.
package replay
