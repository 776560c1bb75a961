package machine

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mcpfsm/mcpfsm/states"
)

// GraphOptions mark a connection's whereabouts on a rendered lifecycle.
type GraphOptions struct {
	// Current, if set, is drawn as the state the connection is in.
	Current states.State
	// Path, if set, is drawn as the transitions the connection took; each edge shows
	// how many times it was taken.
	Path []Transition
	// Policies, if set, are the values shown on timed edges and invoked effects in
	// place of the spec's defaults.
	Policies *Policies
}

// DOT renders the spec as a Graphviz digraph. The output depends only on the spec and
// opts: the same input gives the same bytes.
func (s *Spec) DOT(opts GraphOptions) string {
	g := s.graph(opts)
	var b strings.Builder
	name := baseName(s.file)
	if q := strconv.Quote(name); q != `"`+name+`"` {
		name = q // a line break would end the comment, the rest read as DOT
	}
	fmt.Fprintf(&b, "// The lifecycle in %s, rendered by mcpfsm graph. Do not edit.\n", name)
	b.WriteString("digraph lifecycle {\n")
	b.WriteString("  rankdir=TB;\n")
	b.WriteString("  node [shape=box, style=rounded, fontname=\"Helvetica\", fontsize=11];\n")
	b.WriteString("  edge [fontname=\"Helvetica\", fontsize=9];\n")
	b.WriteString("  start [shape=point, label=\"\"];\n")
	for _, n := range g.nodes {
		attrs := []string{"label=" + dotQuote(strings.Join(n.lines, "\n"))}
		if n.final {
			attrs = append(attrs, "peripheries=2")
		}
		switch {
		case n.current:
			attrs = append(attrs, "style=\"rounded,filled,bold\"", "fillcolor=\"#ffd27f\"")
		case n.visited:
			attrs = append(attrs, "style=\"rounded,filled\"", "fillcolor=\"#e8f0ff\"")
		}
		fmt.Fprintf(&b, "  %s [%s];\n", dotQuote(n.name), strings.Join(attrs, ", "))
	}
	fmt.Fprintf(&b, "  start -> %s;\n", dotQuote(string(s.name(s.initial))))
	for _, e := range g.edges {
		attrs := []string{"label=" + dotQuote(e.label)}
		if e.timed {
			attrs = append(attrs, "style=dashed")
		}
		if e.internal {
			attrs = append(attrs, "style=dotted")
		}
		if e.taken > 0 {
			attrs = append(attrs, "color=\"#d35400\"", "fontcolor=\"#d35400\"", "penwidth=2")
		}
		fmt.Fprintf(&b, "  %s -> %s [%s];\n", dotQuote(e.from), dotQuote(e.to), strings.Join(attrs, ", "))
	}
	b.WriteString("}\n")
	return b.String()
}

// Mermaid renders the spec as a Mermaid stateDiagram-v2, which GitHub draws in
// Markdown. The output depends only on the spec and opts.
func (s *Spec) Mermaid(opts GraphOptions) string {
	g := s.graph(opts)
	mermaidID := mermaidIDs(g.nodes)
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	for _, n := range g.nodes {
		id := mermaidID(n.name)
		if id != n.name || len(n.lines) > 1 {
			// Named, not only identified: Mermaid draws a state that has
			// description lines with those alone, its name left off.
			fmt.Fprintf(&b, "    state %q as %s\n", n.name, id)
		}
		for _, line := range n.lines[1:] {
			fmt.Fprintf(&b, "    %s : %s\n", id, mermaidText(line))
		}
	}
	fmt.Fprintf(&b, "    [*] --> %s\n", mermaidID(string(s.name(s.initial))))
	for _, e := range g.edges {
		fmt.Fprintf(&b, "    %s --> %s : %s\n", mermaidID(e.from), mermaidID(e.to), mermaidText(e.label))
	}
	for _, n := range g.nodes {
		if n.final {
			fmt.Fprintf(&b, "    %s --> [*]\n", mermaidID(n.name))
		}
	}
	var visited []string
	current := ""
	for _, n := range g.nodes {
		switch {
		case n.current:
			current = mermaidID(n.name)
		case n.visited:
			visited = append(visited, mermaidID(n.name))
		}
	}
	if len(visited) > 0 {
		b.WriteString("    classDef visited fill:#e8f0ff\n")
		fmt.Fprintf(&b, "    class %s visited\n", strings.Join(visited, ","))
	}
	if current != "" {
		b.WriteString("    classDef current fill:#ffd27f,stroke-width:3px\n")
		fmt.Fprintf(&b, "    class %s current\n", current)
	}
	return b.String()
}

type graphNode struct {
	name             string
	lines            []string // the name, then what the state does
	final            bool
	current, visited bool
}

type graphEdge struct {
	from, to        string
	label           string
	timed, internal bool
	taken           int
}

type graph struct {
	nodes []graphNode
	edges []graphEdge
}

// graph lays out what both renderings draw, in the spec's order.
func (s *Spec) graph(opts GraphOptions) graph {
	pol := &s.defaults
	if opts.Policies != nil {
		pol = opts.Policies
	}
	visited := map[states.State]bool{}
	taken := map[[3]string]int{}
	for _, t := range opts.Path {
		visited[t.From], visited[t.To] = true, true
		taken[[3]string{t.From.String(), t.To.String(), t.Trigger}]++
	}
	var g graph
	for _, ss := range s.states[1:] {
		n := graphNode{name: string(ss.name), final: ss.final, current: ss.name == opts.Current, visited: visited[ss.name]}
		n.lines = []string{n.name}
		if ss.calls != 0 {
			n.lines = append(n.lines, "calls: "+ss.calls.String())
		}
		if len(ss.entry) > 0 {
			n.lines = append(n.lines, "entry / "+actionNames(ss.entry))
		}
		if ss.invoke != nil {
			n.lines = append(n.lines, fmt.Sprintf("invoke %s ≤ %s %s", ss.invoke.name, ss.invoke.timeout.Name, pol.Format(ss.invoke.timeout)))
		}
		if len(ss.exit) > 0 {
			n.lines = append(n.lines, "exit / "+actionNames(ss.exit))
		}
		g.nodes = append(g.nodes, n)
	}
	for _, e := range s.edges { // grouped by state already, in file order
		ge := graphEdge{from: string(s.name(e.from)), to: string(s.name(e.to)), timed: e.delay != nil, internal: e.internal}
		ge.label = e.name
		if e.delay != nil && e.delay.policy.Kind != 0 { // a registry's delay may name none
			if e.delay.fn != nil {
				ge.label += fmt.Sprintf(" (%s %s)", e.delay.policy.Name, pol.Format(e.delay.policy))
			} else {
				ge.label += fmt.Sprintf(" (%s)", pol.Format(e.delay.policy))
			}
		}
		if len(e.guards) > 0 {
			ge.label += " [" + e.guardLabel() + "]"
		}
		if len(e.effects) > 0 {
			ge.label += " / " + actionNames(e.effects)
		}
		if e.internal {
			ge.label += " (internal)"
		}
		if n := taken[[3]string{ge.from, ge.to, e.name}]; n > 0 {
			ge.taken = n
			ge.label += fmt.Sprintf(" ×%d", n)
		}
		g.edges = append(g.edges, ge)
	}
	return g
}

func actionNames(list []actionRef) string {
	names := make([]string, len(list))
	for i, a := range list {
		names[i] = a.name
	}
	return strings.Join(names, ", ")
}

func dotQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// mermaidKeywords are the words with which a line of Mermaid's stateDiagram-v2 may
// begin (its lexer's, case aside): a state whose ID is one (note, state, class...)
// made the whole picture fail to parse.
var mermaidKeywords = map[string]bool{
	"state": true, "note": true, "class": true, "classdef": true, "style": true, "scale": true,
	"default": true, "href": true, "click": true, "acctitle": true, "accdescr": true,
	"statediagram": true, "hide": true, "direction": true, "end": true, "as": true,
}

// mermaidIDs returns the Mermaid ID of each state's name: the name with - written _
// (an ID cannot hold a -), or with _ added if it is one of mermaidKeywords, and, when
// that is another state's name or ID (a-b beside a_b), with _2, _3... added, so that no
// two states are drawn as one. Other names keep theirs; the others take theirs in the
// spec's order.
func mermaidIDs(nodes []graphNode) func(string) string {
	ids := make(map[string]string, len(nodes))
	taken := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		if !strings.Contains(n.name, "-") && !mermaidKeywords[n.name] {
			ids[n.name], taken[n.name] = n.name, true
		}
	}
	for _, n := range nodes {
		if _, ok := ids[n.name]; ok {
			continue
		}
		base := strings.ReplaceAll(n.name, "-", "_")
		if mermaidKeywords[base] {
			base += "_"
		}
		id := base
		for i := 2; taken[id]; i++ {
			id = fmt.Sprintf("%s_%d", base, i)
		}
		ids[n.name], taken[id] = id, true
	}
	return func(name string) string { return ids[name] }
}

// mermaidText keeps a label within what stateDiagram-v2 parses: no colons, semicolons
// or hashes, which it reads as syntax.
func mermaidText(s string) string {
	return strings.NewReplacer(": ", " ", ":", " ", ";", ",", "#", "").Replace(s)
}

func baseName(path string) string {
	if i := strings.LastIndexAny(path, `/\`); i >= 0 {
		return path[i+1:]
	}
	return path
}
