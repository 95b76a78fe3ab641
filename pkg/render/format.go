// Package render owns everything dlqctl prints: the output formats chosen
// by -o, the one tablewriter setup, the one lipgloss palette, and human
// time formatting against an injected clock.
package render

import (
	"fmt"
	"strings"
)

// Format is an -o value.
type Format string

// The output formats.
const (
	Table  Format = "table"
	Wide   Format = "wide"
	JSON   Format = "json"
	NDJSON Format = "ndjson"
	YAML   Format = "yaml"
)

// Formats lists the valid -o values.
var Formats = []Format{Table, Wide, JSON, NDJSON, YAML}

// ParseFormat validates an -o value; an unknown one lists the valid ones.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = string(f)
	}
	return "", fmt.Errorf("unknown output format %q: valid formats are %s", s, strings.Join(names, ", "))
}

// Human reports whether the format is for people (a table).
func (f Format) Human() bool { return f == Table || f == Wide }
