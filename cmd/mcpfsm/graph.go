package main

import (
	"context"
	"fmt"
	"io"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
)

func runGraph(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("graph", "[--format dot|mermaid] [FILE]", `
Render a lifecycle spec as a Graphviz DOT digraph or a Mermaid stateDiagram-v2.
FILE defaults to the built-in lifecycle (transitions.yaml). The output is
deterministic: docs/graphs/ holds it for the built-in lifecycle.
Edges read "trigger [guards] / effects"; dashed edges are timed ("after DELAY
(policy default)"), dotted ones internal (no state change).`, stderr)
	format := fs.String("format", "dot", "output format: dot or mermaid")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() > 1 {
		fmt.Fprintln(stderr, "mcpfsm graph: at most one FILE")
		return 2
	}
	if *format != "dot" && *format != "mermaid" {
		fmt.Fprintf(stderr, "mcpfsm graph: unknown format %q (want dot or mermaid)\n", *format)
		return 2
	}
	spec := mcpfsm.DefaultSpec()
	if fs.NArg() == 1 {
		var err error
		if spec, err = mcpfsm.LoadSpecFile(fs.Arg(0)); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	if *format == "mermaid" {
		fmt.Fprint(stdout, spec.Mermaid(machine.GraphOptions{}))
	} else {
		fmt.Fprint(stdout, spec.DOT(machine.GraphOptions{}))
	}
	return 0
}
