package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/simulate"
	"github.com/mcpfsm/mcpfsm/states"
)

func runGraph(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("graph", "[--format dot|mermaid] [--trace FILE [--server NAME]] [SPEC]", `
Render a lifecycle spec as a Graphviz DOT digraph or a Mermaid stateDiagram-v2.
SPEC defaults to the built-in lifecycle (transitions.yaml). The output is
deterministic: docs/graphs/ holds it for the built-in lifecycle.
Edges read "trigger [guards] / effects"; dashed edges are timed ("after DELAY
(policy default)"), dotted ones internal (no state change).

With --trace, the path a connection took and the state it is in are drawn on the
picture: FILE holds the JSON lines of mcpfsm run --json or mcpfsm simulate --json
("-" for stdin); --server picks one server when FILE holds several. Each edge
taken shows how many times it was taken, and timed edges and invoked effects show
the policies the connection ran with (the last "server" line of FILE for it),
not the spec's defaults. FILE is read whole before anything is drawn: at most
1,000,000 transitions of the server drawn, and lines of at most 1 MiB.`, stderr)
	format := fs.String("format", "dot", "output format: dot or mermaid")
	trace := fs.String("trace", "", "JSON lines of transitions to highlight")
	server := fs.String("server", "", "the server of --trace to highlight")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() > 1 {
		fmt.Fprintln(stderr, "mcpfsm graph: at most one SPEC")
		return 2
	}
	if *format != "dot" && *format != "mermaid" {
		fmt.Fprintf(stderr, "mcpfsm graph: unknown format %q (want dot or mermaid)\n", *format)
		return 2
	}
	spec := mcpfsm.DefaultSpec()
	if fs.NArg() == 1 {
		var err error
		if spec, err = loadSpecFile(fs.Arg(0)); err != nil {
			fmt.Fprintln(stderr, errorText(err))
			return 1
		}
	}
	var opts machine.GraphOptions
	if *trace != "" {
		path, policies, err := readTrace(spec, *trace, *server)
		if err != nil {
			fmt.Fprintln(stderr, "mcpfsm graph:", errorText(err))
			return 1
		}
		opts.Path = path
		if len(path) > 0 {
			opts.Current = path[len(path)-1].To
		}
		if policies != nil {
			p := spec.Defaults()
			for _, name := range sortedNames(policies) {
				if err := p.Set(name, policies[name]); err != nil {
					fmt.Fprintf(stderr, "mcpfsm graph: %s: %s\n", printable(*trace, maxLine), errorText(err))
					return 1
				}
			}
			opts.Policies = &p
		}
	}
	if *format == "mermaid" {
		fmt.Fprint(stdout, spec.Mermaid(opts))
	} else {
		fmt.Fprint(stdout, spec.DOT(opts))
	}
	return 0
}

// traceLine is any line of a trace: a transition, a server line, a note or a summary.
type traceLine struct {
	event
	Kind     string            `json:"kind"`
	Policies map[string]string `json:"policies"`
}

// The most of a trace that graph --trace reads: transitions of the server drawn (as
// many as a simulation takes), and bytes in one line. A trace is read whole before
// anything is drawn: an endless one (on stdin) grew without bound.
const maxTraceLine = 1 << 20

var maxTraceTransitions = simulate.MaxTransitions // tests lower it

// readTrace reads the transitions of one server from JSON lines, and the policies of
// its last server line (nil if it has none).
func readTrace(spec *machine.Spec, file, server string) ([]machine.Transition, map[string]string, error) {
	var r io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, nil, err
		}
		defer f.Close()
		r = f
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxTraceLine)
	var out []machine.Transition
	servers := map[string]bool{}
	policies := map[string]map[string]string{}
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var ev traceLine
		if err := json.Unmarshal(b, &ev); err != nil {
			return nil, nil, fmt.Errorf("%s:%d: %v", file, line, err)
		}
		if ev.Kind == "server" {
			policies[ev.Server] = ev.Policies
			continue
		}
		if ev.From == "" { // a note or a summary
			continue
		}
		servers[ev.Server] = true
		if server != "" && ev.Server != server {
			continue
		}
		from, to := states.State(ev.From), states.State(ev.To)
		_, ok1 := spec.State(from)
		_, ok2 := spec.State(to)
		if !ok1 || !ok2 {
			return nil, nil, fmt.Errorf("%s: object %d: state %s or %s is not in the lifecycle drawn", file, line, machine.Quote(ev.From), machine.Quote(ev.To))
		}
		if len(out) == maxTraceTransitions {
			return nil, nil, fmt.Errorf("%s:%d: more than %d transitions of server %s: graph a part of the trace (such as its last lines: tail -n %d)", file, line, maxTraceTransitions, machine.Quote(ev.Server), maxTraceTransitions)
		}
		out = append(out, machine.Transition{At: ev.Time, From: from, To: to, Trigger: ev.Trigger})
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, nil, fmt.Errorf("%s:%d: a line longer than %d bytes: not a trace", file, line+1, maxTraceLine)
	} else if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", file, err)
	}
	if server == "" && len(servers) > 1 {
		return nil, nil, fmt.Errorf("%s holds several servers (%s): pick one with --server", file, strings.Join(sortedNames(servers), ", "))
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("%s holds no transitions of server %s", file, machine.Quote(server))
	}
	if server == "" {
		server = sortedNames(servers)[0]
	}
	return out, policies[server], nil
}
