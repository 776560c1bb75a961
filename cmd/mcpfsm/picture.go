package main

import (
	"fmt"
	"html"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// This file draws a lifecycle as SVG for the status page, from the spec alone (no
// script, no network): a layered layout in the manner of Sugiyama's, simplified. States
// are put in layers by their distance from the initial state (final states in a layer
// of their own at the bottom), ordered within a layer to keep edges short, and edges
// drawn as curves between them. The current state and the recent path are marked.

const (
	nodeH    = 30.0
	layerGap = 78.0
	nodeGap  = 26.0
	charW    = 7.2 // of the 12px sans-serif labels, on average
	margin   = 16.0
)

// A picture is the layout of a lifecycle: where its states go. It depends on the
// spec alone, and is made once.
type picture struct {
	width, height float64
	nodes         map[states.State]*placed
	order         []states.State // the spec's order
	edges         []drawnEdge
}

type placed struct {
	x, y, w float64 // centre, and width
	layer   int
	final   bool
	calls   machine.CallMode
}

// drawnEdge is the edges of a spec from one state to another, drawn as one curve.
type drawnEdge struct {
	from, to states.State
	names    []string // what takes it: triggers, "after <delay>"
	timed    bool     // every edge of it is timed
	close    bool     // only close takes it: drawn faint, there is one from nearly every state
}

var (
	pictureLayoutsMu sync.Mutex
	pictureLayouts   = map[*machine.Spec]*picture{}
)

// pictureOf returns the layout of spec, made on first use.
func pictureOf(spec *machine.Spec) *picture {
	pictureLayoutsMu.Lock()
	defer pictureLayoutsMu.Unlock()
	if l := pictureLayouts[spec]; l != nil {
		return l
	}
	l := newLayout(spec)
	pictureLayouts[spec] = l
	return l
}

func newLayout(spec *machine.Spec) *picture {
	l := &picture{nodes: map[states.State]*placed{}}
	for _, st := range spec.States() {
		l.order = append(l.order, st.Name)
		l.nodes[st.Name] = &placed{w: float64(len(st.Name))*charW + 24, layer: -1, final: st.Final, calls: st.Calls}
	}
	// The edges, merged by pair; internal ones stay in their state and are not drawn.
	byPair := map[[2]states.State]int{}
	out := map[states.State][]states.State{}
	for _, e := range spec.Edges() {
		if e.Internal || e.From == e.To {
			continue
		}
		k := [2]states.State{e.From, e.To}
		i, ok := byPair[k]
		if !ok {
			i = len(l.edges)
			byPair[k] = i
			l.edges = append(l.edges, drawnEdge{from: e.From, to: e.To, timed: true, close: true})
			out[e.From] = append(out[e.From], e.To)
		}
		l.edges[i].names = append(l.edges[i].names, e.Name())
		l.edges[i].timed = l.edges[i].timed && e.Delay != ""
		l.edges[i].close = l.edges[i].close && e.Name() == "close"
	}
	// Layers: breadth first from the initial state; final states last.
	layer := 0
	frontier := []states.State{spec.Initial()}
	l.nodes[spec.Initial()].layer = 0
	for len(frontier) > 0 {
		var next []states.State
		for _, s := range frontier {
			for _, t := range out[s] {
				if n := l.nodes[t]; n.layer < 0 && !n.final {
					n.layer = layer + 1
					next = append(next, t)
				}
			}
		}
		if len(next) > 0 {
			layer++
		}
		frontier = next
	}
	last := layer + 1
	for _, name := range l.order {
		if n := l.nodes[name]; n.final || n.layer < 0 {
			n.layer = last // final, or not reachable (a spec the validator refuses)
		}
	}
	rows := make([][]states.State, last+1)
	for _, name := range l.order {
		n := l.nodes[name]
		rows[n.layer] = append(rows[n.layer], name)
	}
	rows = slices.DeleteFunc(rows, func(r []states.State) bool { return len(r) == 0 })
	// Order each layer by the mean position of its neighbours in the layer above
	// (a barycentre sweep, twice), so that edges cross less.
	pos := map[states.State]float64{}
	for _, row := range rows {
		for i, s := range row {
			pos[s] = float64(i) - float64(len(row)-1)/2
		}
	}
	in := map[states.State][]states.State{}
	for _, e := range l.edges {
		in[e.to] = append(in[e.to], e.from)
	}
	for range 2 {
		for r := 1; r < len(rows); r++ {
			bary := map[states.State]float64{}
			for _, s := range rows[r] {
				sum, n := 0.0, 0
				for _, p := range append(slices.Clone(in[s]), out[s]...) {
					if l.nodes[p].layer < l.nodes[s].layer {
						sum += pos[p]
						n++
					}
				}
				if n > 0 {
					bary[s] = sum / float64(n)
				} else {
					bary[s] = pos[s]
				}
			}
			sort.SliceStable(rows[r], func(i, j int) bool { return bary[rows[r][i]] < bary[rows[r][j]] })
			for i, s := range rows[r] {
				pos[s] = float64(i) - float64(len(rows[r])-1)/2
			}
		}
	}
	// Coordinates: each row centred.
	for _, row := range rows {
		w := -nodeGap
		for _, s := range row {
			w += l.nodes[s].w + nodeGap
		}
		l.width = math.Max(l.width, w)
	}
	l.width += 2 * margin
	for r, row := range rows {
		w := -nodeGap
		for _, s := range row {
			w += l.nodes[s].w + nodeGap
		}
		x := (l.width - w) / 2
		for _, s := range row {
			n := l.nodes[s]
			n.layer = r
			n.x = x + n.w/2
			n.y = margin + nodeH/2 + float64(r)*layerGap
			x += n.w + nodeGap
		}
	}
	l.height = margin*2 + nodeH + float64(len(rows)-1)*layerGap
	return l
}

// svg draws the layout with current as the state the connection is in and path as
// its recent transitions.
func (l *picture) svg(current states.State, path []machine.Transition) string {
	visited := map[states.State]bool{}
	taken := map[[2]states.State]int{}
	for _, tr := range path {
		visited[tr.From], visited[tr.To] = true, true
		if tr.From != tr.To {
			taken[[2]states.State{tr.From, tr.To}]++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="lifecycle" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" role="img" aria-label="lifecycle, current state %s">`,
		l.width, l.height, html.EscapeString(string(current)))
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#9aa0a6"/></marker>` +
		`<marker id="arrow-hot" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#d35400"/></marker></defs>`)
	// Untaken edges first, so that the path is drawn over them.
	for pass := range 2 {
		for _, e := range l.edges {
			n := taken[[2]states.State{e.from, e.to}]
			if (n > 0) != (pass == 1) {
				continue
			}
			l.edge(&b, e, n)
		}
	}
	for _, name := range l.order {
		n := l.nodes[name]
		class := "state"
		switch {
		case name == current:
			class += " current"
		case visited[name]:
			class += " visited"
		}
		if n.final {
			class += " final"
		}
		fmt.Fprintf(&b, `<g class="%s" data-state="%s"><title>%s: calls %s</title>`, class, html.EscapeString(string(name)), html.EscapeString(string(name)), callsText(n.calls))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.0f" rx="9"/>`, n.x-n.w/2, n.y-nodeH/2, n.w, nodeH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text></g>`, n.x, n.y+4, html.EscapeString(string(name)))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

func callsText(c machine.CallMode) string {
	if c == 0 {
		return "closed"
	}
	return c.String()
}

// edge draws one edge: a curve from the side of one state that faces the other, bent
// to one side so that the edges of a pair in both directions do not overlap.
func (l *picture) edge(b *strings.Builder, e drawnEdge, taken int) {
	from, to := l.nodes[e.from], l.nodes[e.to]
	x1, y1, x2, y2 := from.x, from.y, to.x, to.y
	switch {
	case to.layer > from.layer:
		y1, y2 = y1+nodeH/2, y2-nodeH/2
	case to.layer < from.layer:
		y1, y2 = y1-nodeH/2, y2+nodeH/2
	case to.x > from.x:
		x1, x2 = x1+from.w/2, x2-to.w/2
	default:
		x1, x2 = x1-from.w/2, x2+to.w/2
	}
	// The control point: off the straight line's middle, to the right of the
	// direction of travel, more for edges that go up (mostly back edges) or sideways.
	mx, my := (x1+x2)/2, (y1+y2)/2
	dx, dy := x2-x1, y2-y1
	length := math.Max(1, math.Hypot(dx, dy))
	bend := 14.0
	if to.layer <= from.layer {
		bend = 34
	}
	cx, cy := mx-dy/length*bend, my+dx/length*bend
	class, marker := "edge", "arrow"
	if e.timed {
		class += " timed"
	}
	if e.close {
		class += " close"
	}
	if taken > 0 {
		class += " taken"
		marker = "arrow-hot"
	}
	title := string(e.from) + " → " + string(e.to) + ": " + strings.Join(e.names, ", ")
	if taken > 0 {
		title += fmt.Sprintf(" (taken %d× recently)", taken)
	}
	fmt.Fprintf(b, `<path class="%s" data-from="%s" data-to="%s" d="M%.1f,%.1f Q%.1f,%.1f %.1f,%.1f" marker-end="url(#%s)"><title>%s</title></path>`,
		class, html.EscapeString(string(e.from)), html.EscapeString(string(e.to)), x1, y1, cx, cy, x2, y2, marker, html.EscapeString(title))
}
