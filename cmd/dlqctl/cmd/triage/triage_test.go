package triage

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	dlqctl "github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/internal/testutil"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
)

var update = flag.Bool("update", false, "rewrite golden files")

// world is the screen's model on the seeded sandbox, on the fixed clock,
// with a ledger of its own; its messages are driven by the test as the
// program would: commands run in goroutines, Update in the test's.
type world struct {
	t       testing.TB
	b       *sandbox.Broker
	cli     *testutil.CLI
	session *session
	m       *model
	msgs    chan tea.Msg
	pending int
	quit    bool
}

const policies = `policies:
  - queue: orders
    max-age: 1d
    triage-slo: 4h
`

func newWorld(t testing.TB, color bool, sel ...string) *world {
	t.Helper()
	b := sandbox.New(func() time.Time { return testutil.Now })
	if err := b.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	w := openWorld(t, b, color, sel...)
	w.settle()
	return w
}

// openWorld opens the screen on a broker; its loads are left running.
func openWorld(t testing.TB, b *sandbox.Broker, color bool, sel ...string) *world {
	t.Helper()
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	cli := testutil.NewCLI(t, srv.URL, nil)
	cli.WriteConfig(policies)
	f, _, _, _ := cli.Factory()
	t.Cleanup(f.Close)
	session, err := newSession(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	o := &Options{GroupBy: "error"}
	if len(sel) > 0 {
		cmd := NewCmdTriage(f, func(got *Options) error { o = got; return nil })
		cmd.SetArgs(sel)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := o.Selection.Build(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, b: b, cli: cli, session: session, msgs: make(chan tea.Msg, 16)}
	w.m = newModel(context.Background(), session, config{base: o.Selection, sel: s, by: o.GroupBy, now: f.Now, color: color})
	w.send(tea.WindowSizeMsg{Width: 80, Height: 24})
	w.do(w.m.Init())
	return w
}

// do runs a command as the program does, in a goroutine.
func (w *world) do(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	w.pending++
	go func() { w.msgs <- cmd() }()
}

func (w *world) send(msg tea.Msg) {
	_, cmd := w.m.Update(msg)
	w.do(cmd)
}

// step handles the next message a command returned.
func (w *world) step() {
	w.t.Helper()
	select {
	case msg := <-w.msgs:
		w.pending--
		switch msg := msg.(type) {
		case nil:
		case tea.BatchMsg:
			for _, c := range msg {
				w.do(c)
			}
		case tea.QuitMsg:
			w.quit = true
		default:
			w.send(msg)
		}
	case <-time.After(30 * time.Second):
		w.t.Fatal("no message from the screen's commands in 30s")
	}
}

// settle handles messages until no command is left.
func (w *world) settle() {
	w.t.Helper()
	for w.pending > 0 {
		w.step()
	}
}

// until handles messages until cond holds.
func (w *world) until(cond func() bool) {
	w.t.Helper()
	for !cond() {
		if w.pending == 0 {
			w.t.Fatalf("condition not met and nothing left to wait for; the screen:\n%s", ansi.Strip(w.m.render()))
		}
		w.step()
	}
}

// keys presses keys: names (enter, esc, down, tab, ctrl+c, ctrl+o) or
// single characters.
func (w *world) keys(names ...string) {
	for _, n := range names {
		w.send(keyPress(n))
		w.settle()
	}
}

// press presses one key and leaves what it started running.
func (w *world) press(name string) { w.send(keyPress(name)) }

// typ types text into the field in focus.
func (w *world) typ(text string) {
	for _, r := range text {
		w.send(tea.KeyPressMsg{Code: r, Text: string(r)})
	}
	w.settle()
}

func keyPress(n string) tea.KeyPressMsg {
	switch n {
	case "enter":
		return tea.KeyPressMsg{Code: tea.KeyEnter}
	case "esc":
		return tea.KeyPressMsg{Code: tea.KeyEscape}
	case "down":
		return tea.KeyPressMsg{Code: tea.KeyDown}
	case "up":
		return tea.KeyPressMsg{Code: tea.KeyUp}
	case "tab":
		return tea.KeyPressMsg{Code: tea.KeyTab}
	case "home":
		return tea.KeyPressMsg{Code: tea.KeyHome}
	case "left":
		return tea.KeyPressMsg{Code: tea.KeyLeft}
	case "backspace":
		return tea.KeyPressMsg{Code: tea.KeyBackspace}
	case "ctrl+c":
		return tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}
	case "ctrl+o":
		return tea.KeyPressMsg{Code: 'o', Mod: tea.ModCtrl}
	case "ctrl+u":
		return tea.KeyPressMsg{Code: 'u', Mod: tea.ModCtrl}
	}
	r := []rune(n)[0]
	return tea.KeyPressMsg{Code: r, Text: n}
}

var (
	batchID = regexp.MustCompile(`\d{8}T\d{6}-[0-9a-f]{4}`)
	elapsed = regexp.MustCompile(`in \d+(\.\d+)?(µs|ms|s)`)
)

// frame is the screen as text, with what changes from run to run (batch
// ids, elapsed times, the sandbox's port) replaced.
func (w *world) frame() string {
	s := ansi.Strip(w.m.render())
	lines := strings.Split(s, "\n")
	if len(lines) != 24 {
		w.t.Fatalf("%d lines, want 24", len(lines))
	}
	for i, l := range lines {
		if ansi.StringWidth(l) != 80 {
			w.t.Fatalf("line %d is %d cells wide, want 80: %q", i+1, ansi.StringWidth(l), l)
		}
	}
	s = strings.ReplaceAll(s, w.session.Server(), "http://sandbox")
	s = batchID.ReplaceAllString(s, "BATCH-ID")
	return elapsed.ReplaceAllString(s, "in ELAPSED")
}

func (w *world) golden(name string) {
	w.t.Helper()
	got := w.frame()
	testutil.Golden(w.t, filepath.Join("..", "..", "..", "..", "testdata", "golden", "triage", name+".txt"), got+"\n", *update)
}

func (w *world) ledger() *ledger.Store {
	s, err := ledger.Open(context.Background(), w.cli.Env["DLQCTL_LEDGER"])
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = s.Close() })
	return s
}

// classOf finds a class in the loaded groups.
func (w *world) classOf(pattern string) inspect.Group {
	for _, g := range w.m.groups {
		if strings.HasPrefix(g.Pattern, pattern) {
			return g
		}
	}
	w.t.Fatalf("no class %q", pattern)
	return inspect.Group{}
}

// moveTo puts the classes cursor on a class.
func (w *world) moveTo(class string) {
	w.keys("home")
	for i := 0; i < 20; i++ {
		if g, ok := w.m.currentGroup(); ok && g.Key == class {
			return
		}
		w.keys("down")
	}
	w.t.Fatalf("class %s not reached", class)
}

func TestScreensAt80x24(t *testing.T) {
	w := newWorld(t, false)
	w.golden("classes")

	w.keys("enter")
	if w.m.screen != screenRows {
		t.Fatal("enter did not open the class")
	}
	w.golden("rows")

	w.keys("enter")
	if w.m.screen != screenMessage || w.m.msg.loading {
		t.Fatal("enter did not open the message")
	}
	w.golden("message")

	w.keys("esc", "esc", "?")
	w.golden("help")
	w.keys("esc")
	if w.m.modal != nil || w.m.screen != screenClasses {
		t.Fatal("esc did not close the help and stay on the classes")
	}
}

// The scenario on the model: open, drill into a class, hold it,
// replay another with confirmation; then the ledger and the broker's
// books say what was done, once.
func TestHoldOneClassReplayAnother(t *testing.T) {
	w := newWorld(t, false)
	held := w.classOf("order <n> not found")
	replayed := w.classOf("timeout calling inventory-service")

	w.moveTo(held.Key)
	w.keys("h")
	w.golden("hold")
	w.keys("enter") // until 24h stands; on to why
	w.typ("waiting on the inventory fix")
	w.keys("enter")
	if w.m.modal != nil {
		t.Fatalf("hold not recorded: %+v", w.m.modal)
	}
	if !strings.Contains(w.m.status, "Held "+render.Plural(held.Messages, "message", "messages")) {
		t.Fatalf("status %q", w.m.status)
	}
	if n := w.m.undecided(held.Key); n != 0 {
		t.Fatalf("held class still shows %d undecided", n)
	}

	w.moveTo(replayed.Key)
	w.keys("r")
	w.golden("replay-plan")
	w.keys("enter")
	if pm := w.m.modal.(*planModal); pm.phase != confirming || !strings.Contains(pm.err, "why") {
		t.Fatalf("a replay without a reason went on: phase %v, err %q", pm.phase, pm.err)
	}
	// The form opens on its first field, the rate.
	w.keys("ctrl+u")
	w.typ("0") // unlimited: the screen's confirmation is the --yes
	w.keys("tab")
	w.typ("inventory-service fixed")
	w.keys("enter")
	// One message of the class failed in the held class too: the hold
	// covers it, and the screen refuses as the command does.
	pm := w.m.modal.(*planModal)
	if pm.phase != confirming || !strings.Contains(pm.err, "1 message is under an active hold") {
		t.Fatalf("a held message did not stop the replay: phase %v, err %q", pm.phase, pm.err)
	}
	w.golden("replay-held")
	w.keys("ctrl+o", "enter")
	w.until(func() bool { pm, ok := w.m.modal.(*planModal); return ok && pm.phase == finished })
	w.golden("replay-done")
	w.keys("enter")
	w.settle()
	w.golden("after")

	st := w.ledger()
	ctx := context.Background()
	bs, err := st.Batches(ctx, ledger.BatchFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 {
		t.Fatalf("%d batches, want the hold and the replay", len(bs))
	}
	byAction := map[string]ledger.Batch{}
	for _, b := range bs {
		byAction[b.Action] = b
	}
	h, r := byAction[ledger.ActionHold], byAction[ledger.ActionReplay]
	if h.Why != "waiting on the inventory fix" || h.By != "oncall" || !h.Until.Equal(testutil.Now.Add(24*time.Hour)) || h.Selection != "--class "+held.Key {
		t.Fatalf("hold recorded as %+v", h)
	}
	if r.Why != "inventory-service fixed" || r.Status != ledger.StatusDone || r.Selection != "--class "+replayed.Key {
		t.Fatalf("replay recorded as %+v", r)
	}

	// The books: each message with a row in the replayed class is live
	// once and has left the DLQ (all its rows: the replay acts on the
	// message); every other message is still dead-lettered, none live.
	classes := map[string]map[string]bool{} // payload → classes of its rows
	for _, row := range seedRows(t) {
		p := compactJSON(row.Payload)
		if classes[p] == nil {
			classes[p] = map[string]bool{}
		}
		classes[p][deadletter.ClassID(row.Error)] = true
	}
	live := map[string]int{}
	for _, m := range w.b.LiveMessages() {
		live[compactJSON(m.Payload)]++
	}
	dead := map[string]bool{}
	for _, row := range w.b.DeadLetterRows() {
		dead[compactJSON(row.Payload)] = true
	}
	n := 0
	for p, cs := range classes {
		switch {
		case cs[replayed.Key]:
			n++
			if live[p] != 1 || dead[p] {
				t.Errorf("replayed message %s: live %d times, still dead-lettered %v", p, live[p], dead[p])
			}
		case live[p] != 0 || !dead[p]:
			t.Errorf("message %s outside the class: live %d times, dead-lettered %v", p, live[p], dead[p])
		}
	}
	if n != replayed.Messages {
		t.Fatalf("%d messages in the class, the screen said %d", n, replayed.Messages)
	}
}

// seedRows are the seed's dead-letter rows, read from a fresh broker.
func seedRows(t *testing.T) []sandbox.Row {
	b := sandbox.New(func() time.Time { return testutil.Now })
	if err := b.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	return b.DeadLetterRows()
}

// An interrupted replay stops as the command does, says how to resume,
// and the resumed batch publishes each message once.
func TestInterruptAndResume(t *testing.T) {
	w := newWorld(t, false)
	g := w.classOf("unknown payload version")
	w.moveTo(g.Key)
	w.keys("r", "ctrl+u")
	w.typ("4") // slow enough to interrupt
	w.keys("tab")
	w.typ("v4 parser deployed")
	w.press("enter")
	w.until(func() bool { pm := w.m.modal.(*planModal); return pm.phase == executing && pm.done >= 2 })
	w.press("ctrl+c")
	w.until(func() bool { pm := w.m.modal.(*planModal); return pm.phase == finished })
	pm := w.m.modal.(*planModal)
	if !strings.Contains(pm.result, "Resume with: dlqctl dlq replay --batch ") {
		t.Fatalf("no resume line after an interrupt:\n%s", pm.result)
	}
	resume := batchID.FindString(pm.result)
	if len(w.b.LiveMessages()) >= g.Messages {
		t.Fatalf("the interrupt did not stop the batch: %d of %d live", len(w.b.LiveMessages()), g.Messages)
	}
	// The resume line's batch, run as dlq replay --batch runs it.
	ctx := context.Background()
	p, err := batch.Prepare(ctx, batch.Env{Client: w.session.Client, Ledger: w.session.Ledger, Now: time.Now, User: "oncall"}, batch.Request{
		Action: deadletter.Replay, BatchID: resume, Settings: batch.DefaultSettings(deadletter.Replay),
		Given: batch.GivenRate})
	var pl *batch.Planned
	if err == nil {
		defer p.Close()
		pl, err = p.MakePlan(ctx)
	}
	if err == nil {
		unlimited := 0.0
		_, err = pl.Run(ctx, batch.Go{Rate: &unlimited}, batch.Hooks{})
	}
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	live := map[string]int{}
	for _, m := range w.b.LiveMessages() {
		live[string(m.Payload)]++
	}
	for p, n := range live {
		if n != 1 {
			t.Errorf("%s published %d times", p, n)
		}
	}
	if len(live) != g.Messages {
		t.Errorf("%d messages live after the resume, want %d", len(live), g.Messages)
	}
}

func TestFilterAndGrouping(t *testing.T) {
	w := newWorld(t, false)
	all := len(w.m.classView)
	w.keys("/")
	w.typ("payments")
	if n := len(w.m.classView); n == 0 || n >= all {
		t.Fatalf("filter payments: %d of %d classes", n, all)
	}
	for _, gi := range w.m.classView {
		if !strings.Contains(strings.Join(w.m.groups[gi].Queues, ","), "payments") && !strings.Contains(w.m.groups[gi].Pattern, "payments") {
			t.Fatalf("filter kept %+v", w.m.groups[gi])
		}
	}
	w.keys("enter")
	w.golden("filtered")
	w.keys("esc")
	if len(w.m.classView) != all {
		t.Fatal("esc did not clear the filter")
	}
	w.keys("g")
	if w.m.by != "queue" {
		t.Fatalf("g grouped by %s", w.m.by)
	}
	w.keys("g")
	w.golden("by-group")
	rows := 0
	for _, g := range w.m.groups {
		rows += g.Count
	}
	if rows != w.m.rows.Len() {
		t.Fatalf("regrouped %d rows of %d", rows, w.m.rows.Len())
	}
}

// The command line's selection narrows what is loaded, and every action
// carries it.
func TestSelectionIsCarried(t *testing.T) {
	w := newWorld(t, false, "--queue", "orders")
	for i := range w.m.rows.Len() {
		if r := w.m.rows.At(i); r.Queue != "orders" {
			t.Fatalf("loaded a row of %s", r.Queue)
		}
	}
	tg, ok := w.m.target()
	if !ok || !strings.Contains(strings.Join(tg.args, " "), "--queue orders --class ") {
		t.Fatalf("target %+v", tg)
	}
	if w.m.scopes == nil || len(w.m.scopes.Scopes) == 0 {
		t.Fatal("no scopes")
	}
	for _, s := range w.m.scopes.Scopes {
		if s.Queue != "orders" {
			t.Fatalf("scope of %s checked", s.Queue)
		}
	}
}

// Colour only where asked: NO_COLOR leaves reverse video for the cursor
// and no colour at all; a colour terminal gets the breach in red.
func TestColourFollowsTheTerminal(t *testing.T) {
	sgr := regexp.MustCompile(`\x1b\[([0-9;:]*)m`)
	colour := func(frame string) bool {
		for _, m := range sgr.FindAllStringSubmatch(frame, -1) {
			for _, p := range strings.Split(m[1], ";") {
				if n := p; len(n) == 2 && (n[0] == '3' || n[0] == '4' || n[0] == '9') && n != "39" && n != "49" {
					return true
				}
			}
		}
		return false
	}
	plain := newWorld(t, false)
	for _, k := range []string{"", "enter", "enter"} {
		if k != "" {
			plain.keys(k)
		}
		if f := plain.m.render(); colour(f) {
			t.Fatalf("colour with colour off:\n%q", f)
		}
	}
	if !strings.Contains(plain.m.render(), "\x1b[7m") {
		t.Fatal("no reverse video for the cursor")
	}
	if f := newWorld(t, true).m.render(); !colour(f) || !strings.Contains(f, "\x1b[91m") {
		t.Fatal("no colour on a colour terminal")
	}
}

// What a tired person runs into on the screen: a broker that is down, a
// hold made on an open message, a filter kept, a long message.
func TestTheScreenSaysWhatIsTrue(t *testing.T) {
	// The broker down: the header and the list say so, the cause whole.
	b := sandbox.New(func() time.Time { return testutil.Now })
	if err := b.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	b.SetFaults(sandbox.Faults{Fail503Every: 1, Script: func(sandbox.Call) sandbox.Action { return sandbox.Refuse }})
	down := openWorld(t, b, false)
	down.settle()
	frame := down.frame()
	if !strings.Contains(frame, "the broker cannot be read") || !strings.Contains(frame, "Cannot read the DLQ:") || !strings.Contains(frame, "503") {
		t.Fatalf("a broker that cannot be read:\n%s", frame)
	}

	w := newWorld(t, false)
	g := w.classOf("order <n> not found")
	w.moveTo(g.Key)
	w.keys("enter", "enter") // the class, then its first message
	if w.m.screen != screenMessage || !strings.Contains(w.m.msg.page.text, "none recorded") {
		t.Fatalf("message screen:\n%s", w.frame())
	}
	// End and Home scroll the message, as the key table says (on the
	// screen as drawn: the program draws after every key).
	w.frame()
	w.send(tea.KeyPressMsg{Code: tea.KeyEnd})
	if w.m.msg.page.vp.YOffset() == 0 {
		t.Fatalf("End did not scroll the message:\n%s", w.frame())
	}
	w.keys("home")
	if w.m.msg.page.vp.YOffset() != 0 {
		t.Fatal("Home did not scroll back")
	}
	// A hold on the open message: its decisions show it.
	w.keys("h", "tab")
	w.typ("INC-9")
	w.keys("tab")
	w.typ("team-billing")
	w.keys("enter")
	if strings.Contains(w.m.msg.page.text, "none recorded") || !strings.Contains(w.m.msg.page.text, "for team-billing") {
		t.Fatalf("after a hold on the open message:\n%s", w.m.msg.page.text)
	}
	// Back on the rows, the heading says who holds them; a kept filter
	// shows in the title.
	w.keys("esc")
	if !strings.Contains(w.frame(), "held by team-billing") {
		t.Fatalf("rows screen:\n%s", w.frame())
	}
	w.keys("/")
	w.typ("billing")
	w.keys("enter")
	w.m.setStatus("something else")
	if !strings.Contains(w.frame(), "filter: billing") {
		t.Fatalf("a kept filter is not shown:\n%s", w.frame())
	}
}

// In a class's rows, a filter that starts with ? is a jq predicate over
// the row as dlq ls -o ndjson prints it; one that does not compile says
// why and keeps every row.
func TestJqRowFilter(t *testing.T) {
	w := newWorld(t, false)
	w.keys("enter") // into the first class
	all := len(w.m.rowView)
	if all < 2 {
		t.Fatalf("the first class has %d rows", all)
	}
	first := w.m.rows.At(w.m.rowView[0])
	w.keys("/")
	w.typ(`?.transactionId == "` + first.TransactionID + `"`)
	if len(w.m.rowView) == 0 || len(w.m.rowView) >= all {
		t.Fatalf("?.transactionId kept %d of %d rows", len(w.m.rowView), all)
	}
	for _, i := range w.m.rowView {
		if w.m.rows.At(i).TransactionID != first.TransactionID {
			t.Fatalf("kept %s", w.m.rows.At(i).TransactionID)
		}
	}
	w.keys("esc", "/")
	w.typ(`?.retryCount >=`)
	if len(w.m.rowView) != all || w.m.whereErr == "" || !strings.Contains(ansi.Strip(w.m.render()), "invalid --where") {
		t.Fatalf("a broken expression: %d of %d rows, %q", len(w.m.rowView), all, w.m.whereErr)
	}
}

// In the class list, a filter that starts with ? keeps the classes that
// have a row the jq predicate is true for: it looked applied and kept
// every class before.
func TestJqClassFilter(t *testing.T) {
	w := newWorld(t, false)
	all := len(w.m.classView)
	w.keys("/")
	w.typ(`?.queue == "payments" and .retryCount >= 1`)
	if n := len(w.m.classView); n == 0 || n >= all {
		t.Fatalf("?.queue == \"payments\" kept %d of %d classes", n, all)
	}
	for _, gi := range w.m.classView {
		found := false
		for _, ri := range w.m.members[w.m.groups[gi].Key] {
			if w.m.rows.At(ri).Queue == "payments" {
				found = true
			}
		}
		if !found {
			t.Fatalf("kept class %s, which has no payments row", w.m.groups[gi].Key)
		}
	}
	w.keys("esc", "/")
	w.typ(`?.retryCount >=`)
	if len(w.m.classView) != all || !strings.Contains(ansi.Strip(w.m.render()), "invalid --where") {
		t.Fatalf("a broken expression: %d of %d classes", len(w.m.classView), all)
	}
}

// A large load makes the groups' figures a few times, not once a chunk
// (each time is a pass over what is loaded), and what the screen counts
// once it is in is what a pass over every row says: undecided and held,
// with decisions that came with the rows (a hold, then a refresh) and
// decisions read again after one.
func TestLargeLoadCountsTrue(t *testing.T) {
	n := 120_000
	if testutil.Race {
		n = 20_000
	}
	b := sandbox.New(func() time.Time { return testutil.Now })
	b.Fill(n, 2)
	w := openWorld(t, b, false)
	w.settle()
	if w.m.rows.Len() != n {
		t.Fatalf("%d rows loaded", w.m.rows.Len())
	}
	// Once a chunk would be 60 times (at 120k rows; the race detector's
	// smaller load makes them once a chunk, as it should).
	t.Logf("groups made %d times over %d rows", w.m.made, n)
	if !testutil.Race && w.m.made > 35 {
		t.Fatalf("the groups were made %d times over %d rows", w.m.made, n)
	}
	check := func(when string) {
		t.Helper()
		now := w.m.cfg.now()
		for _, g := range w.m.groups {
			undecided, held := 0, 0
			for _, i := range w.m.members[g.Key] {
				r := w.m.rows.At(i)
				d, ok := w.m.dec[r.Address()]
				if inspect.Undecided(d, ok, r, now, w.session.TriageSLO(r.Queue, r.ConsumerGroup)) {
					undecided++
				}
				if ok && d.Action == ledger.ActionHold && d.Covers(r.FailedAt, now) {
					held++
				}
			}
			if got := w.m.undecided(g.Key); got != undecided {
				t.Fatalf("%s: class %s shows %d undecided, its rows say %d", when, g.Key, got, undecided)
			}
			if got, _ := w.m.held(g.Key); got != held {
				t.Fatalf("%s: class %s shows %d held, its rows say %d", when, g.Key, got, held)
			}
		}
	}
	check("loaded")
	g := w.m.groups[len(w.m.groups)-1]
	w.moveTo(g.Key)
	w.keys("h", "enter")
	w.typ("a hold on the smallest class")
	w.keys("enter")
	if w.m.modal != nil {
		t.Fatalf("hold not recorded: %+v", w.m.modal)
	}
	if got, _ := w.m.held(g.Key); got == 0 {
		t.Fatalf("class %s shows nothing held after its hold", g.Key)
	}
	check("after the hold")
	w.keys("R")
	check("after a refresh")
}

// compactJSON is a payload as JSON without its layout: a copy is the same
// message however the broker spaced it.
func compactJSON(p []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, p) != nil {
		return string(p)
	}
	return b.String()
}

// A field that opens pre-filled is selected: typing replaces it (until
// 4h, not 24h4h), backspace clears it, an arrow keeps it to edit.
func TestPrefilledFieldsAreReplacedByTyping(t *testing.T) {
	w := newWorld(t, false)
	w.moveTo(w.classOf("order <n> not found").Key)
	w.keys("h")
	hm := w.m.modal.(*holdModal)
	w.typ("4h")
	if got := hm.until.Value(); got != "4h" {
		t.Fatalf("typing into the pre-filled until gave %q, want 4h", got)
	}
	w.keys("esc", "h")
	hm = w.m.modal.(*holdModal)
	w.keys("backspace")
	if got := hm.until.Value(); got != "" {
		t.Fatalf("backspace on the pre-filled until left %q", got)
	}
	w.keys("esc", "h")
	hm = w.m.modal.(*holdModal)
	w.keys("left")
	w.typ("0")
	if got := hm.until.Value(); got != "240h" && got != "204h" {
		t.Fatalf("an arrow, then typing, gave %q: the value should be kept and edited", got)
	}
	// An until that is no time is refused in the screen's words, and
	// nothing is recorded.
	w.keys("ctrl+u")
	w.typ("4x")
	w.keys("enter")
	w.typ("a reason")
	w.keys("enter")
	w.until(func() bool { return !hm.busy })
	if !strings.HasPrefix(hm.err, `invalid until "4x`) || !strings.Contains(hm.err, "want RFC 3339") || w.m.modal != hm {
		t.Fatalf("an until of 4x: err %q, modal %T", hm.err, w.m.modal)
	}
	w.keys("esc")
	w.moveTo(w.classOf("timeout calling inventory-service").Key)
	w.keys("r")
	w.typ("5")
	if pm := w.m.modal.(*planModal); pm.rate.Value() != "5" {
		t.Fatalf("typing into the pre-filled rate gave %q", pm.rate.Value())
	}
	// A rate that is none is refused as --rate is, and nothing runs.
	w.keys("ctrl+u")
	w.typ("-3")
	w.keys("tab")
	w.typ("a reason")
	w.keys("enter")
	if pm := w.m.modal.(*planModal); pm.phase != confirming || !strings.Contains(pm.err, "invalid rate -3") {
		t.Fatalf("a negative rate went on: phase %v, err %q", pm.phase, pm.err)
	}
}

// The screen lists as dlq ls does (inspect.List): a queue the broker does
// not have is said, not shown as an empty DLQ.
func TestAMisspelledQueueIsSaid(t *testing.T) {
	w := newWorld(t, false, "--queue", "ordrs")
	if w.m.loadErr == nil || !strings.Contains(w.m.loadErr.Error(), `"ordrs"`) {
		t.Fatalf("loading rows of a queue that does not exist: %v", w.m.loadErr)
	}
	if frame := w.frame(); !strings.Contains(frame, "ordrs") {
		t.Fatalf("the screen does not say so:\n%s", frame)
	}
}
