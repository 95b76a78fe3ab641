package triage

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/progress"
	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/dlqctl/dlqctl/pkg/batch"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/render"
)

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
		t, until, why, owner := hm.t, hm.until.Value(), hm.why.Value(), hm.owner.Value()
		hm.busy, hm.err = true, ""
		return func() tea.Msg {
			b, n, err := m.session.hold(m.ctx, t, until, why, owner)
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
	line := "Held " + render.Plural(msg.n, "message", "messages") + " until " + render.Timestamp(b.Until) + " (batch " + b.ID + ")"
	m.setStatus(line)
	m.log = append(m.log, line)
	// The decisions of what was held and the scopes' verdicts change; the
	// rows do not. An open message shows its decisions: it is read again.
	m.decGen++
	var addrs []deadletter.Address
	if hm.t.group != "" {
		m.rows.EachOf(m.members[hm.t.group], func(_ int, r deadletter.Row) bool {
			addrs = append(addrs, r.Address())
			return true
		})
	}
	for _, s := range hm.t.addrs {
		if a, err := deadletter.ParseAddress(s); err == nil {
			addrs = append(addrs, a)
		}
	}
	cmds := []tea.Cmd{m.lookupDecisions(m.decGen, addrs), m.loadScopes(m.decGen)}
	if m.screen == screenMessage && m.msg != nil {
		cmds = append(cmds, m.openMessage(m.msg.addr))
	}
	return tea.Batch(cmds...)
}

func (m *model) plan(verb string, t target) tea.Cmd {
	return func() tea.Msg {
		p, err := m.session.plan(m.ctx, verb, t)
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
		pm.planned.Close()
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
	why := strings.TrimSpace(pm.why.Value())
	var held *batch.HeldError
	var bad *batch.SettingError
	switch err := pm.planned.Refusal(why, rate); {
	case errors.As(err, &bad):
		pm.err = render.Clean(oneLine(bad.Words("rate")))
		return nil
	case errors.Is(err, batch.ErrNoReason):
		pm.err = "why: say why; it is recorded in the ledger"
		return nil
	case errors.As(err, &held):
		pm.err = render.Plural(held.Messages, "message is", "messages are") + " under an active hold: ctrl+o overrides (--override-hold)"
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
		run.outcome, run.err = planned.Run(ctx, why, rate, func(done int) {
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
