package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// bin is the mcpfsm binary, built once by TestMain; the tests run it as a user would.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcpfsm-cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "mcpfsm")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building mcpfsm: %v\n%s", err, out)
		os.Exit(1)
	}
	code := 0
	defer func() { os.RemoveAll(dir); os.Exit(code) }()
	goleak.VerifyTestMain(exitCode{&code, m})
}

// exitCode lets TestMain clean up after goleak.VerifyTestMain, which calls os.Exit.
type exitCode struct {
	code *int
	m    *testing.M
}

func (e exitCode) Run() int { *e.code = e.m.Run(); return *e.code }

// runCLI runs the binary and returns its stdout, stderr and exit code.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("running mcpfsm %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestGraphEqualsDocs(t *testing.T) {
	for format, file := range map[string]string{"dot": "lifecycle.dot", "mermaid": "lifecycle.mmd"} {
		out, errOut, code := runCLI(t, "graph", "--format", format)
		if code != 0 || errOut != "" {
			t.Fatalf("graph --format %s: exit %d, stderr %q", format, code, errOut)
		}
		if want := readFile(t, "../../docs/graphs/"+file); out != want {
			t.Errorf("mcpfsm graph --format %s differs from docs/graphs/%s", format, file)
		}
	}
	out, _, code := runCLI(t, "graph", "../../transitions.yaml")
	if code != 0 || out != readFile(t, "../../docs/graphs/lifecycle.dot") {
		t.Errorf("graph FILE of transitions.yaml differs from docs/graphs (exit %d)", code)
	}
}

func TestValidate(t *testing.T) {
	out, errOut, code := runCLI(t, "validate", "../../transitions.yaml")
	if code != 0 || out != "../../transitions.yaml: ok\n" || errOut != "" {
		t.Errorf("validate transitions.yaml: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	broken := "../../machine/testdata/invalid/twins_not_exclusive.yaml"
	out, errOut, code = runCLI(t, "validate", broken)
	want := strings.ReplaceAll(readFile(t, strings.TrimSuffix(broken, ".yaml")+".err"), "twins_not_exclusive.yaml:", broken+":")
	if code != 1 || out != "" || errOut != want {
		t.Errorf("validate a broken spec: exit %d, stdout %q, stderr:\n%s\nwant:\n%s", code, out, errOut, want)
	}
	_, errOut, code = runCLI(t, "validate", "no-such.yaml")
	if code != 1 || !strings.Contains(errOut, "no-such.yaml") {
		t.Errorf("validate a missing file: exit %d, stderr %q", code, errOut)
	}
	_, _, code = runCLI(t, "graph", broken)
	if code != 1 {
		t.Errorf("graph of a broken spec: exit %d, want 1", code)
	}
}

func TestUsage(t *testing.T) {
	for _, c := range []struct {
		args   []string
		code   int
		stdout string // a substring
		stderr string // a substring
	}{
		{[]string{"--help"}, 0, "Commands:", ""},
		{nil, 2, "Commands:", ""},
		{[]string{"nope"}, 2, "", `unknown command "nope"`},
		{[]string{"graph", "--help"}, 0, "Usage: mcpfsm graph [--format dot|mermaid] [--trace FILE [--server NAME]] [SPEC]", ""},
		{[]string{"validate", "-h"}, 0, "Usage: mcpfsm validate FILE", ""},
		{[]string{"graph", "--format", "svg"}, 2, "", `unknown format "svg"`},
		{[]string{"graph", "--bogus"}, 2, "", "flag provided but not defined: -bogus"},
		{[]string{"validate"}, 2, "", "want exactly one FILE"},
	} {
		out, errOut, code := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(out, c.stdout) || !strings.Contains(errOut, c.stderr) {
			t.Errorf("mcpfsm %v: exit %d (want %d)\nstdout: %s\nstderr: %s", c.args, code, c.code, out, errOut)
		}
	}
}

// TestDemo runs the fault tour and checks that each act of it shows in the output.
func TestDemo(t *testing.T) {
	out, errOut, code := runCLI(t, "demo")
	if code != 0 || errOut != "" {
		t.Fatalf("demo: exit %d, stderr %q\n%s", code, errOut, out)
	}
	for _, want := range []string{
		`call counter → "3"`,
		"lost (expired:",                          // the restart, found by a call
		`call counter → "1"`,                      // retried on a new session
		"probe_failed (timeout: probe: no answer", // the freeze, found by a probe
		"connect_failed (timeout:",                // reconnects time out while frozen
		"failed fast in",                          // calls fail fast while the breaker is open
		"half-open → ready connected",             // a trial closes the breaker
		`call echo → "welcome back"`,              // after the server came back
		"tearing-down → closed torn_down",         // closed cleanly
		"Summary",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if out, _, code := runCLI(t, "demo", "--help"); code != 0 || !strings.Contains(out, "fault tour") {
		t.Errorf("demo --help: exit %d\n%s", code, out)
	}
}
