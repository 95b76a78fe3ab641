//go:build !race

package testutil

// Race is whether the race detector is on (see race.go).
const Race = false
