package testserver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func connect(t *testing.T, tr mcp.Transport) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx(t), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, error) {
	t.Helper()
	res, err := cs.CallTool(ctx(t), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return "", err
	}
	if res.IsError || len(res.Content) != 1 {
		return "", errors.New("tool error")
	}
	return res.Content[0].(*mcp.TextContent).Text, nil
}

func inMemory(t *testing.T, opts Options) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(opts).Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	return connect(t, ct)
}

func TestTools(t *testing.T) {
	cs := inMemory(t, Options{})
	if got, err := call(t, cs, "echo", map[string]any{"text": "hi"}); err != nil || got != "hi" {
		t.Errorf("echo = %q, %v", got, err)
	}
	for _, want := range []string{"1", "2", "3"} {
		if got, err := call(t, cs, "counter", nil); err != nil || got != want {
			t.Errorf("counter = %q, %v; want %s", got, err, want)
		}
	}
	if got, err := call(t, cs, "slow", map[string]any{"ms": 10}); err != nil || got != "slept" {
		t.Errorf("slow = %q, %v", got, err)
	}
	if got, err := call(t, cs, "grandchild", nil); err != nil || got != "0" {
		t.Errorf("grandchild = %q, %v", got, err)
	}
	res, err := cs.CallTool(ctx(t), &mcp.CallToolParams{Name: "stats"})
	if err != nil {
		t.Fatal(err)
	}
	stats, err := Stats(res)
	if err != nil {
		t.Fatal(err)
	}
	if stats["tools/call"] != 7 {
		t.Errorf("stats = %v, want 7 tools/call", stats)
	}
}

func TestSwitches(t *testing.T) {
	cs := inMemory(t, Options{RefusePing: true})
	err := cs.Ping(ctx(t), nil)
	if err == nil || !strings.Contains(err.Error(), "method not found") {
		t.Errorf("refused ping = %v", err)
	}

	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(Options{HangInitialize: true}).Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(short, ct, nil); err == nil {
		cs.Close()
		t.Error("initialize was answered")
	}
	ss.Wait()
}

func TestCrashInProcess(t *testing.T) {
	cs := inMemory(t, Options{})
	if _, err := call(t, cs, "crash", nil); err == nil {
		t.Error("crash answered")
	}
	done := make(chan error, 1)
	go func() { done <- cs.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end")
	}
}

func TestToolsChanged(t *testing.T) {
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(Options{}).Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	changed := make(chan struct{}, 2)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	}).Connect(ctx(t), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, want := range []string{"added extra", "removed extra"} {
		if got, err := call(t, cs, "change_tools", nil); err != nil || got != want {
			t.Errorf("change_tools = %q, %v; want %q", got, err, want)
		}
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatal("no tools/list_changed")
		}
	}
}

func TestHarness(t *testing.T) {
	for _, opts := range []Options{{}, {SSE: true}, {Stateless: true}} {
		h := StartHTTP(t, opts)
		var tr mcp.Transport = &mcp.StreamableClientTransport{Endpoint: h.URL()}
		if opts.SSE {
			tr = &mcp.SSEClientTransport{Endpoint: h.URL()}
		}
		cs := connect(t, tr)
		before := h.Count("tools/call")
		if got, err := call(t, cs, "echo", map[string]any{"text": "x"}); err != nil || got != "x" {
			t.Fatalf("%+v: echo = %q, %v", opts, got, err)
		}
		if got := h.Count("tools/call") - before; got != 1 {
			t.Errorf("%+v: counted %d tools/call", opts, got)
		}

		// Frozen: the call waits, and completes once thawed.
		h.Freeze()
		done := make(chan error, 1)
		go func() {
			_, err := call(t, cs, "echo", map[string]any{"text": "y"})
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("%+v: a call to a frozen server returned: %v", opts, err)
		case <-time.After(200 * time.Millisecond):
		}
		h.Thaw()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%+v: call after Thaw: %v", opts, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%+v: the call did not complete after Thaw", opts)
		}

		h.SetStatus(http.StatusServiceUnavailable)
		if _, err := call(t, cs, "echo", map[string]any{"text": "z"}); err == nil {
			t.Errorf("%+v: a 503 call succeeded", opts)
		}
		h.SetStatus(0)
	}
}

func TestHarnessRestart(t *testing.T) {
	h := StartHTTP(t, Options{})
	url := h.URL()
	cs := connect(t, &mcp.StreamableClientTransport{Endpoint: url})
	h.Restart(false)
	if h.URL() != url {
		t.Errorf("URL changed: %s, %s", url, h.URL())
	}
	// The first call may fail on a pooled connection the old server closed.
	ok := false
	for range 3 {
		if _, err := call(t, cs, "echo", map[string]any{"text": "x"}); err == nil {
			ok = true
			break
		}
	}
	if !ok {
		t.Error("the session did not survive Restart(false)")
	}
	h.Restart(true)
	var err error
	for range 3 {
		if _, err = call(t, cs, "echo", map[string]any{"text": "x"}); errors.Is(err, mcp.ErrSessionMissing) {
			break
		}
	}
	if !errors.Is(err, mcp.ErrSessionMissing) {
		t.Errorf("after Restart(true): %v, want ErrSessionMissing", err)
	}
	h.Stop()
	h.Stop()
	if connectOrNil(t, h.URL()) != nil {
		t.Error("a stopped server accepted a session")
	}
}

// connectOrNil returns a session to url, or nil if it cannot connect.
func connectOrNil(t *testing.T, url string) *mcp.ClientSession {
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx(t), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		return nil
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestHarnessCrashAndHangs(t *testing.T) {
	h := StartHTTP(t, Options{HangClose: true})
	cs := connect(t, &mcp.StreamableClientTransport{Endpoint: h.URL()})
	done := make(chan error, 1)
	go func() { done <- cs.Close() }()
	select {
	case err := <-done:
		t.Fatalf("Close returned against a server that never answers DELETE: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	h.Stop() // cuts the DELETE off
	<-done

	h = StartHTTP(t, Options{})
	cs = connect(t, &mcp.StreamableClientTransport{Endpoint: h.URL()})
	if _, err := call(t, cs, "crash", nil); err == nil {
		t.Error("crash answered")
	}
	if connectOrNil(t, h.URL()) != nil {
		t.Error("the server still accepts sessions after crash")
	}
}

func TestArgs(t *testing.T) {
	got := Args(Options{Name: "n", RefusePing: true, HangInitialize: true, HangClose: true, Garbage: true,
		Stateless: true, SSE: true, SpawnGrandchild: true, ToolsTTL: time.Second})
	want := []string{"-name", "n", "-refuse-ping", "-hang-initialize", "-hang-close", "-garbage",
		"-stateless", "-sse", "-grandchild", "-tools-ttl", "1s"}
	if !slices.Equal(got, want) {
		t.Errorf("Args = %q, want %q", got, want)
	}
}

func TestBinary(t *testing.T) {
	bin := Build(t)
	if bin != Build(t) {
		t.Error("Build built twice")
	}
	t.Run("stdio", func(t *testing.T) {
		cs := connect(t, &mcp.CommandTransport{Command: exec.Command(bin, "-name", "bin")})
		if got := cs.InitializeResult().ServerInfo.Name; got != "bin" {
			t.Errorf("server name %q", got)
		}
		if got, err := call(t, cs, "echo", map[string]any{"text": "x"}); err != nil || got != "x" {
			t.Errorf("echo = %q, %v", got, err)
		}
	})
	t.Run("http", func(t *testing.T) {
		cmd := exec.Command(bin, "-http", "127.0.0.1:0")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			cmd.Process.Kill()
			cmd.Wait()
		}()
		url, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		go io.Copy(io.Discard, stdout)
		cs := connect(t, &mcp.StreamableClientTransport{Endpoint: strings.TrimSpace(url)})
		if got, err := call(t, cs, "echo", map[string]any{"text": "x"}); err != nil || got != "x" {
			t.Errorf("echo = %q, %v", got, err)
		}
		cs.Close()
	})
}

func TestNewHandler(t *testing.T) {
	srv := httptest.NewServer(NewHandler(Options{Stateless: true}))
	defer srv.Close()
	cs := connect(t, &mcp.StreamableClientTransport{Endpoint: srv.URL})
	if got, err := call(t, cs, "echo", map[string]any{"text": "x"}); err != nil || got != "x" {
		t.Errorf("echo = %q, %v", got, err)
	}
	cs.Close()
}
