package mcpfsm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// everythingServer installs the pinned npm reference servers (testdata/interop: npm
// ci, keyed on the lock's hash) and returns the path of server-everything's
// entry point, run with node. It skips when node or npm is missing, unless
// MCPFSM_REQUIRE_NODE is set.
func everythingServer(t *testing.T) string {
	t.Helper()
	dir := testutil.NpmCI(t, "testdata/interop")
	return filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
}

// TestInterop_ServerPrintingToStdout: a stdio server on the TypeScript SDK that
// prints to stdout what is not a message (testdata/interop/banner-server.mjs: a
// banner, a log line once connected, a log line and a JSON record in each call, all
// with console.log) is served as the TypeScript SDK's own client serves it: the
// connection comes up at once and stays up, every call answered, and the lines
// reach the server's stderr, in order, after "stdout: ". Before, its banner failed
// every connect (breaker-open).
func TestInterop_ServerPrintingToStdout(t *testing.T) {
	dir := testutil.NpmCI(t, "testdata/interop")
	var stderr testutil.SyncBuffer
	cfg := transport.Config{Name: "banner", Stdio: &transport.Stdio{Command: "node", Args: []string{filepath.Join(dir, "banner-server.mjs")}, Stderr: &stderr}}
	c := open(t, cfg, nil, nil)
	c.waitState(states.Ready, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		want := fmt.Sprintf("call %d", i)
		if got, err := toolText(c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": want}})); err != nil || got != want {
			t.Fatalf("echo = %q, %v\n%s", got, err, c.timeline())
		}
	}
	waitUntil(t, 10*time.Second, "the third call's log lines", func() bool { return strings.Count(stderr.String(), "stdout: {") == 3 })
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	want := []string{"stdout: Banner server v1.0 starting on stdio...", "stdout: connected"}
	for i := range 3 {
		want = append(want, fmt.Sprintf(`stdout: [INFO] echo called with {"text":"call %d"}`, i), `stdout: {"level":"info","msg":"echo","at":`)
	}
	for i := range lines {
		if i < len(want) && strings.HasPrefix(want[i], `stdout: {"level"`) && strings.HasPrefix(lines[i], want[i]) {
			lines[i] = want[i]
		}
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("the server's stderr (-want +got):\n%s", diff)
	}
	if st := c.Status(); st.State != states.Ready || st.Failures != 0 || c.count(states.Ready, states.TearingDown) != 0 {
		t.Errorf("status %+v, want ready without a failure\n%s", st, c.timeline())
	}
}

// startEverythingHTTP runs server-everything in its streamable HTTP mode on a free
// loopback port and returns its MCP endpoint; the server is killed at cleanup.
func startEverythingHTTP(t *testing.T, script string) string {
	t.Helper()
	port := freePort(t)
	runEverythingHTTP(t, script, port)
	return "http://127.0.0.1:" + strconv.Itoa(port) + "/mcp"
}

// everythingProc is a server-everything process in its streamable HTTP mode.
type everythingProc struct{ cmd *exec.Cmd }

// stop kills it (SIGKILL, its process group) and reaps it.
func (p *everythingProc) stop() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// runEverythingHTTP runs server-everything over streamable HTTP on port, returns when
// it listens, and stops it at cleanup.
func runEverythingHTTP(t *testing.T, script string, port int) *everythingProc {
	t.Helper()
	cmd := exec.Command("node", script, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &everythingProc{cmd: cmd}
	var once sync.Once
	t.Cleanup(func() { once.Do(p.stop) })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything did not listen on %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// everythingStdio is server-everything over stdio, started by sh so that the test can
// kill -9 the node process itself: sh writes its pid to pidFile and execs node.
func everythingStdio(script, pidFile string) transport.Config {
	return transport.Config{Name: "everything", Stdio: &transport.Stdio{
		Command: "sh", Args: []string{"-c", `echo $$ >"$0"; exec node "$1" stdio`, pidFile, script},
	}}
}

// killPid kills -9 the process whose pid is in pidFile, and returns that pid.
func killPid(t *testing.T, pidFile string) int {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return pid
}

// interopNotes is what server-everything sent the client.
type interopNotes struct {
	logs    *seen[string] // "level: data"
	updated *seen[string]
	tools   *seen[[]string]
}

// everythingOptions has the client sample, elicit and hold roots, so that
// server-everything registers its conditional tools, and records what it is sent.
func everythingOptions(n *interopNotes, sample func(context.Context) error) func(*Options) {
	*n = interopNotes{logs: newSeen[string](), updated: newSeen[string](), tools: newSeen[[]string]()}
	return func(o *Options) {
		o.Roots = []*mcp.Root{{URI: "file:///interop/root", Name: "interop-root"}}
		o.Handlers.CreateMessage = func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
			if sample != nil {
				if err := sample(ctx); err != nil {
					return nil, err
				}
			}
			return &mcp.CreateMessageResult{Model: "interop", Role: "assistant", Content: &mcp.TextContent{Text: "sampled"}}, nil
		}
		o.Handlers.Elicit = func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		}
		o.Handlers.LoggingMessage = func(_ context.Context, p *mcp.LoggingMessageParams) {
			n.logs.add(fmt.Sprintf("%s: %v", p.Level, p.Data))
		}
		o.Handlers.ResourceUpdated = func(_ context.Context, p *mcp.ResourceUpdatedNotificationParams) { n.updated.add(p.URI) }
		o.Handlers.ToolsChanged = func(tools []*mcp.Tool) {
			var names []string
			for _, tool := range tools {
				names = append(names, tool.Name)
			}
			slices.Sort(names)
			n.tools.add(names)
		}
	}
}

// toolText is the text of a tool's result, and an error for a tool error.
func toolText(res *mcp.CallToolResult, err error) (string, error) {
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		return "", fmt.Errorf("tool error: %s", b.String())
	}
	return b.String(), nil
}

// waitUntil polls ok every 10 ms until it holds or within has passed.
func waitUntil(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const everythingText1 = "demo://resource/dynamic/text/1"

// TestInterop_Everything: every feature the library claims, against the npm reference
// server server-everything 2026.8.31, over stdio and over streamable HTTP. Both speak
// 2025-11-25 (the go-sdk asks for 2026-07-28 first, with server/discover, and falls
// back). Its conditional tools, registered once it has the client's capabilities, come
// with a list change, which reaches ToolsChanged.
func TestInterop_Everything(t *testing.T) {
	script := everythingServer(t)
	for _, mode := range []string{"stdio", "http"} {
		t.Run(mode, func(t *testing.T) {
			cfg := transport.Config{Name: "everything", Stdio: &transport.Stdio{Command: "node", Args: []string{script, "stdio"}}}
			if mode == "http" {
				cfg = transport.Config{Name: "everything", HTTP: &transport.HTTP{URL: startEverythingHTTP(t, script)}}
			}
			var n interopNotes
			c := open(t, cfg, nil, everythingOptions(&n, nil))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c.waitState(states.Ready, 20*time.Second)
			info, _ := c.Server()
			if info.ProtocolVersion != "2025-11-25" || info.Implementation.Name != "mcp-servers/everything" || (mode == "http") != (info.SessionID != "") {
				t.Errorf("server %+v %q, session %q", info.Implementation, info.ProtocolVersion, info.SessionID)
			}
			waitUntil(t, 10*time.Second, "the conditional tools", func() bool {
				all := n.tools.all()
				return len(all) > 0 && slices.Contains(all[len(all)-1], "trigger-sampling-request")
			})
			if got, err := toolText(c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi"}})); err != nil || got != "Echo: hi" {
				t.Errorf("echo = %q, %v", got, err)
			}
			if got, err := toolText(c.CallTool(ctx, &mcp.CallToolParams{Name: "trigger-sampling-request", Arguments: map[string]any{"prompt": "p"}})); err != nil || !strings.Contains(got, `"text": "sampled"`) {
				t.Errorf("sampling = %q, %v", got, err)
			}
			if got, err := toolText(c.CallTool(ctx, &mcp.CallToolParams{Name: "trigger-elicitation-request"})); err != nil || !strings.Contains(got, "Name: Ada") {
				t.Errorf("elicitation = %q, %v", got, err)
			}
			if got, err := toolText(c.CallTool(ctx, &mcp.CallToolParams{Name: "get-roots-list"})); err != nil || !strings.Contains(got, "file:///interop/root") {
				t.Errorf("roots = %q, %v", got, err)
			}
			var progress []float64
			pctx := WithProgress(ctx, func(p *mcp.ProgressNotificationParams) { progress = append(progress, p.Progress) })
			if _, err := toolText(c.CallTool(pctx, &mcp.CallToolParams{Name: "trigger-long-running-operation", Arguments: map[string]any{"duration": 0.4, "steps": 4}})); err != nil {
				t.Error(err)
			}
			if diff := cmp.Diff([]float64{1, 2, 3, 4}, progress); diff != "" {
				t.Errorf("progress (-want +got):\n%s", diff)
			}
			// The level holds: the subscribe's info message is not sent at warning.
			if err := c.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
				t.Fatal(err)
			}
			logsBefore := len(n.logs.all())
			if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: everythingText1}); err != nil {
				t.Fatal(err)
			}
			if _, err := toolText(c.CallTool(ctx, &mcp.CallToolParams{Name: "toggle-subscriber-updates"})); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 10*time.Second, "an update", func() bool { return len(n.updated.all()) > 0 })
			if diff := cmp.Diff([]string{everythingText1}, n.updated.all()); diff != "" {
				t.Errorf("updated (-want +got):\n%s", diff)
			}
			if got := n.logs.all()[logsBefore:]; len(got) != 0 {
				t.Errorf("log messages below warning: %q", got)
			}
			rs, err := c.ListResources(ctx, nil)
			if err != nil || len(rs.Resources) == 0 {
				t.Errorf("resources %v, %v", rs, err)
			}
			var templates []string
			for rt, err := range c.ResourceTemplates(ctx, nil) {
				if err != nil {
					t.Fatal(err)
				}
				templates = append(templates, rt.URITemplate)
			}
			if diff := cmp.Diff([]string{"demo://resource/dynamic/text/{resourceId}", "demo://resource/dynamic/blob/{resourceId}"}, templates); diff != "" {
				t.Errorf("templates (-want +got):\n%s", diff)
			}
			if rr, err := c.ReadResource(ctx, &mcp.ReadResourceParams{URI: everythingText1}); err != nil || !strings.HasPrefix(rr.Contents[0].Text, "Resource 1: ") {
				t.Errorf("read %v, %v", rr, err)
			}
			gp, err := c.GetPrompt(ctx, &mcp.GetPromptParams{Name: "args-prompt", Arguments: map[string]string{"city": "Paris"}})
			if err != nil || !strings.Contains(gp.Messages[0].Content.(*mcp.TextContent).Text, "Paris") {
				t.Errorf("prompt %v, %v", gp, err)
			}
			cr, err := c.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "completable-prompt"}, Argument: mcp.CompleteParamsArgument{Name: "department", Value: "S"}})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"Sales", "Support"}, cr.Completion.Values); diff != "" {
				t.Errorf("completion (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInterop_EverythingKilled: server-everything over stdio, killed with SIGKILL under
// a call, twice. An idempotent call (trigger-long-running-operation, annotated so) is
// sent again on the new process and answers; the log level, the subscription and the
// roots are in force there (the level before the subscription: the new process's
// answer to the restored subscribe, an info message, is not sent at warning). A call
// that is not idempotent (trigger-sampling-request) may have run: it is not sent again.
func TestInterop_EverythingKilled(t *testing.T) {
	script := everythingServer(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	sampling := make(chan struct{}, 1)
	var n interopNotes
	c := open(t, everythingStdio(script, pidFile), nil, everythingOptions(&n, func(ctx context.Context) error {
		select {
		case sampling <- struct{}{}:
		default:
		}
		<-ctx.Done() // answered only when the server is gone
		return ctx.Err()
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.waitState(states.Ready, 20*time.Second)
	if err := c.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: everythingText1}); err != nil {
		t.Fatal(err)
	}
	logsBefore := len(n.logs.all())

	first := c.session()
	var report CallReport
	var progress []float64
	pctx := WithProgress(WithReport(ctx, &report), func(p *mcp.ProgressNotificationParams) { progress = append(progress, p.Progress) })
	done := make(chan error, 1)
	go func() {
		_, err := toolText(c.CallTool(pctx, &mcp.CallToolParams{Name: "trigger-long-running-operation", Arguments: map[string]any{"duration": 0.8, "steps": 4}}))
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // a step or so in
	killPid(t, pidFile)
	if err := <-done; err != nil {
		t.Fatalf("the idempotent call: %v\n%s", err, c.timeline())
	}
	if report.Attempts != 2 || report.First == nil {
		t.Errorf("report %+v, want a second attempt", report)
	}
	if len(progress) == 0 || progress[len(progress)-1] != 4 {
		t.Errorf("progress %v, want it to end with the retry's 4", progress)
	}
	c.waitNewSession(first, 20*time.Second)
	// The subscription reached the new process, and the reconnect reported it updated once.
	if _, err := toolText(c.CallTool(ctx, &mcp.CallToolParams{Name: "toggle-subscriber-updates"})); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "two updates", func() bool { return len(n.updated.all()) >= 2 })
	if got, err := toolText(c.CallTool(ctx, &mcp.CallToolParams{Name: "get-roots-list"})); err != nil || !strings.Contains(got, "file:///interop/root") {
		t.Errorf("roots on the new process = %q, %v", got, err)
	}
	if got := n.logs.all()[logsBefore:]; len(got) != 0 {
		t.Errorf("log messages below warning from the new process: %q", got)
	}

	second := c.session()
	report = CallReport{}
	go func() {
		_, err := c.CallTool(WithReport(ctx, &report), &mcp.CallToolParams{Name: "trigger-sampling-request", Arguments: map[string]any{"prompt": "p"}})
		done <- err
	}()
	<-sampling
	killPid(t, pidFile)
	err := <-done
	var ce *CallError
	if !errors.As(err, &ce) || ce.Cause != states.CauseLost || !errors.Is(err, ErrMayHaveRun) || report.Attempts != 1 {
		t.Errorf("the sampling call got %v (report %+v), want one attempt that may have run", err, report)
	}
	c.waitNewSession(second, 20*time.Second)
	if got, err := toolText(c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "back"}})); err != nil || got != "Echo: back" {
		t.Errorf("echo after the second kill = %q, %v", got, err)
	}
}

// TestInterop_EverythingHTTPRestarted: server-everything over streamable HTTP is
// restarted (SIGKILL, then a new process on the same port) while the connection is
// idle. The new process does not know the session and answers the next call's POST
// with 400 (the spec says 404): the server did not take the call, so a call that is
// not idempotent (toggle-simulated-logging) is sent again on a new session, which has
// the subscription and the log level back.
func TestInterop_EverythingHTTPRestarted(t *testing.T) {
	script := everythingServer(t)
	port := freePort(t)
	srv := runEverythingHTTP(t, script, port)
	pol := fastPolicies()
	pol.KeepaliveInterval = time.Minute // no probe finds the restart first
	var n interopNotes
	c := open(t, transport.Config{Name: "everything", HTTP: &transport.HTTP{URL: "http://127.0.0.1:" + strconv.Itoa(port) + "/mcp"}}, pol, everythingOptions(&n, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.waitState(states.Ready, 20*time.Second)
	if err := c.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: everythingText1}); err != nil {
		t.Fatal(err)
	}
	first, _ := c.Server()
	logsBefore := len(n.logs.all())
	srv.stop()
	runEverythingHTTP(t, script, port)

	var report CallReport
	if _, err := toolText(c.CallTool(WithReport(ctx, &report), &mcp.CallToolParams{Name: "toggle-subscriber-updates"})); err != nil {
		t.Fatalf("the call after the restart: %v\n%s", err, c.timeline())
	}
	if report.Attempts != 2 {
		t.Errorf("report %+v, want a second attempt on a new session", report)
	}
	if info, _ := c.Server(); info.SessionID == first.SessionID {
		t.Errorf("still on session %s", info.SessionID)
	}
	waitUntil(t, 10*time.Second, "two updates", func() bool { return len(n.updated.all()) >= 2 })
	if got := n.logs.all()[logsBefore:]; len(got) != 0 {
		t.Errorf("log messages below warning from the new process: %q", got)
	}
}
