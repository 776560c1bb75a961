package machine

import (
	"fmt"
	"strings"

	"github.com/mcpfsm/mcpfsm/states"
	yaml "go.yaml.in/yaml/v3"
)

// maxGuardsPerTrigger bounds the guards one (state, trigger) may use, so that checking
// every combination of their values stays cheap.
const maxGuardsPerTrigger = 8

// check validates what read could not see one field at a time: the shape of the graph,
// and that stateless will never be handed an ambiguous or unhandled situation.
func (l *loader) check() {
	s := l.spec
	at := make(map[*edge]*yaml.Node, len(l.pending))
	for _, p := range l.pending {
		at[p.e] = p.at
	}

	for _, must := range []states.State{states.Ready, states.Closed} {
		if s.byState[must] == nil {
			l.Errorf(l.statesKey, "the spec has no state %q", must)
		}
	}
	if s.initial != 0 && s.byState[s.initial].final {
		l.Errorf(l.declared[s.initial], "initial state %q is final", s.initial)
	}
	for _, ss := range s.states {
		key := l.declared[ss.state]
		switch {
		case ss.state.Final() && !ss.final:
			l.Errorf(key, "state %q must be final", ss.state)
		case !ss.state.Final() && ss.final:
			l.Errorf(key, "state %q cannot be final: only %q is", ss.state, states.Closed)
		}
		if ss.final {
			if ss.invoke != nil {
				l.Errorf(key, "final state %q cannot invoke an effect", ss.state)
			}
			for _, list := range ss.on {
				for _, e := range list {
					l.Errorf(at[e], "final state %q cannot have transitions", ss.state)
				}
			}
			for _, e := range ss.after {
				l.Errorf(at[e], "final state %q cannot have transitions", ss.state)
			}
			continue
		}
		for t, list := range ss.on {
			l.checkTwins(ss, states.Trigger(t), list, at)
		}
		if uncovered, ok := l.uncovered(ss.on[states.Close]); !ok {
			l.Errorf(key, "state %q does not handle close%s", ss.state, uncovered)
		}
		if ss.invoke != nil {
			for _, t := range l.reg.Invokes[ss.invoke.name].Outcomes {
				if uncovered, ok := l.uncovered(ss.on[t]); !ok {
					l.Errorf(key, "state %q invokes %s but does not handle its outcome %s%s", ss.state, ss.invoke.name, t, uncovered)
				}
			}
		}
	}
	if s.initial == 0 {
		return // reported already; reachability needs a start
	}
	l.checkReach(at)
}

// checkTwins reports transitions on one trigger that could fire together (stateless
// panics when two guarded transitions are permitted at once) and exact duplicates.
func (l *loader) checkTwins(ss *stateSpec, t states.Trigger, list []*edge, at map[*edge]*yaml.Node) {
	for j := 1; j < len(list); j++ {
		for i := range j {
			a, b := list[i], list[j]
			if exclusive(a, b) {
				continue
			}
			if a.to == b.to && a.internal == b.internal && a.guardLabel() == b.guardLabel() {
				l.Errorf(at[b], "transition on %s in state %q duplicates the one at line %d: merge them", t, ss.state, at[a].Line)
				continue
			}
			l.Errorf(at[b], "transitions on %s in state %q could both fire: %s and %s are not mutually exclusive (make one require \"not\" of a guard the other requires)",
				t, ss.state, guardSet(a), guardSet(b))
		}
	}
}

// exclusive reports whether a and b can never both be permitted: one requires a guard
// that the other requires to be false.
func exclusive(a, b *edge) bool {
	for _, ga := range a.guards {
		for _, gb := range b.guards {
			if ga.name == gb.name && ga.negate != gb.negate {
				return true
			}
		}
	}
	return false
}

func guardSet(e *edge) string {
	if len(e.guards) == 0 {
		return "(no guard)"
	}
	return "[" + e.guardLabel() + "]"
}

// uncovered reports whether, for every combination of the values of the guards the
// edges use, at least one edge is permitted. When not, it also returns " when ..." naming
// a combination that no edge handles.
func (l *loader) uncovered(list []*edge) (string, bool) {
	if len(list) == 0 {
		return "", false
	}
	var names []string
	index := map[string]int{}
	for _, e := range list {
		for _, g := range e.guards {
			if _, ok := index[g.name]; !ok {
				index[g.name] = len(names)
				names = append(names, g.name)
			}
		}
	}
	if len(names) > maxGuardsPerTrigger {
		return fmt.Sprintf(" (its transitions use %d guards, more than %d can be checked)", len(names), maxGuardsPerTrigger), false
	}
	for mask := 0; mask < 1<<len(names); mask++ {
		handled := false
		for _, e := range list {
			ok := true
			for _, g := range e.guards {
				value := mask&(1<<index[g.name]) != 0
				ok = ok && value != g.negate
			}
			handled = handled || ok
		}
		if !handled {
			var when []string
			for i, n := range names {
				if mask&(1<<i) != 0 {
					when = append(when, n)
				} else {
					when = append(when, "not "+n)
				}
			}
			return " when " + strings.Join(when, ", "), false
		}
	}
	return "", true
}

// checkReach reports states the initial state cannot reach, and non-final states from
// which ready or closed cannot be reached. Guards are ignored: an edge counts as a path.
func (l *loader) checkReach(at map[*edge]*yaml.Node) {
	s := l.spec
	next := map[states.State][]states.State{}
	prev := map[states.State][]states.State{}
	for _, e := range s.edges {
		if e.to != 0 && !e.internal {
			next[e.from] = append(next[e.from], e.to)
			prev[e.to] = append(prev[e.to], e.from)
		}
	}
	reach := func(from states.State, adj map[states.State][]states.State) map[states.State]bool {
		seen := map[states.State]bool{from: true}
		stack := []states.State{from}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, m := range adj[n] {
				if !seen[m] {
					seen[m] = true
					stack = append(stack, m)
				}
			}
		}
		return seen
	}
	fromInitial := reach(s.initial, next)
	toReady := reach(states.Ready, prev)
	toClosed := reach(states.Closed, prev)
	for _, ss := range s.states {
		key := l.declared[ss.state]
		if !fromInitial[ss.state] {
			l.Errorf(key, "state %q is unreachable from the initial state %q", ss.state, s.initial)
			continue
		}
		if ss.final {
			continue
		}
		if s.byState[states.Ready] != nil && !toReady[ss.state] {
			l.Errorf(key, "state %q cannot reach %q", ss.state, states.Ready)
		}
		if s.byState[states.Closed] != nil && !toClosed[ss.state] {
			l.Errorf(key, "state %q cannot reach %q", ss.state, states.Closed)
		}
	}
}
