// Package dlqctl embeds the project's default sandbox seed; the CLI lives
// in cmd/dlqctl.
package dlqctl

import _ "embed"

// SandboxSeed is testdata/sandbox.json, the seed `dlqctl sandbox` loads
// when no --seed is given.
//
//go:embed testdata/sandbox.json
var SandboxSeed []byte
