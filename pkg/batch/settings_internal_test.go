package batch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// An approval recorded before the settings were a table binds the same
// plan: the digest read from the table's binding rows is the one the
// three fields made (to-partition only when set).
func TestPlanDigestReadsTheTableAsBefore(t *testing.T) {
	before := func(manifest string, st Settings) string {
		parts := []string{manifest, st.ToQueue, st.Transform}
		if st.ToPartition != "" {
			parts = append(parts, st.ToPartition)
		}
		h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
		return hex.EncodeToString(h[:])
	}
	for _, st := range []Settings{{}, {ToQueue: "recovery"}, {Transform: ".x = 1"}, {ToQueue: "q", Transform: ".", ToPartition: "p7", Rate: 3, Order: "none"}, {ToPartition: "0"}} {
		if got, want := planDigest("m", st), before("m", st); got != want {
			t.Errorf("%+v: digest %s, before %s", st, got, want)
		}
	}
}

// Every setting has a row, under a name of its own, and each row fills
// a field of its own.
func TestEverySettingIsARow(t *testing.T) {
	names, fields := map[string]bool{}, map[any]bool{}
	var all Given
	var s Settings
	for _, st := range settingsTable {
		if names[st.name] || fields[st.field(&s)] || all.Has(st.given) || GivenNamed(st.name) != st.given || st.given.String() != st.name {
			t.Errorf("row %s (%s) is not a setting of its own", st.name, st.key)
		}
		names[st.name], fields[st.field(&s)] = true, true
		all |= st.given
	}
	if all != GivenToPartition<<1-1 {
		t.Errorf("the table names settings %#x; Given has %#x", all, GivenToPartition<<1-1)
	}
}

// Each action is offered the settings it takes, with its own defaults,
// every offered one has words, and Check refuses a bad value of each
// checked one by that setting's name.
func TestOfferAndCheckReadTheTable(t *testing.T) {
	offered := func(action string) (names []string, s Settings) {
		for _, o := range Offer(action, &s) {
			if o.Words == "" {
				t.Errorf("%s: %s has no words", action, o.Name)
			}
			names = append(names, o.Name)
		}
		return names, s
	}
	for action, want := range map[string]string{
		"replay":  "rate burst concurrency via to-queue transform to-partition max-generation max-failures max-refailures order max-lag window no-trace",
		"discard": "rate burst",
		"restore": "rate burst concurrency to-queue transform to-partition no-trace",
		"import":  "rate burst concurrency to-queue transform to-partition no-trace",
	} {
		names, s := offered(action)
		if got := strings.Join(names, " "); got != want {
			t.Errorf("%s is offered %q, want %q", action, got, want)
		}
		if s != DefaultSettings(action) {
			t.Errorf("%s: offered defaults %+v, want %+v", action, s, DefaultSettings(action))
		}
		if err := s.Check(action); err != nil {
			t.Errorf("%s: its defaults refused: %v", action, err)
		}
	}
	for _, c := range []struct {
		bad  func(*Settings)
		name string
	}{
		{func(s *Settings) { s.Rate = -1 }, "rate"},
		{func(s *Settings) { s.Burst = 0 }, "burst"},
		{func(s *Settings) { s.Concurrency = 257 }, "concurrency"},
		{func(s *Settings) { s.Via = "pigeon" }, "via"},
		{func(s *Settings) { s.Via, s.Transform = "move", "." }, "via"},
		{func(s *Settings) { s.Via, s.ToQueue = "endpoint", "q" }, "via"},
		{func(s *Settings) { s.Transform = ".[" }, "transform"},
		{func(s *Settings) { s.MaxGeneration = -1 }, "max-generation"},
		{func(s *Settings) { s.MaxFailures = -1 }, "max-failures"},
		{func(s *Settings) { s.MaxRefailures = -2 }, "max-refailures"},
		{func(s *Settings) { s.Order = "random" }, "order"},
		{func(s *Settings) { s.MaxLag = "soon" }, "max-lag"},
		{func(s *Settings) { s.Window = "25:00-26:00" }, "window"},
	} {
		s := DefaultSettings("replay")
		c.bad(&s)
		var se *SettingError
		if err := s.Check("replay"); !errors.As(err, &se) || se.Setting.String() != c.name {
			t.Errorf("%+v: %v, want %s refused", s, err, c.name)
		}
	}
	// A setting the action does not take is not checked: a discard runs
	// one delete at a time, whatever a concurrency says.
	if err := (Settings{Rate: 1, Burst: 1, Concurrency: 0}).Check("discard"); err != nil {
		t.Errorf("a discard's concurrency checked: %v", err)
	}
}
