package deadletter

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"regexp"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/duration"
	"github.com/dlqctl/dlqctl/pkg/errs"
)

// Selection is what the selection flags of ls, replay, rm and decide say.
type Selection struct {
	Queue         string    `json:"queue,omitempty"`
	ConsumerGroup string    `json:"consumerGroup,omitempty"`
	Partition     string    `json:"partition,omitempty"`
	Error         string    `json:"error,omitempty"`
	FailedAfter   time.Time `json:"failedAfter,omitzero"`
	FailedBefore  time.Time `json:"failedBefore,omitzero"`
	Class         string    `json:"class,omitempty"`
	Limit         int       `json:"limit,omitempty"`
	Addresses     []Address `json:"addresses,omitempty"`
	All           bool      `json:"all,omitempty"`
	// Acting names the command that acts on the selection (dlq rm): its
	// snapshot is refused when its filters turn out to select everything
	// in scope without All (Everything). "" for a read, or a screen where
	// the person picked the class.
	Acting string `json:"-"`
	// Where is a jq predicate over the row as ls -o ndjson prints it;
	// WhereDecrypt fetches envelope rows' payloads for it (one GET each).
	Where        string `json:"where,omitempty"`
	WhereDecrypt bool   `json:"whereDecrypt,omitempty"`

	// WhereInput, when set, fills v (empty) with the value --where is
	// run on for a row (the caller knows its decision); otherwise
	// WhereValue with no decision, at WhereNow.
	WhereInput func(r Row, v map[string]any)
	WhereNow   time.Time
	// WhereRows, when set, is what the rows a snapshot matches pass
	// through first: WhereInput's decisions are looked up there, a chunk
	// of rows at a time, rather than loaded whole beforehand.
	WhereRows func(context.Context, iter.Seq2[Row, error]) iter.Seq2[Row, error]
	// Decrypt, when set, fetches an envelope row's decrypted payload
	// before --where sees it (one GET); it is asked only for rows every
	// other criterion selects.
	Decrypt func(Row) (json.RawMessage, error)

	errRE *regexp.Regexp
	addrs map[Address]struct{}
	where *Where
	// scratch is MatchWhere's value, reused row after row.
	scratch map[string]any
}

// Compile validates the selection; call it before Match.
func (s *Selection) Compile() error {
	if s.Error != "" {
		re, err := regexp.Compile(s.Error)
		if err != nil {
			return fmt.Errorf("invalid --error regex %q: %v", s.Error, err)
		}
		s.errRE = re
	}
	if s.Limit < 0 {
		return fmt.Errorf("invalid --limit %d: want 0 (no limit) or more", s.Limit)
	}
	if !s.FailedAfter.IsZero() && !s.FailedBefore.IsZero() && !s.FailedAfter.Before(s.FailedBefore) {
		return fmt.Errorf("--failed-after must be before --failed-before")
	}
	if len(s.Addresses) > 0 {
		s.addrs = make(map[Address]struct{}, len(s.Addresses))
		for _, a := range s.Addresses {
			s.addrs[a] = struct{}{}
		}
	}
	if s.Where != "" {
		w, err := CompileWhere(s.Where)
		if err != nil {
			return err
		}
		s.where = w
	}
	return nil
}

// WherePredicate is the compiled --where, nil without one.
func (s *Selection) WherePredicate() *Where { return s.where }

// Bind makes --where run under ctx (an interrupt stops it at once).
func (s *Selection) Bind(ctx context.Context) {
	if s.where != nil {
		s.where.Bind(ctx)
	}
}

// WhereErr is what stopped --where, if anything did: a result that is
// not true or false, an evaluation over its budget, an interrupt. A read
// that runs the predicate ends with it.
func (s *Selection) WhereErr() error { return s.where.Err() }

// Narrowed reports whether the selection has a criterion besides --where
// and --all: one that keeps a --where-decrypt from fetching the whole DLQ.
func (s *Selection) Narrowed() bool {
	c := *s
	c.Where, c.WhereDecrypt, c.All, c.Limit = "", false, false, 0
	return !c.Empty()
}

// Empty reports whether no criterion at all was given (and not --all).
func (s *Selection) Empty() bool {
	return s.Queue == "" && s.ConsumerGroup == "" && s.Partition == "" && s.Error == "" &&
		s.FailedAfter.IsZero() && s.FailedBefore.IsZero() && s.Class == "" && len(s.Addresses) == 0 && !s.All && s.Where == ""
}

// OnlyAddresses reports whether the selection is explicit addresses and
// nothing else: the broker's detail route can answer for each.
func (s *Selection) OnlyAddresses() bool {
	c := *s
	c.Addresses, c.addrs, c.errRE = nil, nil, nil
	return len(s.Addresses) > 0 && c.Empty() && s.Limit == 0
}

// InScope reports whether a row is in the selection's scope: its queue,
// group and partition, before any filter of what the rows say.
func (s *Selection) InScope(r Row) bool {
	return (s.Queue == "" || r.Queue == s.Queue) && (s.ConsumerGroup == "" || r.ConsumerGroup == s.ConsumerGroup) &&
		(s.Partition == "" || r.Partition == s.Partition)
}

// filtered reports whether the selection filters rows by what they say
// (error, class, failure time, --where), beyond its scope.
func (s *Selection) filtered() bool {
	return s.Error != "" || s.Class != "" || !s.FailedAfter.IsZero() || !s.FailedBefore.IsZero() || s.Where != ""
}

// Everything refuses a destructive selection whose filters turned out to
// select every dead letter in its scope (matched of inScope rows): a
// predicate that is true of everything (a typo, more often than not)
// needs --all, as a bare command does. verb names the command.
func (s *Selection) Everything(verb string, inScope, matched int) error {
	if verb == "" || s.All || !s.filtered() || len(s.Addresses) > 0 || inScope == 0 || matched < inScope {
		return nil
	}
	scope := "in the DLQ"
	if s.Queue != "" || s.ConsumerGroup != "" || s.Partition != "" {
		var parts []string
		for _, p := range []struct{ k, v string }{{"queue", s.Queue}, {"group", s.ConsumerGroup}, {"partition", s.Partition}} {
			if p.v != "" {
				parts = append(parts, p.k+" "+p.v)
			}
		}
		scope = "of " + strings.Join(parts, ", ")
	}
	return errs.Usagef("%s: the filters select every dead letter %s (%d rows), which may not be what they mean (a predicate true of every row?); pass --all if the whole of it is meant", verb, scope, inScope)
}

// Match reports whether a row is selected (Limit is applied by callers).
func (s *Selection) Match(r Row) bool {
	if !s.MatchFields(r) {
		return false
	}
	return s.where == nil || s.MatchWhere(r)
}

// MatchFields is Match without --where: the cheap criteria, which a
// caller runs first in order, leaving --where (MatchWhere) to run
// concurrently.
func (s *Selection) MatchFields(r Row) bool {
	if s.Queue != "" && r.Queue != s.Queue {
		return false
	}
	if s.ConsumerGroup != "" && r.ConsumerGroup != s.ConsumerGroup {
		return false
	}
	if s.Partition != "" && r.Partition != s.Partition {
		return false
	}
	if !s.FailedAfter.IsZero() && r.FailedAt.Before(s.FailedAfter) {
		return false
	}
	if !s.FailedBefore.IsZero() && !r.FailedAt.Before(s.FailedBefore) {
		return false
	}
	if s.errRE != nil && !s.errRE.MatchString(r.ErrorMessage) {
		return false
	}
	if s.Class != "" && ClassID(r.ErrorMessage) != s.Class {
		return false
	}
	if s.addrs != nil {
		if _, ok := s.addrs[r.Address()]; !ok {
			return false
		}
	}
	return true
}

// ConcurrentWhere reports whether MatchWhere may run on several rows at
// once (not while --where-decrypt fetches payloads, one message at a time).
func (s *Selection) ConcurrentWhere() bool { return s.where != nil && s.Decrypt == nil }

// MatchWhere runs --where on a row the other criteria selected (true
// without one). It is not for concurrent use; MatchWhereInto is.
func (s *Selection) MatchWhere(r Row) bool {
	if s.scratch == nil {
		s.scratch = map[string]any{}
	}
	return s.MatchWhereInto(r, s.scratch)
}

// MatchWhereInto is MatchWhere building the row's value in v, a map the
// caller owns and reuses (the predicate keeps nothing of it).
func (s *Selection) MatchWhereInto(r Row, v map[string]any) bool {
	if s.where == nil {
		return true
	}
	if r.Undecryptable() && s.Decrypt != nil {
		if data, err := s.Decrypt(r); err == nil && len(data) > 0 && !IsEnvelope(data) {
			r.Data = data
		}
	}
	if r.Undecryptable() {
		s.where.envelopes.Add(1)
	}
	clear(v)
	if s.WhereInput != nil {
		s.WhereInput(r, v)
	} else {
		now := s.WhereNow
		if now.IsZero() {
			now = time.Now()
		}
		FillWhereValue(v, r, now, "", "")
	}
	return s.where.Test(v)
}

// RowLevel reports whether the selection can pick some rows of an address
// and not others (by group, error, class or time): then a snapshot must
// look for the address's other rows, which its delete removes too.
func (s *Selection) RowLevel() bool {
	return s.ConsumerGroup != "" || s.Error != "" || s.Class != "" || !s.FailedAfter.IsZero() || !s.FailedBefore.IsZero()
}

// String is the selection as a command line would type it, for the ledger
// and messages.
func (s *Selection) String() string {
	var parts []string
	add := func(flag, v string) {
		if v != "" {
			parts = append(parts, flag+" "+shellQuote(v))
		}
	}
	add("--queue", s.Queue)
	add("--cg", s.ConsumerGroup)
	add("--partition", s.Partition)
	add("--error", s.Error)
	if !s.FailedAfter.IsZero() {
		add("--failed-after", s.FailedAfter.UTC().Format(time.RFC3339))
	}
	if !s.FailedBefore.IsZero() {
		add("--failed-before", s.FailedBefore.UTC().Format(time.RFC3339))
	}
	add("--class", s.Class)
	add("--where", s.Where)
	if s.WhereDecrypt {
		parts = append(parts, "--where-decrypt")
	}
	if s.Limit > 0 {
		add("--limit", fmt.Sprint(s.Limit))
	}
	for _, a := range s.Addresses {
		parts = append(parts, shellQuote(a.String()))
	}
	if s.All {
		parts = append(parts, "--all")
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ParseTime reads --failed-after/--failed-before: RFC 3339, or a duration
// ago ("2h", "3d").
func ParseTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if d, err := duration.Parse(s); err == nil {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("invalid time %q: want RFC 3339 (2026-07-30T09:41:02Z) or a duration ago (90m, 2h, 3d)", s)
}

// ReadAddresses reads --from-file: one address per line, or NDJSON rows
// as `dlq ls -o ndjson` prints them. Blank lines and # comments are skipped.
func ReadAddresses(r io.Reader) ([]Address, error) {
	var out []Address
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "{") {
			var row struct {
				Address       string `json:"address"`
				PartitionID   string `json:"partitionId"`
				TransactionID string `json:"transactionId"`
				// An export's first and last lines (dlq export) name no row.
				Export    *int  `json:"dlqctlExport"`
				ExportEnd *bool `json:"dlqctlExportEnd"`
			}
			if err := json.Unmarshal([]byte(line), &row); err != nil {
				return nil, fmt.Errorf("line %d: not an address or a JSON row: %v", n, err)
			}
			if row.Export != nil || row.ExportEnd != nil {
				continue
			}
			if row.PartitionID != "" && row.TransactionID != "" {
				out = append(out, Address{PartitionID: row.PartitionID, TransactionID: row.TransactionID})
				continue
			}
			line = row.Address
		}
		a, err := ParseAddress(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
