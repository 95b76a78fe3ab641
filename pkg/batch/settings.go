package batch

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/duration"
	"github.com/dlqctl/dlqctl/pkg/errs"
	"github.com/dlqctl/dlqctl/pkg/jq"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// Settings are what a batch runs with, recorded in the ledger when it
// starts: resuming it (--batch) reuses them, except what the command line
// sets again.
type Settings struct {
	Rate        float64 `json:"rate"`
	Burst       int     `json:"burst"`
	Concurrency int     `json:"concurrency,omitempty"`
	Via         string  `json:"via,omitempty"`
	ToQueue     string  `json:"toQueue,omitempty"`
	// ToPartition is the partition a restore publishes to instead of
	// each message's own.
	ToPartition   string `json:"toPartition,omitempty"`
	Transform     string `json:"transform,omitempty"`
	MaxGeneration int    `json:"maxGeneration,omitempty"`
	MaxFailures   int    `json:"maxFailures,omitempty"`
	MaxRefailures int    `json:"maxRefailures,omitempty"`
	// Order is the replay order; recorded, it also says the manifest is
	// already in that order.
	Order string `json:"order,omitempty"`
	// MaxLag (a duration, as written) holds publishing back while a
	// destination consumer group lags more; Window (HH:MM-HH:MM [zone])
	// keeps it to a time of day.
	MaxLag string `json:"maxLag,omitempty"`
	Window string `json:"window,omitempty"`
	// NoTrace: no trace event in the broker for the copies (--no-trace);
	// on a broker that keeps traces (Queen 1.x, 2.x) each copy gets one.
	NoTrace bool `json:"noTrace,omitempty"`
}

// Given names the settings a caller gave explicitly (a command line's
// flags): on a recorded batch, every setting not given is the recorded
// one.
type Given uint16

// The settings, as Given names them.
const (
	GivenRate Given = 1 << iota
	GivenBurst
	GivenConcurrency
	GivenVia
	GivenToQueue
	GivenTransform
	GivenMaxGeneration
	GivenMaxFailures
	GivenMaxRefailures
	GivenOrder
	GivenMaxLag
	GivenWindow
	GivenNoTrace
	GivenToPartition
)

// Has reports whether g names s.
func (g Given) Has(s Given) bool { return g&s != 0 }

// setting is one row of the settings' table: what it is called (its
// command-line flag; its key in the recorded settings), the field it
// fills, which actions take it, what it does in words, its check, and
// the rules about it that are otherwise written in several places. The
// flags of every batch command, their refusals, resume, the approval
// digest and the flags a command line gave are read from it.
type setting struct {
	given Given
	// name is the setting's name and its flag's; key, its JSON key.
	name, key string
	// field is the field of Settings it fills.
	field func(*Settings) any
	// takes says which actions take it (nil: every one).
	takes func(*deadletter.Action) bool
	// words is what it does, as a flag's help says it to a person about
	// to run act: no flag is named (a front end adds what its own flags
	// have to do with it).
	words func(act *deadletter.Action) string
	// check refuses a value that is not one (nil: every value is); it
	// sees all the settings, for a value that another one rules out.
	check func(*Settings) error
	// binds: it decides where the copies go or what they carry. Once a
	// run started, a resume keeps it (kept words what the batch does,
	// refusing another value), and an approval covers it.
	binds bool
	kept  func(recorded string) string
	// stays: a record of a run without it leaves the caller's (a run
	// records it whenever it has one); any other a run left out is the
	// zero value.
	stays bool
	// decides: a decision (dlq decide) records it, as what its manifest
	// was recorded by; every other is a run's to record.
	decides bool
}

// Which actions take a setting.
func publishing(a *deadletter.Action) bool   { return a.Publishes }
func republishing(a *deadletter.Action) bool { return a.Republishes() }
func inFlight(a *deadletter.Action) bool     { return !a.Discards() } // a discard deletes one at a time

// said is words that are the same for every action.
func said(w string) func(*deadletter.Action) string {
	return func(*deadletter.Action) string { return w }
}

// settingsTable is every setting, in the order the approval digest
// reads the binding ones (to-queue, transform, then to-partition, which
// joins the digest only when set: approvals made before it bind the rest).
var settingsTable = []setting{
	{given: GivenRate, name: "rate", key: "rate", field: func(s *Settings) any { return &s.Rate }, stays: true,
		words: func(a *deadletter.Action) string {
			return perSecond(a) + " per second, 0 for unlimited; a resumed batch keeps its recorded rate unless this is given"
		},
		check: func(s *Settings) error { return ValidateRate(s.Rate) }},
	{given: GivenBurst, name: "burst", key: "burst", field: func(s *Settings) any { return &s.Burst }, stays: true,
		words: func(a *deadletter.Action) string {
			return "how many " + perSecond(a) + " may start at once before the rate applies"
		},
		check: func(s *Settings) error { return atLeast(GivenBurst, s.Burst, 1) }},
	{given: GivenConcurrency, name: "concurrency", key: "concurrency", field: func(s *Settings) any { return &s.Concurrency }, takes: inFlight,
		words: said("at most this many calls in flight"),
		check: func(s *Settings) error { return ValidateConcurrency(s.Concurrency) }},
	{given: GivenVia, name: "via", key: "via", field: func(s *Settings) any { return &s.Via }, takes: republishing,
		words: said("path: auto (the broker's move on Queen 1.6+, else manual), move, manual (push, then delete: a repeat is a duplicate), or endpoint (/retry; before 1.6 the broker mints the copy's id and a lost answer leaves it unknown)"),
		check: checkVia},
	{given: GivenToQueue, name: "to-queue", key: "toQueue", field: func(s *Settings) any { return &s.ToQueue }, binds: true, takes: publishing,
		words: said("publish to this queue instead of each message's own (a recovery queue, which only the failed group's consumer reads)"),
		kept:  func(q string) string { return "this batch publishes to " + destName(q) + "; a resume cannot change it" }},
	{given: GivenTransform, name: transformName, key: "transform", field: func(s *Settings) any { return &s.Transform }, binds: true, takes: publishing,
		words: said("jq expression applied to each payload before publishing, tried on every payload while planning; " + jq.BudgetHelp()),
		check: func(s *Settings) error { return ValidateTransform(s.Transform) },
		kept: func(t string) string {
			return fmt.Sprintf("this batch was started with %q; a resume cannot change it", t)
		}},
	{given: GivenToPartition, name: "to-partition", key: "toPartition", field: func(s *Settings) any { return &s.ToPartition }, binds: true, takes: publishing,
		words: said("publish to this partition instead of each message's own"),
		kept: func(p string) string {
			return fmt.Sprintf("this batch publishes to partition %q; a resume cannot change it", p)
		}},
	{given: GivenMaxGeneration, name: "max-generation", key: "maxGeneration", field: func(s *Settings) any { return &s.MaxGeneration }, takes: republishing,
		words: said("refuse to replay a message that has already been replayed this many times"),
		check: func(s *Settings) error { return atLeast(GivenMaxGeneration, s.MaxGeneration, 0) }},
	{given: GivenMaxFailures, name: "max-failures", key: "maxFailures", field: func(s *Settings) any { return &s.MaxFailures }, takes: republishing,
		words: said("stop scheduling after this many failed addresses (0 = never)"),
		check: func(s *Settings) error { return atLeast(GivenMaxFailures, s.MaxFailures, 0) }},
	{given: GivenMaxRefailures, name: "max-refailures", key: "maxRefailures", field: func(s *Settings) any { return &s.MaxRefailures }, takes: republishing,
		words: said("pause the batch when this many replayed messages failed again (0 = never)"),
		check: func(s *Settings) error { return atLeast(GivenMaxRefailures, s.MaxRefailures, 0) }},
	{given: GivenOrder, name: "order", key: "order", field: func(s *Settings) any { return &s.Order }, stays: true, decides: true, takes: republishing,
		words: said("partition (each partition in enqueue order, a message not replayed holds back the rest), skip-gaps, or none"),
		check: checkOrder},
	{given: GivenMaxLag, name: "max-lag", key: "maxLag", field: func(s *Settings) any { return &s.MaxLag }, takes: republishing,
		words: said("wait while a consumer group of the destination lags more than this (such as 2m)"),
		check: func(s *Settings) error { return parsed(s.MaxLag, ParseMaxLag) }},
	{given: GivenWindow, name: "window", key: "window", field: func(s *Settings) any { return &s.Window }, takes: republishing,
		words: said("publish only in this time of day: HH:MM-HH:MM, local or followed by a zone (22:00-06:00 UTC)"),
		check: func(s *Settings) error { return parsed(s.Window, ParseWindow) }},
	{given: GivenNoTrace, name: "no-trace", key: "noTrace", field: func(s *Settings) any { return &s.NoTrace }, takes: publishing,
		words: func(a *deadletter.Action) string {
			original := map[string]string{deadletter.FromArchive: "the archived original", deadletter.FromFile: "the original"}[a.From]
			return "write no trace event in the broker for the copies (on Queen 1.x and 2.x, each copy otherwise gets one naming the batch, its reason and " +
				cmp.Or(original, "the original") + "; a failed one never fails the " + a.Name + ")"
		}},
}

// perSecond is what an action's rate counts.
func perSecond(a *deadletter.Action) string {
	if a.Discards() {
		return "deletes"
	}
	return "messages"
}

// atLeast refuses a setting's number under min.
func atLeast(s Given, n, min int) error {
	if n < min {
		return refuse(errs.Flag, s, strconv.Itoa(n), fmt.Sprintf("want %d or more", min))
	}
	return nil
}

// parsed refuses a setting written as text that parse refuses ("": none
// given).
func parsed[T any](v string, parse func(string) (T, error)) error {
	if v == "" {
		return nil
	}
	_, err := parse(v)
	return err
}

// checkVia refuses a path that is none of them, or one that cannot do
// what the other settings ask.
func checkVia(s *Settings) error {
	switch s.Via {
	case replay.ViaAuto, replay.ViaManual:
	case replay.ViaMove:
		if s.Transform != "" {
			return refuse(errs.Flag, GivenVia, s.Via, "the broker's move publishes the stored payload, so it cannot take a transform (auto pushes a transformed one under the broker's copy id)")
		}
	case replay.ViaEndpoint:
		if s.Transform != "" || s.ToQueue != "" {
			return refuse(errs.Flag, GivenVia, s.Via, "the /retry endpoint republishes the stored payload to its own queue, so it cannot take a transform or another queue")
		}
	default:
		return refuse(errs.Flag, GivenVia, strconv.Quote(s.Via), "valid values are auto, move, manual, endpoint")
	}
	return nil
}

// checkOrder refuses an order that is none of them.
func checkOrder(s *Settings) error {
	switch s.Order {
	case replay.OrderPartition, replay.OrderSkipGaps, replay.OrderNone:
		return nil
	}
	return refuse(errs.Flag, GivenOrder, strconv.Quote(s.Order), "valid values are partition, skip-gaps, none")
}

// takesFor reports whether the action takes the setting.
func (st setting) takesFor(a *deadletter.Action) bool { return st.takes == nil || st.takes(a) }

// Offered is one setting as a front end offers it for an action: its
// name (a command line's flag is called so), what it does, and the field
// of a Settings it fills: an *int, *string, *float64 or *bool, holding
// the setting's default.
type Offered struct {
	Given Given
	Name  string
	Words string
	Field any
}

// Offer is every setting the action takes, each filling its field of s,
// which it sets to the action's defaults first.
func Offer(action string, s *Settings) []Offered {
	act := deadletter.ActionOf(action)
	*s = DefaultSettings(action)
	var out []Offered
	for _, st := range settingsTable {
		if st.takesFor(act) {
			out = append(out, Offered{Given: st.given, Name: st.name, Words: st.words(act), Field: st.field(s)})
		}
	}
	return out
}

// Check refuses the first setting the action takes whose value is not
// one: each setting's own check, every batch command's and screen's.
func (s Settings) Check(action string) error {
	act := deadletter.ActionOf(action)
	for _, st := range settingsTable {
		if st.check != nil && st.takesFor(act) {
			if err := st.check(&s); err != nil {
				return err
			}
		}
	}
	return nil
}

// String is the name of the one setting g names. The command lines give
// each setting by the flag of its name (--rate, --to-queue, …).
func (g Given) String() string {
	for _, st := range settingsTable {
		if st.given == g {
			return st.name
		}
	}
	return fmt.Sprintf("settings(%#x)", uint16(g))
}

// GivenNamed is the setting of that name, 0 if none is.
func GivenNamed(name string) Given {
	for _, st := range settingsTable {
		if st.name == name {
			return st.given
		}
	}
	return 0
}

// value is the setting's value in s, as the digest and refusals say it.
func (st setting) value(s *Settings) string {
	switch v := st.field(s).(type) {
	case *string:
		return *v
	case *int:
		return strconv.Itoa(*v)
	case *float64:
		return strconv.FormatFloat(*v, 'g', -1, 64)
	case *bool:
		return strconv.FormatBool(*v)
	}
	return ""
}

// SettingError refuses the value of one setting. It names the setting as
// the settings do (Given's String); a front end words it with its own name
// for the setting, a command line with the flag that gives it (Words).
// Its kind is errs.Flag, or errs.Usage where the value is fine on its own
// and the broker or the batch refuses it.
type SettingError struct {
	Setting Given
	// Value is the value refused, when the refusal is about that value
	// alone; Why is what is wrong, or what the batch keeps instead.
	Value string
	Why   string
}

func (e *SettingError) Error() string { return e.Words(e.Setting.String()) }

// Words is the refusal with the setting called name.
func (e *SettingError) Words(name string) string {
	if e.Value != "" {
		return fmt.Sprintf("invalid %s %s: %s", name, e.Value, e.Why)
	}
	return name + ": " + e.Why
}

// refuse is a SettingError of kind k.
func refuse(k errs.Kind, s Given, value, why string) error {
	return &errs.Error{Kind: k, Err: &SettingError{Setting: s, Value: value, Why: why}}
}

// ValidateConcurrency refuses a number of calls in flight outside 1 to
// 256: every batch action's, and verify's.
func ValidateConcurrency(n int) error {
	if n < 1 || n > 256 {
		return refuse(errs.Flag, GivenConcurrency, strconv.Itoa(n), "want 1 to 256")
	}
	return nil
}

// transformName is the transform setting's name (its row's), which jq's
// errors say.
const transformName = "transform"

// ValidateTransform refuses a transform that is not a jq program (""
// is none).
func ValidateTransform(expr string) error {
	if expr == "" {
		return nil
	}
	if _, err := CompileTransform(expr); err != nil {
		// jq's error names the setting already: the refusal does.
		return refuse(errs.Flag, GivenTransform, strconv.Quote(expr), strings.TrimPrefix(err.Error(), "invalid "+transformName+": "))
	}
	return nil
}

// ParseMaxLag reads --max-lag: a duration above zero.
func ParseMaxLag(s string) (time.Duration, error) {
	d, err := duration.Parse(s)
	if err != nil || d <= 0 {
		return 0, refuse(errs.Flag, GivenMaxLag, strconv.Quote(s), "want a duration such as 2m or 1h")
	}
	return d, nil
}

// ParseWindow reads --window.
func ParseWindow(s string) (replay.Window, error) {
	w, err := replay.ParseWindow(s)
	if err != nil {
		return w, refuse(errs.Flag, GivenWindow, "", err.Error())
	}
	return w, nil
}

// ResumeSettings merges a batch's recorded settings under the ones the
// caller gave: a setting the record has and the caller did not give is
// the record's. Once a run has started (its settings, rate included, are
// recorded) the destination and the payload transform cannot change: the
// copies already published went where the batch said. A decided batch's
// first run may set them. Settings a run leaves out of its record when
// they are empty (to-queue, transform, …) are the zero value once run.
func ResumeSettings(raw json.RawMessage, cur Settings, given Given) (Settings, error) {
	if len(raw) == 0 {
		return cur, nil
	}
	var rec map[string]json.RawMessage
	if json.Unmarshal(raw, &rec) != nil || rec == nil {
		return cur, nil // an unreadable record: the caller's settings stand
	}
	// A run records every setting, its rate among them (decide records
	// only the order): what it left out is the setting's zero value.
	_, started := rec["rate"]
	var recorded Settings
	out := cur
	for _, st := range settingsTable {
		v, ok := rec[st.key]
		if ok && json.Unmarshal(v, st.field(&recorded)) != nil {
			ok = false
		}
		if !ok && (!started || st.stays) {
			continue
		}
		if st.binds && started && given.Has(st.given) && st.value(&cur) != st.value(&recorded) {
			return cur, refuse(errs.Flag, st.given, "", st.kept(st.value(&recorded)))
		}
		if !given.Has(st.given) {
			_ = json.Unmarshal(mustJSON(st.field(&recorded)), st.field(&out))
		}
	}
	return out, nil
}

// decided is what a decision of the action records of the settings
// (nil: none): not a run's settings, which a resume would take as
// started (ResumeSettings), only what the manifest was recorded by.
func (s Settings) decided(act *deadletter.Action) json.RawMessage {
	rec := map[string]any{}
	for _, st := range settingsTable {
		if st.decides && st.takesFor(act) {
			rec[st.key] = st.field(&s)
		}
	}
	if len(rec) == 0 {
		return nil
	}
	return mustJSON(rec)
}

// mustJSON is v as JSON (a setting's field always encodes).
func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func destName(q string) string {
	if q == "" {
		return "each message's own queue"
	}
	return "queue " + q
}

// viaWords says which path a replay takes, for the plan and the audit.
func viaWords(s Settings, resolved string) string {
	switch {
	case resolved == replay.ViaRestore:
		return "a push of the archived payload under an id derived from its address (dlqa-…): restoring it again is a duplicate the broker drops"
	case resolved == replay.ViaMove && s.Transform != "":
		return "push under the broker's copy id (dlq:<row id>), then delete (the move cannot change a payload, and a transform does)"
	case resolved == replay.ViaMove && s.ToQueue != "":
		return "the broker's move to " + destName(s.ToQueue) + ", one call a message (a message of several rows: a push under the broker's copy id, then a delete)"
	case resolved == replay.ViaMove:
		return "the broker's move, one call a message (copy dlq:<row id>; a message of several rows: a push under that id, then a delete)"
	case resolved == replay.ViaEndpoint:
		return "endpoint (/retry; a lost answer leaves the address unknown)"
	case s.Transform != "":
		return "manual (transform, push with a derived id, delete)"
	case s.ToQueue != "":
		return "manual (push to " + destName(s.ToQueue) + " with a derived id, delete)"
	}
	return "manual (push with a derived id, then delete)"
}

func rateWords(r float64) string {
	if r <= 0 {
		return "an unlimited rate"
	}
	return fmt.Sprintf("%g/s", r)
}

// ValidateRate refuses rates that are not a number of messages a second
// a person means: NaN, infinities, negatives, and rates so low a batch
// would take months.
func ValidateRate(r float64) error {
	if math.IsNaN(r) || math.IsInf(r, 0) || r < 0 || (r > 0 && r < 0.01) || r > 1e6 {
		return refuse(errs.Flag, GivenRate, fmt.Sprint(r), "want messages per second between 0.01 and 1000000, or 0 for unlimited")
	}
	return nil
}

// DefaultSettings are what a replay, a discard or a restore runs with
// when nothing else is said: the commands' flag defaults, and the triage
// screen's.
func DefaultSettings(action string) Settings {
	switch act := deadletter.ActionOf(action); {
	case act.Discards():
		return Settings{Rate: 10, Burst: 1, Concurrency: 1}
	case act.Outside():
		return Settings{Rate: 10, Burst: 1, Concurrency: 4}
	}
	return Settings{Rate: 10, Burst: 1, Concurrency: 4, Via: replay.ViaAuto, MaxGeneration: 3, Order: replay.OrderPartition}
}

// Apply sets the engine options the settings ask for (the rate and
// burst are set by Run: they may change while the plan is shown).
func (s Settings) Apply(o *replay.Options) error {
	o.Concurrency = s.Concurrency
	o.Via = s.Via
	o.ToQueue = s.ToQueue
	o.ToPartition = s.ToPartition
	o.MaxFailures = s.MaxFailures
	o.MaxGeneration = s.MaxGeneration
	o.MaxRefailures = s.MaxRefailures
	o.Order = s.Order
	if o.Order == "" {
		o.Order = replay.OrderPartition
	}
	if s.Transform != "" {
		if err := ValidateTransform(s.Transform); err != nil {
			return err
		}
		o.Transform, _ = CompileTransform(s.Transform)
	}
	return nil
}
