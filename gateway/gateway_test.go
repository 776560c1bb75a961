package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestGateway_BackendCrashInvisible: a front client calls in a loop while the stdio
// backend is killed and respawned. Calls during the gap fail fast as tool errors
// naming the server and the cause (the call in flight at the kill, of a tool that is
// not idempotent, says the server may have run it); after the respawn calls succeed
// again; the front session never breaks.
func TestGateway_BackendCrashInvisible(t *testing.T) {
	s := stdio(t, "files", testserver.Options{})
	// A second's backoff: a call that waited for the respawn would take about that
	// long, well apart from one that fails fast, even on a loaded machine.
	s.Policies.BackoffBase, s.Policies.BackoffMax = time.Second, time.Second
	g := start(t, config(s), gateway.Options{})
	cs := front(t, g, nil, "2025-11-25")
	waitTools(t, cs, has("files__counter"))
	pid := func() int {
		res := call(t, cs, "files__pid", nil)
		n, err := strconv.Atoi(text(res))
		if err != nil || res.IsError {
			t.Fatalf("pid: %q", text(res))
		}
		return n
	}
	first := pid()
	var before, gap, after int
	var slowest time.Duration
	killed := false
	deadline := time.Now().Add(waitFor)
	for after < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("the backend never served again: %d answered, %d failed in the gap", before, gap)
		}
		if before == 10 && !killed {
			if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
		begin := time.Now()
		// counter is not idempotent: a call the crash breaks is not sent again.
		res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "files__counter", Arguments: map[string]any{}})
		took := time.Since(begin)
		if err != nil {
			t.Fatalf("the front got a protocol error, not a tool error: %v", err)
		}
		switch {
		case !res.IsError && !killed:
			before++
		case !res.IsError && gap > 0:
			after++
		case !res.IsError:
			t.Fatalf("a call answered %q after the kill, before any failed", text(res))
		default:
			msg := text(res)
			if !killed || after > 0 {
				t.Fatalf("a tool error outside the gap: %s", msg)
			}
			if !strings.Contains(msg, `server "files"`) || !(strings.Contains(msg, "last failure") || strings.Contains(msg, "may have run")) {
				t.Errorf("the gap's error does not name the server and the cause: %s", msg)
			}
			if strings.Contains(msg, `mcpfsm: server "files"`) || strings.Count(msg, "may have run") > 1 {
				t.Errorf("the gap's error says the server or that it may have run twice: %s", msg)
			}
			if gap > 0 {
				// The first call of the gap may be the one in flight at the kill,
				// which waits for the crash to be seen: it is not a fast failure's.
				slowest = max(slowest, took)
			}
			gap++
		}
		time.Sleep(5 * time.Millisecond)
	}
	if gap < 2 {
		t.Fatalf("%d calls failed in the gap: the test did not see the crash", gap)
	}
	if slowest > 600*time.Millisecond {
		t.Errorf("a call in the gap took %v: it did not fail fast", slowest)
	}
	if second := pid(); second == first {
		t.Errorf("the backend was not respawned: pid %d both times", first)
	}
	t.Logf("%d answered before, %d failed fast in the gap (slowest %v), %d answered after", before, gap, slowest, after)
}

// TestGateway_OneBadBackend: one of three backends cannot start. The other two serve;
// the bad one's tools are not listed (it never listed any: the gateway shows only what
// a backend has listed), and the instructions say it is not connected.
func TestGateway_OneBadBackend(t *testing.T) {
	bad := mcpfsm.ServerConfig{Name: "bad", Policies: quick(), Transport: transport.Config{
		Name: "bad", Stdio: &transport.Stdio{Command: "/nonexistent/mcp-server"},
	}}
	g := start(t, config(inMemory("a", testserver.Options{Name: "a"}), bad, inMemory("c", testserver.Options{Name: "c"})), gateway.Options{})
	cs := front(t, g, nil, "")
	names := waitTools(t, cs, func(n []string) bool { return has("a__echo")(n) && has("c__echo")(n) })
	for _, n := range names {
		if strings.HasPrefix(n, "bad__") {
			t.Errorf("the bad backend's tool %s is listed", n)
		}
	}
	for _, name := range []string{"a__echo", "c__echo"} {
		if res := call(t, cs, name, map[string]any{"text": name}); res.IsError || text(res) != name {
			t.Errorf("%s: %q", name, text(res))
		}
	}
	if _, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "bad__echo"}); err == nil || !strings.Contains(err.Error(), `server "bad"`) {
		t.Errorf("a call to the bad server's name: %v, want an error naming it", err)
	}
	// A new front session learns what is behind the gateway.
	later := front(t, g, nil, "")
	instr := later.InitializeResult().Instructions
	if !strings.Contains(instr, "## bad") || !strings.Contains(instr, "Not connected") || !strings.Contains(instr, "Server a test") ||
		!strings.Contains(instr, "in front of 3 MCP servers,") {
		t.Errorf("instructions do not say what is behind the gateway:\n%s", instr)
	}
	if title := later.InitializeResult().ServerInfo.Title; !strings.Contains(title, "a, bad, c") {
		t.Errorf("server title %q does not list the servers", title)
	}
}

// TestGateway_SamplingForwarded: a backend tool that asks for sampling gets the front
// client's answer, with the backend on 2025-11-25 (it sends a request of its own,
// which the gateway attributes to the one front call in flight) or on 2026-07-28 (an
// input request inside the call's answer, whose context names the front call), and
// the front client on 2025-11-25 (asked with a request on its call's stream) or on
// 2026-07-28 (asked with an input-required result; its retry resumes the parked
// call). A tool that asks twice (sampling, then elicitation) works on each. A front
// client without sampling gets a clean refusal.
func TestGateway_SamplingForwarded(t *testing.T) {
	for _, backend := range []string{"2025-11-25", "2026-07-28"} {
		for _, frontVersion := range []string{"2025-11-25", "2026-07-28"} {
			t.Run("backend "+backend+" front "+frontVersion, func(t *testing.T) {
				s := inMemory("llm", testserver.Options{})
				if backend != "2026-07-28" {
					s.Transport.ProtocolVersion = backend
				}
				g := start(t, config(s), gateway.Options{})
				sampled := make(chan string, 4)
				cs := front(t, g, &mcp.ClientOptions{
					CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
						sampled <- req.Params.Messages[0].Content.(*mcp.TextContent).Text
						return &mcp.CreateMessageResult{Model: "front-model", Role: "assistant", Content: &mcp.TextContent{Text: "the front's answer"}}, nil
					},
					ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
						return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "elicited"}}, nil
					},
				}, frontVersion)
				if got := cs.InitializeResult().ProtocolVersion; got != frontVersion {
					t.Fatalf("the front negotiated %s", got)
				}
				waitTools(t, cs, has("llm__sample"))
				res := call(t, cs, "llm__sample", map[string]any{"prompt": "what is 2+2?"})
				if res.IsError || !strings.Contains(text(res), "the front's answer") {
					t.Fatalf("sample: %q (error %v)", text(res), res.IsError)
				}
				select {
				case p := <-sampled:
					if p != "what is 2+2?" {
						t.Errorf("the front was asked %q", p)
					}
				default:
					t.Error("the front's handler was not called")
				}
				res = call(t, cs, "llm__sample_then_elicit", map[string]any{"prompt": "p", "message": "m"})
				if res.IsError || !strings.Contains(text(res), "the front's answer") || !strings.Contains(text(res), "elicited") {
					t.Errorf("sample_then_elicit: %q (error %v)", text(res), res.IsError)
				}
				// Refused: the backend's tool says why in its error result, or (an input
				// request refused on 2026-07-28) the call fails with the refusal's text.
				plain := front(t, g, nil, frontVersion)
				res, err := plain.CallTool(callCtx(t), &mcp.CallToolParams{Name: "llm__sample", Arguments: map[string]any{"prompt": "x"}})
				if got := fmt.Sprint(err) + text(res); !strings.Contains(got, "the front client does not support sampling") || (err == nil && !res.IsError) {
					t.Errorf("a front client without sampling: %q (error %v), want a refusal", got, res != nil && res.IsError)
				}
			})
		}
	}
}

// TestGateway_FrontGivesNoAnswer: a backend's sampling or elicitation request asked
// of a front client before 2026-07-28 that never answers it (it declared sampling)
// ends after frontAskTimeout, the front client told it is cancelled, and the backend
// told why: it waited for ever, and with it the backend's call and the front's own
// request. (On 2026-07-28 a call parked for its client's retry waits parkTimeout.)
func TestGateway_FrontGivesNoAnswer(t *testing.T) {
	defer gateway.SetFrontAskTimeout(300 * time.Millisecond)()
	s := inMemory("llm", testserver.Options{})
	s.Transport.ProtocolVersion = "2025-11-25"
	g := start(t, config(s), gateway.Options{})
	cancelled := make(chan struct{}, 4)
	deaf := func(ctx context.Context) {
		<-ctx.Done()
		cancelled <- struct{}{}
	}
	cs := front(t, g, &mcp.ClientOptions{
		CreateMessageHandler: func(ctx context.Context, _ *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			deaf(ctx)
			return nil, ctx.Err()
		},
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			deaf(ctx)
			return nil, ctx.Err()
		},
	}, "2025-11-25")
	waitTools(t, cs, has("llm__sample"))
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"llm__sample", map[string]any{"prompt": "p"}},
		{"llm__elicit", map[string]any{"message": "m"}},
	} {
		res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
		if got := fmt.Sprint(err) + text(res); !strings.Contains(got, "the front client gave no answer within 300ms") {
			t.Errorf("%s, its front client deaf: %q, want the backend told the front gave no answer", tc.tool, got)
		}
		select {
		case <-cancelled:
		case <-time.After(waitFor):
			t.Errorf("%s: the front client was not told its request is cancelled", tc.tool)
		}
	}
}

// TestGateway_UnknownName: a name no backend shows is a clear MCP error, naming the
// server whose prefix it has.
func TestGateway_UnknownName(t *testing.T) {
	g := start(t, config(inMemory("files", testserver.Options{})), gateway.Options{})
	cs := front(t, g, nil, "")
	waitTools(t, cs, has("files__echo"))
	for name, want := range map[string]string{
		"files__nope": `server "files" (prefix "files") shows no tool "nope"`,
		"nope":        `no server of this gateway shows it (names start with a server's prefix: files__)`,
	} {
		_, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: name})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams || !strings.Contains(je.Message, want) {
			t.Errorf("%s: %v, want invalid params saying %q", name, err, want)
		}
	}
	if _, err := cs.GetPrompt(callCtx(t), &mcp.GetPromptParams{Name: "files__nope"}); err == nil || !strings.Contains(err.Error(), "shows no prompt") {
		t.Errorf("an unknown prompt: %v", err)
	}
}

// TestGateway_Names: prefixes, a prefix of "", include, exclude and rename, for tools
// and prompts; resources keep their URIs.
func TestGateway_Names(t *testing.T) {
	a := inMemory("a", testserver.Options{Name: "a"})
	a.Include, a.Exclude, a.Rename = []string{"e*", "greet", "pid", "item"}, []string{"elicit*"}, map[string]string{"pid": "which_pid"}
	b := inMemory("b", testserver.Options{Name: "b"})
	empty := ""
	b.Prefix, b.Include = &empty, []string{"counter"}
	g := start(t, &mcpfsm.Config{Servers: []mcpfsm.ServerConfig{a, b}, Separator: "-"}, gateway.Options{})
	cs := front(t, g, nil, "")
	names := waitTools(t, cs, func(n []string) bool { return has("a-echo")(n) && has("counter")(n) })
	want := "a-echo counter which_pid"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("tools %q, want %q", got, want)
	}
	if res := call(t, cs, "which_pid", nil); res.IsError {
		t.Errorf("a renamed tool: %s", text(res))
	}
	if res := call(t, cs, "counter", nil); res.IsError || text(res) != "1" {
		t.Errorf("an unprefixed tool: %s", text(res))
	}
	deadline := time.Now().Add(waitFor)
	for {
		res, err := cs.GetPrompt(callCtx(t), &mcp.GetPromptParams{Name: "a-greet", Arguments: map[string]string{"name": "bob"}})
		if err == nil {
			if got := res.Messages[0].Content.(*mcp.TextContent).Text; got != "Hello, bob!" {
				t.Errorf("prompt: %q", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prompt a-greet: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rr, err := cs.ReadResource(callCtx(t), &mcp.ReadResourceParams{URI: "test://items/42"})
	if err != nil || rr.Contents[0].Text != "item 42 v0" {
		t.Errorf("a resource read through a template: %v %v", rr, err)
	}
}

// TestGateway_ListChanged: a backend's changed list reaches the front session as a
// list-changed notification and a new list, and so does a reload that adds a server;
// the front session stays open throughout.
func TestGateway_ListChanged(t *testing.T) {
	first := inMemory("a", testserver.Options{})
	g := start(t, config(first), gateway.Options{})
	changed := make(chan struct{}, 16)
	cs := front(t, g, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}}, "2025-11-25")
	waitTools(t, cs, has("a__echo"))
	drain := func() {
		for {
			select {
			case <-changed:
			default:
				return
			}
		}
	}
	got := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(waitFor):
			t.Fatalf("no list-changed notification after %s", what)
		}
	}
	drain()
	call(t, cs, "a__change_tools", nil)
	got("change_tools")
	waitTools(t, cs, has("a__extra"))
	drain()
	res, err := g.Reload(callCtx(t), config(first, inMemory("b", testserver.Options{})))
	if err != nil || len(res.Added) != 1 {
		t.Fatalf("reload: %v, %v", res, err)
	}
	got("a reload that adds a server")
	waitTools(t, cs, has("b__echo"))
	if res := call(t, cs, "b__echo", map[string]any{"text": "new"}); text(res) != "new" {
		t.Errorf("the added server: %q", text(res))
	}
	drain()
	if _, err := g.Reload(callCtx(t), config(inMemory("b", testserver.Options{}))); err != nil {
		t.Fatal(err)
	}
	got("a reload that removes a server")
	waitTools(t, cs, func(n []string) bool { return !has("a__echo")(n) })
	if err := cs.Ping(callCtx(t), nil); err != nil {
		t.Errorf("the front session broke: %v", err)
	}
}

// TestGateway_ProgressLoggingCancel: a backend's progress reaches the front under the
// front's token before the result; its log messages reach the front at the level the
// front set (the backends are set to it); a front request cancelled is cancelled on
// the backend.
func TestGateway_ProgressLoggingCancel(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	logs := make(chan string, 16)
	progress := make(chan float64, 16)
	cs := front(t, g, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			logs <- fmt.Sprintf("%s %s %v", req.Params.Logger, req.Params.Level, req.Params.Data)
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if req.Params.ProgressToken == "front-token" {
				progress <- req.Params.Progress
			}
		},
	}, "2025-11-25")
	waitTools(t, cs, has("a__slow_progress"))
	res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__slow_progress", Arguments: map[string]any{"ms": 5, "steps": 4},
		Meta: mcp.Meta{"progressToken": "front-token"}})
	if err != nil || res.IsError {
		t.Fatalf("slow_progress: %v %s", err, text(res))
	}
	// The go-sdk's client may handle a notification that came just before its
	// call's result after the result (it queues notifications for a goroutine and
	// delivers results at once), and a progress notification handled after its call
	// has returned is dropped: the last one may be lost, the others not.
	if n := len(progress); n < 3 {
		t.Errorf("%d progress notifications before the result, want at least 3 of 4", n)
	}

	if err := cs.SetLoggingLevel(callCtx(t), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	if res := call(t, cs, "a__log", map[string]any{"level": "debug", "text": "quiet"}); text(res) != "filtered" {
		t.Errorf("a debug message at level info: %q, want filtered", text(res))
	}
	if res := call(t, cs, "a__log", map[string]any{"level": "warning", "text": "loud"}); text(res) != "sent" {
		t.Errorf("a warning at level info: %q, want sent", text(res))
	}
	select {
	case got := <-logs:
		if !strings.HasPrefix(got, "a") || !strings.Contains(got, "warning loud") {
			t.Errorf("log message %q", got)
		}
	case <-time.After(waitFor):
		t.Error("the backend's log message did not reach the front")
	}

	before := backendStats(t, cs)["notifications/cancelled"]
	slowBefore := backendCalls(t, cs, "slow")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__slow", Arguments: map[string]any{"ms": 60000}})
		done <- err
	}()
	waitBackendCalls(t, cs, "slow", slowBefore)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled call: %v", err)
	}
	waitStats(t, cs, func(s map[string]int) bool { return s["notifications/cancelled"] > before })
}

// backendCalls is how many calls of tool backend a has received from the gateway, as
// its state tool says (through the front session cs).
func backendCalls(t *testing.T, cs *mcp.ClientSession, tool string) int {
	t.Helper()
	st, err := testserver.State(call(t, cs, "a__state", nil))
	if err != nil {
		t.Fatal(err)
	}
	return st.Tools[tool]
}

// waitBackendCalls waits until backend a has received more calls of tool than before:
// a call cancelled before the gateway sent it never reaches the backend, and nor does
// its cancellation.
func waitBackendCalls(t *testing.T, cs *mcp.ClientSession, tool string, before int) {
	t.Helper()
	for deadline := time.Now().Add(waitFor); backendCalls(t, cs, tool) == before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no call of %s reached the backend", tool)
		}
	}
}

// backendStats reads the test server's counts of what reached it.
func backendStats(t *testing.T, cs *mcp.ClientSession) map[string]int {
	t.Helper()
	res := call(t, cs, "a__stats", nil)
	var out map[string]int
	if err := jsonUnmarshal(text(res), &out); err != nil {
		t.Fatalf("stats %q: %v", text(res), err)
	}
	return out
}

func waitStats(t *testing.T, cs *mcp.ClientSession, ok func(map[string]int) bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !ok(backendStats(t, cs)) {
		if time.Now().After(deadline) {
			t.Fatalf("the backend never saw it: %v", backendStats(t, cs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdInFlight starts a front call of a__hold, ms long, and gives it time to reach
// the backend; the channel has its error.
func holdInFlight(cs *mcp.ClientSession, ms int) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "a__hold", Arguments: map[string]any{"ms": ms}})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	return done
}

// TestGateway_ReloadRemovesAServerUnderACall: a call in flight to a server that a
// reload removes (here renamed) ends once the server's close does (its
// teardown_timeout at most), as a tool error that says the reload removed the
// server: it said only that the session broke ("artifact"), as if the server had
// failed.
func TestGateway_ReloadRemovesAServerUnderACall(t *testing.T) {
	b := inMemory("b", testserver.Options{})
	g := start(t, config(inMemory("a", testserver.Options{}), b), gateway.Options{})
	cs := front(t, g, nil, "2025-11-25")
	waitTools(t, cs, has("b__hold"))
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "b__hold", Arguments: map[string]any{"ms": 600000}})
		if err != nil {
			res = toolError(err.Error())
		}
		done <- res
	}()
	time.Sleep(300 * time.Millisecond) // the call reaches the backend
	renamed := inMemory("c", testserver.Options{})
	if _, err := g.Reload(callCtx(t), config(inMemory("a", testserver.Options{}), renamed)); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if !res.IsError || !strings.Contains(text(res), `server "b" was removed by a reload while the request ran`) {
			t.Errorf("the call to the removed server answered %q, want a tool error saying the reload removed it", text(res))
		}
	case <-time.After(waitFor):
		t.Fatal("the call to the removed server did not end")
	}
}

func toolError(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "(protocol error) " + msg}}}
}

// TestGateway_CloseWithCallInFlight: Close cancels the front's requests in flight and
// closes the front's sessions before the backends. The SDK's close of a front session
// waits for its requests, which wait for their backends: closing the sessions first,
// as Close once asked its caller to, waited for as long as the backend took.
func TestGateway_CloseWithCallInFlight(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	cs := front(t, g, nil, "2025-11-25")
	waitTools(t, cs, has("a__hold"))
	done := holdInFlight(cs, 600000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := g.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v with a call in flight", d)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight did not end with the gateway")
	}
	for range g.Server().Sessions() {
		t.Error("a front session is still open after Close")
	}
}

// TestGateway_ResultsSayTheGateway: on 2026-07-28 a result's _meta names the server
// that answered; through the gateway that is the gateway, not the backend behind it
// (whose server info the front's server once passed on as it came).
func TestGateway_ResultsSayTheGateway(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	cs := front(t, g, nil, "2026-07-28")
	waitTools(t, cs, has("a__echo"))
	res := call(t, cs, "a__echo", map[string]any{"text": "x"})
	info, _ := res.Meta["io.modelcontextprotocol/serverInfo"].(map[string]any)
	if want := cs.InitializeResult().ServerInfo.Name; info["name"] != want {
		t.Errorf("the result's server info %v, want the gateway's (%s)", res.Meta, want)
	}
}

// TestGateway_ParkingPublished: a 2026-07-28 front call is seen by the backend's own
// requests (a backend before 2026-07-28 sends sampling on its own; calls.attribute
// finds the call) with all it takes to ask the front: its parking was set after the
// call was published, unsynchronized with that reading (a data race, and a request
// seen in between was refused as if the call took no input requests).
func TestGateway_ParkingPublished(t *testing.T) {
	s := inMemory("a", testserver.Options{})
	s.Transport.ProtocolVersion = "2025-11-25"
	g := start(t, config(s), gateway.Options{})
	cs := front(t, g, nil, "2026-07-28")
	waitTools(t, cs, has("a__echo"))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			g.AttributedParks("a")
			runtime.Gosched()
		}
	}()
	for range 100 {
		call(t, cs, "a__echo", map[string]any{"text": "x"})
	}
	close(stop)
	<-done
}

// TestGateway_SamplingOfACancelledCall: on 2025-11-25 a backend's request names no
// call. A backend that goes on with a call its front client cancelled (it was told,
// and did not listen) and then asks for sampling is refused, saying why, while
// another front session has a call in flight there: that session is not asked
// another client's question (it was: the cancelled call was forgotten at once, and
// the other session's was the one call in flight). Once the cancelled call no longer
// counts, requests go to the one session in flight again.
func TestGateway_SamplingOfACancelledCall(t *testing.T) {
	defer gateway.SetCutLinger(time.Second)()
	outcome := make(chan string, 4) // of the backend's sampling requests
	s := mcp.NewServer(&mcp.Implementation{Name: "deaf", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "late_sample"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Prompt string `json:"prompt"`
		Ms     int    `json:"ms"`
	}) (*mcp.CallToolResult, any, error) {
		time.Sleep(time.Duration(in.Ms) * time.Millisecond) // cancelled or not
		res, err := req.Session.CreateMessage(context.Background(), &mcp.CreateMessageParams{MaxTokens: 5,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: in.Prompt}}}})
		if err != nil {
			outcome <- err.Error()
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil, nil
		}
		outcome <- "answered"
		return &mcp.CallToolResult{Content: []mcp.Content{res.Content}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "wait"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Ms int `json:"ms"`
	}) (*mcp.CallToolResult, any, error) {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(in.Ms) * time.Millisecond):
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "waited"}}}, nil, nil
	})
	sc := inMemory("deaf", testserver.Options{})
	sc.Transport.InMemory.Server = s
	sc.Transport.ProtocolVersion = "2025-11-25"
	g := start(t, config(sc), gateway.Options{})
	asked := make(chan string, 4)
	handler := func(who string) func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
		return func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			asked <- who + " was asked " + req.Params.Messages[0].Content.(*mcp.TextContent).Text
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "answered by " + who}}, nil
		}
	}
	a := front(t, g, &mcp.ClientOptions{CreateMessageHandler: handler("A")}, "2025-11-25")
	b := front(t, g, &mcp.ClientOptions{CreateMessageHandler: handler("B")}, "2025-11-25")
	waitTools(t, a, has("deaf__late_sample"))

	// B gives up on its call after 50ms; the backend asks for it at 300ms, while
	// A's call is in flight.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.CallTool(ctx, &mcp.CallToolParams{Name: "deaf__late_sample", Arguments: map[string]any{"prompt": "B's question", "ms": 300}}); err == nil {
		t.Fatal("B's call was not cancelled")
	}
	if res := call(t, a, "deaf__wait", map[string]any{"ms": 600}); text(res) != "waited" {
		t.Fatalf("A's call: %q", text(res))
	}
	select {
	case got := <-asked:
		t.Errorf("%s: another session's question", got)
	default:
	}
	select {
	case got := <-outcome:
		if !strings.Contains(got, "cancelled them lately") {
			t.Errorf("the backend's request: %q, want a refusal saying a call was cancelled lately", got)
		}
	case <-time.After(waitFor):
		t.Fatal("the backend's request was never answered")
	}

	// Later (the cancelled call no longer counts), A's own call is asked of A.
	time.Sleep(1200 * time.Millisecond)
	if res := call(t, a, "deaf__late_sample", map[string]any{"prompt": "A's question", "ms": 0}); text(res) != "answered by A" {
		t.Errorf("A's own sampling: %q", text(res))
	}
}

// TestGateway_LogLevelOfANewerRequest: a 2026-07-28 front client asks for a call's log
// messages with the level in its request's _meta; the backend (on 2026-07-28 too) is
// given it, and its messages at or above it reach the client. (None did: the gateway
// dropped the key with the protocol's others, and the backend sent nothing.) A front
// session on 2025-11-25 that set a less verbose level does not lower it.
func TestGateway_LogLevelOfANewerRequest(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	logs := make(chan string, 16)
	cs := front(t, g, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) { logs <- fmt.Sprint(req.Params.Data) },
	}, "2026-07-28")
	waitTools(t, cs, has("a__log"))
	logAt := func(level, msg string, meta mcp.Meta) string {
		t.Helper()
		res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__log", Arguments: map[string]any{"level": level, "text": msg}, Meta: meta})
		if err != nil {
			t.Fatal(err)
		}
		return text(res)
	}
	info := mcp.Meta{mcp.MetaKeyLogLevel: "info"}
	if got := logAt("warning", "loud", info); got != "sent" {
		t.Errorf("a warning in a request at level info: the backend %s it", got)
	}
	if got := logAt("debug", "quiet", info); got != "filtered" {
		t.Errorf("a debug message in a request at level info: the backend %s it", got)
	}
	select {
	case got := <-logs:
		if got != "loud" {
			t.Errorf("the front got %q", got)
		}
	case <-time.After(waitFor):
		t.Fatal("the backend's warning did not reach the front")
	}

	old := front(t, g, nil, "2025-11-25")
	if err := old.SetLoggingLevel(callCtx(t), &mcp.SetLoggingLevelParams{Level: "error"}); err != nil {
		t.Fatal(err)
	}
	if got := logAt("info", "still", info); got != "sent" {
		t.Errorf("an info message in a request at level info, another session at error: the backend %s it", got)
	}
}

// TestGateway_UnknownLogLevelRefused: a front session's logging/setLevel with a level
// that is not one of the protocol's eight is refused (-32602): the go-sdk's server
// took it, the client was told it was set, and the gateway kept it as the session's
// level and asked every backend for it (which refused it).
func TestGateway_UnknownLogLevelRefused(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	cs := front(t, g, nil, "2025-11-25")
	waitTools(t, cs, has("a__echo"))
	for _, level := range []mcp.LoggingLevel{"LOUD", "", "Debug"} {
		err := cs.SetLoggingLevel(callCtx(t), &mcp.SetLoggingLevelParams{Level: level})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams || !strings.Contains(je.Message, "not a log level") {
			t.Errorf("setLevel %q: %v, want invalid params", level, err)
		}
	}
	if err := cs.SetLoggingLevel(callCtx(t), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Errorf("setLevel debug: %v", err)
	}
}

// TestGateway_LevelWhileBackendDown: front sessions that set their log level again
// and again while a backend is connecting hold one goroutine for it, not one each
// (2,000 setLevel: 2,000 goroutines, each waiting up to 5 minutes); and a backend
// whose breaker was open when the level was set is given it once it is back (it was
// not: the one try failed fast, and the level was never set).
func TestGateway_LevelWhileBackendDown(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "control")
	if err := testserver.WriteControl(ctl, testserver.ControlHangInitialize); err != nil {
		t.Fatal(err)
	}
	b := inMemory("b", testserver.Options{Control: ctl})
	b.Policies.ConnectTimeout = 200 * time.Millisecond
	b.Policies.BreakerThreshold, b.Policies.BreakerCooldown, b.Policies.BreakerCooldownMax = 1, 500*time.Millisecond, 500*time.Millisecond
	b.Policies.BreakerCooldownJitter = 0
	slow := inMemory("slow", testserver.Options{HangInitialize: true}) // connecting, all along
	slow.Policies.ConnectTimeout = time.Minute
	g := start(t, config(inMemory("a", testserver.Options{}), b, slow), gateway.Options{StartupWait: -1})
	cs := front(t, g, nil, "2025-11-25")
	waitTools(t, cs, has("a__echo"))
	for deadline := time.Now().Add(waitFor); g.Manager().Conn("b").Status().State != "breaker-open"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("b never opened its breaker: %s", g.Manager().Conn("b").Status().State)
		}
	}
	before := runtime.NumGoroutine()
	for i := range 2000 {
		level := mcp.LoggingLevel("info")
		if i%2 == 1 {
			level = "debug"
		}
		if err := cs.SetLoggingLevel(callCtx(t), &mcp.SetLoggingLevelParams{Level: level}); err != nil {
			t.Fatal(err)
		}
	}
	if grown := runtime.NumGoroutine() - before; grown > 50 {
		t.Errorf("%d more goroutines after 2,000 setLevel with a backend down", grown)
	}
	if err := testserver.WriteControl(ctl); err != nil {
		t.Fatal(err)
	}
	waitTools(t, cs, has("b__log"))
	deadline := time.Now().Add(waitFor)
	for {
		if got := text(call(t, cs, "b__log", map[string]any{"level": "debug", "text": "x"})); got == "sent" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("a debug message on the backend that was down: %s, want sent (the front's level is debug)", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestGateway_CollisionLoggedOnce: two servers without prefixes showing the same
// names are logged once per name that collides, not again on every list change of
// any backend (10 changes logged the 24 collisions 10 times more, and a backend
// whose list keeps changing made the log grow without end).
func TestGateway_CollisionLoggedOnce(t *testing.T) {
	empty := ""
	a, b := inMemory("a", testserver.Options{}), inMemory("b", testserver.Options{})
	a.Prefix, b.Prefix = &empty, &empty
	log, logged := logLines("a name collides")
	g := start(t, config(a, b), gateway.Options{Logger: log})
	cs := front(t, g, nil, "2025-11-25")
	waitTools(t, cs, has("echo"))
	time.Sleep(100 * time.Millisecond) // both servers listed and settled
	first := len(logged())
	if first == 0 {
		t.Fatal("no collision logged")
	}
	for i := range 10 {
		call(t, cs, "change_tools", nil) // a's list changes: extra comes and goes
		if i%2 == 0 {
			waitTools(t, cs, has("extra"))
		} else {
			waitTools(t, cs, func(n []string) bool { return !has("extra")(n) })
		}
	}
	if got := len(logged()); got != first {
		t.Errorf("%d collisions logged after 10 list changes, %d before", got, first)
	}
}

// TestGateway_LLMNameWarned: a shown tool name that common LLM APIs refuse (a dot
// from a prefix, more than 64 characters) is logged once, naming the tool and its
// server, and still shown and callable; a good name is not logged, and list changes
// log nothing again.
func TestGateway_LLMNameWarned(t *testing.T) {
	dotted, long, good := "files.v2", strings.Repeat("p", 60), "ok"
	a, b, c := inMemory("a", testserver.Options{}), inMemory("b", testserver.Options{}), inMemory("c", testserver.Options{})
	a.Prefix, b.Prefix, c.Prefix = &dotted, &long, &good
	log, logged := logLines("function-name rule")
	g := start(t, config(a, b, c), gateway.Options{Logger: log})
	cs := front(t, g, nil, "2025-11-25")
	waitTools(t, cs, func(n []string) bool { return has("files.v2__echo")(n) && has(long+"__echo")(n) && has("ok__echo")(n) })
	if got := text(call(t, cs, "files.v2__echo", map[string]any{"text": "hi"})); got != "hi" {
		t.Errorf("files.v2__echo: %q, want hi", got)
	}
	time.Sleep(100 * time.Millisecond) // every server listed and settled
	first := logged()
	for _, want := range []string{`tool \"files.v2__echo\" of server \"a\"`, `tool \"` + long + `__echo\" of server \"b\"`} {
		if n := len(slices.DeleteFunc(slices.Clone(first), func(l string) bool { return !strings.Contains(l, want) })); n != 1 {
			t.Errorf("%s logged %d times, want once:\n%s", want, n, strings.Join(first, ""))
		}
	}
	if i := slices.IndexFunc(first, func(l string) bool { return strings.Contains(l, `server \"c\"`) }); i >= 0 {
		t.Errorf("a good name logged: %s", first[i])
	}
	for i := range 4 {
		call(t, cs, "ok__change_tools", nil) // c's list changes: extra comes and goes
		if i%2 == 0 {
			waitTools(t, cs, has("ok__extra"))
		} else {
			waitTools(t, cs, func(n []string) bool { return !has("ok__extra")(n) })
		}
	}
	if got := logged(); len(got) != len(first) {
		t.Errorf("%d warnings after 4 list changes, %d before:\n%s", len(got), len(first), strings.Join(got, ""))
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// logLines returns a logger, and a function that returns the records it has logged
// that hold substr.
func logLines(substr string) (*slog.Logger, func() []string) {
	var mu sync.Mutex
	var lines []string
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		if strings.Contains(string(p), substr) {
			mu.Lock()
			lines = append(lines, string(p))
			mu.Unlock()
		}
		return len(p), nil
	}), nil))
	return log, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lines)
	}
}

// TestGateway_RefusedToolLoggedOnce: a backend tool the front server refuses (its
// input schema is not an object: a server on another SDK may list one) is left out
// and logged once, not again (and tried again) on every list change of any backend.
func TestGateway_RefusedToolLoggedOnce(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "odd", Version: "1"}, nil)
	odd := &mcp.Tool{Name: "odd", InputSchema: map[string]any{"type": "object"}}
	s.AddTool(odd, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	})
	odd.InputSchema = map[string]any{"type": "string"} // past the go-sdk's check: listed as is
	sc := inMemory("odd", testserver.Options{})
	sc.Transport.InMemory.Server = s
	log, logged := logLines("cannot be shown")
	g := start(t, config(sc, inMemory("a", testserver.Options{})), gateway.Options{Logger: log})
	cs := front(t, g, nil, "2025-11-25")
	waitTools(t, cs, has("a__echo"))
	time.Sleep(100 * time.Millisecond)
	if n := len(logged()); n != 1 {
		t.Fatalf("the refused tool was logged %d times, want once", n)
	}
	for i := range 10 {
		call(t, cs, "a__change_tools", nil)
		if i%2 == 0 {
			waitTools(t, cs, has("a__extra"))
		} else {
			waitTools(t, cs, func(n []string) bool { return !has("a__extra")(n) })
		}
	}
	if n := len(logged()); n != 1 {
		t.Errorf("the refused tool was logged %d times after 10 list changes, want once", n)
	}
	if has("odd__odd")(toolNames(t, cs)) {
		t.Error("the refused tool is listed")
	}
}

// TestGateway_BackendInstructionsCapped: what a backend says of itself in its
// initialize (its instructions, name and version) reaches the front's instructions
// cut to a bound: two backends with 4 MiB of instructions each made every front
// initialize answer 8 MiB (the host's model reads them whole; past 16 MiB a stdio
// host cannot read the line at all), one hostile backend breaking the gateway for
// every client.
//
// The backends here say 256 KiB of instructions and a name and version of 64 KiB
// each, 32 and 320 times the bounds: uncut, the front's instructions are 768 KiB,
// twelve times what the test allows. (They said 4 MiB and 1 MiB: a connect to
// each then cost 0.9 s of CPU under the race detector, encoding and decoding a
// 6 MiB answer, which on a loaded machine took longer than the connect timeout,
// and every connect started over from nothing: the backends were never ready.)
func TestGateway_BackendInstructionsCapped(t *testing.T) {
	big := func(name string) mcpfsm.ServerConfig {
		s := mcp.NewServer(&mcp.Implementation{Name: strings.Repeat("N", 64<<10), Version: strings.Repeat("V", 64<<10)},
			&mcp.ServerOptions{Instructions: "Use me. " + strings.Repeat("x", 256<<10)})
		return mcpfsm.ServerConfig{Name: name, Policies: quick(), Transport: transport.Config{Name: name, InMemory: &transport.InMemory{Server: s}}}
	}
	g := start(t, config(big("a"), big("b")), gateway.Options{})
	for _, name := range []string{"a", "b"} {
		if err := g.Manager().Conn(name).WaitReady(callCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	instr := front(t, g, nil, "2025-11-25").InitializeResult().Instructions
	if !strings.Contains(instr, "in front of 2 MCP servers,") {
		t.Errorf("the instructions do not count the servers:\n%.300s", instr)
	}
	if !strings.Contains(instr, "## b") || !strings.Contains(instr, "Use me. xxx") {
		t.Errorf("the instructions lack the backends':\n%.300s", instr)
	}
	if len(instr) > 64<<10 {
		t.Errorf("the front's instructions are %d bytes, want the backends' cut", len(instr))
	}
}

// TestGateway_StatusResourceNotShadowed: a backend that lists a resource at the
// status resource's URI does not take it over. It did: the backend's resource
// replaced the gateway's handler, so a read of the status went to the backend (which
// could say anything there), and once the backend dropped it the status resource
// was gone for good (not found).
func TestGateway_StatusResourceNotShadowed(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{StatusResource: testserver.ResourceA})
	cs := front(t, g, nil, "2025-11-25")
	waitTools(t, cs, has("a__echo"))
	res, err := cs.ReadResource(callCtx(t), &mcp.ReadResourceParams{URI: testserver.ResourceA})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Contents) != 1 || res.Contents[0].MIMEType != "application/json" || !strings.Contains(res.Contents[0].Text, `"a"`) {
		t.Fatalf("the status resource read %+v, want the gateway's status", res.Contents)
	}
	var n int
	for r, err := range cs.Resources(callCtx(t), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if r.URI == testserver.ResourceA {
			n++
			if r.Name != "mcpfsm-gateway-status" {
				t.Errorf("the status resource is listed as %+v", r)
			}
		}
	}
	if n != 1 {
		t.Errorf("the status resource's URI listed %d times", n)
	}
}
