//go:build unix

package transport

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// TestAServerThatPrintsToStdout: a stdio server that prints a banner and log
// records to stdout, at its start and in the middle of a session, is served: each
// such line goes where its stderr goes (Stdio.Stderr, and the tail of the
// session's errors), after "stdout: ", and one warning says so. Before, the first
// such line failed the handshake, a counted protocol failure.
func TestAServerThatPrintsToStdout(t *testing.T) {
	lines := strings.Split(strings.TrimSuffix(testserver.NoiseLines, "\n"), "\n")
	var passed string
	for _, l := range lines {
		passed += "stdout: " + l + "\n"
	}

	t.Run("served", func(t *testing.T) {
		var stderr, logs testutil.SyncBuffer
		cfg := stdioConfig(t, testserver.Options{Noise: true})
		cfg.Stdio.Args = append([]string{"-on-usr2", "noise"}, cfg.Stdio.Args...)
		cfg.Stdio.Stderr = &stderr
		s := dial(t, cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if got, err := echo(callCtx(t), s, "after the banner"); err != nil || got != "after the banner" {
			t.Fatalf("echo = %q, %v", got, err)
		}
		if err := syscall.Kill(s.proc.cmd.Process.Pid, syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for stderr.String() != passed+passed && time.Now().Before(deadline) {
			if got, err := echo(callCtx(t), s, "meanwhile"); err != nil || got != "meanwhile" {
				t.Fatalf("echo while the server printed = %q, %v", got, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got := stderr.String(); got != passed+passed {
			t.Errorf("Stdio.Stderr got %q, want the lines twice:\n%q", got, passed+passed)
		}
		if err := s.Probe(callCtx(t)); err != nil {
			t.Errorf("Probe after the lines: %v", err)
		}
		if n := strings.Count(logs.String(), "not JSON-RPC"); n != 1 {
			t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
		}
		if strings.Contains(logs.String(), "Starting") {
			t.Errorf("the log holds a line's text:\n%s", logs.String())
		}
	})

	t.Run("in a dial's error", func(t *testing.T) {
		cfg := stdioConfig(t, testserver.Options{Noise: true, HangInitialize: true})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := Dial(ctx, cfg, Options{})
		var te *Error
		if !errors.As(err, &te) || te.Op != OpDial {
			t.Fatalf("Dial = %v, want an *Error with Op dial", err)
		}
		if te.StderrTail != passed {
			t.Errorf("Dial = %v: tail %q, want %q", err, te.StderrTail, passed)
		}
	})
}

// TestNoiseNotHeldByAStuckStderr: a Stdio.Stderr that blocks (a terminal paused,
// a pipe nobody reads) holds neither the session's reads nor its Dial nor its
// Close: the lines a server prints to stdout reach it once it takes them, in
// order. Written by the session's reader itself, such a line held the reader, and
// a Dial with a 2s deadline was still waiting 15s later.
func TestNoiseNotHeldByAStuckStderr(t *testing.T) {
	stderr := &stuckWriter{release: make(chan struct{})}
	cfg := stdioConfig(t, testserver.Options{Noise: true})
	cfg.Stdio.Stderr = stderr
	type result struct {
		got string
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := Dial(ctx, cfg, Options{})
		if err != nil {
			done <- result{err: err}
			return
		}
		got, err := echo(ctx, s, "past the banner")
		done <- result{got, errors.Join(err, s.Close(ctx))}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.got != "past the banner" {
			t.Errorf("Dial, echo and Close with Stdio.Stderr stuck = %q, %v", r.got, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Dial, echo and Close with Stdio.Stderr stuck: still waiting after 10s (a 2s deadline)")
	}
	close(stderr.release)
	var want string
	for _, l := range strings.SplitAfter(testserver.NoiseLines, "\n") {
		if l != "" {
			want += "stdout: " + l
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for stderr.String() != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := stderr.String(); got != want {
		t.Errorf("Stdio.Stderr got %q once it took lines, want %q", got, want)
	}
}

// stuckWriter takes nothing until release is closed.
type stuckWriter struct {
	release chan struct{}
	buf     testutil.SyncBuffer
}

func (w *stuckWriter) Write(b []byte) (int, error) {
	<-w.release
	return w.buf.Write(b)
}

func (w *stuckWriter) String() string { return w.buf.String() }
