// Package policy holds the thresholds dlq check judges a scope by (a
// queue, or one consumer group of it) and who owns it.
package policy

import (
	"slices"
	"time"
)

// Policy is what is in force for one scope. A zero duration is not set.
type Policy struct {
	Owner     string
	MaxAge    time.Duration
	TriageSLO time.Duration
}

// Rule is one policy as written: a queue ("*" for every queue), perhaps
// one consumer group of it, and what it sets.
type Rule struct {
	Queue, ConsumerGroup string
	Policy
}

// Set is the rules in the order they were written.
type Set []Rule

// For returns the policy in force for a queue's consumer group: the
// default ("*"), then a default group rule ("*" with the group), then
// the queue's own rule, then the queue's rule for the group, each
// setting only what it names and inheriting the rest. The first rule
// naming a scope is the one for it. ok is false when no rule applies.
func (s Set) For(queue, group string) (Policy, bool) {
	var out Policy
	ok := false
	layer := func(q, g string) {
		for _, r := range s {
			if r.Queue != q || r.ConsumerGroup != g {
				continue
			}
			ok = true
			if r.Owner != "" {
				out.Owner = r.Owner
			}
			if r.MaxAge != 0 {
				out.MaxAge = r.MaxAge
			}
			if r.TriageSLO != 0 {
				out.TriageSLO = r.TriageSLO
			}
			return
		}
	}
	layer("*", "")
	if group != "" {
		layer("*", group)
	}
	if queue != "*" {
		layer(queue, "")
		if group != "" {
			layer(queue, group)
		}
	}
	return out, ok
}

// Names reports whether a rule names queue itself (not only "*").
func (s Set) Names(queue string) bool {
	for _, r := range s {
		if r.Queue == queue {
			return true
		}
	}
	return false
}

// Groups are the consumer groups a rule names for queue: the queue's own
// group rules and the group rules of "*". Each is a scope of the queue
// whatever the broker lists, so a group's own policy is always judged.
func (s Set) Groups(queue string) []string {
	var out []string
	for _, r := range s {
		if r.ConsumerGroup != "" && (r.Queue == queue || r.Queue == "*") && !slices.Contains(out, r.ConsumerGroup) {
			out = append(out, r.ConsumerGroup)
		}
	}
	slices.Sort(out)
	return out
}
