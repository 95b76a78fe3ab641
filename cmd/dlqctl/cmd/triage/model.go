package triage

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/progress"
	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/internal/present"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/gate"
	"github.com/dlqctl/dlqctl/pkg/inspect"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/dlqctl/dlqctl/pkg/render"
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
	sel   *deadletter.Selection
	by    string
	now   func() time.Time
	color bool
}

// chunk is how many rows a load hands the screen at a time: the groups
// are counted and drawn as the rows arrive. The first hand-over is
// smaller, so that the first classes are drawn from the first page.
const chunk, firstChunk = 2000, 200

// model is the screen's state. It is a pointer: the loads and the run
// report back through messages, never by touching it from elsewhere.
type model struct {
	ctx     context.Context
	session *session
	cfg     config
	keys    keys
	help    help.Model
	pal     *render.Palette
	st      styles

	width, height int

	// What is loaded: every row the selection matches (no payloads),
	// grouped as they arrive. gen numbers the row loads and decGen the
	// loads of decisions and scopes; an answer to an older one is dropped.
	gen        int
	decGen     int
	cancelLoad context.CancelFunc
	loading    bool
	loadErr    error
	rows       *rowStore
	grouper    *inspect.Grouper
	members    map[string][]int
	// withDecision are the members whose address has a decision: the only
	// ones whose undecided or held state needs a look (every other row
	// is undecided).
	withDecision map[string][]int
	groups       []inspect.Group
	// grouped is how many rows the groups counted when last made: a load
	// makes them again once an eighth more (at least a chunk) has come,
	// or a second has passed, so a large load costs a few passes over
	// its rows, not one a chunk.
	grouped   int
	groupedAt time.Time
	made      int // how many times the groups were made (tests count them)
	dec       map[deadletter.Address]ledger.Decision
	counts    map[string]*groupCounts // per group, dropped when rows or decisions change
	scopes    *gate.Result
	scopesErr error

	screen      screen
	by          string
	classCur    cursor
	rowCur      cursor
	classKey    string // the group drilled into
	classFilter string
	rowFilter   string
	// rowWhere is the row filter's jq predicate when it starts with "?"
	// (as dlq ls --where), compiled once per text; whereErr says why it
	// does not compile.
	rowWhere      *deadletter.Where
	rowWhereText  string
	whereErr      string
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
	addr    deadletter.Address
	loading bool
	page    pager
}

// target is what an action acts on: a group, or one message.
type target struct {
	group string   // the group's key, when it is one
	words string   // for people: "class 1a2b3c4d (42 rows)"
	args  []string // the selection, as the command line's flags and addresses
	// sel and addrs are the selection the action is built from.
	sel   cmdutil.SelectionFlags
	addrs []string
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
	planned   *planned
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
	outcome *outcome
	err     error
	logged  bool
}

// Messages from the loads and actions.
type (
	rowsMsg struct {
		gen    int
		rows   []deadletter.Row
		dec    map[deadletter.Address]ledger.Decision // the rows' decisions
		decErr error                                  // a lookup failed: rows after it lack theirs
		done   bool
		err    error
		next   tea.Cmd
	}
	decisionsMsg struct {
		gen int
		dec map[deadletter.Address]ledger.Decision
		err error
	}
	scopesMsg struct {
		gen int
		res *gate.Result
		err error
	}
	showMsg struct {
		addr deadletter.Address
		res  inspect.ShowResult
		err  error
	}
	decidedMsg struct {
		batch *ledger.Batch
		n     int
		err   error
	}
	plannedMsg struct {
		planned *planned
		err     error
	}
	progressMsg struct{}
	runDoneMsg  struct{}
)

func newModel(ctx context.Context, s *session, cfg config) *model {
	m := &model{ctx: ctx, session: s, cfg: cfg, keys: newKeys(), pal: render.NewPalette(cfg.color), st: newStyles(),
		by: cfg.by, rows: newRowStore(), dec: map[deadletter.Address]ledger.Decision{}, members: map[string][]int{}, grouper: inspect.NewGrouper(cfg.by)}
	m.help = help.New()
	if !cfg.color {
		m.help.Styles = help.Styles{}
	}
	m.input = m.newInput("/ ", "")
	return m
}

func (m *model) Init() tea.Cmd { return m.reload() }

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
		for a, d := range msg.dec {
			m.dec[a] = d
		}
		m.addRows(msg.rows, msg.done)
		if msg.decErr != nil {
			m.setError(msg.decErr)
		}
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
			for a, d := range msg.dec {
				m.dec[a] = d
			}
			m.counts = nil
			m.fileDecisions()
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
		present.Show(&b, &b, m.pal, msg.res)
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

// currentGroup is the group under the cursor on the classes screen.
func (m *model) currentGroup() (inspect.Group, bool) {
	if m.classCur.pos < len(m.classView) {
		return m.groups[m.classView[m.classCur.pos]], true
	}
	return inspect.Group{}, false
}

// currentRow is the row under the cursor on the rows screen.
func (m *model) currentRow() (deadletter.Row, bool) {
	if m.rowCur.pos < len(m.rowView) {
		return m.rows.At(m.rowView[m.rowCur.pos]), true
	}
	return deadletter.Row{}, false
}

// target is what h, r and x act on here: the group under the cursor with
// the command line's selection, or the message under the cursor or open.
func (m *model) target() (target, bool) {
	switch m.screen {
	case screenMessage:
		a := m.msg.addr.String()
		return target{words: "message " + a, args: []string{a}, addrs: []string{a}}, true
	case screenRows:
		r, ok := m.currentRow()
		if !ok {
			return target{}, false
		}
		a := r.Address().String()
		return target{words: "message " + a, args: []string{a}, addrs: []string{a}}, true
	}
	g, ok := m.currentGroup()
	if !ok {
		return target{}, false
	}
	first := m.rows.At(m.members[g.Key][0])
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
		s.Queue, s.ConsumerGroup, words = first.Queue, first.ConsumerGroup, "queue "+first.Queue+", group "+deadletter.GroupLabel(first.ConsumerGroup)
	case "partition":
		s.Queue, s.Partition, words = first.Queue, first.Partition, "queue "+first.Queue+", partition "+first.Partition
	}
	words += " (" + render.Plural(g.Count, "row", "rows") + ")"
	return target{group: g.Key, words: render.Clean(words), args: selectionArgs(s), sel: s}, true
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
