package cmdutil_test

import (
	"fmt"
	"testing"

	"github.com/spf13/pflag"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/batch"
)

// Every batch setting a command line gives is named by its flag: a
// resume keeps the recorded value of a setting the line did not give, and
// refuses one it gave that the batch cannot change (restore's
// --to-partition was missing, so a resume took the recorded partition
// silently).
func TestGivenInNamesEverySettingFlag(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("to-partition", "", "")
	fs.String("to-queue", "", "")
	fs.Float64("rate", 10, "")
	fs.Bool("yes", false, "")
	if err := fs.Parse([]string{"--to-partition", "p9", "--rate", "5", "--yes"}); err != nil {
		t.Fatal(err)
	}
	g := cmdutil.GivenIn(fs)
	if !g.Has(batch.GivenToPartition) || !g.Has(batch.GivenRate) || g.Has(batch.GivenToQueue) {
		t.Fatalf("given %#x", uint16(g))
	}
}

// The batch refuses a setting in its own names; the command line says
// the flag, however the refusal was wrapped.
func TestMessageNamesTheFlag(t *testing.T) {
	_, err := batch.ResumeSettings([]byte(`{"rate":10,"toPartition":"p1"}`), batch.Settings{ToPartition: "p2"}, batch.GivenToPartition)
	if err == nil {
		t.Fatal("a resume changed the partition a started restore publishes to")
	}
	wrapped := fmt.Errorf("resuming batch b1: %w", err)
	want := `resuming batch b1: --to-partition: this batch publishes to partition "p1"; a resume cannot change it`
	if got := cmdutil.Message(wrapped); got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if err := batch.ValidateRate(-1); cmdutil.Message(err) != "invalid --rate -1: want messages per second between 0.01 and 1000000, or 0 for unlimited" {
		t.Fatalf("got %q", cmdutil.Message(err))
	}
	ce := &batch.ChangedError{BatchID: "b1", What: batch.GivenTransform}
	if got := cmdutil.Message(fmt.Errorf("%w: run it as approved", ce)); got != "batch b1 was approved for another plan (--transform changed since): run it as approved" {
		t.Fatalf("got %q", got)
	}
}
