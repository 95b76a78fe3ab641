//go:build race

package client

// raceOn is whether the race detector is on: it empties sync.Pools at
// random, so a test of allocations cannot hold under it.
const raceOn = true
