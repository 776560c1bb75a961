package transport

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestNoWatcherGoroutine: stdio, in-memory and SSE sessions see their end without a
// goroutine of their own (endConn); only streamable HTTP keeps a watcher of
// ClientSession.Wait.
func TestNoWatcherGoroutine(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			s := dial(t, k.start(t, testserver.Options{}), Options{OnEnd: func(error) {}})
			want := k.name == "http" || k.name == "stateless"
			watching := false
			for deadline := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
				// A watcher just started may not be on its way yet.
				watching = strings.Contains(allStacks(), "transport.(*Session).watch(")
				if watching == want || time.Now().After(deadline) {
					break
				}
			}
			if watching != want {
				t.Errorf("a watcher goroutine runs: %v, want %v", watching, want)
			}
			if err := s.Close(callCtx(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// stubConn is a connection that fails to read and write with the errors it is given.
type stubConn struct{ readErr, writeErr, closeErr error }

func (c *stubConn) Read(context.Context) (jsonrpc.Message, error) { return nil, c.readErr }
func (c *stubConn) Write(context.Context, jsonrpc.Message) error  { return c.writeErr }
func (c *stubConn) Close() error                                  { return c.closeErr }
func (c *stubConn) SessionID() string                             { return "" }

func stubSession(onEnd func(error)) *Session {
	return &Session{name: "stub", log: slog.New(slog.DiscardHandler), onEnd: onEnd, watched: make(chan struct{})}
}

// TestEndConnError: the end is reported with the error ClientSession.Wait would
// give: the read error unless io.EOF, else the write error unless io.EOF (not one of
// a canceled context), else the close's error, else io.EOF.
func TestEndConnError(t *testing.T) {
	broken, exit := errors.New("broken pipe"), errors.New("exit status 3")
	for _, c := range []struct {
		name                string
		read, write, closed error
		want                error
	}{
		{"read", errors.New("invalid character"), broken, exit, nil},
		{"write", io.EOF, broken, exit, broken},
		{"close", io.EOF, io.EOF, exit, exit},
		{"eof", io.EOF, nil, nil, io.EOF},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := c.want
			if want == nil {
				want = c.read
			}
			ends := make(chan error, 1)
			s := stubSession(func(err error) { ends <- err })
			s.ends.Store(endUp)
			ec := &endConn{Connection: &stubConn{c.read, c.write, c.closed}, s: s}
			_, _ = ec.Read(context.Background())
			canceled, cancel := context.WithCancel(context.Background())
			cancel()
			if c.write != nil {
				_ = ec.Write(canceled, nil) // a canceled write breaks nothing
				_ = ec.Write(context.Background(), nil)
			}
			if err := ec.Close(); err != c.closed {
				t.Errorf("Close = %v, want %v", err, c.closed)
			}
			_ = ec.Close() // once
			select {
			case err := <-ends:
				var te *Error
				if !errors.As(err, &te) || te.Op != OpEnd || !errors.Is(err, want) {
					t.Errorf("OnEnd(%v), want an *Error with Op %q wrapping %v", err, OpEnd, want)
				}
			case <-time.After(callTimeout):
				t.Fatal("OnEnd was not called")
			}
			<-s.watched
			if len(ends) != 0 {
				t.Error("OnEnd called twice")
			}
		})
	}
}

// TestEndConnDuringDial: a connection that ends before Dial has succeeded is
// reported once Dial succeeds, and not at all if Dial fails or Close came first.
func TestEndConnDuringDial(t *testing.T) {
	t.Run("dial succeeds", func(t *testing.T) {
		ends := make(chan error, 2)
		s := stubSession(func(err error) { ends <- err })
		ec := &endConn{Connection: &stubConn{readErr: io.EOF}, s: s}
		_, _ = ec.Read(context.Background())
		_ = ec.Close()
		select {
		case err := <-ends:
			t.Fatalf("OnEnd(%v) before Dial succeeded", err)
		case <-time.After(10 * time.Millisecond):
		}
		s.up()
		if err := <-ends; !errors.Is(err, io.EOF) {
			t.Errorf("OnEnd(%v), want io.EOF", err)
		}
		<-s.watched
	})
	t.Run("our close", func(t *testing.T) {
		s := stubSession(func(err error) { t.Errorf("OnEnd(%v) after Close", err) })
		s.ends.Store(endUp)
		s.closing.Store(true)
		ec := &endConn{Connection: &stubConn{readErr: io.EOF}, s: s}
		_, _ = ec.Read(context.Background())
		_ = ec.Close()
		<-s.watched
	})
}

// TestSharedClient: sessions of one implementation share an mcp.Client, which is
// dropped with the last of them; each session hears only its own server's tool-list
// changes.
func TestSharedClient(t *testing.T) {
	changed := [2]chan struct{}{make(chan struct{}, 8), make(chan struct{}, 8)}
	var ss [2]*Session
	for i := range ss {
		ss[i] = dial(t, memoryConfig(testserver.Options{}), Options{OnToolsChanged: func() { changed[i] <- struct{}{} }})
	}
	plain := dial(t, memoryConfig(testserver.Options{}), Options{})
	if ss[0].client != ss[1].client || ss[0].client == plain.client {
		t.Error("sessions listening for tool-list changes do not share one client, or share it with one that does not")
	}
	if _, err := ss[1].CallTool(callCtx(t), &mcp.CallToolParams{Name: "change_tools"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed[1]:
	case <-time.After(callTimeout):
		t.Fatal("OnToolsChanged was not called")
	}
	select {
	case <-changed[0]:
		t.Error("OnToolsChanged of another server's session was called")
	case <-time.After(50 * time.Millisecond):
	}
	for _, s := range append(ss[:], plain) {
		if err := s.Close(callCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	clients.mu.Lock()
	n := len(clients.m)
	clients.mu.Unlock()
	if n != 0 {
		t.Errorf("%d clients kept after every session closed", n)
	}
}
