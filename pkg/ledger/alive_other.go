//go:build !unix

package ledger

// Without a portable liveness probe, a claim is held until its lease ends.
func processAlive(int, string) bool { return true }

func processStart() string { return "" }

// Where is "": there is no pid namespace to name here.
func Where() string { return "" }
