package machine

import (
	"math/rand/v2"
	"strings"
	"time"

	"github.com/mcpfsm/mcpfsm/states"
	"github.com/qmuntal/stateless"
)

// A Spec is a validated lifecycle: states, transitions, effects, timed transitions and
// policy defaults, compiled onto one stateless machine. It is immutable after loading and
// is shared by every Machine built from it.
type Spec struct {
	file     string
	desc     string
	initial  states.State
	defaults Policies
	policies []policyDoc // in file order, with descriptions
	states   []*stateSpec
	byState  [numStates]*stateSpec
	edges    []*edge // every edge, in file order
	timed    []*edge // the timed edges; edge timed[i] has trig afterBase+i
	sm       *stateless.StateMachine
}

const (
	numStates   = int(states.Closed) + 1
	numTriggers = int(states.Close) + 1
	// maxAfter is the most timed transitions one state may declare.
	maxAfter = 4
	// afterBase is the first internal trigger value used for timed transitions.
	afterBase = 64
)

// trig is the trigger value given to stateless: a named trigger, or afterBase plus the
// index of a timed edge in Spec.timed.
type trig = states.Trigger

type policyDoc struct {
	info PolicyInfo
	desc string
}

type stateSpec struct {
	state  states.State
	desc   string
	final  bool
	entry  []actionRef
	exit   []actionRef
	invoke *invokeSpec
	on     [numTriggers][]*edge
	after  []*edge
}

type invokeSpec struct {
	name    string
	timeout PolicyInfo
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
	from     states.State
	to       states.State // == from for internal and re-entry edges
	internal bool         // stays in from without leaving it: no exit, entry or timers
	trigger  states.Trigger
	delay    *delayRef // set for timed edges
	trig     trig
	guards   []guardRef
	effects  []actionRef
	desc     string
	name     string // "connected", or "after backoff": what events and history call it
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
func (s *Spec) Initial() states.State { return s.initial }

// Defaults returns the policies the spec declares.
func (s *Spec) Defaults() Policies { return s.defaults }

// States returns the states the spec declares, in file order.
func (s *Spec) States() []states.State {
	out := make([]states.State, len(s.states))
	for i, st := range s.states {
		out[i] = st.state
	}
	return out
}

// StateDescription returns the one-line description of a state.
func (s *Spec) StateDescription(st states.State) string {
	if ss := s.byState[st]; ss != nil {
		return ss.desc
	}
	return ""
}

// Handles reports whether a state has a transition for a trigger, whatever its guards.
func (s *Spec) Handles(st states.State, t states.Trigger) bool {
	ss := s.byState[st]
	return ss != nil && int(t) < numTriggers && len(ss.on[t]) > 0
}

// An Edge describes one transition of a spec, for inspection and rendering.
type Edge struct {
	From, To    states.State
	Internal    bool           // stays in From: no exit, entry or timers
	Trigger     states.Trigger // zero for a timed edge
	Delay       string         // the delay of a timed edge: a delay function or a policy
	DelayPolicy string         // the policy that sets the delay's scale
	Guards      []string       // as written: "tripped", "not planned"
	Effects     []string
	Description string
}

// Name returns what events call the edge's cause: the trigger, or "after <delay>".
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
		out[i] = e.public()
	}
	return out
}

func (e *edge) public() Edge {
	pe := Edge{From: e.from, To: e.to, Internal: e.internal, Trigger: e.trigger, Description: e.desc}
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

// StateInfo describes one state of a spec, for inspection and rendering.
type StateInfo struct {
	State         states.State
	Description   string
	Final         bool
	Entry, Exit   []string
	Invoke        string // the blocking effect run on entry, if any
	InvokeTimeout string // the policy bounding it
}

// StateInfo returns what the spec says of a state.
func (s *Spec) StateInfo(st states.State) (StateInfo, bool) {
	ss := s.byState[st]
	if ss == nil {
		return StateInfo{}, false
	}
	info := StateInfo{State: st, Description: ss.desc, Final: ss.final}
	for _, a := range ss.entry {
		info.Entry = append(info.Entry, a.name)
	}
	for _, a := range ss.exit {
		info.Exit = append(info.Exit, a.name)
	}
	if ss.invoke != nil {
		info.Invoke, info.InvokeTimeout = ss.invoke.name, ss.invoke.timeout.Name
	}
	return info, true
}

// PolicyDoc is a policy as a spec declares it.
type PolicyDoc struct {
	PolicyInfo
	Default     string // formatted as in YAML
	Description string
}

// Policies returns the spec's policies in file order.
func (s *Spec) Policies() []PolicyDoc {
	out := make([]PolicyDoc, len(s.policies))
	for i, p := range s.policies {
		out[i] = PolicyDoc{PolicyInfo: p.info, Default: s.defaults.Format(p.info), Description: p.desc}
	}
	return out
}

// edgeFor finds the edge stateless took.
func (s *Spec) edgeFor(from states.State, t trig, to states.State, internal bool) *edge {
	if t >= afterBase {
		return s.timed[t-afterBase]
	}
	for _, e := range s.byState[from].on[t] {
		if e.to == to && e.internal == internal {
			return e
		}
	}
	return nil
}

// trigName returns what transitions call a trigger: its name, or "after <delay>".
func (s *Spec) trigName(t trig) string {
	if t >= afterBase {
		return s.timed[t-afterBase].name
	}
	return t.String()
}
