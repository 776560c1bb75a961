package transport

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// procState returns the state letter of pid ('R', 'S', 'Z', ...), its parent,
// and its command name, or ok false if there is no such process.
func procState(pid int) (state byte, ppid int, comm string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, "", false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < 0 || end+4 > len(s) {
		return 0, 0, "", false
	}
	fields := strings.Fields(s[end+2:])
	ppid, _ = strconv.Atoi(fields[1])
	return fields[0][0], ppid, s[open+1 : end], true
}

// ourServers returns the pids of this process's children (alive or zombie)
// that run the test server.
func ourServers(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, comm, ok := procState(pid); ok && ppid == os.Getpid() && comm == "mcptestserver" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// noServers checks that no test server child is left, alive or zombie.
func noServers(t *testing.T) {
	t.Helper()
	if pids := ourServers(t); len(pids) > 0 {
		for _, pid := range pids {
			state, _, _, _ := procState(pid)
			t.Errorf("child %d is left, in state %c", pid, state)
		}
	}
}

// reaped checks that our child pid is gone: not alive, not a zombie.
func reaped(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		state, _, _, _ := procState(pid)
		t.Errorf("child %d is not reaped (kill 0: %v, state %c)", pid, err, state)
	}
}

// dead checks that pid, which is not our child, is dead (a zombie waiting for
// its new parent counts as dead).
func dead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(callTimeout)
	for {
		state, _, _, ok := procState(pid)
		if !ok || state == 'Z' || state == 'X' {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("process %d is still alive, state %c", pid, state)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func grandchildPID(t *testing.T, s *Session) int {
	t.Helper()
	res, err := s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "grandchild"})
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(resultText(res))
	if err != nil || pid == 0 {
		t.Fatalf("grandchild pid %q: %v", resultText(res), err)
	}
	return pid
}

func TestProcessGroup(t *testing.T) {
	s := dial(t, stdioConfig(t, testserver.Options{}), Options{})
	pid := s.proc.cmd.Process.Pid
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		t.Errorf("child %d is in process group %d (%v), want its own", pid, pgid, err)
	}
}

func TestStdioEnvAndDir(t *testing.T) {
	dir := t.TempDir()
	cfg := stdioConfig(t, testserver.Options{})
	cfg.Stdio.Dir = dir
	cfg.Stdio.Env = map[string]string{"MCPFSM_TEST_VAR": "value-1"}
	s := dial(t, cfg, Options{})
	pid := s.proc.cmd.Process.Pid
	cwd, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "cwd"))
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := filepath.EvalSymlinks(dir); cwd != want {
		t.Errorf("child cwd %q, want %q", cwd, want)
	}
	env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		t.Fatal(err)
	}
	vars := strings.Split(string(env), "\x00")
	for _, want := range []string{"MCPFSM_TEST_VAR=value-1", "PATH=" + os.Getenv("PATH")} {
		found := false
		for _, v := range vars {
			found = found || v == want
		}
		if !found {
			t.Errorf("child environment lacks %q", want)
		}
	}
}

// TestNoZombies walks every path on which a stdio child ends and checks that
// it is reaped, with or without Close.
func TestNoZombies(t *testing.T) {
	t.Run("clean close", func(t *testing.T) {
		s := dial(t, stdioConfig(t, testserver.Options{}), Options{})
		pid := s.proc.cmd.Process.Pid
		if err := s.Close(callCtx(t)); err != nil {
			t.Errorf("Close: %v", err)
		}
		reaped(t, pid)
	})
	t.Run("crash without close", func(t *testing.T) {
		e := newEnds()
		s := dial(t, stdioConfig(t, testserver.Options{}), e.options())
		pid := s.proc.cmd.Process.Pid
		_, _ = s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "crash"})
		e.wait(t)
		reaped(t, pid)
	})
	t.Run("killed without close", func(t *testing.T) {
		e := newEnds()
		s := dial(t, stdioConfig(t, testserver.Options{}), e.options())
		pid := s.proc.cmd.Process.Pid
		syscall.Kill(pid, syscall.SIGKILL)
		e.wait(t)
		reaped(t, pid)
	})
	t.Run("forced close of a hanging server", func(t *testing.T) {
		s := dial(t, stdioConfig(t, testserver.Options{HangClose: true}), Options{})
		pid := s.proc.cmd.Process.Pid
		closeWithin(t, s)
		reaped(t, pid)
	})
	t.Run("forced close of a stopped server", func(t *testing.T) {
		s := dial(t, stdioConfig(t, testserver.Options{}), Options{})
		pid := s.proc.cmd.Process.Pid
		stopChild(t, pid)
		closeWithin(t, s)
		reaped(t, pid)
	})
	for _, tc := range []struct {
		name    string
		opts    testserver.Options
		timeout time.Duration
	}{
		// A handshake that fails does not wait for the dial context, even if
		// the server ignores stdin EOF: the child is killed at once.
		{"dial fails on garbage", testserver.Options{Garbage: true}, time.Minute},
		{"dial fails on garbage, server hangs in close", testserver.Options{Garbage: true, HangClose: true}, time.Minute},
		{"dial times out", testserver.Options{HangInitialize: true}, 300 * time.Millisecond},
		{"dial times out, server hangs in close", testserver.Options{HangInitialize: true, HangClose: true}, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noServers(t)
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			start := time.Now()
			if s, err := Dial(ctx, stdioConfig(t, tc.opts), Options{}); err == nil {
				s.Close(ctx)
				t.Fatal("Dial succeeded")
			}
			limit := tc.timeout + 10*time.Second
			if tc.opts.Garbage {
				limit = 10 * time.Second // far less than the context: it did not wait for it
			}
			if d := time.Since(start); d > limit {
				t.Errorf("Dial took %v", d)
			}
			noServers(t)
		})
	}
}

// TestGroupIsKilled checks that what the child started dies with it, on every
// way the child ends. The grandchild holds the child's stdout, so the session
// sees no EOF until it is gone too.
func TestGroupIsKilled(t *testing.T) {
	t.Run("child killed", func(t *testing.T) {
		e := newEnds()
		s := dial(t, stdioConfig(t, testserver.Options{SpawnGrandchild: true}), e.options())
		gc := grandchildPID(t, s)
		syscall.Kill(s.proc.cmd.Process.Pid, syscall.SIGKILL)
		e.wait(t) // needs the grandchild gone: it holds stdout
		dead(t, gc)
	})
	t.Run("clean close", func(t *testing.T) {
		s := dial(t, stdioConfig(t, testserver.Options{SpawnGrandchild: true}), Options{})
		gc := grandchildPID(t, s)
		if err := s.Close(callCtx(t)); err != nil {
			t.Errorf("Close: %v", err)
		}
		dead(t, gc)
	})
	t.Run("forced close", func(t *testing.T) {
		s := dial(t, stdioConfig(t, testserver.Options{SpawnGrandchild: true, HangClose: true}), Options{})
		gc := grandchildPID(t, s)
		pid := s.proc.cmd.Process.Pid
		closeWithin(t, s)
		reaped(t, pid)
		dead(t, gc)
	})
}

// TestKillAll: a program exiting before its sessions have finished closing kills
// every stdio server it started, and what they started, at once; the servers it has
// reaped are forgotten, so that the registry holds only what still runs.
func TestKillAll(t *testing.T) {
	e := newEnds()
	s := dial(t, stdioConfig(t, testserver.Options{SpawnGrandchild: true, HangClose: true}), e.options())
	gc := grandchildPID(t, s)
	KillAll()
	e.wait(t)
	dead(t, gc)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		running.mu.Lock()
		_, held := running.m[s.proc]
		running.mu.Unlock()
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a reaped server is still registered as running")
		}
	}
}

// TestPipeBuffered: what the reaper looks at before it closes a reaped child's stdout
// under a descendant that still holds it: the bytes left in the pipe.
func TestPipeBuffered(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if n, ok := pipeBuffered(r); !ok || n != 0 {
		t.Errorf("empty pipe: %d, %v", n, ok)
	}
	if _, err := w.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if n, ok := pipeBuffered(r); !ok || n != 10 {
		t.Errorf("10 bytes written: %d, %v", n, ok)
	}
	if _, err := r.Read(make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if n, ok := pipeBuffered(r); !ok || n != 6 {
		t.Errorf("4 of them read: %d, %v", n, ok)
	}
}
