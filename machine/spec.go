package machine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/mcpfsm/mcpfsm/states"
	"github.com/qmuntal/stateless"
)

// A Spec is a validated lifecycle: states (each with what calls do in it), transitions,
// effects, timed transitions and policy defaults, compiled onto one stateless machine.
// It is immutable after loading and is shared by every Machine built from it.
type Spec struct {
	file     string
	desc     string
	initial  sid
	defaults Policies
	policies []policyDoc  // in file order, with descriptions
	states   []*stateSpec // by sid; states[0] is nil
	byName   map[states.State]sid
	edges    []*edge // every edge, in file order
	timed    []*edge // the timed edges; edge timed[i] has trig afterBase+i
	sm       *stateless.StateMachine
}

// sid is a state's index in its Spec, from 1 in file order. The engine works with
// indexes and shows names.
type sid uint8

const (
	// maxStates is the most states a spec may declare.
	maxStates = 64
	// numTriggers bounds the trigger values a state's table holds.
	numTriggers = 32
	// maxAfter is the most timed transitions one state may declare.
	maxAfter = 4
	// afterBase is the first internal trigger value used for timed transitions.
	afterBase = 64
)

// trig is the trigger value given to stateless: a named trigger, or afterBase plus the
// index of a timed edge in Spec.timed.
type trig = states.Trigger

// A CallMode is what a call does that finds no session to use while the connection is
// in a state. A spec declares one for every state that is not final (calls: serve, wait
// or fail).
type CallMode uint8

// The call modes.
const (
	// Serve: the state holds a session that calls use; a call that finds none waits
	// for one, as in Wait.
	Serve CallMode = iota + 1
	// Wait: a call waits until a session is up, or until its context ends.
	Wait
	// FailFast: a call fails at once, with an error naming the state and the
	// connection's last failure.
	FailFast
)

var callModeNames = [...]string{Serve: "serve", Wait: "wait", FailFast: "fail"}

// String returns the mode as written in a spec: serve, wait or fail.
func (c CallMode) String() string {
	if int(c) < len(callModeNames) && callModeNames[c] != "" {
		return callModeNames[c]
	}
	return "calls(?)"
}

// MarshalText encodes c as its name.
func (c CallMode) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText decodes a call mode's name.
func (c *CallMode) UnmarshalText(b []byte) error {
	for m, name := range callModeNames {
		if name != "" && name == string(b) {
			*c = CallMode(m)
			return nil
		}
	}
	return fmt.Errorf("unknown call mode %q", b)
}

type policyDoc struct {
	info PolicyInfo
	desc string
}

type stateSpec struct {
	id     sid
	name   states.State
	desc   string
	calls  CallMode // 0 for a final state
	final  bool
	entry  []actionRef
	exit   []actionRef
	invoke *invokeSpec
	on     [numTriggers][]*edge
	after  []*edge
	// unsure: something of the state did not load (its invoke, an edge's target), so
	// the graph-wide checks cannot judge it; the spec does not load anyway.
	unsure bool
}

type invokeSpec struct {
	name    string
	timeout PolicyInfo
	run     func(context.Context, Effects, Invocation) Event
}

type actionRef struct {
	name string
	do   func(*Vars, *Policies, time.Time)
}

type guardRef struct {
	name   string
	negate bool
	test   func(*Vars, *Policies) bool
}

func (g guardRef) String() string {
	if g.negate {
		return "not " + g.name
	}
	return g.name
}

type delayRef struct {
	name   string
	policy PolicyInfo // the policy named, or the delay function's scale
	fn     func(*Vars, *Policies, *rand.Rand) (time.Duration, bool)
}

// An edge is one transition. A timed edge has a delay and a trig of its own.
type edge struct {
	from     sid
	to       sid  // == from for internal and re-entry edges
	internal bool // stays in from without leaving it: no exit, entry or timers
	trigger  states.Trigger
	delay    *delayRef // set for timed edges
	trig     trig
	guards   []guardRef
	effects  []actionRef
	desc     string
	name     string // "connected", or "after backoff": what events and history call it
	// broken: a guard or the delay did not load. The edge still counts as a path
	// (so that one typo is not also reported as an unreachable state), but not in the
	// checks of its guards; the spec does not load anyway.
	broken bool
}

// guardLabel renders the guards as in YAML: "not closing, planned".
func (e *edge) guardLabel() string {
	parts := make([]string, len(e.guards))
	for i, g := range e.guards {
		parts[i] = g.String()
	}
	return strings.Join(parts, ", ")
}

// File returns the name the spec was loaded from.
func (s *Spec) File() string { return s.file }

// Description returns the spec's one-line description.
func (s *Spec) Description() string { return s.desc }

// Initial returns the state a machine starts in.
func (s *Spec) Initial() states.State { return s.name(s.initial) }

// Defaults returns the policies the spec declares.
func (s *Spec) Defaults() Policies { return s.defaults }

// name returns the name of a state of the spec.
func (s *Spec) name(id sid) states.State {
	if int(id) < len(s.states) && s.states[id] != nil {
		return s.states[id].name
	}
	return ""
}

// A StateInfo is what a spec declares of one state.
type StateInfo struct {
	Name        states.State // as the spec names it
	Description string       // its one-line description
	// Calls is what a call does in the state when it finds no session (0 for a
	// final state, where calls fail with ErrClosed).
	Calls CallMode
	Final bool // the connection is closed for good in it
	// Invoke is the blocking effect run on entry, if any, and InvokeTimeout the
	// policy bounding it.
	Invoke, InvokeTimeout string
	Entry, Exit           []string // the actions run on entering and on leaving it
}

// States returns what the spec declares of each state, in file order.
func (s *Spec) States() []StateInfo {
	out := make([]StateInfo, 0, len(s.states)-1)
	for _, ss := range s.states[1:] {
		out = append(out, ss.info())
	}
	return out
}

// State returns what the spec declares of the named state, and whether it declares it.
func (s *Spec) State(name states.State) (StateInfo, bool) {
	id, ok := s.byName[name]
	if !ok {
		return StateInfo{}, false
	}
	return s.states[id].info(), true
}

func (ss *stateSpec) info() StateInfo {
	info := StateInfo{Name: ss.name, Description: ss.desc, Calls: ss.calls, Final: ss.final}
	for _, a := range ss.entry {
		info.Entry = append(info.Entry, a.name)
	}
	for _, a := range ss.exit {
		info.Exit = append(info.Exit, a.name)
	}
	if ss.invoke != nil {
		info.Invoke, info.InvokeTimeout = ss.invoke.name, ss.invoke.timeout.Name
	}
	return info
}

// Calls returns the call mode of the named state: 0 for a final state or a name the
// spec does not declare.
func (s *Spec) Calls(name states.State) CallMode {
	if id, ok := s.byName[name]; ok {
		return s.states[id].calls
	}
	return 0
}

// Final reports whether the named state is final: nothing leaves it, and a machine
// there has closed.
func (s *Spec) Final(name states.State) bool {
	id, ok := s.byName[name]
	return ok && s.states[id].final
}

// An Edge describes one transition of a spec, for inspection and rendering.
type Edge struct {
	From, To    states.State
	Internal    bool           // stays in From: no exit, entry or timers
	Trigger     states.Trigger // zero for a timed edge
	Delay       string         // the delay of a timed edge: a delay function or a policy
	DelayPolicy string         // the policy that sets the delay's scale
	Guards      []string       // as written: "tripped", "not planned"
	Effects     []string       // the actions it runs
	Description string         // its one-line description
}

// Name returns what events call the edge: the trigger, or "after <delay>".
func (e Edge) Name() string {
	if e.Delay != "" {
		return "after " + e.Delay
	}
	return e.Trigger.String()
}

// Edges returns every transition of the spec in file order.
func (s *Spec) Edges() []Edge {
	out := make([]Edge, len(s.edges))
	for i, e := range s.edges {
		out[i] = s.public(e)
	}
	return out
}

func (s *Spec) public(e *edge) Edge {
	pe := Edge{From: s.name(e.from), To: s.name(e.to), Internal: e.internal, Trigger: e.trigger, Description: e.desc}
	if e.delay != nil {
		pe.Delay, pe.DelayPolicy = e.delay.name, e.delay.policy.Name
	}
	for _, g := range e.guards {
		pe.Guards = append(pe.Guards, g.String())
	}
	for _, a := range e.effects {
		pe.Effects = append(pe.Effects, a.name)
	}
	return pe
}

// PolicyDoc is a policy as a spec declares it.
type PolicyDoc struct {
	PolicyInfo
	Default     string // formatted as in YAML
	Description string // its one-line description
}

// Policies returns the spec's policies in file order.
func (s *Spec) Policies() []PolicyDoc {
	out := make([]PolicyDoc, len(s.policies))
	for i, p := range s.policies {
		out[i] = PolicyDoc{PolicyInfo: p.info, Default: s.defaults.Format(p.info), Description: p.desc}
	}
	return out
}

// trigName returns what transitions call a trigger: its name, or "after <delay>".
func (s *Spec) trigName(t trig) string {
	if t >= afterBase {
		return s.timed[t-afterBase].name
	}
	return t.String()
}
