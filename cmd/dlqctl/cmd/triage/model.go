package triage

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/progress"
	"charm.land/bubbles/v2/textinput"
	"charm.land/bubbles/v2/viewport"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/dlqctl/dlqctl/cmd/dlqctl/cmd/dlq"
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

type screen int

const (
	screenClasses screen = iota // the groups (failure classes by default)
	screenRows                  // one group's dead letters
	screenMessage               // one message, as dlq show prints it
)

// config is what the command line decided.
type config struct {
	base  cmdutil.SelectionFlags // the selection flags, carried into every action
	sel   *replay.Selection
	by    string
	now   func() time.Time
	color bool
}

// chunk is how many rows a load hands the screen at a time: the groups
// are counted and drawn as the rows arrive.
const chunk = 2000

// model is the screen's state. It is a pointer: the loads and the run
// report back through messages, never by touching it from elsewhere.
type model struct {
	ctx  context.Context
	wf   *dlq.Workflow
	cfg  config
	keys keys
	help help.Model
	pal  *render.Palette
	st   styles

	width, height int

	// What is loaded: every row the selection matches (no payloads),
	// grouped as they arrive. gen numbers the row loads and decGen the
	// loads of decisions and scopes; an answer to an older one is dropped.
	gen        int
	decGen     int
	cancelLoad context.CancelFunc
	loading    bool
	loadErr    error
	rows       []client.Row
	grouper    *dlq.Grouper
	members    map[string][]int
	groups     []dlq.Group
	dec        map[client.Address]ledger.Decision
	undecCache map[string]int // per group, dropped when rows or decisions change
	scopes     *dlq.CheckResult
	scopesErr  error

	screen        screen
	by            string
	classCur      cursor
	rowCur        cursor
	classKey      string // the group drilled into
	classFilter   string
	rowFilter     string
	filtering     bool
	input         textinput.Model
	classView     []int  // indexes into groups that the filter keeps
	rowView       []int  // indexes into rows of the open group that the filter keeps
	rowWidths     [2]int // the widest queue and group name among rowView
	msg           *message
	modal         any // *helpModal, *holdModal or *planModal
	status        string
	statusIsError bool
	log           []string // what was done, printed when the screen closes
	run           *running // the batch running, if any
}

// message is the open message.
type message struct {
	addr    client.Address
	loading bool
	page    pager
}

// target is what an action acts on: a group, or one message.
type target struct {
	words string   // for people: "class 1a2b3c4d (42 rows)"
	args  []string // the selection, as the command line's flags and addresses
}

type helpModal struct{}

type holdModal struct {
	t                 target
	until, why, owner textinput.Model
	form              form
	err               string
	busy              bool
}

// args is the hold as dlq decide's command line.
func (hm *holdModal) args() []string {
	a := []string{"--action", "hold", "--until", hm.until.Value(), "--why", hm.why.Value()}
	if o := strings.TrimSpace(hm.owner.Value()); o != "" {
		a = append(a, "--owner", o)
	}
	return append(a, hm.t.args...)
}

type phase int

const (
	planning phase = iota
	confirming
	executing
	finished
)

type planModal struct {
	verb      string // replay or rm
	t         target
	phase     phase
	planned   *dlq.Planned
	page      pager // the plan, then the outcome
	rate, why textinput.Model
	form      form
	err       string
	override  bool // ctrl+o: act on held messages too
	ran       bool // the batch was started: the lists are reloaded after
	done      int
	bar       progress.Model
	result    string // the outcome, as the command prints it
}

// running is a batch being run; triageRun waits for it when the screen
// closes under it.
type running struct {
	cancel  context.CancelFunc
	done    atomic.Int64
	notify  chan struct{}
	ended   chan struct{}
	outcome *dlq.Outcome
	err     error
	logged  bool
}

// Messages from the loads and actions.
type (
	rowsMsg struct {
		gen  int
		rows []client.Row
		done bool
		err  error
		next tea.Cmd
	}
	decisionsMsg struct {
		gen int
		dec map[client.Address]ledger.Decision
		err error
	}
	scopesMsg struct {
		gen int
		res *dlq.CheckResult
		err error
	}
	showMsg struct {
		addr client.Address
		res  dlq.ShowResult
		err  error
	}
	decidedMsg struct {
		batch *ledger.Batch
		n     int
		err   error
	}
	plannedMsg struct {
		planned *dlq.Planned
		err     error
	}
	progressMsg struct{}
	runDoneMsg  struct{}
)

func newModel(ctx context.Context, wf *dlq.Workflow, cfg config) *model {
	m := &model{ctx: ctx, wf: wf, cfg: cfg, keys: newKeys(), pal: render.NewPalette(cfg.color), st: newStyles(),
		by: cfg.by, members: map[string][]int{}, grouper: dlq.NewGrouper(cfg.by)}
	m.help = help.New()
	if !cfg.color {
		m.help.Styles = help.Styles{}
	}
	m.input = m.newInput("/ ", "")
	return m
}

func (m *model) Init() tea.Cmd { return m.reload() }

// reload reads everything again: the rows, the decisions, the scopes.
func (m *model) reload() tea.Cmd {
	if m.cancelLoad != nil {
		m.cancelLoad()
	}
	m.gen++
	m.decGen++
	ctx, cancel := context.WithCancel(m.ctx)
	m.cancelLoad = cancel
	m.rows, m.members, m.grouper, m.groups = nil, map[string][]int{}, dlq.NewGrouper(m.by), nil
	m.loading, m.loadErr = true, nil
	m.refilter()
	return tea.Batch(m.streamRows(ctx, m.gen), m.loadDecisions(m.decGen), m.loadScopes(m.decGen))
}

func (m *model) streamRows(ctx context.Context, gen int) tea.Cmd {
	ch := make(chan rowsMsg, 2)
	go func() {
		defer close(ch)
		send := func(msg rowsMsg) bool {
			select {
			case ch <- msg:
				return true
			case <-ctx.Done():
				return false
			}
		}
		batch := make([]client.Row, 0, chunk)
		for r, err := range m.wf.Rows(ctx, m.cfg.sel) {
			if err != nil {
				send(rowsMsg{gen: gen, rows: batch, done: true, err: err})
				return
			}
			if batch = append(batch, r); len(batch) == chunk {
				if !send(rowsMsg{gen: gen, rows: batch}) {
					return
				}
				batch = make([]client.Row, 0, chunk)
			}
		}
		send(rowsMsg{gen: gen, rows: batch, done: true})
	}()
	var next tea.Cmd
	next = func() tea.Msg {
		msg, ok := <-ch
		if !ok {
			return nil
		}
		msg.next = next
		return msg
	}
	return next
}

func (m *model) loadDecisions(gen int) tea.Cmd {
	return func() tea.Msg {
		dec, err := m.wf.Decisions(m.ctx)
		return decisionsMsg{gen: gen, dec: dec, err: err}
	}
}

func (m *model) loadScopes(gen int) tea.Cmd {
	var queues []string
	if m.cfg.base.Queue != "" {
		queues = []string{m.cfg.base.Queue}
	}
	return func() tea.Msg {
		res, err := m.wf.Check(m.ctx, queues)
		return scopesMsg{gen: gen, res: res, err: err}
	}
}

func (m *model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.layout()
		return m, nil
	case tea.KeyPressMsg:
		return m, m.key(msg)
	case rowsMsg:
		if msg.gen != m.gen {
			return m, nil
		}
		m.addRows(msg.rows)
		if msg.err != nil {
			m.loadErr = msg.err
			m.setError(msg.err)
		}
		if msg.done {
			m.loading = false
			return m, nil
		}
		return m, msg.next
	case decisionsMsg:
		if msg.gen == m.decGen {
			if msg.err != nil {
				m.setError(msg.err)
			}
			m.dec, m.undecCache = msg.dec, nil
		}
		return m, nil
	case scopesMsg:
		if msg.gen == m.decGen {
			m.scopes, m.scopesErr = msg.res, msg.err
		}
		return m, nil
	case showMsg:
		if m.msg == nil || m.msg.addr != msg.addr {
			return m, nil
		}
		m.msg.loading = false
		if msg.err != nil {
			m.msg.page.set(m.pal.Red("error: ") + render.Clean(msg.err.Error()))
			return m, nil
		}
		var b strings.Builder
		dlq.WriteShow(&b, m.pal, msg.res)
		m.msg.page.set(strings.TrimRight(b.String(), "\n"))
		return m, nil
	case decidedMsg:
		return m, m.decided(msg)
	case plannedMsg:
		m.planned(msg)
		return m, nil
	case progressMsg:
		if pm, ok := m.modal.(*planModal); ok && m.run != nil {
			pm.done = int(m.run.done.Load())
		}
		if m.run != nil {
			return m, m.run.wait()
		}
		return m, nil
	case runDoneMsg:
		return m, m.runDone()
	}
	return m, m.forward(msg)
}

// forward hands other messages (cursor blinks, pastes) to the input in use.
func (m *model) forward(msg tea.Msg) tea.Cmd {
	switch md := m.modal.(type) {
	case *holdModal:
		return md.form.update(msg)
	case *planModal:
		if md.phase == confirming {
			return md.form.update(msg)
		}
		return nil
	}
	var cmd tea.Cmd
	if m.filtering {
		m.input, cmd = m.input.Update(msg)
	}
	return cmd
}

func (m *model) setError(err error) {
	m.status, m.statusIsError = render.Clean(oneLine(err.Error())), true
}

func (m *model) setStatus(s string) { m.status, m.statusIsError = s, false }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// addRows counts arriving rows into their groups.
func (m *model) addRows(rows []client.Row) {
	for _, r := range rows {
		i := len(m.rows)
		m.rows = append(m.rows, r)
		k := m.grouper.Add(r)
		m.members[k] = append(m.members[k], i)
	}
	m.groups, m.undecCache = m.grouper.Groups(), nil
	m.refilter()
}

// regroup groups the loaded rows another way.
func (m *model) regroup(by string) {
	m.by = by
	m.grouper, m.members = dlq.NewGrouper(by), map[string][]int{}
	for i, r := range m.rows {
		k := m.grouper.Add(r)
		m.members[k] = append(m.members[k], i)
	}
	m.groups, m.undecCache = m.grouper.Groups(), nil
	m.classCur = cursor{}
	m.refilter()
}

// refilter recomputes what the lists show, keeping the cursor on the
// same group when it is still there.
func (m *model) refilter() {
	keep := ""
	if i := m.classCur.pos; i < len(m.classView) && m.classView[i] < len(m.groups) {
		keep = m.groups[m.classView[i]].Key
	}
	m.classView = m.classView[:0]
	f := strings.ToLower(m.classFilter)
	for i, g := range m.groups {
		if f == "" || strings.Contains(strings.ToLower(g.Key+" "+g.Pattern+" "+strings.Join(g.Queues, ",")), f) {
			m.classView = append(m.classView, i)
		}
	}
	for vi, gi := range m.classView {
		if m.groups[gi].Key == keep {
			m.classCur.pos = vi
		}
	}
	m.classCur.fit(len(m.classView), m.listHeight())

	m.rowView, m.rowWidths = m.rowView[:0], [2]int{}
	f = strings.ToLower(m.rowFilter)
	for _, i := range m.members[m.classKey] {
		r := m.rows[i]
		if f == "" || strings.Contains(strings.ToLower(r.Queue+" "+r.Partition+" "+r.ConsumerGroup+" "+r.ErrorMessage+" "+r.TransactionID+" "+r.PartitionID), f) {
			m.rowView = append(m.rowView, i)
			m.rowWidths[0] = max(m.rowWidths[0], len(r.Queue))
			m.rowWidths[1] = max(m.rowWidths[1], len(dlq.GroupName(r.ConsumerGroup)))
		}
	}
	m.rowCur.fit(len(m.rowView), m.listHeight())
}

// currentGroup is the group under the cursor on the classes screen.
func (m *model) currentGroup() (dlq.Group, bool) {
	if m.classCur.pos < len(m.classView) {
		return m.groups[m.classView[m.classCur.pos]], true
	}
	return dlq.Group{}, false
}

// currentRow is the row under the cursor on the rows screen.
func (m *model) currentRow() (client.Row, bool) {
	if m.rowCur.pos < len(m.rowView) {
		return m.rows[m.rowView[m.rowCur.pos]], true
	}
	return client.Row{}, false
}

// target is what h, r and x act on here: the group under the cursor with
// the command line's selection, or the message under the cursor or open.
func (m *model) target() (target, bool) {
	switch m.screen {
	case screenMessage:
		return target{words: "message " + m.msg.addr.String(), args: []string{m.msg.addr.String()}}, true
	case screenRows:
		r, ok := m.currentRow()
		if !ok {
			return target{}, false
		}
		return target{words: "message " + r.Address().String(), args: []string{r.Address().String()}}, true
	}
	g, ok := m.currentGroup()
	if !ok {
		return target{}, false
	}
	first := m.rows[m.members[g.Key][0]]
	s := m.cfg.base
	// --limit bounds what the screen loads; an action takes the whole group.
	s.Limit = 0
	words := ""
	switch m.by {
	case "error":
		s.Class, words = g.Key, "class "+g.Key
	case "queue":
		s.Queue, words = first.Queue, "queue "+first.Queue
	case "cg":
		s.Queue, s.ConsumerGroup, words = first.Queue, first.ConsumerGroup, "queue "+first.Queue+", group "+dlq.GroupName(first.ConsumerGroup)
	case "partition":
		s.Queue, s.Partition, words = first.Queue, first.Partition, "queue "+first.Queue+", partition "+first.Partition
	}
	words += " (" + plural(g.Count, "row", "rows") + ")"
	return target{words: render.Clean(words), args: selectionArgs(s)}, true
}

// selectionArgs writes selection flags back as a command line.
func selectionArgs(s cmdutil.SelectionFlags) []string {
	var a []string
	add := func(flag, v string) {
		if v != "" {
			a = append(a, "--"+flag, v)
		}
	}
	add("queue", s.Queue)
	add("cg", s.ConsumerGroup)
	add("partition", s.Partition)
	add("error", s.Error)
	add("failed-after", s.FailedAfter)
	add("failed-before", s.FailedBefore)
	add("class", s.Class)
	add("from-file", s.FromFile)
	if s.Limit > 0 {
		add("limit", strconv.Itoa(s.Limit))
	}
	return a
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// ---- keys ----

func (m *model) key(k tea.KeyPressMsg) tea.Cmd {
	if k.String() == "ctrl+c" {
		if m.run != nil {
			m.run.cancel()
			m.setStatus("Interrupting: calls in flight finish, then the batch can be resumed.")
			return nil
		}
		return tea.Quit
	}
	switch md := m.modal.(type) {
	case *helpModal:
		if key.Matches(k, m.keys.Help, m.keys.Back, m.keys.Quit) {
			m.modal = nil
		}
		return nil
	case *holdModal:
		return m.holdKey(md, k)
	case *planModal:
		return m.planKey(md, k)
	}
	if m.filtering {
		return m.filterKey(k)
	}
	switch {
	case key.Matches(k, m.keys.Quit):
		return tea.Quit
	case key.Matches(k, m.keys.Help):
		m.modal = &helpModal{}
	case key.Matches(k, m.keys.Refresh):
		m.setStatus("")
		cmd := m.reload()
		if m.screen == screenMessage {
			return tea.Batch(cmd, m.openMessage(m.msg.addr))
		}
		return cmd
	case key.Matches(k, m.keys.Filter) && m.screen != screenMessage:
		m.filtering = true
		m.input.SetValue(m.filterText())
		m.input.CursorEnd()
		return m.input.Focus()
	case key.Matches(k, m.keys.Group) && m.screen == screenClasses:
		next := dlq.GroupBys[0]
		for i, b := range dlq.GroupBys {
			if b == m.by {
				next = dlq.GroupBys[(i+1)%len(dlq.GroupBys)]
			}
		}
		m.classFilter = ""
		m.regroup(next)
	case key.Matches(k, m.keys.Hold):
		if t, ok := m.target(); ok {
			hm := &holdModal{t: t, until: m.newInput("until ", "24h"), why: m.newInput("why   ", ""), owner: m.newInput("owner ", "")}
			hm.until.Placeholder = "24h, 2d or an RFC 3339 time"
			hm.why.Placeholder = "recorded in the ledger"
			hm.owner.Placeholder = "the team that owns the follow-up (optional)"
			hm.form = form{fields: []*textinput.Model{&hm.until, &hm.why, &hm.owner}}
			m.modal = hm
			return hm.form.start(0)
		}
	case key.Matches(k, m.keys.Replay), key.Matches(k, m.keys.Discard):
		if t, ok := m.target(); ok {
			verb := "replay"
			if key.Matches(k, m.keys.Discard) {
				verb = "rm"
			}
			m.modal = &planModal{verb: verb, t: t}
			return m.plan(verb, t.args)
		}
	case key.Matches(k, m.keys.Open):
		switch m.screen {
		case screenClasses:
			if g, ok := m.currentGroup(); ok {
				m.screen, m.classKey, m.rowCur, m.rowFilter = screenRows, g.Key, cursor{}, ""
				m.refilter()
			}
		case screenRows:
			if r, ok := m.currentRow(); ok {
				return m.openMessage(r.Address())
			}
		}
	case key.Matches(k, m.keys.Back):
		switch m.screen {
		case screenMessage:
			m.screen, m.msg = screenRows, nil
		case screenRows:
			m.screen = screenClasses
		default:
			m.classFilter = ""
			m.refilter()
		}
	default:
		m.move(k)
	}
	return nil
}

// move moves the cursor, or scrolls the message.
func (m *model) move(k tea.KeyPressMsg) {
	if m.screen == screenMessage {
		switch {
		case key.Matches(k, m.keys.Top):
			m.msg.page.vp.GotoTop()
		case key.Matches(k, m.keys.Bottom):
			m.msg.page.vp.GotoBottom()
		default:
			m.msg.page.update(k)
		}
		return
	}
	c, n := &m.classCur, len(m.classView)
	if m.screen == screenRows {
		c, n = &m.rowCur, len(m.rowView)
	}
	h := m.listHeight()
	switch {
	case key.Matches(k, m.keys.Up):
		c.move(-1, n, h)
	case key.Matches(k, m.keys.Down):
		c.move(1, n, h)
	case key.Matches(k, m.keys.PageUp):
		c.move(-h, n, h)
	case key.Matches(k, m.keys.PageDown):
		c.move(h, n, h)
	case key.Matches(k, m.keys.Top):
		c.move(-n, n, h)
	case key.Matches(k, m.keys.Bottom):
		c.move(n, n, h)
	}
}

func (m *model) filterText() string {
	if m.screen == screenRows {
		return m.rowFilter
	}
	return m.classFilter
}

func (m *model) filterKey(k tea.KeyPressMsg) tea.Cmd {
	switch k.String() {
	case "enter":
		m.filtering = false
		m.input.Blur()
		return nil
	case "esc":
		m.filtering = false
		m.input.Blur()
		m.input.SetValue("")
	}
	var cmd tea.Cmd
	if m.filtering {
		m.input, cmd = m.input.Update(k)
	}
	if m.screen == screenRows {
		m.rowFilter = m.input.Value()
	} else {
		m.classFilter = m.input.Value()
	}
	m.refilter()
	return cmd
}

func (m *model) openMessage(addr client.Address) tea.Cmd {
	m.msg = &message{addr: addr, loading: true, page: newPager()}
	m.screen = screenMessage
	m.layout()
	return func() tea.Msg {
		res, err := m.wf.Show(m.ctx, addr)
		return showMsg{addr: addr, res: res, err: err}
	}
}

// ---- hold ----

func (m *model) holdKey(hm *holdModal, k tea.KeyPressMsg) tea.Cmd {
	if hm.busy {
		return nil
	}
	switch {
	case key.Matches(k, m.keys.Cancel):
		m.modal = nil
		return nil
	case key.Matches(k, m.keys.Next), k.String() == "enter" && hm.form.focus == 0:
		return hm.form.next()
	case k.String() == "enter":
		args := hm.args()
		hm.busy, hm.err = true, ""
		return func() tea.Msg {
			b, n, err := m.wf.Decide(m.ctx, args)
			return decidedMsg{batch: b, n: n, err: err}
		}
	}
	// An error said about what was typed goes once the typing changes it.
	hm.err = ""
	return hm.form.update(k)
}

func (m *model) decided(msg decidedMsg) tea.Cmd {
	hm, ok := m.modal.(*holdModal)
	if !ok {
		return nil
	}
	hm.busy = false
	if msg.err != nil {
		hm.err = render.Clean(oneLine(msg.err.Error()))
		return nil
	}
	m.modal = nil
	b := msg.batch
	line := "Held " + plural(msg.n, "message", "messages") + " until " + render.Timestamp(b.Until) + " (batch " + b.ID + ")"
	m.setStatus(line)
	m.log = append(m.log, line)
	// The decisions and the scopes' verdicts change; the rows do not. An
	// open message shows its decisions: it is read again.
	m.decGen++
	cmds := []tea.Cmd{m.loadDecisions(m.decGen), m.loadScopes(m.decGen)}
	if m.screen == screenMessage && m.msg != nil {
		cmds = append(cmds, m.openMessage(m.msg.addr))
	}
	return tea.Batch(cmds...)
}

// ---- replay and discard ----

func (m *model) plan(verb string, args []string) tea.Cmd {
	// The screen asks before it acts; the command's --yes says so.
	args = append(append([]string{}, args...), "--yes")
	return func() tea.Msg {
		p, err := m.wf.Plan(m.ctx, verb, args)
		return plannedMsg{planned: p, err: err}
	}
}

func (m *model) planned(msg plannedMsg) {
	pm, ok := m.modal.(*planModal)
	if !ok || pm.phase != planning {
		return
	}
	pm.page = newPager()
	if msg.err != nil {
		pm.phase, pm.err = finished, render.Clean(oneLine(msg.err.Error()))
		return
	}
	pm.planned = msg.planned
	if msg.planned.Messages() == 0 {
		pm.phase, pm.result = finished, "Nothing to "+pm.verb+": no dead letter matches now."
		pm.page.set(pm.result)
		m.layout()
		return
	}
	var b strings.Builder
	msg.planned.WritePlan(&b, m.pal)
	pm.page.set(strings.TrimRight(b.String(), "\n"))
	pm.rate = m.newInput("rate/s ", strconv.FormatFloat(msg.planned.Rate(), 'f', -1, 64))
	pm.why = m.newInput("why    ", "")
	pm.why.Placeholder = "recorded in the ledger"
	pm.form = form{fields: []*textinput.Model{&pm.rate, &pm.why}}
	pm.phase = confirming
	pm.form.start(0)
	m.layout()
}

func (m *model) planKey(pm *planModal, k tea.KeyPressMsg) tea.Cmd {
	switch pm.phase {
	case planning:
		if key.Matches(k, m.keys.Cancel) {
			m.modal = nil
		}
		return nil
	case executing:
		if key.Matches(k, m.keys.Cancel) {
			m.run.cancel()
			m.setStatus("Interrupting: calls in flight finish, then the batch can be resumed.")
		}
		return nil
	case finished:
		if key.Matches(k, m.keys.Cancel, m.keys.Submit) {
			m.modal = nil
			if pm.ran {
				return m.afterRun()
			}
		} else {
			pm.page.update(k)
		}
		return nil
	}
	switch {
	case key.Matches(k, m.keys.Cancel):
		m.modal = nil
		m.setStatus("Cancelled: nothing was written.")
		return nil
	case key.Matches(k, m.keys.Override) && pm.planned.Held() > 0:
		pm.planned.OverrideHold()
		pm.override, pm.err = true, ""
		return nil
	case key.Matches(k, m.keys.Next):
		return pm.form.next()
	case key.Matches(k, m.keys.Up), key.Matches(k, m.keys.Down), key.Matches(k, m.keys.PageUp), key.Matches(k, m.keys.PageDown):
		if k.Text == "" { // arrows and pages scroll the plan; letters are typed
			pm.page.update(k)
			return nil
		}
	case k.String() == "enter":
		return m.startRun(pm)
	}
	pm.err = ""
	return pm.form.update(k)
}

// startRun checks the form and runs the batch.
func (m *model) startRun(pm *planModal) tea.Cmd {
	rate, err := strconv.ParseFloat(strings.TrimSpace(pm.rate.Value()), 64)
	if err != nil {
		pm.err = "rate: want messages a second, such as 10 (0 for unlimited)"
		return nil
	}
	if err := pm.planned.SetRate(rate); err != nil {
		pm.err = render.Clean(oneLine(err.Error()))
		return nil
	}
	why := strings.TrimSpace(pm.why.Value())
	if why == "" {
		pm.err = "why: say why; it is recorded in the ledger"
		return nil
	}
	if pm.planned.Held() > 0 && !pm.override {
		pm.err = plural(pm.planned.Held(), "message is", "messages are") + " under an active hold: ctrl+o overrides (--override-hold)"
		return nil
	}
	ctx, cancel := context.WithCancel(m.ctx)
	run := &running{cancel: cancel, notify: make(chan struct{}, 1), ended: make(chan struct{})}
	m.run = run
	m.setStatus("")
	pm.phase, pm.err, pm.done, pm.ran = executing, "", 0, true
	opts := []progress.Option{progress.WithWidth(max(20, m.width-10)), progress.WithFillCharacters('█', '░')}
	if !m.cfg.color {
		opts = append(opts, progress.WithColors(lipgloss.NoColor{}))
	}
	pm.bar = progress.New(opts...)
	planned := pm.planned
	go func() {
		defer close(run.ended)
		run.outcome, run.err = planned.Run(ctx, why, func(done int) {
			run.done.Store(int64(done))
			select {
			case run.notify <- struct{}{}:
			default:
			}
		})
	}()
	return run.wait()
}

// wait returns the run's next message: progress, or its end.
func (r *running) wait() tea.Cmd {
	return func() tea.Msg {
		select {
		case <-r.notify:
			return progressMsg{}
		case <-r.ended:
			return runDoneMsg{}
		}
	}
}

func (m *model) runDone() tea.Cmd {
	run := m.run
	if run == nil {
		return nil
	}
	m.run = nil
	line := m.logRun(run)
	pm, ok := m.modal.(*planModal)
	if !ok {
		m.setStatus(line)
		return m.afterRun()
	}
	pm.phase = finished
	pm.done = int(run.done.Load())
	if run.err != nil {
		pm.err = render.Clean(oneLine(run.err.Error()))
		return nil
	}
	var b strings.Builder
	run.outcome.Write(&b, m.pal)
	pm.result = strings.TrimRight(b.String(), "\n")
	pm.page.set(pm.result)
	m.setStatus(line)
	return nil
}

// logRun records a finished run in the session's log and returns its
// summary line.
func (m *model) logRun(run *running) string {
	run.logged = true
	if run.err != nil {
		line := "error: " + render.Clean(oneLine(run.err.Error()))
		m.log = append(m.log, line)
		return line
	}
	var b strings.Builder
	run.outcome.Write(&b, render.NewPalette(false))
	text := strings.TrimRight(b.String(), "\n")
	m.log = append(m.log, strings.Split(text, "\n")...)
	first, _, _ := strings.Cut(text, "\n")
	return first
}

// afterRun reloads what a run changed: rows, decisions, scopes.
func (m *model) afterRun() tea.Cmd {
	cmd := m.reload()
	if m.screen == screenMessage {
		return tea.Batch(cmd, m.openMessage(m.msg.addr))
	}
	return cmd
}

// wait blocks until a run the screen closed under has finished, and logs it.
func (m *model) wait() {
	if m.run == nil {
		return
	}
	<-m.run.ended
	if !m.run.logged {
		m.logRun(m.run)
	}
}

// ---- inputs ----

func (m *model) newInput(prompt, value string) textinput.Model {
	ti := textinput.New()
	ti.Prompt = prompt
	ti.SetValue(value)
	// The width bounds what is shown (the input scrolls); the placeholder
	// needs one too, or only its first letter shows.
	ti.SetWidth(max(m.width-6-ansi.StringWidth(prompt), 20))
	s := textinput.DefaultDarkStyles()
	s.Cursor.Blink = false
	if !m.cfg.color {
		s.Focused = textinput.StyleState{}
		s.Blurred = textinput.StyleState{}
		s.Cursor.Color = nil
	}
	ti.SetStyles(s)
	return ti
}

// form is a modal's text fields, one in focus; tab goes round them.
type form struct {
	fields []*textinput.Model
	focus  int
}

// start focuses field i.
func (f *form) start(i int) tea.Cmd {
	f.focus = i
	return f.fields[i].Focus()
}

// next moves the focus to the next field.
func (f *form) next() tea.Cmd {
	f.fields[f.focus].Blur()
	return f.start((f.focus + 1) % len(f.fields))
}

// update hands a message to the field in focus.
func (f *form) update(msg tea.Msg) tea.Cmd {
	in := f.fields[f.focus]
	var cmd tea.Cmd
	*in, cmd = in.Update(msg)
	return cmd
}

// ---- cursor ----

// cursor is a list position and the first row shown.
type cursor struct{ pos, top int }

func (c *cursor) move(d, n, h int) {
	c.pos += d
	c.fit(n, h)
}

func (c *cursor) fit(n, h int) {
	if n == 0 {
		c.pos, c.top = 0, 0
		return
	}
	c.pos = min(max(c.pos, 0), n-1)
	h = max(h, 1)
	if c.pos < c.top {
		c.top = c.pos
	}
	if c.pos >= c.top+h {
		c.top = c.pos - h + 1
	}
	c.top = min(max(c.top, 0), max(n-h, 0))
}

// pager is scrollable text: a viewport, with the text word-wrapped to its
// width (the viewport's own soft wrap cuts words in two).
type pager struct {
	vp        viewport.Model
	text      string
	wrappedAt int
}

func newPager() pager {
	vp := viewport.New()
	// h, r and x act; only the arrows, pages and ctrl keys scroll.
	vp.KeyMap.Left = key.NewBinding(key.WithKeys("ctrl+left"))
	vp.KeyMap.Right = key.NewBinding(key.WithKeys("ctrl+right"))
	vp.KeyMap.HalfPageUp = key.NewBinding(key.WithKeys("ctrl+u"))
	vp.KeyMap.HalfPageDown = key.NewBinding(key.WithKeys("ctrl+d"))
	vp.KeyMap.PageDown = key.NewBinding(key.WithKeys("pgdown", "space", "ctrl+f"))
	vp.KeyMap.PageUp = key.NewBinding(key.WithKeys("pgup", "ctrl+b"))
	return pager{vp: vp, wrappedAt: -1}
}

func (p *pager) set(text string) { p.text, p.wrappedAt = text, -1 }

func (p *pager) update(k tea.KeyPressMsg) { p.vp, _ = p.vp.Update(k) }

// lines are the w×h window of the text.
func (p *pager) lines(w, h int) []string {
	p.vp.SetWidth(w)
	p.vp.SetHeight(h)
	if p.wrappedAt != w {
		p.vp.SetContent(ansi.Wrap(p.text, w, ""))
		p.wrappedAt = w
	}
	return viewLines(p.vp.View(), w)
}

// more reports whether text is below the window.
func (p *pager) more() bool { return !p.vp.AtBottom() }
