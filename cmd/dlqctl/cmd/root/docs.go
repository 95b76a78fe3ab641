package root

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// CommandReference renders the command tree as docs/reference/commands.md:
// every command's usage, summary and flags, straight from cobra, so the
// reference cannot list a command or flag that does not exist.
func CommandReference(cmd *cobra.Command) string {
	var b strings.Builder
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		if c.Runnable() && c.HasParent() {
			fmt.Fprintf(&b, "## `%s`\n\n%s\n\n```\n%s\n", c.CommandPath(), c.Short, c.UseLine())
			if fl := c.LocalFlags().FlagUsagesWrapped(100); fl != "" {
				fmt.Fprintf(&b, "\n%s", fl)
			}
			b.WriteString("```\n\n")
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cmd)
	fmt.Fprintf(&b, "## Global flags\n\n```\n%s```\n", cmd.PersistentFlags().FlagUsagesWrapped(100))
	return b.String()
}
