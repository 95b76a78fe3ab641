package cmdutil

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/jq"
	"github.com/spf13/cobra"
)

// SelectionFlags are the selection flags shared by ls, replay, rm and decide.
type SelectionFlags struct {
	Queue, ConsumerGroup, Partition, Error string
	FailedAfter, FailedBefore              string
	Class                                  string
	Limit                                  int
	FromFile                               string
	All                                    bool
	Where                                  string
	WhereDecrypt                           bool
}

// AddSelectionFlags binds the selection flags; withAll adds --all.
func AddSelectionFlags(cmd *cobra.Command, s *SelectionFlags, withAll bool) {
	fl := cmd.Flags()
	once := func(p *string, name, usage string) { fl.Var(&onceString{p: p, name: name}, name, usage) }
	once(&s.Queue, "queue", "only dead letters of this queue")
	once(&s.ConsumerGroup, "cg", "only rows of this consumer group ('(queue mode)' or __QUEUE_MODE__ for queue-mode consumers)")
	once(&s.Partition, "partition", "only this partition (by name)")
	once(&s.Error, "error", "only rows whose errorMessage matches this regular expression")
	once(&s.FailedAfter, "failed-after", "only rows that failed after this time (RFC 3339, or a duration ago such as 2h)")
	once(&s.FailedBefore, "failed-before", "only rows that failed before this time (RFC 3339, or a duration ago)")
	once(&s.Class, "class", "only this failure class (an id from ls --group-by error)")
	fl.IntVar(&s.Limit, "limit", 0, "at most this many (0 = no limit)")
	once(&s.FromFile, "from-file", "addresses to select, one a line or as NDJSON rows of ls -o ndjson (- for stdin)")
	once(&s.Where, "where", "only rows this jq predicate is true for, over the row as ls -o ndjson prints it (.data.orderId == 8812); "+jq.BudgetHelp())
	fl.BoolVar(&s.WhereDecrypt, "where-decrypt", false, "fetch each encrypted row's payload (one GET) for --where where the list shows envelopes; needs a narrowing selection")
	if withAll {
		fl.BoolVar(&s.All, "all", false, "select the whole DLQ (required when no other selection is given)")
	}
}

// Any reports whether any selection flag or address was given.
func (s *SelectionFlags) Any(args []string) bool {
	return len(args) > 0 || *s != SelectionFlags{}
}

// Build turns the flags and address arguments into a compiled selection.
func (s *SelectionFlags) Build(f *Factory, args []string) (*deadletter.Selection, error) {
	sel := &deadletter.Selection{Queue: s.Queue, ConsumerGroup: deadletter.GroupName(s.ConsumerGroup), Partition: s.Partition,
		Error: s.Error, Class: strings.ToLower(s.Class), Limit: s.Limit, All: s.All, Where: s.Where, WhereDecrypt: s.WhereDecrypt}
	if sel.Class != "" && !deadletter.IsClassID(sel.Class) {
		// It can match nothing: a typo would be "nothing matches", exit 0.
		return nil, FlagErrorf("--class %q is not a class id: class ids are the 8 hex digits `dlq ls --group-by error` prints", s.Class)
	}
	if s.Where != "" {
		// Its own error, with where the expression went wrong: no --help hint.
		if _, err := deadletter.CompileWhere(s.Where); err != nil {
			return nil, UsageError(err)
		}
	}
	if s.WhereDecrypt && s.Where == "" {
		return nil, FlagErrorf("--where-decrypt goes with --where")
	}
	now := f.Now()
	var err error
	if s.FailedAfter != "" {
		if sel.FailedAfter, err = deadletter.ParseTime(s.FailedAfter, now); err != nil {
			return nil, FlagErrorf("--failed-after: %v", err)
		}
	}
	if s.FailedBefore != "" {
		if sel.FailedBefore, err = deadletter.ParseTime(s.FailedBefore, now); err != nil {
			return nil, FlagErrorf("--failed-before: %v", err)
		}
	}
	for _, a := range args {
		addr, err := deadletter.ParseAddress(a)
		if err != nil {
			return nil, FlagErrorf("%v", err)
		}
		sel.Addresses = append(sel.Addresses, addr)
	}
	if s.FromFile != "" {
		var addrs []deadletter.Address
		if s.FromFile == "-" {
			addrs, err = deadletter.ReadAddresses(f.IO.In)
		} else {
			fh, ferr := os.Open(s.FromFile)
			if ferr != nil {
				return nil, UsageError(fmt.Errorf("--from-file: %v", ferr))
			}
			addrs, err = deadletter.ReadAddresses(fh)
			fh.Close()
		}
		if err != nil {
			return nil, UsageError(fmt.Errorf("--from-file %s: %v", s.FromFile, err))
		}
		if len(addrs) == 0 {
			return nil, UsageError(fmt.Errorf("--from-file %s holds no address", s.FromFile))
		}
		sel.Addresses = append(sel.Addresses, addrs...)
	}
	if err := sel.Compile(); err != nil {
		return nil, FlagErrorf("%v", err)
	}
	return sel, nil
}

// BuildRequired is Build for a command that acts (command: "dlq rm"):
// an empty selection is refused (RequireSelection).
func (s *SelectionFlags) BuildRequired(f *Factory, args []string, command string) (*deadletter.Selection, error) {
	sel, err := s.Build(f, args)
	if err != nil {
		return nil, err
	}
	return sel, RequireSelection(sel, command)
}

// RequireSelection refuses an empty selection for commands that act:
// the whole DLQ must be asked for with --all.
func RequireSelection(sel *deadletter.Selection, verb string) error {
	if sel.Empty() {
		return FlagErrorf("%s needs a selection (--queue, --cg, --error, --class, --where, addresses, --from-file, …) or --all for the whole DLQ", verb)
	}
	return nil
}

// ParseDurationFlag parses a duration flag value with its name in the error.
func ParseDurationFlag(name, v string, parse func(string) (time.Duration, error)) (time.Duration, error) {
	d, err := parse(v)
	if err != nil {
		return 0, FlagErrorf("--%s: %v", name, err)
	}
	return d, nil
}

// Noun makes a command that only groups verbs: bare, it prints its help;
// with an unknown verb, it is a usage error (cobra would print help and
// exit 0).
func Noun(cmd *cobra.Command) *cobra.Command {
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if c.SuggestionsMinimumDistance <= 0 {
			c.SuggestionsMinimumDistance = 2
		}
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
		}
		return &FlagError{Err: errors.New(msg)}
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	return cmd
}

// onceString is a selection flag that takes one value: given again with
// another, it is refused, where a plain string flag kept the last and a
// selection silently acted on one queue of the two named.
type onceString struct {
	p    *string
	name string
	set  bool
}

func (o *onceString) String() string {
	if o.p == nil {
		return ""
	}
	return *o.p
}

func (o *onceString) Set(v string) error {
	if o.set && v != *o.p {
		hint := "give one"
		if o.name == "queue" || o.name == "cg" || o.name == "partition" || o.name == "class" {
			field := map[string]string{"queue": ".queue", "cg": ".consumerGroup", "partition": ".partition", "class": ".errorClass"}[o.name]
			hint = fmt.Sprintf("to select both, --where '%s == %q or %s == %q'", field, *o.p, field, v)
		}
		return fmt.Errorf("given twice (%q, then %q): a selection takes one; %s", *o.p, v, hint)
	}
	*o.p, o.set = v, true
	return nil
}

func (o *onceString) Type() string { return "string" }
