package testserver

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestControl(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control")
	if c := ReadControl(path); len(c) != 0 {
		t.Errorf("a missing control file reads as %v", c)
	}
	if err := WriteControl(path, ControlLatency+"=150ms", ControlHangInitialize); err != nil {
		t.Fatal(err)
	}
	c := ReadControl(path)
	if c.Duration(ControlLatency) != 150*time.Millisecond || !c.Has(ControlHangInitialize) || c.Has(ControlGarbage) {
		t.Errorf("control = %v", c)
	}
	if err := WriteControl(path); err != nil {
		t.Fatal(err)
	}
	if c := ReadControl(path); len(c) != 0 {
		t.Errorf("an emptied control file reads as %v", c)
	}
}

func TestControlLatencyAndHang(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control")
	h := StartHTTP(t, Options{Control: path})
	cs := connect(t, &mcp.StreamableClientTransport{Endpoint: h.URL()})
	if err := WriteControl(path, ControlLatency+"=200ms"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := call(t, cs, "echo", map[string]any{"text": "x"}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("a call under 200ms of latency took %v", took)
	}

	// While the control says so, initialize hangs; once the word is gone it
	// is answered again.
	if err := WriteControl(path, ControlHangInitialize); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(short, &mcp.StreamableClientTransport{Endpoint: h.URL()}, nil); err == nil {
		cs.Close()
		t.Error("initialize was answered while the control hangs it")
	}
	if err := WriteControl(path); err != nil {
		t.Fatal(err)
	}
	connect(t, &mcp.StreamableClientTransport{Endpoint: h.URL()})
}

func TestJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	cs := inMemory(t, Options{Journal: path})
	for _, id := range []string{"a", "b", "a"} {
		if got, err := call(t, cs, "journal", map[string]any{"id": id}); err != nil || got != id {
			t.Fatalf("journal %s = %q, %v", id, got, err)
		}
	}
	runs, err := ReadJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	if runs["a"] != 2 || runs["b"] != 1 || len(runs) != 2 {
		t.Errorf("journal = %v", runs)
	}
	// Without Journal there is no journal tool.
	res, err := inMemory(t, Options{}).ListTools(ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(res.Tools, func(tool *mcp.Tool) bool { return tool.Name == "journal" || tool.Name == "tools_changed_burst" }) {
		t.Error("a server without the options lists their tools")
	}
}

func TestBurst(t *testing.T) {
	for _, kind := range []string{"memory", "http"} {
		t.Run(kind, func(t *testing.T) {
			var changed atomic.Int64
			client := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, &mcp.ClientOptions{
				ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed.Add(1) },
			})
			var tr mcp.Transport
			if kind == "http" {
				tr = &mcp.StreamableClientTransport{Endpoint: StartHTTP(t, Options{BurstTool: true}).URL()}
			} else {
				st, ct := mcp.NewInMemoryTransports()
				ss, err := New(Options{BurstTool: true}).Connect(context.Background(), st, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ss.Close() })
				tr = ct
			}
			cs, err := client.Connect(ctx(t), tr, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cs.Close() })
			if got, err := call(t, cs, "tools_changed_burst", map[string]any{"n": 50}); err != nil || got != "50" {
				t.Fatalf("tools_changed_burst = %q, %v", got, err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for changed.Load() < 50 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := changed.Load(); n != 50 {
				t.Errorf("the client got %d notifications, want 50", n)
			}
		})
	}
}

func TestBinaryFaultFlags(t *testing.T) {
	bin := Build(t)
	dir := t.TempDir()
	control, journal := filepath.Join(dir, "control"), filepath.Join(dir, "journal")
	args := Args(Options{Journal: journal, Control: control, BurstTool: true, GarbageOnSignal: true})
	if want := []string{"-burst-tool", "-garbage-on-usr1", "-journal", journal, "-control", control}; !slices.Equal(args, want) {
		t.Errorf("Args = %q, want %q", args, want)
	}

	// garbage in the control file: the server starts with a line of garbage.
	if err := WriteControl(control, ControlGarbage); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(short, &mcp.CommandTransport{Command: exec.Command(bin, args...)}, nil); err == nil {
		cs.Close()
		t.Error("a server told to write garbage first connected")
	}
	if err := WriteControl(control); err != nil {
		t.Fatal(err)
	}

	// SIGUSR1: garbage mid-session, which ends the session.
	cs := connect(t, &mcp.CommandTransport{Command: exec.Command(bin, args...)})
	if got, err := call(t, cs, "journal", map[string]any{"id": "x"}); err != nil || got != "x" {
		t.Fatalf("journal = %q, %v", got, err)
	}
	pidText, err := call(t, cs, "pid", nil)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(pidText)
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cs.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("garbage on stdout did not end the session")
	}
	if runs, _ := ReadJournal(journal); runs["x"] != 1 {
		t.Errorf("journal = %v", runs)
	}
}
