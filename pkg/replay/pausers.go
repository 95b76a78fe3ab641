package replay

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// A Pauser holds a run's scheduling back while it is closed: no new
// address is started (calls in flight finish). The engine asks its pausers
// before each address's first call; a pauser answers from what it last
// read, so a pause costs no request per message.
type Pauser interface {
	// Closed says why scheduling must wait at now ("" when it may go on)
	// and when to ask again.
	Closed(ctx context.Context, now time.Time) (why string, recheck time.Duration)
	// Kind names the pauser.s pauses in the report: "consumer lag",
	// "outside the window".
	Kind() string
}

// Pause is the time a run spent waiting on one kind of pauser.
type Pause struct {
	Kind    string        `json:"kind"`
	Times   int           `json:"times"`
	For     time.Duration `json:"-"`
	Seconds float64       `json:"seconds"`
	// Last is the last reason given ("group billing lags 7m (max 2m)").
	Last string `json:"last"`
}

// LagSource is where a LagPauser reads lag; *client.Client is one.
type LagSource interface {
	ConsumerGroups(ctx context.Context) ([]client.ConsumerGroup, error)
}

// LagPauser is closed while a consumer group of a destination queue lags
// more than Max behind: a replay at full rate into consumers that cannot
// keep up is how a recovery becomes the second incident.
type LagPauser struct {
	Source LagSource
	// Queues are the queues the run publishes to.
	Queues []string
	Max    time.Duration
	// Every is how often the lag is read; 0 means every 5 seconds.
	Every time.Duration

	mu     sync.Mutex
	readAt time.Time
	why    string
}

// Kind is "consumer lag".
func (g *LagPauser) Kind() string { return "consumer lag" }

func (g *LagPauser) every() time.Duration {
	if g.Every <= 0 {
		return 5 * time.Second
	}
	return g.Every
}

// Closed reads the destination groups' lag at most once every Every. A
// lag that cannot be read keeps the run paused: pacing by lag was asked
// for, and a replay is not let loose on consumers nobody can see.
func (g *LagPauser) Closed(ctx context.Context, now time.Time) (string, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.readAt.IsZero() || now.Sub(g.readAt) >= g.every() || now.Before(g.readAt) {
		g.why = g.read(ctx)
		g.readAt = now
	}
	return g.why, g.every()
}

func (g *LagPauser) read(ctx context.Context) string {
	cgs, err := g.Source.ConsumerGroups(ctx)
	if err != nil {
		return "consumer lag unknown: " + firstLine(err.Error())
	}
	var worst *client.ConsumerGroup
	for i := range cgs {
		cg := &cgs[i]
		if !slices.Contains(g.Queues, cg.Queue) {
			continue
		}
		if cg.Lag == nil {
			return fmt.Sprintf("consumer lag unknown: the broker reports none for group %s of %s", deadletter.GroupLabel(cg.Name), cg.Queue)
		}
		if cg.Lag.MaxTime > g.Max && (worst == nil || cg.Lag.MaxTime > worst.Lag.MaxTime) {
			worst = cg
		}
	}
	if worst == nil {
		return ""
	}
	where := ""
	if len(g.Queues) > 1 {
		where = " on " + worst.Queue
	}
	return fmt.Sprintf("group %s%s lags %s (max %s)", deadletter.GroupLabel(worst.Name), where, render.Duration(worst.Lag.MaxTime), render.Duration(g.Max))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Window is a time of day a run may publish in, such as 22:00-06:00: a
// long recovery spread over off-peak hours. It may wrap past midnight.
type Window struct {
	from, to int // minutes after midnight
	loc      *time.Location
	text     string
}

// ParseWindow reads "HH:MM-HH:MM", in local time, or followed by a zone
// ("22:00-06:00 Europe/Berlin", "01:00-05:00 UTC").
func ParseWindow(s string) (Window, error) {
	text := strings.TrimSpace(s)
	span, zone, _ := strings.Cut(text, " ")
	w := Window{loc: time.Local, text: text}
	if zone = strings.TrimSpace(zone); zone != "" {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			return Window{}, fmt.Errorf("invalid window %q: unknown time zone %q", s, zone)
		}
		w.loc = loc
	}
	a, b, ok := strings.Cut(span, "-")
	var err error
	if !ok {
		return Window{}, fmt.Errorf("invalid window %q: want HH:MM-HH:MM, optionally followed by a time zone", s)
	}
	if w.from, err = minuteOfDay(a); err == nil {
		w.to, err = minuteOfDay(b)
	}
	if err != nil {
		return Window{}, fmt.Errorf("invalid window %q: %v", s, err)
	}
	if w.from == w.to {
		return Window{}, fmt.Errorf("invalid window %q: it starts where it ends (no window publishes at any time)", s)
	}
	return w, nil
}

func minuteOfDay(s string) (int, error) {
	h, m, ok := strings.Cut(strings.TrimSpace(s), ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || len(m) != 2 || hh < 0 || hh > 24 || mm < 0 || mm > 59 || (hh == 24 && mm != 0) {
		return 0, fmt.Errorf("%q is not a time of day (HH:MM)", s)
	}
	return hh*60 + mm, nil
}

// String is the window as written.
func (w Window) String() string { return w.text }

// Contains reports whether t is inside the window.
func (w Window) Contains(t time.Time) bool {
	t = t.In(w.loc)
	m := t.Hour()*60 + t.Minute()
	if w.from < w.to {
		return m >= w.from && m < w.to
	}
	return m >= w.from || m < w.to
}

// Opens is the next time at or after t the window opens (t itself when
// it is open).
func (w Window) Opens(t time.Time) time.Time {
	if w.Contains(t) {
		return t
	}
	lt := t.In(w.loc)
	open := time.Date(lt.Year(), lt.Month(), lt.Day(), w.from/60, w.from%60, 0, 0, w.loc)
	if !open.After(lt) {
		open = open.AddDate(0, 0, 1)
	}
	return open
}

// Kind is "outside the window".
func (w Window) Kind() string { return "outside the window" }

// Closed is closed outside the window; it asks again when the window
// opens, or in a minute, whichever is sooner (the clock may jump).
func (w Window) Closed(_ context.Context, now time.Time) (string, time.Duration) {
	open := w.Opens(now)
	if open.Equal(now) {
		return "", 0
	}
	wait := open.Sub(now)
	return fmt.Sprintf("outside the window %s (opens in %s)", w.text, render.Duration(wait.Round(time.Minute))), min(wait, time.Minute)
}
