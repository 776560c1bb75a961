package transport

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// TestChildExitReportedWhileADescendantHoldsStdout: a stdio server that leaves
// a descendant outside its process group (setsid) holding its stdin and
// stdout, then dies. The child's end must be reported (OnEnd) promptly, and a
// call made then fail at once, not wait for its deadline: the descendant keeps
// the pipe's write end open, so the reader never sees the stream end by itself.
func TestChildExitReportedWhileADescendantHoldsStdout(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	bin := testserver.Build(t)
	args := append([]string{"-c", `setsid sleep 60 & echo $! > "$0"; exec "$@"`, pidFile, bin}, testserver.Args(testserver.Options{})...)
	e := newEnds()
	s := dial(t, Config{Name: "grandparent", Stdio: &Stdio{Command: "/bin/sh", Args: args}}, e.options())
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	gpid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	t.Cleanup(func() { _ = syscall.Kill(gpid, syscall.SIGKILL) })
	if _, err := echo(callCtx(t), s, "hi"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(s.proc.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	end := within(t, "OnEnd of a child whose descendant holds stdout", e.next(), 3*time.Second)
	t.Logf("OnEnd after %v: %v", end.d, end.err)
	call := goTimed(withTimeout(10*time.Second, func(ctx context.Context) error {
		_, err := echo(ctx, s, "after")
		return err
	}))
	c := within(t, "a call after the child died", call, time.Second)
	if c.err == nil {
		t.Error("a call to a dead child succeeded")
	}
}
