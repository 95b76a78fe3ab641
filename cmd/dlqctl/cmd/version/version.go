// Package version is `dlqctl version`.
package version

import (
	"fmt"

	"github.com/dlqctl/dlqctl/internal/build"
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// NewCmdVersion prints the version.
func NewCmdVersion(f *cmdutil.Factory) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the dlqctl version",
		Args:    cobra.NoArgs,
		Example: "  $ dlqctl version\n  $ dlqctl version -o json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, c, d := build.Info()
			fm, _ := f.Format()
			if !fm.Human() {
				return render.Document(f.IO.Out, fm, map[string]string{"version": v, "commit": c, "date": d})
			}
			fmt.Fprintf(f.IO.Out, "dlqctl %s", v)
			if c != "" {
				fmt.Fprintf(f.IO.Out, " (%s", c[:min(12, len(c))])
				if d != "" {
					fmt.Fprintf(f.IO.Out, ", %s", d)
				}
				fmt.Fprint(f.IO.Out, ")")
			}
			fmt.Fprintln(f.IO.Out)
			return nil
		},
	}
}
