package triage

import (
	"fmt"
	"strings"

	"github.com/dlqctl/dlqctl/internal/cmdutil"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/render"
)

func (m *model) helpBody(w, h int) []string {
	m.help.SetWidth(w - 4)
	lines := []string{"Keys", ""}
	lines = append(lines, strings.Split(m.help.FullHelpView(m.keys.helpFor(m.screen).FullHelp()), "\n")...)
	lines = append(lines, "",
		"In a plan: tab moves between rate and why, enter runs, ctrl+o acts",
		"on messages under a hold all the same (--override-hold), esc",
		"cancels. While a batch runs, ctrl+c or esc interrupts it (calls in",
		"flight finish; it resumes with dlq replay --batch); ctrl+c quits.",
		"",
		"h, r and x act on the class under the cursor (with the selection",
		"dlqctl triage was given), or on one message in a class or open.",
		"Nothing is written before its plan is shown and confirmed; every",
		"decision is recorded in the ledger as its dlq command records it.",
		"",
		"/ filters by text; /?EXPR filters with a jq predicate over each",
		"row as dlq ls --where does (?.retryCount > 3): in a class, its",
		"rows; in the class list, the classes with a row it is true for.")
	return box("Help", lines, w, h)
}

func (m *model) holdBody(hm *holdModal, w, h int) []string {
	lines := []string{
		"Hold " + hm.t.words,
		"",
		"Under investigation: dlq check stops counting these dead letters as",
		"undecided until then. Recorded with who, when and why.",
		"",
		hm.until.View(),
		hm.why.View(),
		hm.owner.View(),
		"",
		m.st.faint.Render("same as: " + cmdutil.CommandLine(append([]string{"dlqctl", "dlq", "decide"}, hm.args()...)...)),
	}
	if hm.busy {
		lines = append(lines, "Recording…")
	}
	if hm.err != "" {
		lines = append(lines, m.pal.Red("error: ")+hm.err)
	}
	return box("Hold", lines, w, h)
}

func (m *model) planBody(pm *planModal, w, h int) []string {
	verb := deadletter.ActionOf(pm.verb).Title
	title := verb + " " + pm.t.words
	inner := h - 2
	var lines []string
	switch pm.phase {
	case planning:
		lines = []string{"Planning: reading the selection, as dlq " + pm.verb + " --dry-run does…"}
	case confirming:
		formLen := 4
		if pm.err != "" {
			formLen++
		}
		lines = pm.page.lines(w-4, max(inner-formLen, 1))
		rule := strings.Repeat("─", max(w-4, 1))
		if pm.page.more() {
			rule = fit("── more below: ↑/↓ pgup/pgdn scroll "+rule, w-4)
		}
		lines = append(lines, rule, pm.rate.View(), pm.why.View(),
			m.st.faint.Render("same as: "+cmdutil.CommandLine(append(append([]string{"dlqctl", "dlq", pm.verb}, pm.t.args...), m.runFlags(pm)...)...)))
		if pm.err != "" {
			lines = append(lines, m.pal.Red("error: ")+pm.err)
		}
	case executing:
		total := max(pm.planned.Messages(), 1)
		pm.bar.SetWidth(max(w-6, 10))
		lines = []string{
			deadletter.ActionOf(pm.verb).Doing + " " + render.Plural(pm.planned.Messages(), "message", "messages") + "…",
			"",
			pm.bar.ViewAs(float64(pm.done) / float64(total)),
			fmt.Sprintf("%d of %d done", pm.done, pm.planned.Messages()),
			"",
			"ctrl+c or esc interrupts: calls in flight finish, and the batch",
			"resumes with " + cmdutil.CommandLine("dlqctl", "dlq", pm.verb, "--batch", pm.planned.BatchID(), "--yes") + ".",
		}
	case finished:
		if pm.result != "" {
			lines = pm.page.lines(w-4, max(inner-1, 1))
		}
		if pm.err != "" {
			lines = append(lines, m.pal.Red("error: ")+pm.err)
		}
	}
	return box(title, lines, w, h)
}

// runFlags are the flags the form adds to the command line.
func (m *model) runFlags(pm *planModal) []string {
	f := []string{"--rate", strings.TrimSpace(pm.rate.Value()), "--why", pm.why.Value()}
	if pm.override {
		f = append(f, "--override-hold")
	}
	return append(f, "--yes")
}
