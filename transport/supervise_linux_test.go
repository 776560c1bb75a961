package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestCloseSendsSIGTERM (issue 17, item 22): a server that ignores stdin EOF
// but not SIGTERM is ended by SIGTERM at half the close context's time, not
// killed at its end.
func TestCloseSendsSIGTERM(t *testing.T) {
	cfg := stdioConfig(t, testserver.Options{})
	cfg.Stdio.Args = append([]string{"-ignore-eof"}, cfg.Stdio.Args...)
	s := dial(t, cfg, Options{})
	pid := s.proc.cmd.Process.Pid
	// The child's runtime handles SIGTERM (its exit needs a CPU): half of 4 s
	// left it time to on a loaded machine, where half of 2 s once did not.
	const timeout = 4 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err := s.Close(ctx)
	d := time.Since(start)
	t.Logf("Close after %v: %v", d, err)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.String() != "signal: terminated" || errors.Is(err, ErrForcedClose) {
		t.Errorf("Close = %v, want the child's exit by SIGTERM, not forced", err)
	}
	if d < timeout/2-50*time.Millisecond || d > timeout-100*time.Millisecond {
		t.Errorf("Close took %v, want about %v (SIGTERM at half the context's time)", d, timeout/2)
	}
	reaped(t, pid)
}

// TestCloseSIGTERMIgnored: a server that ignores SIGTERM too is killed when
// the close context ends; Close is forced and bounded.
func TestCloseSIGTERMIgnored(t *testing.T) {
	s := dial(t, stdioConfig(t, testserver.Options{HangClose: true}), Options{})
	pid := s.proc.cmd.Process.Pid
	err := closeWithin(t, s)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.String() != "signal: killed" {
		t.Errorf("Close = %v, want the child killed", err)
	}
	reaped(t, pid)
}

// TestStderrTail (issue 17, item 22): the last of a child's stderr is
// attached to the error of a child that fails to start, or dies, and still
// reaches Stdio.Stderr.
func TestStderrTail(t *testing.T) {
	t.Run("dial", func(t *testing.T) {
		var tee testutil.SyncBuffer
		cfg := stdioConfig(t, testserver.Options{})
		cfg.Stdio.Args = []string{"-echo-args", "stderr"}
		cfg.Stdio.Stderr = &tee
		_, err := Dial(callCtx(t), cfg, Options{})
		var te *Error
		if !errors.As(err, &te) || te.Op != OpDial {
			t.Fatalf("Dial = %v, want an *Error with Op dial", err)
		}
		const want = "refusing to start with arguments"
		if !strings.Contains(te.StderrTail, want) || !strings.Contains(err.Error(), "; stderr: ") {
			t.Errorf("Dial = %v (tail %q), want the child's stderr", err, te.StderrTail)
		}
		if !strings.Contains(tee.String(), want) {
			t.Errorf("Stdio.Stderr got %q, want the child's stderr too", tee.String())
		}
	})
	t.Run("end", func(t *testing.T) {
		cfg := stdioConfig(t, testserver.Options{})
		cfg.Stdio.Args = append([]string{"-crash-loudly"}, cfg.Stdio.Args...)
		e := newEnds()
		s := dial(t, cfg, e.options())
		_, _ = s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "crash"})
		err := e.wait(t)
		var te *Error
		if !errors.As(err, &te) || te.StderrTail != "mcptestserver: crashing on request\n" {
			t.Errorf("OnEnd(%v), want the child's last words in StderrTail", err)
		}
		if want := `end: exit status 3; stderr: "mcptestserver: crashing on request\n"`; !strings.HasSuffix(err.Error(), want) {
			t.Errorf("OnEnd(%v), want it to end with %s", err, want)
		}
	})
}

// TestStderrTailKept: only the last stderrTailSize bytes are kept, from a
// line's start, with no part of a secret cut in two.
func TestStderrTailKept(t *testing.T) {
	var w tailWriter
	secret := "envSECRETmarker"
	red := newRedactor(Config{Stdio: &Stdio{Command: "x", Env: map[string]string{"K": secret}}})
	var all strings.Builder
	for i := 0; all.Len() < 3*stderrTailSize; i++ {
		line := fmt.Sprintf("line %d %s\n", i, secret)
		all.WriteString(line)
		_, _ = w.Write([]byte(line))
	}
	raw, truncated := w.tail()
	if !truncated || len(raw) != stderrTailSize || !strings.HasSuffix(all.String(), raw) {
		t.Fatalf("kept %d bytes (truncated %v), want the last %d", len(raw), truncated, stderrTailSize)
	}
	got := red.tail(raw, truncated)
	if !strings.HasPrefix(got, "…line ") || strings.Contains(got, secret[:4]) || !strings.Contains(got, "REDACTED") {
		t.Errorf("tail %q, want whole lines, redacted", got[:min(len(got), 80)])
	}
	// One write larger than the tail.
	_, _ = w.Write(bytes.Repeat([]byte("z"), 3*stderrTailSize))
	if raw, _ := w.tail(); raw != strings.Repeat("z", stderrTailSize) {
		t.Errorf("kept %d bytes after a huge write", len(raw))
	}
}

// TestChildDiesWithParent (issue 17, item 22): a stdio server, in a process
// group of its own and deaf to stdin EOF and SIGTERM, dies when the process
// that started it is killed.
func TestChildDiesWithParent(t *testing.T) {
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+testserver.Build(t))
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		_ = helper.Process.Kill()
		_ = helper.Wait()
		t.Fatalf("helper said %q: %v %v", line, err, perr)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // if it survived
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	dead(t, pid)
}
