package dlq

import (
	"strings"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/iostreams"
)

// While a run is paused (for lag, outside its window), the bar says
// paused and why, and no rate (the bar's own fell towards "0 msg/hr");
// once it goes on, its rate is of the messages since.
func TestProgressSaysPausedNotARateOfZero(t *testing.T) {
	io, _, _, errOut := iostreams.Test()
	io.SetTTY(false, false, true)
	f := cmdutil.NewFactory(io)
	done, paused, finish := progress(f, 100, "replay")
	for i := 1; i <= 20; i++ {
		done(i)
		time.Sleep(30 * time.Millisecond)
	}
	paused("orders/billing lags 7m0s, past --max-lag 2m0s")
	time.Sleep(1200 * time.Millisecond)
	done(20) // the engine reports progress while it waits
	time.Sleep(200 * time.Millisecond)
	got := errOut.String()
	i := strings.Index(got, "paused: orders/billing lags 7m0s")
	if i < 0 {
		t.Fatalf("the bar does not say paused:\n%q", got)
	}
	if strings.Contains(got[i:], "msg/") {
		t.Fatalf("the bar shows a rate while paused:\n%q", got[i:])
	}
	paused("")
	for i := 21; i <= 40; i++ {
		done(i)
		time.Sleep(30 * time.Millisecond)
	}
	finish()
	if !strings.Contains(errOut.String(), "msg/s)") {
		t.Fatalf("no rate once it went on:\n%q", errOut.String())
	}
}
