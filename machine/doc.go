// Package machine is the engine that runs a connection's lifecycle as data: it loads
// and validates a lifecycle spec (LoadSpec, LoadSpecFile: the YAML of transitions.yaml,
// every problem with its file:line:column), compiles it onto a qmuntal/stateless
// machine, and runs it.
//
// A Spec binds the names it uses (guards, actions, invoked effects, delays) to code
// through a Registry; package effects provides the default lifecycle's. A Machine is
// one connection's lifecycle: an owner, held by one goroutine at a time, fires the
// triggers that events posted to its mailbox carry, runs the effects and arms the timed
// transitions, under the engine's own rules (failures counted before guards, stale
// events ignored, close applied until a final state). The loader refuses a loop of
// invoked effects' outcomes the machine would go round without a pause (no timed edge
// on the way) unless its guards end it whatever causes the outcomes carry: a guard
// counts only by what it declares of the engine's books of failures (Guard.Books: it
// holds exactly on some last causes, once the failures reach breaker_threshold, or once
// a streak of one cause does), an outcome the invoke does not list in Invoke.Fails may
// carry no cause at all, and an action on the way may reset the books. Policies holds the numbers a
// spec declares and a config overrides. A Sim runs the same core in virtual time
// against a World, for mcpfsm simulate. Spec.DOT and Spec.Mermaid draw a spec, and a
// connection's path on it.
package machine
