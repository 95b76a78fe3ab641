//go:build race

package testutil

// Race is whether the race detector is on: a test that loads a large
// DLQ to count work loads a small one then (ten times slower, and the
// count is the same code).
const Race = true
