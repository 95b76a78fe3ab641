// Command dlqctl is the operator CLI for dead-letter triage and replay on
// the Queen broker.
package main

import (
	"os"

	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/root"
)

func main() { os.Exit(root.Main()) }
