package present

import (
	"fmt"
	"strconv"
	"time"

	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// Progress says a batch's progress in one line: done, failed and left of
// its size, the run's pace and its estimated end, who runs it, and a
// stop asked of it.
func Progress(p *ledger.Progress, now time.Time) string {
	c := render.Clean
	s := fmt.Sprintf("%s of %s done, %s failed, %s left", render.Count(p.Done), render.Count(p.Size), render.Count(p.Failed), render.Count(p.Left))
	if p.Skipped > 0 {
		s += fmt.Sprintf(", %s skipped", render.Count(p.Skipped))
	}
	if p.Rate > 0 {
		s += fmt.Sprintf("; %s/s", strconv.FormatFloat(p.Rate, 'f', 1, 64))
	}
	if !p.EstimatedEnd.IsZero() {
		s += ", ends in about " + render.Duration(p.EstimatedEnd.Sub(now).Round(time.Second))
	}
	if r := p.Run; r.Host != "" {
		s += fmt.Sprintf("; run by pid %d on %s", r.PID, c(r.Host))
		if !r.LastBeat.IsZero() {
			s += ", heard from " + render.AgeSince(now, r.LastBeat) + " ago"
		}
	}
	if st := p.Run.Stop; st != nil && p.Status == ledger.StatusRunning {
		s += fmt.Sprintf("; stop asked by %s %s ago: %s", c(st.By), render.AgeSince(now, st.At), c(st.Why))
	}
	return s
}

// RunningRow is a running batch as decisions ls --running lists it.
func RunningRow(b ledger.Batch, p *ledger.Progress, now time.Time) []string {
	c := render.Clean
	rate, ends, run := "-", "-", "-"
	if p.Rate > 0 {
		rate = strconv.FormatFloat(p.Rate, 'f', 1, 64) + "/s"
	}
	if !p.EstimatedEnd.IsZero() {
		ends = "in " + render.Duration(p.EstimatedEnd.Sub(now).Round(time.Second))
	}
	if r := p.Run; r.Host != "" {
		run = fmt.Sprintf("%s pid %d, %s ago", c(r.Host), r.PID, render.AgeSince(now, r.LastBeat))
	}
	status := p.Status
	if p.Run.Stop != nil && status == ledger.StatusRunning {
		status = "stopping"
	}
	return []string{b.ID, b.Action, c(b.By), status, render.Count(p.Done) + "/" + render.Count(p.Size), render.Count(p.Failed), render.Count(p.Left), rate, ends, run}
}

// RunningHeader is RunningRow's header.
var RunningHeader = []string{"BATCH", "ACTION", "BY", "STATUS", "DONE", "FAILED", "LEFT", "RATE", "ENDS", "RUN (HOST, PID, LAST HEARD)"}
