package machine_test

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

var (
	dotEdge = regexp.MustCompile(`^\t("[^"]+"|\S+) -> ("[^"]+"|\S+) \[label=<(.*)>\];$`)
	dotCell = regexp.MustCompile(`<TD ALIGN="LEFT">([^<]*)</TD>`)
)

// TestGraphMatchesStateless: the edges our renderers draw are exactly the transitions
// configured on the stateless machine built from the spec, as stateless's own ToGraph
// reports them (its order is not stable and it names guards after Go functions, so the
// edges are compared as sorted sets: from, to, trigger, number of guards, internal).
func TestGraphMatchesStateless(t *testing.T) {
	spec := loadDefault(t)
	pol := spec.Defaults()
	sm, _ := spec.Stateless("", &machine.Vars{}, &pol)
	// Stateless knows states by their index in the spec, from 1.
	name := func(index string) string {
		var i int
		fmt.Sscan(index, &i)
		return string(spec.States()[i-1].Name)
	}
	var fromStateless []string
	for _, line := range strings.Split(sm.ToGraph(), "\n") {
		m := dotEdge.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		from, to := name(strings.Trim(m[1], `"`)), name(strings.Trim(m[2], `"`))
		internal := strings.Contains(m[3], "<B>Internal</B>")
		for _, cell := range dotCell.FindAllStringSubmatch(m[3], -1) {
			trigger, _, _ := strings.Cut(cell[1], " ")
			guards := strings.Count(cell[1], "[")
			fromStateless = append(fromStateless, fmt.Sprintf("%s -> %s on %s, %d guards, internal %v", from, to, trigger, guards, internal))
		}
	}
	var fromSpec []string
	timed := 0
	for _, e := range spec.Edges() {
		trigger := e.Trigger.String()
		if e.Delay != "" {
			trigger = fmt.Sprintf("trigger(%d)", 64+timed) // the internal trigger of the k-th timed edge
			timed++
		}
		fromSpec = append(fromSpec, fmt.Sprintf("%s -> %s on %s, %d guards, internal %v", e.From, e.To, trigger, len(e.Guards), e.Internal))
	}
	sort.Strings(fromStateless)
	sort.Strings(fromSpec)
	if len(fromSpec) != 47 {
		t.Errorf("the default spec has %d edges, want 47", len(fromSpec))
	}
	if diff := cmp.Diff(fromSpec, fromStateless); diff != "" {
		t.Errorf("edges differ (-spec +stateless):\n%s", diff)
	}
	// And every spec edge appears in both renderings.
	dot, mmd := spec.DOT(machine.GraphOptions{}), spec.Mermaid(machine.GraphOptions{})
	for _, e := range spec.Edges() {
		if !strings.Contains(dot, fmt.Sprintf("%q -> %q [label=%q", e.From.String(), e.To.String(), e.Name())) &&
			!strings.Contains(dot, fmt.Sprintf("%q -> %q [label=\"%s ", e.From.String(), e.To.String(), e.Name())) {
			t.Errorf("DOT lacks %s -> %s on %s", e.From, e.To, e.Name())
		}
		id := func(s states.State) string { return strings.ReplaceAll(s.String(), "-", "_") }
		if !strings.Contains(mmd, fmt.Sprintf("    %s --> %s : %s", id(e.From), id(e.To), e.Name())) {
			t.Errorf("Mermaid lacks %s -> %s on %s", e.From, e.To, e.Name())
		}
	}
}

// TestGraphHighlight renders a connection's path and current state onto the picture.
func TestGraphHighlight(t *testing.T) {
	spec := loadDefault(t)
	at := time.Unix(0, 0)
	path := []machine.Transition{
		{At: at, From: states.Idle, To: states.Connecting, Trigger: "start"},
		{At: at, From: states.Connecting, To: states.BackingOff, Trigger: "connect_failed"},
		{At: at, From: states.BackingOff, To: states.Connecting, Trigger: "after backoff"},
		{At: at, From: states.Connecting, To: states.BackingOff, Trigger: "connect_failed"},
	}
	pol := spec.Defaults()
	pol.BackoffBase = 250 * time.Millisecond
	opts := machine.GraphOptions{Current: states.BackingOff, Path: path, Policies: &pol}
	golden(t, "testdata/highlight.dot", spec.DOT(opts))
	golden(t, "testdata/highlight.mmd", spec.Mermaid(opts))
	// Deterministic: the same input renders the same bytes.
	for range 20 {
		if spec.DOT(opts) != spec.DOT(opts) || spec.Mermaid(opts) != spec.Mermaid(opts) {
			t.Fatal("rendering is not deterministic")
		}
	}
}

// TestMermaidIDsDistinct: states whose names differ only in - and _ are drawn as two
// states in Mermaid (whose IDs cannot hold a -); both were drawn as one, their edges
// merged.
func TestMermaidIDsDistinct(t *testing.T) {
	data := strings.ReplaceAll(string(defaultSpecYAML(t)), "breaker-open", "backing_off")
	spec, err := machine.LoadSpec("twins.yaml", []byte(data), effects.Registry())
	if err != nil {
		t.Fatal(err)
	}
	mmd := spec.Mermaid(machine.GraphOptions{})
	alias := regexp.MustCompile(`(?m)^    state "([^"]+)" as (\S+)$`)
	ids := map[string]string{} // id to the state drawn under it
	for _, st := range spec.States() {
		ids[string(st.Name)] = string(st.Name)
	}
	for _, m := range alias.FindAllStringSubmatch(mmd, -1) {
		delete(ids, m[1])
		if other, ok := ids[m[2]]; ok {
			t.Errorf("states %q and %q are both drawn as %s:\n%s", other, m[1], m[2], mmd)
		}
		ids[m[2]] = m[1]
	}
	if len(ids) != len(spec.States()) {
		t.Errorf("%d states drawn as %d", len(spec.States()), len(ids))
	}
}

// TestDOTFileNameEscaped: the file name in the DOT's first line, a comment, is quoted
// when it holds a line break (or another control character), which ended the comment
// and wrote the rest of the name into the picture as DOT.
func TestDOTFileNameEscaped(t *testing.T) {
	spec, err := machine.LoadSpec("specs/x\n}\ndigraph evil {\r.yaml", defaultSpecYAML(t), effects.Registry())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(spec.DOT(machine.GraphOptions{}), "\n")
	want := []string{`// The lifecycle in "x\n}\ndigraph evil {\r.yaml", rendered by mcpfsm graph. Do not edit.`, "digraph lifecycle {"}
	if diff := cmp.Diff(want, lines[:2]); diff != "" {
		t.Errorf("first lines (-want +got):\n%s", diff)
	}
	if got := loadDefault(t).DOT(machine.GraphOptions{}); !strings.HasPrefix(got, "// The lifecycle in transitions.yaml, rendered") {
		t.Errorf("a plain name is quoted: %s", got[:80])
	}
}

// TestGraphDelayWithoutPolicy: a registry's delay whose Policy names no policy (it
// is optional) is drawn without one; the graph panicked (reflect, formatting a
// duration as a number).
func TestGraphDelayWithoutPolicy(t *testing.T) {
	reg := effects.Registry()
	delays := map[string]machine.Delay{}
	for name, d := range reg.Delays {
		delays[name] = d
	}
	for name, policy := range map[string]string{"steady": "", "typo": "backof_base"} {
		d := delays["backoff"]
		d.Policy = policy
		delays[name] = d
	}
	reg.Delays = delays
	for _, name := range []string{"steady", "typo"} {
		data := strings.Replace(string(defaultSpecYAML(t)), "delay: backoff", "delay: "+name, 1)
		spec, err := machine.LoadSpec("custom.yaml", []byte(data), reg)
		if err != nil {
			t.Fatal(err)
		}
		dot, mmd := spec.DOT(machine.GraphOptions{}), spec.Mermaid(machine.GraphOptions{})
		if !strings.Contains(dot, `"backing-off" -> "connecting" [label="after `+name+`", style=dashed]`) || !strings.Contains(mmd, "backing_off --> connecting : after "+name+"\n") {
			t.Errorf("the timed edge of %s is not drawn plainly:\n%s\n%s", name, dot, mmd)
		}
	}
}
