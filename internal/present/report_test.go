package present_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// The engine says what is left to do as a typed Next; the report words
// it with the commands and flags a user types, after the engine's reason.
func TestReportWordsWhatIsLeft(t *testing.T) {
	a := deadletter.Address{PartitionID: "p1", TransactionID: "t1"}
	cases := []struct {
		l    replay.AddrResult
		want string
	}{
		{replay.AddrResult{Reason: "unknown: lost", Next: replay.RetryUnknownNext}, "unknown: lost; check the live queue, then re-run with --retry-unknown"},
		{replay.AddrResult{Reason: "failed: no route", Next: replay.OtherPathNext}, "failed: no route (use --via auto or manual)"},
		{replay.AddrResult{Reason: "not restored: queue q does not exist", Next: replay.AnotherQueueNext}, "does not exist (restore it --to-queue another)"},
		{replay.AddrResult{Reason: "back", Next: replay.ReplayOrDiscardNext, Generation: 3}, "back: replay it as generation 3 with dlqctl dlq replay p1/t1 --why …, or discard it with dlqctl dlq rm p1/t1 --why …"},
		{replay.AddrResult{Reason: "not sent", Next: replay.CheckEarlierCopyNext}, "discard this dead letter (dlqctl dlq rm p1/t1 --why …)"},
		{replay.AddrResult{Reason: "skipped: cap", Next: replay.GenerationCapNext}, "skipped: cap; --max-generation sets the cap"},
		{replay.AddrResult{Reason: "left for the next run", Next: replay.RerunNext}, "left for the next run; the resume line below runs the batch again"},
		{replay.AddrResult{Reason: "skipped: envelope", Next: replay.DiscardNext}, "  p1/t1  skipped: envelope\n"},
	}
	for _, c := range cases {
		c.l.Address = a
		var out bytes.Buffer
		present.Report(&out, render.NewPalette(false), &replay.Report{Listed: []replay.AddrResult{c.l}})
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("%s: got %q, want %q in it", c.l.Next, out.String(), c.want)
		}
	}
	stops := map[replay.Next]string{
		replay.PrimaryNext:        "; point --server at the primary",
		replay.ManualPathNext:     "; replay with --via manual",
		replay.FailureLimitNext:   " (--max-failures)",
		replay.RefailureLimitNext: " (--max-refailures)",
	}
	for n, want := range stops {
		var out bytes.Buffer
		present.Report(&out, render.NewPalette(false), &replay.Report{Stopped: "stopped", StopNext: n})
		if !strings.Contains(out.String(), "Stopped: stopped"+want) {
			t.Errorf("%s: got %q, want %q in it", n, out.String(), want)
		}
	}
}
