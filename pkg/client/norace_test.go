//go:build !race

package client

// raceOn is whether the race detector is on (see race_test.go).
const raceOn = false
