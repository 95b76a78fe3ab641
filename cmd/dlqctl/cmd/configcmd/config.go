// Package configcmd is `dlqctl config`: view the file, switch and edit
// contexts.
package configcmd

import (
	"fmt"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/config"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/secret"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// NewCmdConfig is the `config` noun.
func NewCmdConfig(f *cmdutil.Factory) *cobra.Command {
	cmd := cmdutil.Noun(&cobra.Command{
		Use:   "config",
		Short: "View the config file and manage contexts (named brokers)",
	})
	cmd.AddCommand(newCmdView(f), newCmdUseContext(f), newCmdSetContext(f))
	return cmd
}

func newCmdView(f *cmdutil.Factory) *cobra.Command {
	return &cobra.Command{
		Use:     "view",
		Short:   "Print the config file and the settings in force",
		Args:    cobra.NoArgs,
		Example: "  $ dlqctl config view\n  $ dlqctl --context staging config view -o json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.Config()
			if err != nil {
				return err
			}
			s, err := f.Settings()
			if err != nil {
				return err
			}
			fm, _ := f.Format()
			// No secret is printed: the token only by where it comes from,
			// URLs and DSNs without their passwords.
			shown := redacted(c)
			inForce := map[string]string{"context": s.Context, "server": secret.URL(s.Server), "ledger": secret.DSN(s.Ledger), "token": tokenState(s)}
			if !fm.Human() {
				return render.Document(f.IO.Out, fm, map[string]any{"path": c.Path(), "config": shown, "inForce": inForce})
			}
			out, err := yaml.Marshal(shown)
			if err != nil {
				return err
			}
			state := ""
			if !c.Exists() {
				state = " (does not exist yet)"
			}
			fmt.Fprintf(f.IO.Out, "# %s%s\n%s", c.Path(), state, out)
			fmt.Fprintf(f.IO.Out, "# in force: context=%q server=%s ledger=%s token=%s\n", s.Context, inForce["server"], inForce["ledger"], tokenState(s))
			return nil
		},
	}
}

func tokenState(s *config.Settings) string {
	if s.Token == "" {
		return "none"
	}
	return "set (from " + s.TokenSource + ")"
}

// redacted is the config as it may be shown: contexts' servers and
// ledgers without passwords.
func redacted(c *config.Config) *config.Config {
	out := *c
	out.Contexts = make(map[string]*config.Context, len(c.Contexts))
	for name, ctx := range c.Contexts {
		cp := *ctx
		cp.Server, cp.Ledger = secret.URL(cp.Server), secret.DSN(cp.Ledger)
		out.Contexts[name] = &cp
	}
	return &out
}

func newCmdUseContext(f *cmdutil.Factory) *cobra.Command {
	return &cobra.Command{
		Use:     "use-context NAME",
		Short:   "Make a context the current one",
		Args:    cobra.ExactArgs(1),
		Example: "  $ dlqctl config use-context prod",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.Config()
			if err != nil {
				return err
			}
			if _, ok := c.Contexts[args[0]]; !ok {
				return cmdutil.UsageError(fmt.Errorf("no context %q in %s; create it with dlqctl config set-context %s --server URL", args[0], c.Path(), args[0]))
			}
			c.CurrentContext = args[0]
			if err := c.Save(); err != nil {
				return cmdutil.UsageError(fmt.Errorf("writing %s: %v", c.Path(), err))
			}
			fmt.Fprintf(f.IO.ErrOut, "Switched to context %q.\n", args[0])
			return nil
		},
	}
}

// SetContextOptions are set-context's flags.
type SetContextOptions struct {
	Name, Server, TokenFile, Ledger, Broker string
	Use                                     bool
}

func newCmdSetContext(f *cmdutil.Factory) *cobra.Command {
	o := &SetContextOptions{}
	cmd := &cobra.Command{
		Use:   "set-context NAME [--server URL] [--token-file FILE] [--ledger DSN]",
		Short: "Create or change a context",
		Args:  cobra.ExactArgs(1),
		Example: `  $ dlqctl config set-context prod --server https://queen.prod.internal:6632 \
      --token-file ~/.config/dlqctl/prod.token --ledger postgres://dlqctl@db/dlqctl --use`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			f.CreatingConfig = true
			c, err := f.Config()
			if err != nil {
				return err
			}
			ctx := c.Contexts[o.Name]
			if ctx == nil {
				ctx = &config.Context{}
				c.Contexts[o.Name] = ctx
			}
			fl := cmd.Flags()
			if fl.Changed("server") {
				ctx.Server = o.Server
			}
			if fl.Changed("token-file") {
				ctx.TokenFile = o.TokenFile
			}
			if fl.Changed("broker") {
				if o.Broker != "" {
					if _, err := deadletter.NamedIdentity(o.Broker); err != nil {
						return cmdutil.UsageError(err)
					}
				}
				ctx.Broker = o.Broker
			}
			if fl.Changed("ledger") {
				if _, _, _, err := ledgerParse(o.Ledger); err != nil {
					return cmdutil.UsageError(err)
				}
				ctx.Ledger = o.Ledger
			}
			if o.Use || c.CurrentContext == "" {
				c.CurrentContext = o.Name
			}
			if err := c.Save(); err != nil {
				return cmdutil.UsageError(fmt.Errorf("writing %s: %v", c.Path(), err))
			}
			fmt.Fprintf(f.IO.ErrOut, "Context %q saved in %s.\n", o.Name, c.Path())
			return nil
		},
	}
	// These shadow the global flags of the same names: here they say what
	// the context stores, not how this run connects.
	cmd.Flags().StringVar(&o.Server, "server", "", "the context's broker URL")
	cmd.Flags().StringVar(&o.TokenFile, "token-file", "", "the context's token file")
	cmd.Flags().StringVar(&o.Ledger, "ledger", "", "the context's ledger DSN")
	cmd.Flags().StringVar(&o.Broker, "broker", "", "a name for the broker in the ledger, shared by every context that names it (a broker reached by several URLs)")
	cmd.Flags().BoolVar(&o.Use, "use", false, "also make it the current context")
	return cmd
}
