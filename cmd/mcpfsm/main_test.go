package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"go.uber.org/goleak"
)

// TestMain runs the tests, or, when this test binary is started under the name mcpfsm
// (by a test that needs mcpfsm as a process of its own: a config's stdio server, the
// README's commands, signals), is the CLI itself. The CLI that tests run is so built
// as the tests are (-race, -cover), and no binary is built or left behind.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "mcpfsm" {
		main()
	}
	goleak.VerifyTestMain(m)
}

// mcpfsmBin returns a path named mcpfsm to this test binary, in a directory the test
// removes when it ends.
func mcpfsmBin(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "mcpfsm")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	return link
}

// runCLI runs an mcpfsm command line in this process and returns its stdout, stderr
// and exit code.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb testutil.SyncBuffer
	code = run(t.Context(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// A background is an mcpfsm command running in this process, such as mcpfsm run;
// stop plays Ctrl-C.
type background struct {
	stdout, stderr testutil.SyncBuffer
	cancel         context.CancelFunc
	code           chan int
}

func startCLI(t *testing.T, args ...string) *background {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{cancel: cancel, code: make(chan int, 1)}
	go func() { b.code <- run(ctx, args, &b.stdout, &b.stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-b.code:
		case <-time.After(40 * time.Second):
			t.Errorf("mcpfsm %v has not returned 40s after Ctrl-C", args)
		}
	})
	return b
}

// waitFor polls stdout until ok holds, for up to 30s.
func (b *background) waitFor(t *testing.T, what string, ok func(stdout string) bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(b.stdout.String()); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s; stdout:\n%s\nstderr:\n%s", what, b.stdout.String(), b.stderr.String())
		}
	}
}

// stop cancels the command, as Ctrl-C does, and returns its exit code.
func (b *background) stop(t *testing.T) int {
	t.Helper()
	b.cancel()
	select {
	case code := <-b.code:
		b.code <- code // for the cleanup
		return code
	case <-time.After(40 * time.Second):
		t.Fatalf("not returned 40s after Ctrl-C; stdout:\n%s", b.stdout.String())
		return -1
	}
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

// TestUsage: help goes to stdout, once, and nothing to stderr; usage errors go to
// stderr.
func TestUsage(t *testing.T) {
	for name := range commands {
		out, errOut, code := runCLI(t, name, "--help")
		first, _, _ := strings.Cut(out, "\n")
		if code != 0 || strings.Count(out, "Usage: ") != 1 || !strings.HasPrefix(out, "Usage: mcpfsm "+name) || strings.HasSuffix(first, " ") || errOut != "" {
			t.Errorf("mcpfsm %s --help: exit %d, %d usages on stdout, first line %q, stderr %q", name, code, strings.Count(out, "Usage: "), first, errOut)
		}
	}
	for _, c := range []struct {
		args   []string
		code   int
		stdout string // a substring
		stderr string // a substring; "" wants stderr empty
	}{
		{[]string{"--help"}, 0, "Commands:", ""},
		{nil, 2, "Commands:", ""},
		{[]string{"nope"}, 2, "", `unknown command "nope"`},
		{[]string{"graph", "--help"}, 0, "Usage: mcpfsm graph [--format dot|mermaid] [--trace FILE [--server NAME]] [SPEC]", ""},
		{[]string{"validate", "-h"}, 0, "Usage: mcpfsm validate FILE", ""},
		{[]string{"graph", "--format", "svg"}, 2, "", `unknown format "svg"`},
		{[]string{"graph", "--bogus"}, 2, "", "mcpfsm graph: flag provided but not defined: -bogus\nUsage: mcpfsm graph"},
		{[]string{"call", "--timeout", "soon"}, 2, "", `mcpfsm call: invalid value "soon" for flag -timeout`},
		{[]string{"run", "-h"}, 0, "Usage: mcpfsm run [--json] [--history] [--http-status ADDR] CONFIG", ""},
		{[]string{"validate"}, 2, "", "want exactly one FILE"},
		{[]string{"auth", "--help"}, 0, `"mcpfsm auth status --help"`, ""},
		{[]string{"auth", "bogus"}, 2, "", `mcpfsm auth: unknown subcommand "bogus" (want login or status)`},
		{[]string{"example-server", "extra"}, 2, "", "mcpfsm example-server: takes no arguments"},
		// The flag package stops at the first argument: a flag after it is not
		// taken for an argument in silence.
		{[]string{"simulate", "dead-hour", "--summary"}, 2, "", "mcpfsm simulate: flag --summary comes after the arguments: write flags first"},
		{[]string{"auth", "status", "servers.yaml", "-json"}, 2, "", "mcpfsm auth status: flag -json comes after the arguments"},
		{[]string{"call", "servers.yaml", "files", "echo", "--help"}, 0, "Usage: mcpfsm call [--timeout 30s]", ""},
		// Past a --, everything is an argument, as the flag package has it.
		{[]string{"auth", "status", "--", "-json"}, 1, "", "open -json: no such file or directory"},
	} {
		out, errOut, code := runCLI(t, c.args...)
		stderrOK := strings.Contains(errOut, c.stderr) && (c.stderr != "" || errOut == "")
		if code != c.code || !strings.Contains(out, c.stdout) || !stderrOK {
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

// TestDemoFailedFast: the demo counts as failed fast only a call that was never sent.
// A call whose session broke under it, and whose retry found the breaker open, wraps
// ErrUnavailable as well; it was sent, and is a failure (it once counted as failed
// fast, after 531 ms). TestCallNotRetriedReportsFirstFailure and the breaker scenario
// in the root package hold the attempts the library reports for each.
func TestDemoFailedFast(t *testing.T) {
	unavailable := fmt.Errorf("the session broke (lost): EOF (not retried: %w)", mcpfsm.ErrUnavailable)
	for _, tc := range []struct {
		err      error
		attempts int
		want     bool
	}{
		{unavailable, 0, true},
		{unavailable, 1, false},
		{errors.New("EOF"), 0, false},
		{errors.New("EOF"), 1, false},
	} {
		if got := failedFast(tc.err, mcpfsm.CallReport{Attempts: tc.attempts}); got != tc.want {
			t.Errorf("failedFast(%v, %d attempts) = %v, want %v", tc.err, tc.attempts, got, tc.want)
		}
	}
}

// TestCount: the CLI says "1 failure" and "2 failures" (mcpfsm run's summary said
// "1 failures").
func TestCount(t *testing.T) {
	for n, want := range map[int]string{0: "0 failures", 1: "1 failure", 2: "2 failures"} {
		if got := count(n, "failure"); got != want {
			t.Errorf("count(%d, failure) = %q, want %q", n, got, want)
		}
	}
}
