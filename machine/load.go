package machine

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mcpfsm/mcpfsm/states"
	yaml "go.yaml.in/yaml/v3"
)

// LoadSpecFile reads and loads a spec file. See LoadSpec.
func LoadSpecFile(path string, reg Registry) (*Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Read one byte past the limit, so that Parse can say the file is too large.
	data, err := io.ReadAll(io.LimitReader(f, MaxSpecSize+1))
	if err != nil {
		return nil, err
	}
	return LoadSpec(path, data, reg)
}

// LoadSpec parses and validates a lifecycle spec and compiles it onto stateless. file
// names data in messages. Every name the spec uses must be in the states vocabulary or
// in reg. When anything is wrong the error is a *FileError listing every problem with
// its file:line:column; no input, however malformed, makes LoadSpec panic, and no spec
// it returns can make the engine panic.
func LoadSpec(file string, data []byte, reg Registry) (*Spec, error) {
	l := &loader{YAMLReader: YAMLReader{File: file}, reg: reg, spec: &Spec{file: file}}
	root := l.Parse(data)
	if root == nil {
		return nil, l.Err()
	}
	l.read(root)
	if err := l.Err(); err != nil {
		return nil, err
	}
	l.check()
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
	declared  map[states.State]*yaml.Node // state name key nodes
	pending   []pendingEdge               // edges whose target is resolved after every state is read
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
			l.Errorf(f.Value, "version %s is not supported (this is version 1)", v)
		}
	}
	if f := top["description"]; f.Value != nil {
		l.spec.desc, _ = l.String(f.Value, "description")
	}
	if f := top["policies"]; f.Value != nil {
		l.readPolicies(f)
	}
	if f := top["states"]; f.Value != nil {
		l.statesKey = f.Key
		l.readStates(f.Value)
	}
	if f := top["initial"]; f.Value != nil {
		if st, ok := l.stateRef(f.Value, "initial state"); ok {
			l.spec.initial = st
		}
	}
	for _, p := range l.pending {
		if p.to == nil {
			p.e.to = p.e.from
			continue
		}
		if st, ok := l.stateRef(p.to, "target state"); ok {
			p.e.to = st
		}
	}
}

func (l *loader) readPolicies(f Field) {
	seen := map[string]*yaml.Node{} // policy name to its default's node
	for _, pf := range l.Mapping(f.Value, "policies") {
		info, ok := LookupPolicy(pf.Name())
		if !ok {
			l.Errorf(pf.Key, "unknown policy %q%s", pf.Name(), didYouMean(pf.Name(), policyNames()))
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

func (l *loader) readStates(n *yaml.Node) {
	l.declared = map[states.State]*yaml.Node{}
	names := stateNames()
	for _, sf := range l.Mapping(n, "states") {
		st, ok := states.ParseState(sf.Name())
		if !ok {
			l.Errorf(sf.Key, "unknown state %q%s", sf.Name(), didYouMean(sf.Name(), names))
			continue
		}
		l.declared[st] = sf.Key
		ss := &stateSpec{state: st}
		l.spec.states = append(l.spec.states, ss)
		l.spec.byState[st] = ss
		l.readState(ss, sf)
	}
}

func (l *loader) readState(ss *stateSpec, sf Field) {
	what := fmt.Sprintf("state %q", ss.state)
	body := l.Struct(sf.Value, what, "description!", "final", "entry", "exit", "invoke", "on", "after")
	if f := body["description"]; f.Value != nil {
		ss.desc, _ = l.String(f.Value, what+" description")
	}
	if f := body["final"]; f.Value != nil {
		ss.final, _ = l.Bool(f.Value, what+" final")
	}
	if f := body["entry"]; f.Value != nil {
		ss.entry = l.actions(f.Value, what+" entry")
	}
	if f := body["exit"]; f.Value != nil {
		ss.exit = l.actions(f.Value, what+" exit")
	}
	if f := body["invoke"]; f.Value != nil {
		ss.invoke = l.readInvoke(f.Value, what)
	}
	if f := body["on"]; f.Value != nil {
		for _, tf := range l.Mapping(f.Value, what+" on") {
			t, ok := states.ParseTrigger(tf.Name())
			if !ok {
				l.Errorf(tf.Key, "unknown trigger %q%s", tf.Name(), didYouMean(tf.Name(), triggerNames()))
				continue
			}
			for _, tn := range l.oneOrMany(tf.Value, fmt.Sprintf("transition on %s in %s", t, what)) {
				e := &edge{from: ss.state, trigger: t, trig: t, name: t.String()}
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
			e := &edge{from: ss.state}
			l.readEdge(e, tn, fmt.Sprintf("timed transition in %s", what), true)
			if e.delay == nil {
				continue
			}
			if len(ss.after) == maxAfter {
				l.Errorf(tn, "%s has more than %d timed transitions", what, maxAfter)
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
		switch {
		case !good:
			ok = false
		case l.reg.Invokes[name].Outcomes != nil:
			inv.name = name
		case l.reg.Actions[name].Do != nil:
			l.Errorf(f.Value, "effect %q is instant: list it under entry, exit or effects, not invoke", name)
			ok = false
		default:
			l.Errorf(f.Value, "unknown invoked effect %q%s", name, didYouMean(name, sortedKeys(l.reg.Invokes)))
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
			l.Errorf(an, "unknown effect %q%s", name, didYouMean(name, sortedKeys(l.reg.Actions)))
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
		l.Errorf(n, "guard %q must be a guard's name, or not and a guard's name", n.Value)
		return ref, false
	}
	g, ok := l.reg.Guards[ref.name]
	if !ok || g.Test == nil {
		l.Errorf(n, "unknown guard %q%s", ref.name, didYouMean(ref.name, sortedKeys(l.reg.Guards)))
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
	l.Errorf(n, "unknown delay %q%s", name, didYouMean(name, candidates))
	return nil
}

func (l *loader) durationPolicy(n *yaml.Node, what string) (PolicyInfo, bool) {
	name, ok := l.String(n, what)
	if !ok {
		return PolicyInfo{}, false
	}
	info, ok := LookupPolicy(name)
	if !ok {
		l.Errorf(n, "unknown policy %q%s", name, didYouMean(name, policyNames()))
		return info, false
	}
	if info.Kind != KindDuration {
		l.Errorf(n, "%s policy %q is a %s, not a duration", what, name, info.Kind)
		return info, false
	}
	return info, true
}

// stateRef resolves a reference to a state that the spec must declare.
func (l *loader) stateRef(n *yaml.Node, what string) (states.State, bool) {
	name, ok := l.String(n, what)
	if !ok {
		return 0, false
	}
	st, known := states.ParseState(name)
	if !known {
		declared := make([]string, 0, len(l.declared))
		for s := range l.declared {
			declared = append(declared, s.String())
		}
		l.Errorf(n, "unknown state %q%s", name, didYouMean(name, declared))
		return 0, false
	}
	if l.declared[st] == nil {
		l.Errorf(n, "state %q is not declared in states", name)
		return 0, false
	}
	return st, true
}

func stateNames() []string {
	var out []string
	for _, s := range states.AllStates() {
		out = append(out, s.String())
	}
	return out
}

func triggerNames() []string {
	var out []string
	for _, t := range states.AllTriggers() {
		out = append(out, t.String())
	}
	return out
}
