package batch

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/duration"
	"github.com/dlqctl/dlqctl/pkg/errs"
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

var givenNames = map[Given]string{
	GivenRate: "rate", GivenBurst: "burst", GivenConcurrency: "concurrency", GivenVia: "via", GivenToQueue: "to-queue",
	GivenTransform: "transform", GivenMaxGeneration: "max-generation", GivenMaxFailures: "max-failures",
	GivenMaxRefailures: "max-refailures", GivenOrder: "order", GivenMaxLag: "max-lag", GivenWindow: "window",
	GivenNoTrace: "no-trace", GivenToPartition: "to-partition",
}

// String is the name of the one setting g names. The command lines give
// each setting by the flag of its name (--rate, --to-queue, …).
func (g Given) String() string {
	if n, ok := givenNames[g]; ok {
		return n
	}
	return fmt.Sprintf("settings(%#x)", uint16(g))
}

// GivenNamed is the setting of that name, 0 if none is.
func GivenNamed(name string) Given {
	for g, n := range givenNames {
		if n == name {
			return g
		}
	}
	return 0
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

// recorded are a batch's recorded settings, each nil when the record
// does not have it (decide records only the order; a run all of them).
type recorded struct {
	Rate          *float64 `json:"rate"`
	Burst         *int     `json:"burst"`
	Concurrency   *int     `json:"concurrency"`
	Via           *string  `json:"via"`
	ToQueue       *string  `json:"toQueue"`
	ToPartition   *string  `json:"toPartition"`
	Transform     *string  `json:"transform"`
	MaxGeneration *int     `json:"maxGeneration"`
	MaxFailures   *int     `json:"maxFailures"`
	MaxRefailures *int     `json:"maxRefailures"`
	Order         *string  `json:"order"`
	MaxLag        *string  `json:"maxLag"`
	Window        *string  `json:"window"`
	NoTrace       *bool    `json:"noTrace"`
}

// take sets *dst to the recorded value, when there is one and the
// caller did not give its own.
func take[T any](dst *T, rec *T, given bool) {
	if rec != nil && !given {
		*dst = *rec
	}
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
	var rec recorded
	if json.Unmarshal(raw, &rec) != nil {
		return cur, nil // an unreadable record: the caller's settings stand
	}
	started := rec.Rate != nil
	if started {
		// What a run leaves out of its record is empty.
		for _, s := range []**string{&rec.Via, &rec.ToQueue, &rec.ToPartition, &rec.Transform, &rec.MaxLag, &rec.Window} {
			if *s == nil {
				*s = new(string)
			}
		}
		for _, n := range []**int{&rec.Concurrency, &rec.MaxGeneration, &rec.MaxFailures, &rec.MaxRefailures} {
			if *n == nil {
				*n = new(int)
			}
		}
		if rec.NoTrace == nil {
			rec.NoTrace = new(bool)
		}
	}
	if started && given.Has(GivenToQueue) && cur.ToQueue != *rec.ToQueue {
		return cur, refuse(errs.Flag, GivenToQueue, "", fmt.Sprintf("this batch publishes to %s; a resume cannot change it", destName(*rec.ToQueue)))
	}
	if started && given.Has(GivenToPartition) && cur.ToPartition != *rec.ToPartition {
		return cur, refuse(errs.Flag, GivenToPartition, "", fmt.Sprintf("this batch publishes to partition %q; a resume cannot change it", *rec.ToPartition))
	}
	if started && given.Has(GivenTransform) && cur.Transform != *rec.Transform {
		return cur, refuse(errs.Flag, GivenTransform, "", fmt.Sprintf("this batch was started with %q; a resume cannot change it", *rec.Transform))
	}
	out := cur
	take(&out.Rate, rec.Rate, given.Has(GivenRate))
	take(&out.Burst, rec.Burst, given.Has(GivenBurst))
	take(&out.Concurrency, rec.Concurrency, given.Has(GivenConcurrency))
	take(&out.Via, rec.Via, given.Has(GivenVia))
	take(&out.ToQueue, rec.ToQueue, given.Has(GivenToQueue))
	take(&out.ToPartition, rec.ToPartition, given.Has(GivenToPartition))
	take(&out.Transform, rec.Transform, given.Has(GivenTransform))
	take(&out.MaxGeneration, rec.MaxGeneration, given.Has(GivenMaxGeneration))
	take(&out.MaxFailures, rec.MaxFailures, given.Has(GivenMaxFailures))
	take(&out.MaxRefailures, rec.MaxRefailures, given.Has(GivenMaxRefailures))
	take(&out.Order, rec.Order, given.Has(GivenOrder))
	take(&out.MaxLag, rec.MaxLag, given.Has(GivenMaxLag))
	take(&out.Window, rec.Window, given.Has(GivenWindow))
	take(&out.NoTrace, rec.NoTrace, given.Has(GivenNoTrace))
	return out, nil
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
		return "push under the broker's copy id (dlq:<row id>), then delete (--transform: the move cannot change a payload)"
	case resolved == replay.ViaMove && s.ToQueue != "":
		return "the broker's move to --to-queue, one call a message (a message of several rows: a push under the broker's copy id, then a delete)"
	case resolved == replay.ViaMove:
		return "the broker's move, one call a message (copy dlq:<row id>; a message of several rows: a push under that id, then a delete)"
	case resolved == replay.ViaEndpoint:
		return "endpoint (/retry; a lost answer leaves the address unknown)"
	case s.Transform != "":
		return "manual (--transform, push with a derived id, delete)"
	case s.ToQueue != "":
		return "manual (push to --to-queue with a derived id, delete)"
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
	switch action {
	case deadletter.Discard:
		return Settings{Rate: 10, Burst: 1, Concurrency: 1}
	case deadletter.Restore:
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
		t, err := CompileTransform(s.Transform)
		if err != nil {
			return refuse(errs.Flag, GivenTransform, "", "invalid: "+err.Error())
		}
		o.Transform = t
	}
	return nil
}
