package main

import (
	"context"
	"fmt"
	"io"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
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
	if _, err := loadSpecFile(fs.Arg(0)); err != nil {
		fmt.Fprintln(stderr, errorText(err))
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", printable(fs.Arg(0), maxLine))
	return 0
}

// loadSpecFile loads a spec file the way a servers config's spec is loaded: only a
// regular file, of at most machine.MaxSpecSize bytes, so that /dev/zero or a FIFO
// given by mistake is refused at once rather than read without end or waited on.
func loadSpecFile(path string) (*machine.Spec, error) {
	data, err := machine.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return mcpfsm.LoadSpec(path, data)
}
