package main

import (
	"context"
	"fmt"
	"io"

	"github.com/mcpfsm/mcpfsm"
)

func runValidate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("validate", "FILE", `
Check a lifecycle spec: its YAML, every name it uses, its policies, and the shape
of its graph. Exits 0 and prints "FILE: ok" when the spec is valid; otherwise
prints every problem as FILE:LINE:COLUMN: message to stderr and exits 1.`, stderr)
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "mcpfsm validate: want exactly one FILE")
		return 2
	}
	if _, err := mcpfsm.LoadSpecFile(fs.Arg(0)); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", fs.Arg(0))
	return 0
}
