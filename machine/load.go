package machine

import (
	"fmt"
	"strings"

	"github.com/mcpfsm/mcpfsm/states"
	yaml "go.yaml.in/yaml/v3"
)

// LoadSpecFile reads and loads a spec file (a regular file of at most MaxSpecSize
// bytes). See LoadSpec.
func LoadSpecFile(path string, reg Registry) (*Spec, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return LoadSpec(path, data, reg)
}

// LoadSpec parses and validates a lifecycle spec and compiles it onto stateless. file
// names data in messages. Every trigger the spec uses must be in the states vocabulary,
// and every guard, action, invoked effect and delay in reg (the guard "closing" is the
// engine's). When anything is wrong the error is a *FileError listing every problem
// with its file:line:column, all at once; no input, however malformed, makes LoadSpec
// panic, and no spec it returns can make the engine panic or keep Close from reaching
// a final state.
func LoadSpec(file string, data []byte, reg Registry) (*Spec, error) {
	l := &loader{YAMLReader: YAMLReader{File: file}, reg: reg, spec: &Spec{file: file}}
	root := l.Parse(data)
	if root == nil {
		return nil, l.Err()
	}
	l.read(root)
	l.check() // on what could be read, so that every problem is reported in one pass
	if err := l.Err(); err != nil {
		return nil, err
	}
	l.compile()
	return l.spec, nil
}

// loader holds what a LoadSpec call has read so far.
type loader struct {
	YAMLReader
	reg  Registry
	spec *Spec

	statesKey *yaml.Node
	declared  map[sid]*yaml.Node // state name key nodes
	pending   []pendingEdge      // edges whose target is resolved after every state is read
	// unresolved: an edge's target did not resolve, so which states are reachable
	// cannot be told.
	unresolved bool
}

type pendingEdge struct {
	e  *edge
	to *yaml.Node // nil for an internal edge
	at *yaml.Node // the edge's mapping, for messages
}

func (l *loader) read(root *yaml.Node) {
	top := l.Struct(root, "the spec", "version!", "description", "initial!", "policies!", "states!")
	if f := top["version"]; f.Value != nil {
		if v, ok := l.String(f.Value, "version"); ok && v != "1" {
			l.Errorf(f.Value, "version %s is not supported (this is version 1)", Quote(v))
		}
	}
	if f := top["description"]; f.Value != nil {
		l.spec.desc, _ = l.String(f.Value, "description")
	}
	if f := top["policies"]; f.Value != nil {
		l.readPolicies(f)
	}
	l.spec.states = []*stateSpec{nil}
	l.spec.byName = map[states.State]sid{}
	l.declared = map[sid]*yaml.Node{}
	if f := top["states"]; f.Value != nil {
		l.statesKey = f.Key
		l.readStates(f.Value)
	}
	if f := top["initial"]; f.Value != nil {
		if id, ok := l.stateRef(f.Value, "initial state"); ok {
			l.spec.initial = id
		}
	}
	for _, p := range l.pending {
		if p.to == nil {
			p.e.to = p.e.from
			continue
		}
		if id, ok := l.stateRef(p.to, "target state"); ok {
			p.e.to = id
		} else {
			l.spec.states[p.e.from].unsure = true
			l.unresolved = true
		}
	}
}

func (l *loader) readPolicies(f Field) {
	seen := map[string]*yaml.Node{} // policy name to its default's node
	for _, pf := range l.Mapping(f.Value, "policies") {
		info, ok := LookupPolicy(pf.Name())
		if !ok {
			l.Errorf(pf.Key, "unknown policy %s%s", Quote(pf.Name()), didYouMean(pf.Name(), policyNames()))
			continue
		}
		seen[info.Name] = pf.Key
		what := fmt.Sprintf("policy %q", info.Name)
		body := l.Struct(pf.Value, what, "default!", "description!")
		doc := policyDoc{info: info}
		if d := body["description"]; d.Value != nil {
			doc.desc, _ = l.String(d.Value, what+" description")
		}
		if d := body["default"]; d.Value != nil {
			seen[info.Name] = d.Value
			if text, ok := l.String(d.Value, what+" default"); ok {
				if err := l.spec.defaults.Set(info.Name, text); err != nil {
					l.Errorf(d.Value, "%v", err)
				}
			}
		}
		l.spec.policies = append(l.spec.policies, doc)
	}
	for _, info := range policyTable {
		if seen[info.Name] == nil {
			l.Errorf(f.Key, "policy %q is not declared: every policy needs a default", info.Name)
		}
	}
	if len(seen) == len(policyTable) {
		for _, c := range l.spec.defaults.check() {
			l.Errorf(seen[c[0]], "%s", c[1])
		}
	}
}

// stateName is what a state may be called: lower-case words joined by - or _.
func validStateName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9' && i > 0, (r == '-' || r == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}

func (l *loader) readStates(n *yaml.Node) {
	for _, sf := range l.Mapping(n, "states") {
		name := sf.Name()
		if !validStateName(name) {
			l.Errorf(sf.Key, "state name %q must be lower-case letters and digits, words joined by - or _", capText(name))
			continue
		}
		if len(l.spec.states) > maxStates {
			l.Errorf(sf.Key, "the spec declares more than %d states", maxStates)
			return
		}
		id := sid(len(l.spec.states))
		ss := &stateSpec{id: id, name: states.State(name)}
		l.spec.states = append(l.spec.states, ss)
		l.spec.byName[ss.name] = id
		l.declared[id] = sf.Key
		l.readState(ss, sf)
	}
}

func (l *loader) readState(ss *stateSpec, sf Field) {
	what := fmt.Sprintf("state %q", ss.name)
	body := l.Struct(sf.Value, what, "description!", "calls", "final", "entry", "exit", "invoke", "on", "after")
	if f := body["description"]; f.Value != nil {
		ss.desc, _ = l.String(f.Value, what+" description")
	}
	if f := body["final"]; f.Value != nil {
		ss.final, _ = l.Bool(f.Value, what+" final")
	}
	switch f := body["calls"]; {
	case f.Value != nil && ss.final:
		l.Errorf(f.Key, "final state %q takes no calls: calls there fail with the connection closed", ss.name)
	case f.Value != nil:
		if v, ok := l.String(f.Value, what+" calls"); ok {
			switch v {
			case "serve":
				ss.calls = Serve
			case "wait":
				ss.calls = Wait
			case "fail":
				ss.calls = FailFast
			default:
				l.Errorf(f.Value, "%s calls must be serve, wait or fail, not %q%s", what, capText(v), didYouMean(v, []string{"serve", "wait", "fail"}))
			}
		}
	case !ss.final && body != nil:
		l.Errorf(sf.Key, "%s does not say what calls do in it (calls: serve, wait or fail)", what)
	}
	if f := body["entry"]; f.Value != nil {
		ss.entry = l.actions(f.Value, what+" entry")
	}
	if f := body["exit"]; f.Value != nil {
		ss.exit = l.actions(f.Value, what+" exit")
	}
	if f := body["invoke"]; f.Value != nil {
		ss.invoke = l.readInvoke(f.Value, what)
		ss.unsure = ss.unsure || ss.invoke == nil
	}
	if f := body["on"]; f.Value != nil {
		for _, tf := range l.Mapping(f.Value, what+" on") {
			t, ok := states.ParseTrigger(tf.Name())
			if !ok || int(t) >= numTriggers {
				l.Errorf(tf.Key, "unknown trigger %q%s", capText(tf.Name()), didYouMean(tf.Name(), triggerNames()))
				ss.unsure = true // what it handles cannot be told
				continue
			}
			for _, tn := range l.oneOrMany(tf.Value, fmt.Sprintf("transition on %s in %s", t, what)) {
				e := &edge{from: ss.id, trigger: t, trig: t, name: t.String()}
				l.readEdge(e, tn, fmt.Sprintf("transition on %s in %s", t, what), false)
				ss.on[t] = append(ss.on[t], e)
				l.spec.edges = append(l.spec.edges, e)
			}
		}
	}
	if f := body["after"]; f.Value != nil {
		if f.Value.Kind != yaml.SequenceNode {
			l.Errorf(f.Value, "%s after must be a list of timed transitions, found %s", what, describe(f.Value))
			return
		}
		for _, tn := range f.Value.Content {
			e := &edge{from: ss.id}
			l.readEdge(e, tn, fmt.Sprintf("timed transition in %s", what), true)
			if e.delay == nil {
				e.broken = true
				e.delay = &delayRef{name: "?"}
			}
			if len(ss.after) == maxAfter {
				l.Errorf(tn, "%s has more than %d timed transitions", what, maxAfter)
				continue
			}
			if len(l.spec.timed) >= 255-afterBase {
				l.Errorf(tn, "the spec has too many timed transitions")
				continue
			}
			e.trig = trig(afterBase + len(l.spec.timed))
			e.name = "after " + e.delay.name
			ss.after = append(ss.after, e)
			l.spec.timed = append(l.spec.timed, e)
			l.spec.edges = append(l.spec.edges, e)
		}
	}
}

// oneOrMany accepts one transition (a mapping) or a list of guarded alternatives.
func (l *loader) oneOrMany(n *yaml.Node, what string) []*yaml.Node {
	switch n.Kind {
	case yaml.MappingNode:
		return []*yaml.Node{n}
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			l.Errorf(n, "%s is an empty list", what)
		}
		return n.Content
	}
	l.Errorf(n, "%s must be a mapping or a list of them, found %s", what, describe(n))
	return nil
}

func (l *loader) readEdge(e *edge, n *yaml.Node, what string, timed bool) {
	keys := []string{"to", "guard", "effects", "description!"}
	if timed {
		keys = append(keys, "delay!")
	}
	body := l.Struct(n, what, keys...)
	if body == nil {
		return
	}
	if f := body["description"]; f.Value != nil {
		e.desc, _ = l.String(f.Value, what+" description")
	}
	if f := body["guard"]; f.Value != nil {
		for _, g := range l.Strings(f.Value, what+" guard") {
			if ref, ok := l.guardRef(g); ok {
				e.guards = append(e.guards, ref)
			} else {
				e.broken = true
			}
		}
	}
	if f := body["effects"]; f.Value != nil {
		e.effects = l.actions(f.Value, what+" effects")
	}
	if f := body["delay"]; f.Value != nil {
		e.delay = l.delayRef(f.Value)
	}
	to := body["to"].Value
	if to != nil {
		if _, ok := l.String(to, what+" target"); !ok {
			to = nil
			e.internal = true
		}
	} else {
		e.internal = true
	}
	l.pending = append(l.pending, pendingEdge{e: e, to: to, at: n})
}

func (l *loader) readInvoke(n *yaml.Node, what string) *invokeSpec {
	body := l.Struct(n, what+" invoke", "effect!", "timeout!")
	var inv invokeSpec
	ok := true
	if f := body["effect"]; f.Value != nil {
		name, good := l.String(f.Value, what+" invoke effect")
		reg, known := l.reg.Invokes[name]
		switch {
		case !good:
			ok = false
		case known && reg.Run != nil && reg.Outcomes != nil:
			inv.name, inv.run = name, reg.Run
		case known:
			l.Errorf(f.Value, "invoked effect %q is not bound to code (its registry entry has no Run or no outcomes)", name)
			ok = false
		case l.reg.Actions[name].Do != nil:
			l.Errorf(f.Value, "effect %q is instant: list it under entry, exit or effects, not invoke", name)
			ok = false
		default:
			l.Errorf(f.Value, "unknown invoked effect %q%s", capText(name), didYouMean(name, sortedKeys(l.reg.Invokes)))
			ok = false
		}
	} else {
		ok = false
	}
	if f := body["timeout"]; f.Value != nil {
		info, good := l.durationPolicy(f.Value, "timeout")
		ok = ok && good
		inv.timeout = info
	} else {
		ok = false
	}
	if !ok {
		return nil
	}
	return &inv
}

func (l *loader) actions(n *yaml.Node, what string) []actionRef {
	var out []actionRef
	for _, an := range l.Strings(n, what) {
		name := an.Value
		a, ok := l.reg.Actions[name]
		switch {
		case ok && a.Do != nil:
			out = append(out, actionRef{name: name, do: a.Do})
		case l.reg.Invokes[name].Outcomes != nil:
			l.Errorf(an, "effect %q blocks: make it a state's invoke, not a listed effect", name)
		default:
			l.Errorf(an, "unknown effect %q%s", capText(name), didYouMean(name, sortedKeys(l.reg.Actions)))
		}
	}
	return out
}

func (l *loader) guardRef(n *yaml.Node) (guardRef, bool) {
	words := strings.Fields(n.Value)
	ref := guardRef{}
	switch {
	case len(words) == 1:
		ref.name = words[0]
	case len(words) == 2 && words[0] == "not":
		ref.name, ref.negate = words[1], true
	default:
		l.Errorf(n, "guard %q must be a guard's name, or not and a guard's name", capText(n.Value))
		return ref, false
	}
	g, ok := engineGuards[ref.name]
	if !ok {
		g, ok = l.reg.Guards[ref.name]
	}
	if !ok || g.Test == nil {
		names := append(sortedKeys(l.reg.Guards), closingGuard)
		l.Errorf(n, "unknown guard %q%s", capText(ref.name), didYouMean(ref.name, names))
		return ref, false
	}
	ref.test = g.Test
	return ref, true
}

func (l *loader) delayRef(n *yaml.Node) *delayRef {
	name, ok := l.String(n, "delay")
	if !ok {
		return nil
	}
	if d, ok := l.reg.Delays[name]; ok && d.Next != nil {
		ref := &delayRef{name: name, fn: d.Next}
		if info, ok := LookupPolicy(d.Policy); ok {
			ref.policy = info
		}
		return ref
	}
	if info, ok := LookupPolicy(name); ok {
		if info.Kind != KindDuration {
			l.Errorf(n, "delay policy %q is a %s, not a duration", name, info.Kind)
			return nil
		}
		return &delayRef{name: name, policy: info}
	}
	candidates := sortedKeys(l.reg.Delays)
	for _, p := range policyTable {
		if p.Kind == KindDuration {
			candidates = append(candidates, p.Name)
		}
	}
	l.Errorf(n, "unknown delay %q%s", capText(name), didYouMean(name, candidates))
	return nil
}

func (l *loader) durationPolicy(n *yaml.Node, what string) (PolicyInfo, bool) {
	name, ok := l.String(n, what)
	if !ok {
		return PolicyInfo{}, false
	}
	info, ok := LookupPolicy(name)
	if !ok {
		l.Errorf(n, "unknown policy %q%s", capText(name), didYouMean(name, policyNames()))
		return info, false
	}
	if info.Kind != KindDuration {
		l.Errorf(n, "%s policy %q is a %s, not a duration", what, name, info.Kind)
		return info, false
	}
	return info, true
}

// stateRef resolves a reference to a state that the spec must declare.
func (l *loader) stateRef(n *yaml.Node, what string) (sid, bool) {
	name, ok := l.String(n, what)
	if !ok {
		return 0, false
	}
	id, known := l.spec.byName[states.State(name)]
	if !known {
		declared := make([]string, 0, len(l.spec.byName))
		for s := range l.spec.byName {
			declared = append(declared, string(s))
		}
		l.Errorf(n, "%s %q is not declared in states%s", what, capText(name), didYouMean(name, declared))
		return 0, false
	}
	return id, true
}

func triggerNames() []string {
	var out []string
	for _, t := range states.AllTriggers() {
		out = append(out, t.String())
	}
	return out
}

// capText shortens text quoted from a file to a readable length.
func capText(s string) string {
	const max = 60
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}
