package present

import (
	"fmt"

	"github.com/dlqctl/dlqctl/pkg/gate"
	"github.com/dlqctl/dlqctl/pkg/render"
)

// BreachText says a breach in words, naming the settings (max-age,
// triage SLO) as the config file and the flags do.
func BreachText(b gate.Breach) string {
	switch b.Kind {
	case gate.MaxAge:
		return fmt.Sprintf("oldest dead letter %s is %s old (max-age %s)", b.Address, render.AgeOfSeconds(b.AgeSeconds), render.Duration(b.Limit))
	case gate.DefaultMaxAge:
		return fmt.Sprintf("%d dead letter(s), oldest %s old; no policy for this queue, so it is held to max-age 0", b.DeadLetters, render.AgeOfSeconds(b.AgeSeconds))
	case gate.TriageSLO:
		return fmt.Sprintf("%d dead letter(s) undecided past the triage SLO of %s", b.DeadLetters, render.Duration(b.Limit))
	case gate.Unexecuted:
		d := b.Decision
		return fmt.Sprintf("decided, not carried out: batch %s (%s by %s, %s ago, %s), %d dead letter(s) still here past the triage SLO of %s",
			d.BatchID, d.Action, d.By, render.AgeOfSeconds(b.AgoSeconds), d.Status, b.DeadLetters, render.Duration(b.Limit))
	case gate.Vanished:
		return fmt.Sprintf("%d dead letter(s) vanished from the broker with no recorded decision", b.DeadLetters)
	}
	return string(b.Kind)
}

// CheckDocument is a check's answer as -o json and yaml write it: the
// gate's result, each scope's breaches in words.
type CheckDocument struct {
	*gate.Result
	Scopes []ScopeDocument `json:"scopes"`
}

// ScopeDocument is one scope of a CheckDocument.
type ScopeDocument struct {
	gate.Scope
	Breaches []string `json:"breaches"`
}

// DocumentOf is res as a CheckDocument.
func DocumentOf(res *gate.Result) *CheckDocument {
	doc := &CheckDocument{Result: res, Scopes: make([]ScopeDocument, len(res.Scopes))}
	for i, s := range res.Scopes {
		doc.Scopes[i] = ScopeDocument{Scope: s, Breaches: make([]string, len(s.Breaches))}
		for j, b := range s.Breaches {
			doc.Scopes[i].Breaches[j] = BreachText(b)
		}
	}
	return doc
}
