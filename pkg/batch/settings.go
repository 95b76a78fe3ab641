package batch

import (
	"encoding/json"
	"fmt"
	"math"
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
	Rate          float64 `json:"rate"`
	Burst         int     `json:"burst"`
	Concurrency   int     `json:"concurrency,omitempty"`
	Via           string  `json:"via,omitempty"`
	ToQueue       string  `json:"toQueue,omitempty"`
	Transform     string  `json:"transform,omitempty"`
	MaxGeneration int     `json:"maxGeneration,omitempty"`
	MaxFailures   int     `json:"maxFailures,omitempty"`
	MaxRefailures int     `json:"maxRefailures,omitempty"`
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

// settingFlags are the flags that set Settings' fields, by JSON key.
var settingFlags = []struct {
	flag, key string
	copy      func(dst, src *Settings)
}{
	{"rate", "rate", func(d, s *Settings) { d.Rate = s.Rate }},
	{"burst", "burst", func(d, s *Settings) { d.Burst = s.Burst }},
	{"concurrency", "concurrency", func(d, s *Settings) { d.Concurrency = s.Concurrency }},
	{"via", "via", func(d, s *Settings) { d.Via = s.Via }},
	{"to-queue", "toQueue", func(d, s *Settings) { d.ToQueue = s.ToQueue }},
	{"transform", "transform", func(d, s *Settings) { d.Transform = s.Transform }},
	{"max-generation", "maxGeneration", func(d, s *Settings) { d.MaxGeneration = s.MaxGeneration }},
	{"max-failures", "maxFailures", func(d, s *Settings) { d.MaxFailures = s.MaxFailures }},
	{"max-refailures", "maxRefailures", func(d, s *Settings) { d.MaxRefailures = s.MaxRefailures }},
	{"order", "order", func(d, s *Settings) { d.Order = s.Order }},
	{"max-lag", "maxLag", func(d, s *Settings) { d.MaxLag = s.MaxLag }},
	{"window", "window", func(d, s *Settings) { d.Window = s.Window }},
	{"no-trace", "noTrace", func(d, s *Settings) { d.NoTrace = s.NoTrace }},
}

// ParseMaxLag reads --max-lag: a duration above zero.
func ParseMaxLag(s string) (time.Duration, error) {
	d, err := duration.Parse(s)
	if err != nil || d <= 0 {
		return 0, errs.Flagf("invalid --max-lag %q: want a duration such as 2m or 1h", s)
	}
	return d, nil
}

// ParseWindow reads --window.
func ParseWindow(s string) (replay.Window, error) {
	w, err := replay.ParseWindow(s)
	if err != nil {
		return w, errs.Flagf("--window: %v", err)
	}
	return w, nil
}

// ResumeSettings merges a batch's recorded settings under the flags the
// command line set: a setting the record has (decide records only the
// order) and the command line does not set is the record's. Once a run
// has started (its settings, rate included, are recorded) the destination
// and the payload transform cannot change: the copies already published
// went where the batch said. A decided batch's first run may set them.
func ResumeSettings(recorded json.RawMessage, cur Settings, changed func(string) bool) (Settings, error) {
	if len(recorded) == 0 {
		return cur, nil
	}
	var rec Settings
	var keys map[string]json.RawMessage
	if json.Unmarshal(recorded, &rec) != nil || json.Unmarshal(recorded, &keys) != nil {
		return cur, nil // an unreadable record: the command line's settings stand
	}
	_, started := keys["rate"]
	if started && changed("to-queue") && cur.ToQueue != rec.ToQueue {
		return cur, errs.Flagf("this batch publishes to %s; a resume cannot change --to-queue", destName(rec.ToQueue))
	}
	if started && changed("transform") && cur.Transform != rec.Transform {
		return cur, errs.Flagf("this batch was started with --transform %q; a resume cannot change it", rec.Transform)
	}
	out := cur
	for _, f := range settingFlags {
		if _, ok := keys[f.key]; ok && !changed(f.flag) {
			f.copy(&out, &rec)
		}
	}
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
		return errs.Flagf("invalid --rate %v: want messages per second between 0.01 and 1000000, or 0 for unlimited", r)
	}
	return nil
}

// DefaultSettings are what a replay or a discard runs with when nothing
// else is said: the commands' flag defaults, and the triage screen's.
func DefaultSettings(action string) Settings {
	if action == deadletter.Discard {
		return Settings{Rate: 10, Burst: 1, Concurrency: 1}
	}
	return Settings{Rate: 10, Burst: 1, Concurrency: 4, Via: replay.ViaAuto, MaxGeneration: 3, Order: replay.OrderPartition}
}

// Apply sets the engine options the settings ask for (the rate and
// burst are set by Prepare).
func (s Settings) Apply(o *replay.Options) error {
	o.Concurrency = s.Concurrency
	o.Via = s.Via
	o.ToQueue = s.ToQueue
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
			return errs.Flagf("invalid --transform: %v", err)
		}
		o.Transform = t
	}
	return nil
}
