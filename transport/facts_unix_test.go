//go:build unix

package transport

import (
	"context"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestFactsStdio(t *testing.T) {
	const name = "stdio-test"
	start := func(t *testing.T, o testserver.Options) (*Session, *ends) {
		e := newEnds()
		s := dial(t, stdioConfig(t, o), e.options())
		if s.ProtocolVersion() != "2026-07-28" || s.ID() != "" {
			t.Fatalf("protocol %q, session ID %q", s.ProtocolVersion(), s.ID())
		}
		return s, e
	}
	t.Run("child killed", func(t *testing.T) {
		s, e := start(t, testserver.Options{})
		inflight := callSlow(t, s)
		killed := time.Now()
		syscall.Kill(s.proc.cmd.Process.Pid, syscall.SIGKILL)
		checkFact(t, "call in flight", recv(t, inflight), fact{
			msg: prefix(name, `call tool "slow"`) + `calling "tools/call": EOF`,
			is:  []error{io.EOF},
			not: []error{mcp.ErrConnectionClosed},
		})
		checkFact(t, "OnEnd", e.wait(t), fact{
			msg:  prefix(name, "end") + `signal: killed`,
			exit: "signal: killed",
		})
		t.Logf("OnEnd %v after SIGKILL", time.Since(killed))
		checkFact(t, "later call", echoErr(t, s), fact{
			msg: prefix(name, `call tool "echo"`) + `connection closed: calling "tools/call": client is closing: EOF`,
			is:  []error{mcp.ErrConnectionClosed},
			not: []error{io.EOF, codeClientClosing},
		})
		checkFact(t, "Close", s.Close(callCtx(t)), fact{
			msg:  prefix(name, "close") + `signal: killed`,
			not:  []error{ErrForcedClose},
			exit: "signal: killed",
		})
	})
	t.Run("child crashes", func(t *testing.T) {
		s, e := start(t, testserver.Options{})
		_, err := s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "crash"})
		checkFact(t, "the crashing call", err, fact{
			msg: prefix(name, `call tool "crash"`) + `calling "tools/call": EOF`,
			is:  []error{io.EOF},
		})
		checkFact(t, "OnEnd", e.wait(t), fact{msg: prefix(name, "end") + `exit status 3`, exit: "exit status 3"})
	})
	t.Run("clean close", func(t *testing.T) {
		s, _ := start(t, testserver.Options{})
		if err := s.Close(callCtx(t)); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	t.Run("frozen child", func(t *testing.T) {
		s, _ := start(t, testserver.Options{})
		pid := s.proc.cmd.Process.Pid
		stopChild(t, pid)
		_, err := echo(shortCtx(t), s, "x")
		checkFact(t, "deadline", err, fact{
			msg:  prefix(name, `call tool "echo"`) + `context deadline exceeded`,
			bare: context.DeadlineExceeded,
		})
		// The cancellation notice the SDK sends is still in flight: the
		// graceful close waits for it, so Close is forced.
		checkFact(t, "Close", s.Close(shortCtx(t)), fact{
			msg:  prefix(name, "close") + forcedClose + `\nsignal: killed`,
			is:   []error{ErrForcedClose, context.DeadlineExceeded},
			exit: "signal: killed",
		})
	})
	t.Run("ping", func(t *testing.T) {
		s, _ := start(t, testserver.Options{})
		if err := s.ClientSession().Ping(callCtx(t), nil); err != nil {
			t.Errorf("SDK ping: %v", err)
		}
		s, _ = start(t, testserver.Options{RefusePing: true})
		checkFact(t, "SDK ping refused", s.ClientSession().Ping(callCtx(t), nil), fact{
			msg:  `calling "ping": method not found: "ping"`,
			code: jsonrpc.CodeMethodNotFound,
		})
		if err := s.Probe(callCtx(t)); err != nil {
			t.Errorf("Probe of a ping-less server: %v", err)
		}
	})
	t.Run("child hangs in close", func(t *testing.T) {
		s, _ := start(t, testserver.Options{HangClose: true})
		checkFact(t, "Close", s.Close(shortCtx(t)), fact{
			msg:  prefix(name, "close") + forcedClose + `\nsignal: killed`,
			is:   []error{ErrForcedClose, context.DeadlineExceeded},
			exit: "signal: killed",
		})
	})
	t.Run("dial", func(t *testing.T) {
		_, err := Dial(shortCtx(t), stdioConfig(t, testserver.Options{HangInitialize: true}), Options{})
		checkFact(t, "initialize hangs", err, fact{
			msg:  prefix(name, "dial") + `context deadline exceeded`,
			bare: context.DeadlineExceeded,
		})
		_, err = Dial(callCtx(t), stdioConfig(t, testserver.Options{Garbage: true}), Options{})
		checkFact(t, "a broken message on stdout", err, fact{
			msg: prefix(name, "dial") + `connection closed: calling "initialize": client is closing: invalid character 't' looking for beginning of object key string`,
			is:  []error{mcp.ErrConnectionClosed},
		})
		_, err = Dial(callCtx(t), Config{Name: name, Stdio: &Stdio{Command: "/nonexistent/server"}}, Options{})
		checkFact(t, "no such command", err, fact{
			msg: prefix(name, "dial") + `fork/exec /nonexistent/server: no such file or directory`,
			is:  []error{syscall.ENOENT},
		})
	})
}
