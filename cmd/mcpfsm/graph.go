package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
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
not the spec's defaults.`, stderr)
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
	dec := json.NewDecoder(r)
	var out []machine.Transition
	servers := map[string]bool{}
	policies := map[string]map[string]string{}
	for line := 1; ; line++ {
		var ev traceLine
		if err := dec.Decode(&ev); err == io.EOF {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("%s: object %d: %v", file, line, err)
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
		out = append(out, machine.Transition{At: ev.Time, From: from, To: to, Trigger: ev.Trigger})
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
