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
// (no event from outside, no timer). A connect that fails at once (a refused
// connection takes microseconds) would be tried again and again, as fast as it fails,
// with nothing to stop it but Close. A cycle with no guard is refused as such. A
// guarded one is refused unless its guards are proved to end it whatever the causes
// of the outcomes (see spinEscape): a guard bounds the loop only by what it declares
// of the engine's books (Guard.Books); one that declares nothing bounds nothing.
func (l *loader) checkSpin(at map[*edge]*yaml.Node) {
	s := l.spec
	var edges []spinEdge
	for _, e := range s.edges {
		from := s.states[e.from]
		if e.internal || e.delay != nil || e.broken || e.to == 0 || from.unsure || from.invoke == nil || s.states[e.to].invoke == nil {
			continue
		}
		inv := l.reg.Invokes[from.invoke.name]
		if !slices.Contains(inv.Outcomes, e.trigger) || !l.beforeClose(e) {
			continue
		}
		edges = append(edges, l.spinEdge(e, slices.Contains(inv.Fails, e.trigger)))
	}
	var unguarded []spinEdge
	for _, se := range edges {
		if len(se.e.guards) == 0 {
			unguarded = append(unguarded, se)
		}
	}
	if loop := l.cycle(unguarded); loop != nil {
		l.Errorf(at[loop[0]], "the machine would go round %s without a pause, as fast as the effects end (a connect refused at once: microseconds): take a timed edge (after) on the way, or guard one of these transitions", l.loopNames(loop))
		return
	}
	region := l.spinEscape(edges, 0)
	if region == nil {
		return
	}
	var causes causeSet
	acts := false
	for _, se := range region {
		causes |= se.causes
		acts = acts || se.acts
	}
	loop := l.cycle(region)
	reset := ""
	if acts {
		reset = " (an action on the way may reset the books, so only guards on the last cause count)"
	}
	l.Errorf(at[loop[0]], "the machine would go round %s without a pause, as fast as the effects end, for as long as outcomes with %s keep coming: its guards do not end the loop for them%s; take a timed edge (after) on the way, or add a guard that does (not tripped ends it for the causes that count; a guard on the last cause, for the causes it excludes)",
		l.loopNames(loop), causes, reset)
}

// beforeClose reports whether e may fire before Close is asked for: it does not
// require "closing". After Close, checkClose is the judge of cycles.
func (l *loader) beforeClose(e *edge) bool {
	for _, g := range e.guards {
		if g.name == closingGuard && !g.negate {
			return false
		}
	}
	return true
}

// A causeSet is a set of causes, states.CauseNone among them: bit c is cause c.
type causeSet uint32

const counting = causeSet(1<<states.CauseLost | 1<<states.CauseTimeout | 1<<states.CauseExpired | 1<<states.CauseProtocol)

func (cs causeSet) String() string {
	var names []string
	for _, c := range states.AllCauses() {
		if cs&(1<<c) == 0 {
			continue
		}
		if c == states.CauseNone {
			names = append(names, "no cause (a success)")
		} else {
			names = append(names, "cause "+c.String())
		}
	}
	switch len(names) {
	case 0:
		return "no cause"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// A spinEdge is an edge taken on an outcome, with what its guards say of the causes
// the outcome may carry when it is taken.
type spinEdge struct {
	e *edge
	// causes are those the outcome may carry with the edge permitted, as far as its
	// guards on the last cause tell: every cause but none for an outcome the invoke
	// lists in Fails, every cause for another (none leaves the books as they were).
	causes causeSet
	// notTripped: the edge requires a guard declared Tripped to be false.
	notTripped bool
	// notStreak: the causes c for which it requires a guard declared Streak c to be false.
	notStreak causeSet
	// acts: an action runs as it is taken (the exit of the state it leaves, its own,
	// the entry of the state it enters), which may reset the books.
	acts bool
}

func (l *loader) spinEdge(e *edge, fails bool) spinEdge {
	se := spinEdge{e: e, causes: 1<<uint(len(states.AllCauses())) - 1}
	if fails {
		se.causes &^= 1 << states.CauseNone
	}
	for _, g := range e.guards {
		b := l.reg.Guards[g.name].Books
		set := 0
		for _, declared := range []bool{len(b.LastCause) > 0, b.Tripped, b.Streak != states.CauseNone} {
			if declared {
				set++
			}
		}
		switch {
		case set != 1:
		case len(b.LastCause) > 0:
			// An event with a cause makes it the last one before guards see it; one
			// without leaves the last cause as it was, so none stays possible.
			var last causeSet
			for _, c := range b.LastCause {
				last |= 1 << c
			}
			if g.negate {
				last = ^last
			}
			se.causes &= last | 1<<states.CauseNone
		case b.Tripped && g.negate:
			se.notTripped = true
		case b.Streak != states.CauseNone && g.negate:
			se.notStreak |= 1 << b.Streak
		}
	}
	se.acts = len(e.effects) > 0 || len(l.spec.states[e.from].exit) > 0 || len(l.spec.states[e.to].entry) > 0
	return se
}

// spinEscape returns a set of edges that the machine may go round for ever without a
// pause, taking each of them again and again, or nil if there is none. Only edges
// permitted for some cause can be taken; such edges fall into strongly connected
// regions, and each is judged by the engine's books (machine/core.go book), which
// only events change while no action runs:
//
//   - Failures grows by one with each event whose cause counts and never shrinks. A
//     run that takes an edge requiring "not tripped" for ever can meet only finitely
//     many such events: from some point on, only the causes that do not count remain
//     (judged again, in the region with them alone). A run that does not take such an
//     edge for ever stays in the region without them (judged again).
//   - A streak of cause c grows with each failure of c and starts over with an event
//     of another cause; an event without one (a success) leaves it as it was. A run
//     that takes an edge requiring "not" of a streak of c for ever must meet other
//     causes for ever, or only finitely many failures of c. Where every edge of the
//     region permits c or no cause alone, it cannot meet other causes: from some
//     point on, only successes remain (judged again, in the region with them alone);
//     a run that does not take such an edge for ever stays in the region without
//     them (judged again). (A success was once taken to start the streak over: a
//     loop lengthening it each round was refused.) Whether the other causes may come
//     often enough depends on breaker_threshold, which a config may change: where
//     any may come, the streak is taken to bound nothing.
//   - An action may reset the books (healthy does): a region where one runs is judged
//     by the guards on the last cause alone.
//
// done holds the rules already applied on the way down (bit 0: Failures; bit c: the
// streak of c), so that each is applied once.
func (l *loader) spinEscape(edges []spinEdge, done causeSet) []spinEdge {
	var live []spinEdge
	for _, se := range edges {
		if se.causes != 0 {
			live = append(live, se)
		}
	}
	for _, region := range l.regions(live) {
		if r := l.spinRegion(region, done); r != nil {
			return r
		}
	}
	return nil
}

func (l *loader) spinRegion(region []spinEdge, done causeSet) []spinEdge {
	var notStreak, all causeSet
	tripped := false
	for _, se := range region {
		if se.acts {
			return region
		}
		tripped = tripped || se.notTripped
		notStreak |= se.notStreak
		all |= se.causes
	}
	if tripped && done&1 == 0 {
		fewer := make([]spinEdge, 0, len(region))
		var without []spinEdge
		for _, se := range region {
			se.causes &^= counting
			fewer = append(fewer, se)
			if !se.notTripped {
				without = append(without, se)
			}
		}
		if r := l.spinEscape(fewer, done|1); r != nil {
			return r
		}
		return l.spinEscape(without, done|1)
	}
	const none = causeSet(1 << states.CauseNone)
	for _, c := range states.AllCauses() {
		if c == states.CauseNone || notStreak&(1<<c) == 0 || done&(1<<c) != 0 || all&(1<<c) == 0 || all&^(1<<c|none) != 0 {
			continue
		}
		fewer := make([]spinEdge, 0, len(region))
		var without []spinEdge
		for _, se := range region {
			if se.notStreak&(1<<c) == 0 {
				without = append(without, se)
			}
			se.causes &= none
			fewer = append(fewer, se)
		}
		if r := l.spinEscape(fewer, done|1<<c); r != nil {
			return r
		}
		return l.spinEscape(without, done|1<<c)
	}
	return region
}

// regions returns the strongly connected regions of edges: each the edges between
// states that can reach one another by them, a region holding at least one edge.
func (l *loader) regions(edges []spinEdge) [][]spinEdge {
	n := len(l.spec.states)
	adj := make([][]sid, n)
	for _, se := range edges {
		adj[se.e.from] = append(adj[se.e.from], se.e.to)
	}
	// Tarjan's algorithm.
	index := make([]int, n) // 0 unvisited, else its order of visit + 1
	low := make([]int, n)
	comp := make([]int, n) // component + 1, once assigned
	var stack []sid
	onStack := make([]bool, n)
	next, comps := 1, 0
	var visit func(v sid)
	visit = func(v sid) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range adj[v] {
			if index[w] == 0 {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			comps++
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp[w] = comps
				if w == v {
					break
				}
			}
		}
	}
	for v := range adj {
		if index[v] == 0 && len(adj[v]) > 0 {
			visit(sid(v))
		}
	}
	byComp := make([][]spinEdge, comps+1)
	for _, se := range edges {
		if c := comp[se.e.from]; c != 0 && c == comp[se.e.to] {
			byComp[c] = append(byComp[c], se)
		}
	}
	var out [][]spinEdge
	for _, r := range byComp {
		if len(r) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// cycle returns a cycle of the edges given, in order, or nil if they have none.
func (l *loader) cycle(edges []spinEdge) []*edge {
	s := l.spec
	adj := make([][]*edge, len(s.states))
	for _, se := range edges {
		adj[se.e.from] = append(adj[se.e.from], se.e)
	}
	color := make([]uint8, len(s.states)) // 0 unseen, 1 on the path, 2 done
	var path, loop []*edge
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
				loop = path[i:]
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
			return loop
		}
	}
	return nil
}

// loopNames names the states of a cycle, and the transitions between them.
func (l *loader) loopNames(loop []*edge) string {
	names := []string{string(l.spec.states[loop[0].from].name)}
	for _, e := range loop {
		names = append(names, fmt.Sprintf("%s (%s)", l.spec.states[e.to].name, e.name))
	}
	return strings.Join(names, " → ")
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
