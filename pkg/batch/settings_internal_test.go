package batch

import (
	"crypto/sha256"
	"encoding/hex"
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
