package exporter

import (
	"context"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/exporter"
)

// Started is a started exporter, for the tests: its address, its
// exporter, and serve.
type Started struct {
	Addr string
	Exp  *exporter.Exporter // the first context's
	// Exps are every context's, by name ("" for the one of the flags).
	Exps  map[string]*exporter.Exporter
	Serve func(context.Context) error
}

// Start starts the exporter of a command line's options, as run does.
func Start(f *cmdutil.Factory, args ...string) (*Started, error) {
	var o *Options
	cmd := NewCmdExporter(f, func(opts *Options) error { o = opts; return nil })
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if err := cmd.Execute(); err != nil {
		return nil, err
	}
	s, err := start(f, o)
	if err != nil {
		return nil, err
	}
	exps := map[string]*exporter.Exporter{}
	for _, e := range s.exps {
		exps[e.context] = e.exp
	}
	return &Started{Addr: s.listeners[0].Addr().String(), Exp: s.exps[0].exp, Exps: exps, Serve: func(ctx context.Context) error {
		defer func() {
			for _, e := range s.exps {
				e.exp.Close()
			}
		}()
		return s.serve(ctx)
	}}, nil
}
