//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"golang.org/x/sys/unix"
)

// A stdioHost is a test's host of mcpfsm serve over its pipes: it writes lines to
// the gateway's stdin and reads its stdout's lines as they come.
type stdioHost struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	lines  chan string // the gateway's stdout, line by line; closed at its end
	stderr *testutil.SyncBuffer
}

// startHost runs mcpfsm serve with args, its stdout read line by line; its stdin
// and stdout are pipes, or with sockets socket pairs (as libuv, and so Node and
// Electron hosts, give a child).
func startHost(ctx context.Context, t *testing.T, sockets bool, args ...string) *stdioHost {
	t.Helper()
	h := &stdioHost{t: t, lines: make(chan string, 4096), stderr: new(testutil.SyncBuffer)}
	if !sockets {
		h.cmd, h.stdin, h.stdout, _ = startPiped(ctx, t, h.stderr, append([]string{"serve"}, args...)...)
	} else {
		pair := func(name string) (ours, theirs *os.File) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			// The host's end non-blocking, so that Go's poller serves it: its
			// Close then ends a read under way (and closes the socket) at once.
			if err := unix.SetNonblock(fds[0], true); err != nil {
				t.Fatal(err)
			}
			return os.NewFile(uintptr(fds[0]), "host's "+name), os.NewFile(uintptr(fds[1]), name)
		}
		in, theirIn := pair("stdin")
		out, theirOut := pair("stdout")
		h.cmd = exec.CommandContext(ctx, mcpfsmBin(t), append([]string{"serve"}, args...)...)
		h.cmd.Stdin, h.cmd.Stdout, h.cmd.Stderr = theirIn, theirOut, h.stderr
		err := h.cmd.Start()
		theirIn.Close()
		theirOut.Close()
		if err != nil {
			t.Fatal(err)
		}
		h.stdin, h.stdout = in, out
		t.Cleanup(func() { in.Close(); out.Close() })
	}
	go func() {
		defer close(h.lines)
		r := bufio.NewReaderSize(h.stdout, 1<<20)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			h.lines <- strings.TrimSuffix(line, "\n")
		}
	}()
	return h
}

// send writes lines to the gateway's stdin.
func (h *stdioHost) send(lines ...string) {
	h.t.Helper()
	for _, l := range lines {
		if _, err := io.WriteString(h.stdin, l+"\n"); err != nil {
			h.t.Fatalf("writing to the gateway: %v\nstderr:\n%s", err, h.stderr)
		}
	}
}

// answer returns the next line the gateway writes under id (as JSON writes it:
// 7, "s" or null), skipping the others (notifications), within d; "" past d.
func (h *stdioHost) answer(id string, d time.Duration) string {
	h.t.Helper()
	prefix := `{"jsonrpc":"2.0","id":` + id + `,`
	timeout := time.After(d)
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				h.t.Fatalf("the gateway's stdout ended, waiting for an answer under %s\nstderr:\n%s", id, h.stderr)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			return ""
		}
	}
}

// initialize opens the host's session (protocol 2025-11-25).
// waitTools asks tools/list until every name is listed (30 s at most).
func (h *stdioHost) waitTools(t *testing.T, names ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h.send(`{"jsonrpc":"2.0","id":"list","method":"tools/list"}`)
		a := h.answer(`"list"`, 10*time.Second)
		if !slices.ContainsFunc(names, func(n string) bool { return !strings.Contains(a, strconv.Quote(n)) }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v never listed\nstderr:\n%s", names, h.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *stdioHost) initialize() {
	h.t.Helper()
	h.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"host","version":"1"}}}`)
	if a := h.answer(`"init"`, 30*time.Second); !strings.Contains(a, `"result"`) {
		h.t.Fatalf("initialize was answered %q\nstderr:\n%s", a, h.stderr)
	}
	h.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// TestServeStdioReusedID: a host that sends a request under the ID of one still in
// flight gets the refusal under that ID (JSON-RPC's rule for an ID it could read),
// then the answer to the request in flight, under it too; it got the refusal with a
// null id, which no host can match to a request: its second request was never
// answered. A host that cancels a call and reuses its ID at once gets one answer
// under it, and only one (the cancelled call's is dropped).
func TestServeStdioReusedID(t *testing.T) {
	cfg := serveConfig(t, t.TempDir(), "example")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := startHost(ctx, t, false, cfg)
	h.initialize()
	h.send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`) // waits for the backend's tools
	if a := h.answer("1", 30*time.Second); !strings.Contains(a, "example__slow") {
		t.Fatalf("tools/list was answered %q\nstderr:\n%s", a, h.stderr)
	}

	h.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"example__slow","arguments":{"ms":1500}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	if a := h.answer("7", 10*time.Second); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":7,"error":{"code":-32600,`) {
		t.Errorf("a ping reusing the ID of a call in flight was answered %q, want -32600 under its ID\nstderr:\n%s", a, h.stderr)
	}
	if a := h.answer("7", 10*time.Second); !strings.Contains(a, "slept") {
		t.Errorf("the call in flight was answered %q, want its result under its ID", a)
	}

	h.send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"example__slow","arguments":{"ms":60000}}}`)
	time.Sleep(200 * time.Millisecond) // the call is under way
	h.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":8}}`,
		`{"jsonrpc":"2.0","id":8,"method":"ping"}`)
	if a := h.answer("8", 10*time.Second); a == "" {
		t.Errorf("a ping reusing the ID of a call just cancelled was not answered\nstderr:\n%s", h.stderr)
	}
	time.Sleep(time.Second) // the cancelled call's handler has returned
	h.send(`{"jsonrpc":"2.0","id":9,"method":"ping"}`)
	for {
		line, ok := <-h.lines
		if !ok {
			t.Fatalf("the gateway's stdout ended\nstderr:\n%s", h.stderr)
		}
		if strings.HasPrefix(line, `{"jsonrpc":"2.0","id":8,`) {
			t.Errorf("a second answer under 8: %s", line)
		}
		if strings.HasPrefix(line, `{"jsonrpc":"2.0","id":9,`) {
			break
		}
	}
	h.stdin.Close()
	if err := exited(t, h.cmd, 30*time.Second, "after stdin's end", h.stderr); err != nil {
		t.Errorf("the gateway ended with %v\nstderr:\n%s", err, h.stderr)
	}
}

// TestServeHostKilled: a host killed (SIGKILL: its ends of the gateway's stdin and
// stdout closed at once) while calls it made do not end: the gateway sees stdout's
// reader gone, tells its backend of the cancelled calls, closes it and exits at once.
// It learnt of stdout's end only at a write, and a call that does not end writes
// nothing: the calls were given the 5 s kept for answers at stdin's end first.
func TestServeHostKilled(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "backend.in")
	cfg := filepath.Join(dir, "servers.yaml")
	// The backend's stdin, all the gateway says to it, is copied to log.
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("version: 1\nservers:\n  example:\n    command: /bin/sh\n    args: [-c, 'tee %s | %s example-server']\n", log, mcpfsmBin(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, sockets := range []bool{false, true} {
		t.Run(map[bool]string{false: "pipes", true: "sockets"}[sockets], func(t *testing.T) {
			hostKilled(t, cfg, log, sockets)
		})
	}
}

// hostKilled is TestServeHostKilled over pipes or sockets.
func hostKilled(t *testing.T, cfg, log string, sockets bool) {
	_ = os.Remove(log)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := startHost(ctx, t, sockets, cfg)
	h.initialize()
	h.send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`) // waits for the backend's tools
	if a := h.answer("1", 30*time.Second); !strings.Contains(a, "example__slow") {
		t.Fatalf("tools/list was answered %q\nstderr:\n%s", a, h.stderr)
	}
	const calls = 3
	for i := range calls {
		h.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"example__slow","arguments":{"ms":600000}}}`, 10+i))
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		data, _ := os.ReadFile(log)
		if strings.Count(string(data), `"name":"slow"`) >= calls {
			break // the backend has them all
		}
		if time.Now().After(deadline) {
			t.Fatalf("the calls did not reach the backend:\n%s", data)
		}
	}
	start := time.Now()
	h.stdin.Close()
	h.stdout.Close()
	if err := exited(t, h.cmd, 30*time.Second, "after its host was killed", h.stderr); err != nil {
		t.Errorf("the gateway ended with %v, want exit 0\nstderr:\n%s", err, h.stderr)
	}
	took := time.Since(start)
	if !strings.Contains(h.stderr.String(), "stdout's reader is gone") {
		t.Errorf("the gateway did not say why it ended (in %v):\n%s", took.Round(time.Millisecond), h.stderr)
	}
	if took > 4*time.Second {
		t.Errorf("exited %v after its host was killed, want at once (not past the 5 s given to answers at stdin's end)", took.Round(time.Millisecond))
	}
	data, _ := os.ReadFile(log)
	called, cancelled := map[float64]bool{}, map[float64]bool{}
	for line := range strings.Lines(string(data)) {
		var m struct {
			ID     float64
			Method string
			Params struct{ RequestID float64 }
		}
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch m.Method {
		case "tools/call":
			called[m.ID] = true
		case "notifications/cancelled":
			cancelled[m.Params.RequestID] = true
		}
	}
	for id := range called {
		if !cancelled[id] {
			t.Errorf("the backend was not told its call %v is cancelled:\n%s", id, data)
		}
	}
}

// TestServeStdoutLeftBlocking: the gateway makes its stdout non-blocking while it
// serves (so that a write nobody reads can be cut short: cuttableStdout), and
// blocking again when it exits: the pipe may be the host's, written by others
// after the gateway (a shell's { mcpfsm serve …; echo done; } | …), whose writes
// to a full pipe would fail instead of waiting. A stdout that stderr shares (2>&1)
// is left as it is: serve's stderr writes block.
func TestServeStdoutLeftBlocking(t *testing.T) {
	cfg := serveConfig(t, t.TempDir(), "example")
	nonblocking := func(f *os.File) bool {
		t.Helper()
		var flags int
		var ferr error
		rc, err := f.SyscallConn() // not Fd, which makes the file blocking
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || ferr != nil {
			t.Fatal(err, ferr)
		}
		return flags&unix.O_NONBLOCK != 0
	}
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprint("shared with stderr: ", shared), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			cmd := exec.CommandContext(ctx, mcpfsmBin(t), "serve", cfg)
			var stderr testutil.SyncBuffer
			cmd.Stdout, cmd.Stderr = w, &stderr
			if shared {
				cmd.Stderr = w
			}
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n"); err != nil {
				t.Fatal(err)
			}
			answers := bufio.NewReader(r)
			for {
				line, err := answers.ReadString('\n')
				if err != nil {
					t.Fatalf("no answer to initialize: %v\nstderr:\n%s", err, &stderr)
				}
				if strings.HasPrefix(line, `{"jsonrpc":"2.0","id":1,`) {
					break
				}
			}
			if got := nonblocking(w); got == shared {
				t.Errorf("while serving, stdout non-blocking: %v, want %v", got, !shared)
			}
			go func() { _, _ = io.Copy(io.Discard, answers) }()
			stdin.Close()
			if err := exited(t, cmd, 30*time.Second, "after stdin's end", &stderr); err != nil {
				t.Errorf("the gateway ended with %v\nstderr:\n%s", err, &stderr)
			}
			if nonblocking(w) {
				t.Error("the gateway left its stdout non-blocking")
			}
		})
	}
}

// TestServeStdioInitializeOutOfTurn: a host's request before initialize, and a
// second initialize, get JSON-RPC's -32600 under their IDs, and the session goes on:
// the go-sdk answered both with an error of code 0, no JSON-RPC code, and logged an
// error for each on the gateway's stderr (which a host shows as the server failing).
func TestServeStdioInitializeOutOfTurn(t *testing.T) {
	cfg := serveConfig(t, t.TempDir(), "example")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := startHost(ctx, t, false, cfg)
	h.send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if a := h.answer("1", 10*time.Second); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":1,"error":{"code":-32600,`) {
		t.Errorf("tools/list before initialize was answered %q, want -32600 under its ID", a)
	}
	h.initialize()
	h.send(`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"host","version":"1"}}}`)
	if a := h.answer("2", 10*time.Second); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":2,"error":{"code":-32600,`) {
		t.Errorf("a second initialize was answered %q, want -32600 under its ID", a)
	}
	h.send(`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
	if a := h.answer("3", 30*time.Second); !strings.Contains(a, "example__echo") {
		t.Errorf("tools/list after was answered %q", a)
	}
	h.stdin.Close()
	if err := exited(t, h.cmd, 30*time.Second, "after stdin's end", h.stderr); err != nil {
		t.Errorf("the gateway ended with %v\nstderr:\n%s", err, h.stderr)
	}
	if strings.Contains(h.stderr.String(), "level=ERROR") {
		t.Errorf("a host's requests out of turn logged errors:\n%s", h.stderr)
	}
}

// TestServeStdioInvalidParams: a host's initialize whose protocolVersion is a number
// gets -32602 naming the field under its ID, in a short message (the go-sdk answered
// code 0 and quoted the whole params), and so does a tools/call whose name is a number;
// a resources/read of a URI holding a control character gets "Resource not found"
// (the gateway exited: the go-sdk's answer could not be encoded); the session goes on.
func TestServeStdioInvalidParams(t *testing.T) {
	cfg := serveConfig(t, t.TempDir(), "example")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := startHost(ctx, t, false, cfg)
	pad := strings.Repeat("x", 1<<20)
	h.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":5,"capabilities":{},"clientInfo":{"name":"host","version":"1"},"pad":"` + pad + `"}}`)
	if a := h.answer("1", 10*time.Second); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,`) || !strings.Contains(a, `\"protocolVersion\"`) || len(a) > 200 {
		t.Errorf("initialize with a number for protocolVersion was answered %.300q (%d bytes), want -32602 naming it", a, len(a))
	}
	h.initialize()
	h.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":7,"arguments":{"pad":"` + pad + `"}}}`)
	if a := h.answer("2", 10*time.Second); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":2,"error":{"code":-32602,`) || !strings.Contains(a, `\"name\"`) || len(a) > 200 {
		t.Errorf("tools/call with a number for name was answered %.300q (%d bytes), want -32602 naming it", a, len(a))
	}
	h.send(`{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"test://a\u0001b"}}`)
	if a := h.answer("3", 10*time.Second); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Resource not found"`) {
		t.Errorf("resources/read of an unknown URI with a control character was answered %.300q", a)
	}
	h.send(`{"jsonrpc":"2.0","id":4,"method":"tools/list"}`)
	if a := h.answer("4", 30*time.Second); !strings.Contains(a, "example__echo") {
		t.Errorf("tools/list after was answered %.300q\nstderr:\n%s", a, h.stderr)
	}
	h.stdin.Close()
	if err := exited(t, h.cmd, 30*time.Second, "after stdin's end", h.stderr); err != nil {
		t.Errorf("the gateway ended with %v\nstderr:\n%s", err, h.stderr)
	}
}

// TestServeStdioAnswersAtSIGTERM: at SIGTERM the stdio front's requests in flight are
// given the HTTP front's grace (5 s) to be answered, as the HTTP front's are: a call
// that ends within it gets its real answer; one to a backend that holds it past the
// grace is cancelled and answered with the gateway's shutdown error under its ID
// (the go-sdk's Run, under the signal's context, closed the session at once, and the
// host got nothing for either); then the gateway exits within its bounds (the grace,
// and the close's 15 s). With --http --stdio as well: the HTTP front's shutdown runs
// beside the stdio front's, and stdout's write deadline starts after both.
func TestServeStdioAnswersAtSIGTERM(t *testing.T) {
	for _, mode := range []string{"stdio", "http+stdio"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cfg := serveConfig(t, t.TempDir(), "a")
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			args := []string{cfg}
			if mode == "http+stdio" {
				args = []string{"--http", "127.0.0.1:0", "--stdio", cfg}
			}
			h := startHost(ctx, t, false, args...)
			h.initialize()
			h.waitTools(t, "a__hold")
			h.send(`{"jsonrpc":"2.0","id":"held","method":"tools/call","params":{"name":"a__hold","arguments":{"ms":600000}}}`,
				`{"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"a__slow","arguments":{"ms":1500}}}`)
			time.Sleep(500 * time.Millisecond) // the calls reach the backend
			start := time.Now()
			if err := h.cmd.Process.Signal(unix.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if a := h.answer(`"slow"`, 10*time.Second); !strings.Contains(a, `"result"`) || !strings.Contains(a, "slept") {
				t.Errorf("the call ending within the grace was answered %q, want its result\nstderr:\n%s", a, h.stderr)
			}
			a := h.answer(`"held"`, 15*time.Second)
			var e struct {
				Error *struct {
					Code    int
					Message string
				}
			}
			if json.Unmarshal([]byte(a), &e) != nil || e.Error == nil || e.Error.Code != -32603 || !strings.Contains(e.Error.Message, "mcpfsm gateway: shutting down") {
				t.Errorf("the held call was answered %q, want -32603 naming the gateway's shutdown\nstderr:\n%s", a, h.stderr)
			}
			if d := time.Since(start); d < 4*time.Second {
				t.Errorf("the held call was cancelled %v after SIGTERM, want the 5 s grace first", d)
			}
			if err := exited(t, h.cmd, 25*time.Second, "mcpfsm serve after SIGTERM", h.stderr); err != nil {
				t.Errorf("exit: %v\nstderr:\n%s", err, h.stderr)
			}
			if d := time.Since(start); d > 25*time.Second {
				t.Errorf("exited %v after SIGTERM, want within the 5 s grace and the 15 s close", d)
			}
		})
	}
}

// TestServeSecondSignalExitsAtOnce: a second Ctrl-C or SIGTERM during the shutdown's
// grace ends mcpfsm at once (exit 1, its stdio servers killed), as a user pressing
// Ctrl-C again expects: signal.NotifyContext kept catching signals until run
// returned, so the second one did nothing and the user waited out the 5 s grace and
// up to the 15 s close.
func TestServeSecondSignalExitsAtOnce(t *testing.T) {
	cfg := serveConfig(t, t.TempDir(), "a")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := startHost(ctx, t, false, cfg)
	h.initialize()
	h.waitTools(t, "a__hold")
	h.send(`{"jsonrpc":"2.0","id":"held","method":"tools/call","params":{"name":"a__hold","arguments":{"ms":600000}}}`)
	time.Sleep(500 * time.Millisecond) // the call reaches the backend
	if err := h.cmd.Process.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the first is taken
	start := time.Now()
	if err := h.cmd.Process.Signal(unix.SIGINT); err != nil {
		t.Fatal(err)
	}
	// Within the grace (5 s) that the first signal began: without the fix it is
	// waited out whole.
	err := exited(t, h.cmd, 4*time.Second, "mcpfsm serve after a second signal", h.stderr)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("after a second signal: %v (%v), want exit 1 within the grace\nstderr:\n%s", err, time.Since(start), h.stderr)
	}
	if !strings.Contains(h.stderr.String(), "second signal") {
		t.Errorf("stderr does not say why it exited at once:\n%s", h.stderr)
	}
}

// TestServeStdioReadsDuringTheGrace: after SIGTERM the stdio front goes on reading
// through the shutdown's grace. A new request is answered at once with the shutdown
// error (-32603); a call the host cancels gets no answer (MCP: a cancelled request
// is not answered); and a call that waits on the host's answer to a sampling
// request the gateway sent it gets that answer and its real result. Nothing was
// read during the grace: the new request waited out the 5 s unanswered, then the
// cancelled call and the sampling one both got the shutdown error.
func TestServeStdioReadsDuringTheGrace(t *testing.T) {
	cfg := serveConfig(t, t.TempDir(), "a")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := startHost(ctx, t, false, cfg)
	h.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"host","version":"1"}}}`)
	if a := h.answer(`"init"`, 30*time.Second); !strings.Contains(a, `"result"`) {
		t.Fatalf("initialize was answered %q\nstderr:\n%s", a, h.stderr)
	}
	h.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	h.waitTools(t, "a__hold", "a__sample")
	h.send(`{"jsonrpc":"2.0","id":"held","method":"tools/call","params":{"name":"a__hold","arguments":{"ms":600000}}}`,
		`{"jsonrpc":"2.0","id":"sampled","method":"tools/call","params":{"name":"a__sample","arguments":{"prompt":"hi"}}}`)
	var sampleID json.RawMessage
	for timeout := time.After(15 * time.Second); sampleID == nil; {
		select {
		case line, ok := <-h.lines:
			if !ok {
				t.Fatalf("the gateway's stdout ended\nstderr:\n%s", h.stderr)
			}
			var m struct {
				ID     json.RawMessage
				Method string
			}
			if json.Unmarshal([]byte(line), &m) == nil && m.Method == "sampling/createMessage" {
				sampleID = m.ID
			}
		case <-timeout:
			t.Fatalf("the gateway never asked for sampling\nstderr:\n%s", h.stderr)
		}
	}
	time.Sleep(300 * time.Millisecond) // the held call reaches the backend
	start := time.Now()
	if err := h.cmd.Process.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the signal is taken

	// (b) A new request during the grace: the shutdown error, at once.
	h.send(`{"jsonrpc":"2.0","id":"late","method":"tools/list"}`)
	a := h.answer(`"late"`, 2*time.Second)
	var e struct {
		Error *struct {
			Code    int
			Message string
		}
	}
	if json.Unmarshal([]byte(a), &e) != nil || e.Error == nil || e.Error.Code != -32603 || !strings.Contains(e.Error.Message, "mcpfsm gateway: shutting down") {
		t.Errorf("a request sent during the grace was answered %q (%v after SIGTERM), want -32603 naming the shutdown at once\nstderr:\n%s", a, time.Since(start), h.stderr)
	}

	// (a) and (c): the held call cancelled, the sampling answered.
	h.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"held","reason":"host gave up"}}`,
		`{"jsonrpc":"2.0","id":`+string(sampleID)+`,"result":{"role":"assistant","model":"m","content":{"type":"text","text":"sampled: hi"}}}`)
	var sampled string
	for line := range h.lines { // to the end of stdout
		switch {
		case strings.HasPrefix(line, `{"jsonrpc":"2.0","id":"held",`):
			t.Errorf("the call cancelled during the grace was answered: %s", line)
		case strings.HasPrefix(line, `{"jsonrpc":"2.0","id":"sampled",`):
			sampled = line
		}
	}
	if !strings.Contains(sampled, `"result"`) || !strings.Contains(sampled, "sampled: hi") {
		t.Errorf("the call whose sampling was answered during the grace was answered %q, want its result\nstderr:\n%s", sampled, h.stderr)
	}
	if err := exited(t, h.cmd, 25*time.Second, "mcpfsm serve after SIGTERM", h.stderr); err != nil {
		t.Errorf("exit: %v\nstderr:\n%s", err, h.stderr)
	}
	if d := time.Since(start); d > 25*time.Second {
		t.Errorf("exited %v after SIGTERM, want within the 5 s grace and the 15 s close", d)
	}
}
