// Package version is `dlqctl version`.
package version

import (
	"fmt"

	"github.com/dlqctl/dlqctl/internal/build"
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/spf13/cobra"
)

// NewCmdVersion prints the version, and with --broker which Queen the
// broker runs. (--server is every command's global flag, the broker's
// URL: a switch of that name here shadowed it.)
func NewCmdVersion(f *cmdutil.Factory) *cobra.Command {
	var broker bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the dlqctl version (and, with --broker, which Queen the broker runs)",
		Long: `Version prints dlqctl's version. With --broker it also asks the broker which
Queen release line it runs, told from what it answers (/health's engine and
server keys, and a route only 1.6 has), never from its version string alone:
every C++ 0.x server says 1.0.0. What dlqctl does differs by line (the move
on 1.6 and 2.x, the manual path before); the plan of every replay says it too.`,
		Args:    cobra.NoArgs,
		Example: "  $ dlqctl version\n  $ dlqctl version --broker\n  $ dlqctl version --broker --server https://queen.prod.internal:6632 -o json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, c, d := build.Info()
			fm, err := f.Format()
			if err != nil {
				return err
			}
			var rel *client.Release
			if broker {
				cl, err := f.Client()
				if err != nil {
					return err
				}
				r, err := cl.Release(cmd.Context())
				if err != nil {
					return err
				}
				rel = &r
			}
			if !fm.Human() {
				doc := map[string]any{"version": v, "commit": c, "date": d}
				if rel != nil {
					doc["server"] = rel
				}
				return render.Document(f.IO.Out, fm, doc)
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
			if rel != nil {
				cl, _ := f.Client()
				fmt.Fprintf(f.IO.Out, "broker %s: %s\n  %s\n  told by: %s\n", render.Clean(cl.Server()), render.Clean(rel.Name()), rel.ReplayWords(), render.Clean(rel.Told))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&broker, "broker", false, "also ask the broker (--server, the context's, or the default) which Queen release it runs")
	return cmd
}
