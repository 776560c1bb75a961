package machine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mcpfsm/mcpfsm/states"
	yaml "go.yaml.in/yaml/v3"
)

// maxGuardsPerTrigger bounds the guards one (state, trigger) may use, so that checking
// every combination of their values stays cheap.
const maxGuardsPerTrigger = 8

// check validates what read could not see one field at a time: the shape of the graph,
// that stateless will never be handed an ambiguous or unhandled situation, and that
// Close reaches a final state from everywhere. It runs on whatever read could make of
// the file, so that every problem is reported in one pass: an edge whose target did not
// resolve, or a state whose invoke did not, is left out of the checks that need it.
func (l *loader) check() {
	s := l.spec
	at := make(map[*edge]*yaml.Node, len(l.pending))
	for _, p := range l.pending {
		at[p.e] = p.at
	}
	if len(s.states) == 1 {
		if l.statesKey != nil {
			l.Errorf(l.statesKey, "the spec declares no states")
		}
		return
	}
	finals, serving := 0, 0
	for _, ss := range s.states[1:] {
		if ss.final {
			finals++
		}
		if ss.calls == Serve {
			serving++
		}
	}
	if finals == 0 {
		l.Errorf(l.statesKey, "the spec has no final state (final: true): Close needs one to reach")
	}
	if serving == 0 {
		l.Errorf(l.statesKey, "no state serves calls (calls: serve): a connection could never be used")
	}
	if s.initial != 0 && s.states[s.initial].final {
		l.Errorf(l.declared[s.initial], "initial state %q is final", s.states[s.initial].name)
	}
	for _, ss := range s.states[1:] {
		key := l.declared[ss.id]
		if ss.final {
			if ss.invoke != nil {
				l.Errorf(key, "final state %q cannot invoke an effect", ss.name)
			}
			for _, list := range ss.on {
				for _, e := range list {
					l.Errorf(at[e], "final state %q cannot have transitions", ss.name)
				}
			}
			for _, e := range ss.after {
				l.Errorf(at[e], "final state %q cannot have transitions", ss.name)
			}
			continue
		}
		for t, list := range ss.on {
			l.checkTwins(ss, states.Trigger(t), list, at)
		}
		if uncovered, ok := l.uncovered(ss.on[states.Close], true); !ok && !(ss.unsure && len(ss.on[states.Close]) == 0) {
			l.Errorf(key, "state %q does not handle close%s", ss.name, uncovered)
		}
		if ss.invoke != nil && !ss.unsure {
			for _, t := range l.reg.Invokes[ss.invoke.name].Outcomes {
				if int(t) >= numTriggers {
					continue
				}
				if uncovered, ok := l.uncovered(ss.on[t], false); !ok {
					l.Errorf(key, "state %q invokes %s but does not handle its outcome %s%s", ss.name, ss.invoke.name, t, uncovered)
				}
			}
		}
	}
	if s.initial == 0 {
		return // reported already; reachability needs a start
	}
	l.checkReach()
	if finals > 0 {
		l.checkClose()
	}
	l.checkSpin(at)
}

// checkSpin reports a loop the machine would run without a pause: a cycle of
// transitions each taken on the outcome of the invoked effect of the state it leaves
// (no event from outside, no timer), none of them guarded. A connect that fails at once
// (a refused connection takes microseconds) would be tried again and again, as fast as
// it fails, with nothing to stop it but Close. A guarded cycle may end by itself (a
// retry while the breaker has not tripped), and is left alone.
func (l *loader) checkSpin(at map[*edge]*yaml.Node) {
	s := l.spec
	adj := make([][]*edge, len(s.states))
	for _, e := range s.edges {
		from := s.states[e.from]
		if e.internal || e.delay != nil || e.broken || e.to == 0 || len(e.guards) > 0 || from.unsure || from.invoke == nil || s.states[e.to].invoke == nil {
			continue
		}
		if slices.Contains(l.reg.Invokes[from.invoke.name].Outcomes, e.trigger) {
			adj[e.from] = append(adj[e.from], e)
		}
	}
	color := make([]uint8, len(s.states)) // 0 unseen, 1 on the path, 2 done
	var path []*edge
	var visit func(n sid) bool
	visit = func(n sid) bool {
		color[n] = 1
		for _, e := range adj[n] {
			path = append(path, e)
			if color[e.to] == 1 {
				i := 0
				for path[i].from != e.to {
					i++
				}
				names := []string{string(s.states[e.to].name)}
				for _, pe := range path[i:] {
					names = append(names, fmt.Sprintf("%s (%s)", s.states[pe.to].name, pe.name))
				}
				l.Errorf(at[path[i]], "the machine would go round %s without a pause, as fast as the effects end (a connect refused at once: microseconds): take a timed edge (after) on the way, or guard one of these transitions", strings.Join(names, " → "))
				return true
			}
			if color[e.to] == 0 && visit(e.to) {
				return true
			}
			path = path[:len(path)-1]
		}
		color[n] = 2
		return false
	}
	for _, ss := range s.states[1:] {
		if color[ss.id] == 0 && visit(ss.id) {
			return // one loop is enough to refuse the spec
		}
	}
}

// checkTwins reports transitions on one trigger that could fire together (stateless
// panics when two guarded transitions are permitted at once) and exact duplicates. Each
// transition is reported once, against the first before it that it clashes with, so
// that a list of n alternatives makes at most n problems, not n²/2 (3,000 took 3 GB).
func (l *loader) checkTwins(ss *stateSpec, t states.Trigger, list []*edge, at map[*edge]*yaml.Node) {
	for j := 1; j < len(list); j++ {
		for i := range j {
			a, b := list[i], list[j]
			if a.broken || b.broken || exclusive(a, b) {
				continue
			}
			if a.to == b.to && a.internal == b.internal && a.guardLabel() == b.guardLabel() {
				l.Errorf(at[b], "transition on %s in state %q duplicates the one at line %d: merge them", t, ss.name, at[a].Line)
			} else {
				l.Errorf(at[b], "transitions on %s in state %q could both fire: %s and %s are not mutually exclusive (make one require \"not\" of a guard the other requires)",
					t, ss.name, guardSet(a), guardSet(b))
			}
			break
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
// a combination that no edge handles. closing says that the guard "closing" holds
// whenever the trigger is applied (the engine applies close only once closing).
func (l *loader) uncovered(list []*edge, closing bool) (string, bool) {
	if len(list) == 0 {
		return "", false
	}
	var names []string
	index := map[string]int{}
	for _, e := range list {
		if e.broken {
			return "", true // its guards did not load: it is not for this check to judge
		}
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
		if i, ok := index[closingGuard]; ok && closing && mask&(1<<i) == 0 {
			continue // never applied so
		}
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
// which no state that serves calls can be reached. Guards are ignored here: an edge
// counts as a path (checkClose honours the one guard the engine fixes).
func (l *loader) checkReach() {
	s := l.spec
	next := make([][]sid, len(s.states))
	prev := make([][]sid, len(s.states))
	for _, e := range s.edges {
		if e.to != 0 && !e.internal {
			next[e.from] = append(next[e.from], e.to)
			prev[e.to] = append(prev[e.to], e.from)
		}
	}
	reach := func(from []sid, adj [][]sid) []bool {
		seen := make([]bool, len(s.states))
		stack := append([]sid(nil), from...)
		for _, f := range from {
			seen[f] = true
		}
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
	var serving []sid
	for _, ss := range s.states[1:] {
		if ss.calls == Serve {
			serving = append(serving, ss.id)
		}
	}
	fromInitial := reach([]sid{s.initial}, next)
	toServing := reach(serving, prev)
	for _, ss := range s.states[1:] {
		key := l.declared[ss.id]
		if !fromInitial[ss.id] {
			if !l.unresolved { // an edge that did not resolve might have reached it
				l.Errorf(key, "state %q is unreachable from the initial state %q", ss.name, s.states[s.initial].name)
			}
			continue
		}
		if !ss.final && !ss.unsure && len(serving) > 0 && !toServing[ss.id] {
			l.Errorf(key, "state %q cannot reach a state that serves calls", ss.name)
		}
	}
}

// checkClose proves the engine's close rule terminates: once Close is asked for, the
// engine sets the guard "closing" and applies close in every state the machine enters
// until it is final; a state whose close keeps it where it is (an internal edge) moves
// on only by its invoked effect's outcome, which always comes (bounded by its timeout).
// So from any state, the moves the machine may make after close form a graph (closing
// is true; every other guard may be either), and every path in it must end in a final
// state: no state may be stuck, and no cycle may exist.
func (l *loader) checkClose() {
	s := l.spec
	succ := make([][]sid, len(s.states))
	stuck := make([]string, len(s.states))
	for _, ss := range s.states[1:] {
		if ss.final || ss.unsure || len(ss.on[states.Close]) == 0 {
			continue // reported already, or not for this check to judge
		}
		moves, stays := false, false
		for _, e := range ss.on[states.Close] {
			switch {
			case e.to == 0 || !whileClosing(e):
			case e.internal:
				stays = true
			default:
				moves = true
				succ[ss.id] = append(succ[ss.id], e.to)
			}
		}
		switch {
		case stays && ss.invoke == nil:
			stuck[ss.id] = "its close keeps it there and it invokes no effect to move on"
		case stays:
			for _, t := range l.reg.Invokes[ss.invoke.name].Outcomes {
				if int(t) >= numTriggers {
					continue
				}
				for _, e := range ss.on[t] {
					if e.to != 0 && whileClosing(e) {
						succ[ss.id] = append(succ[ss.id], e.to) // an internal edge is a loop to itself
					}
				}
			}
		case !moves:
			stuck[ss.id] = "no close transition can fire once closing"
		}
	}
	// Depth-first search for a stuck state or a cycle, from every state.
	const (
		unseen = iota
		onPath
		done
	)
	color := make([]int, len(s.states))
	var path []sid
	reported := map[string]bool{}
	var visit func(id sid)
	visit = func(id sid) {
		color[id] = onPath
		path = append(path, id)
		if stuck[id] != "" && !reported[string(s.states[id].name)] {
			reported[string(s.states[id].name)] = true
			l.Errorf(l.declared[id], "after close, state %q never reaches a final state: %s", s.states[id].name, stuck[id])
		}
		for _, n := range succ[id] {
			switch color[n] {
			case onPath:
				var loop []string
				for i := len(path) - 1; i >= 0; i-- {
					if path[i] == n {
						for _, p := range path[i:] {
							loop = append(loop, string(s.states[p].name))
						}
						break
					}
				}
				loop = append(loop, string(s.states[n].name))
				key := strings.Join(loop, " → ")
				if !reported[key] {
					reported[key] = true
					l.Errorf(l.declared[n], "after close, the machine may go round %s for ever instead of reaching a final state", key)
				}
			case unseen:
				visit(n)
			}
		}
		path = path[:len(path)-1]
		color[id] = done
	}
	for _, ss := range s.states[1:] {
		if color[ss.id] == unseen {
			visit(ss.id)
		}
	}
}

// whileClosing reports whether e may fire once close has been asked for: it does not
// require "not closing".
func whileClosing(e *edge) bool {
	for _, g := range e.guards {
		if g.name == closingGuard && g.negate {
			return false
		}
	}
	return true
}
