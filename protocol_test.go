package mcpfsm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The whole protocol through one connection (issue 12): requests beyond tools, what a
// server sends on its own, and the session state carried across reconnects.

// sessionState calls the test server's state tool: what the session the call ran on
// received.
func (c *conn) sessionState(ctx context.Context) testserver.SessionState {
	c.t.Helper()
	res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "state"})
	if err != nil {
		c.t.Fatalf("state: %v\n%s", err, c.timeline())
	}
	st, err := testserver.State(res)
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

// session returns the id the Conn gave its current session, or 0.
func (c *conn) session() uint64 {
	if s := c.current.Load(); s != nil {
		return s.id
	}
	return 0
}

// waitNewSession waits until a session other than old serves calls.
func (c *conn) waitNewSession(old uint64, within time.Duration) {
	c.t.Helper()
	c.waitFor(func(st states.State) bool { return c.session() != old && c.session() != 0 }, within)
}

// seen gathers what handlers see, for tests to wait on.
type seen[T any] struct {
	mu   sync.Mutex
	got  []T
	more chan struct{}
}

func newSeen[T any]() *seen[T] { return &seen[T]{more: make(chan struct{}, 1)} }

func (r *seen[T]) add(v T) {
	r.mu.Lock()
	r.got = append(r.got, v)
	r.mu.Unlock()
	select {
	case r.more <- struct{}{}:
	default:
	}
}

func (r *seen[T]) all() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// waitFor waits until ok accepts what was recorded so far.
func (r *seen[T]) waitFor(t *testing.T, what string, ok func([]T) bool, within time.Duration) []T {
	t.Helper()
	deadline := time.After(within)
	for {
		if got := r.all(); ok(got) {
			return got
		}
		select {
		case <-r.more:
		case <-deadline:
			t.Fatalf("waiting for %s: recorded %v", what, r.all())
		}
	}
}

func count[T comparable](list []T, v T) int {
	n := 0
	for _, x := range list {
		if x == v {
			n++
		}
	}
	return n
}

// TestScenario_SubscriptionsSurviveReconnect: two subscriptions; the stdio server is
// killed; after the respawn both are subscribed on the new session (the server saw the
// subscribes), each was reported updated once for the gap, and updates keep coming.
// On protocol 2025-11-25 a subscribe is answered, so the new session has both before
// calls move to it; on 2026-07-28 (the SDK's subscriptions/listen) it is not, and the
// test waits for the server to record them.
func TestScenario_SubscriptionsSurviveReconnect(t *testing.T) {
	for _, proto := range []string{"2025-11-25", ""} {
		name := proto
		if name == "" {
			name = "latest"
		}
		t.Run(name, func(t *testing.T) {
			opts := testserver.Options{}
			if proto != "" {
				opts.ProtocolVersions = []string{proto}
			}
			updated := newSeen[string]()
			c := open(t, stdioConfig(t, opts), nil, func(o *Options) {
				o.Handlers.ResourceUpdated = func(_ context.Context, p *mcp.ResourceUpdatedNotificationParams) { updated.add(p.URI) }
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			uris := []string{testserver.ResourceA, testserver.ResourceB}
			for _, uri := range uris {
				if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
					t.Fatal(err)
				}
			}
			if got := c.Subscriptions(); !slices.Equal(got, uris) {
				t.Fatalf("Subscriptions = %v", got)
			}
			first := c.session()
			pidText, err := c.callText(ctx, "pid", nil)
			if err != nil {
				t.Fatal(err)
			}
			var pid int
			if err := json.Unmarshal([]byte(pidText), &pid); err != nil || pid <= 0 {
				t.Fatalf("pid = %q", pidText)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			c.waitNewSession(first, 20*time.Second)

			// Both subscriptions reached the new server.
			var st testserver.SessionState
			deadline := time.Now().Add(10 * time.Second)
			for {
				st = c.sessionState(ctx)
				if slices.Equal(st.Subscriptions, uris) || proto != "" || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if diff := cmp.Diff(uris, st.Subscriptions); diff != "" {
				t.Errorf("the new session's subscriptions (-want +got):\n%s", diff)
			}
			// One update each for the gap.
			got := updated.waitFor(t, "the gap's updates", func(got []string) bool { return len(got) >= 2 }, 10*time.Second)
			if count(got, uris[0]) != 1 || count(got, uris[1]) != 1 {
				t.Errorf("updates after the reconnect: %v, want one for each subscription", got)
			}
			// And real updates keep arriving.
			if n, err := c.callText(ctx, "touch", map[string]any{"uri": uris[0]}); err != nil || n != "1" {
				t.Fatalf("touch: %q, %v", n, err)
			}
			updated.waitFor(t, "a new update", func(got []string) bool { return count(got, uris[0]) == 2 }, 10*time.Second)
		})
	}
}

// TestScenario_LogLevelSurvivesReconnect: the level is set to warning; the HTTP server
// restarts and forgets its sessions; the new session is set to warning before any call
// reaches it, and info messages stay filtered.
func TestScenario_LogLevelSurvivesReconnect(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	logs := newSeen[string]()
	c := open(t, httpConfig(h), nil, func(o *Options) {
		o.Handlers.LoggingMessage = func(_ context.Context, p *mcp.LoggingMessageParams) { logs.add(string(p.Level)) }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
		t.Fatal(err)
	}
	first := c.session()
	h.Restart(true)
	time.Sleep(100 * time.Millisecond) // see TestScenario_SessionExpiredReinitAndRetry
	if text, err := c.callText(ctx, "log", map[string]any{"level": "info", "text": "quiet"}); err != nil || text != "filtered" {
		t.Fatalf("an info message after the restart: %q, %v\n%s", text, err, c.timeline())
	}
	if c.session() == first {
		t.Fatalf("no new session after the restart:\n%s", c.timeline())
	}
	st := c.sessionState(ctx)
	if st.LogLevel != "warning" {
		t.Errorf("the new session's level = %q, want warning", st.LogLevel)
	}
	set := slices.Index(st.Methods, "logging/setLevel")
	call := slices.Index(st.Methods, "tools/call")
	if set < 0 || call < 0 || set > call {
		t.Errorf("the new session received %v: want logging/setLevel before any tools/call", st.Methods)
	}
	if text, err := c.callText(ctx, "log", map[string]any{"level": "error", "text": "loud"}); err != nil || text != "sent" {
		t.Fatalf("an error message: %q, %v", text, err)
	}
	got := logs.waitFor(t, "the error message", func(got []string) bool { return slices.Contains(got, "error") }, 10*time.Second)
	if slices.Contains(got, "info") {
		t.Errorf("an info message came through: %v", got)
	}
}

// TestScenario_ProgressThroughRetry: a read-only slow tool reports progress to the
// call's callback; the session expires mid-call (the HTTP server restarts and forgets
// it); the call is retried on the next session, the callback sees the retry's progress,
// and the caller gets the result.
func TestScenario_ProgressThroughRetry(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	c := open(t, httpConfig(h), nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	progress := newSeen[float64]()
	var report CallReport
	done := make(chan error, 1)
	var res *mcp.CallToolResult
	go func() {
		var err error
		cctx := WithReport(WithProgress(ctx, func(p *mcp.ProgressNotificationParams) { progress.add(p.Progress) }), &report)
		res, err = c.CallTool(cctx, &mcp.CallToolParams{Name: "slow_progress", Arguments: map[string]any{"ms": 100, "steps": 20}})
		done <- err
	}()
	// Two notices in, the first attempt has some 1.8 s to go: time enough on a
	// loaded machine for the restart to come before it ends.
	progress.waitFor(t, "the first attempt's progress", func(got []float64) bool { return len(got) >= 2 }, 10*time.Second)
	h.Restart(true)
	if err := <-done; err != nil {
		t.Fatalf("the call: %v\n%s", err, c.timeline())
	}
	if text := res.Content[0].(*mcp.TextContent).Text; text != "progressed 20" {
		t.Errorf("result %q", text)
	}
	if report.Attempts != 2 || report.First == nil {
		t.Errorf("report %+v: want the call retried once", report)
	}
	// The retry's progress starts over. (Its last notification may come after the
	// result, and is then not the call's to see: it has returned.)
	got := progress.all()
	restarts, after := 0, 0
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			restarts++
		}
		if restarts > 0 {
			after++
		}
	}
	if restarts != 1 || after < 4 {
		t.Errorf("progress seen %v: want the first attempt's, then most of the retry's", got)
	}
}

// TestScenario_ServerRequestsDuringCall: a tool that asks the client for sampling and
// then elicitation during a call gets the handlers' answers, over stdio and streamable
// HTTP (on both protocol versions: requests before 2026-07-28, input requests on it).
func TestScenario_ServerRequestsDuringCall(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	for name, cfg := range map[string]transport.Config{
		"stdio":      stdioConfig(t, testserver.Options{}),
		"stdio-2025": stdioConfig(t, testserver.Options{ProtocolVersions: []string{"2025-11-25"}}),
		"http":       httpConfig(h),
	} {
		t.Run(name, func(t *testing.T) {
			var asked atomic.Int32
			c := open(t, cfg, nil, func(o *Options) {
				o.Handlers.CreateMessage = func(_ context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
					asked.Add(1)
					return &mcp.CreateMessageResult{Model: "test", Role: "assistant", Content: &mcp.TextContent{Text: "the model says hi"}}, nil
				}
				o.Handlers.Elicit = func(_ context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
					asked.Add(1)
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes"}}, nil
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			text, err := c.callText(ctx, "sample_then_elicit", map[string]any{"prompt": "hello", "message": "ok?"})
			if err != nil {
				t.Fatal(err)
			}
			if want := "the model says hi\naccept {\"answer\":\"yes\"}"; text != want || asked.Load() != 2 {
				t.Errorf("answer %q (handlers asked %d times), want %q", text, asked.Load(), want)
			}
		})
	}
}

// TestScenario_RootsAnnounced: with no roots configured the client does not advertise
// roots (a server that asks gets method-not-found); with roots, the server lists them,
// a change reaches it as roots/list_changed, and after a reconnect the new session lists
// the current roots.
func TestScenario_RootsAnnounced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := testserver.StartHTTP(t, testserver.Options{})
	none := open(t, httpConfig(h), nil, nil)
	res, err := none.CallTool(ctx, &mcp.CallToolParams{Name: "roots"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "method not found") {
		t.Errorf("roots/list to a client without roots: %+v", res.Content[0])
	}
	if err := none.SetRoots(&mcp.Root{URI: "file:///x"}); err == nil {
		t.Error("SetRoots on a connection opened without roots succeeded")
	}

	c := open(t, httpConfig(h), nil, func(o *Options) { o.Roots = []*mcp.Root{{URI: "file:///a", Name: "a"}} })
	if text, err := c.callText(ctx, "roots", nil); err != nil || text != `["file:///a"]` {
		t.Fatalf("roots = %q, %v", text, err)
	}
	if err := c.SetRoots(&mcp.Root{URI: "file:///a", Name: "a"}, &mcp.Root{URI: "file:///b", Name: "b"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.sessionState(ctx).RootsListChanged == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := c.sessionState(ctx).RootsListChanged; n == 0 {
		t.Fatal("the server never heard roots/list_changed")
	}
	first := c.session()
	c.Reconnect()
	c.waitNewSession(first, 20*time.Second)
	if text, err := c.callText(ctx, "roots", nil); err != nil || text != `["file:///a","file:///b"]` {
		t.Errorf("roots on the new session = %q, %v", text, err)
	}
}

// TestScenario_PlannedReplacementRestoresBeforeSwap: during make before break, calls
// move to the new session only once its level and subscriptions are in place: every
// call on a new session, even one made in the window, finds them there.
func TestScenario_PlannedReplacementRestoresBeforeSwap(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	c := open(t, httpConfig(h), nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: testserver.ResourceA}); err != nil {
		t.Fatal(err)
	}
	firstID := c.sessionState(ctx).ID
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var seen []testserver.SessionState
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "state"})
				if err != nil {
					t.Errorf("a call during the replacement: %v", err)
					return
				}
				st, _ := testserver.State(res)
				mu.Lock()
				seen = append(seen, st)
				mu.Unlock()
			}
		})
	}
	for range 3 {
		old := c.session()
		c.Reconnect()
		c.waitNewSession(old, 20*time.Second)
	}
	time.Sleep(50 * time.Millisecond) // a few calls on the last session
	close(stop)
	wg.Wait()
	others := 0
	for _, st := range seen {
		if st.ID == firstID {
			continue
		}
		others++
		if st.LogLevel != "warning" || !slices.Contains(st.Subscriptions, testserver.ResourceA) {
			t.Fatalf("a call on a new session found it unrestored: level %q, subscriptions %v", st.LogLevel, st.Subscriptions)
		}
	}
	if others == 0 {
		t.Fatalf("no call reached a new session (%d calls)", len(seen))
	}
}

// TestRequestsThroughConn: every client request of the protocol, through a Conn, with
// the answers a raw session gets.
func TestRequestsThroughConn(t *testing.T) {
	cfg := transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}
	prompts, resources := newSeen[int](), newSeen[int]()
	c := open(t, cfg, nil, func(o *Options) {
		o.Handlers.PromptsChanged = func(p []*mcp.Prompt) { prompts.add(len(p)) }
		o.Handlers.ResourcesChanged = func(r []*mcp.Resource, _ []*mcp.ResourceTemplate) { resources.add(len(r)) }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tools []string
	for tool, err := range c.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, tool.Name)
	}
	if !slices.Contains(tools, "echo") || !slices.Contains(tools, "state") {
		t.Errorf("tools %v", tools)
	}
	var uris []string
	for r, err := range c.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, r.URI)
	}
	if !slices.Contains(uris, testserver.ResourceA) {
		t.Errorf("resources %v", uris)
	}
	var templates []string
	for rt, err := range c.ResourceTemplates(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		templates = append(templates, rt.URITemplate)
	}
	if !slices.Contains(templates, testserver.ItemTemplate) {
		t.Errorf("templates %v", templates)
	}
	read, err := c.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://items/42"})
	if err != nil || len(read.Contents) != 1 || !strings.HasPrefix(read.Contents[0].Text, "item 42") {
		t.Errorf("read = %+v, %v", read, err)
	}
	var names []string
	for p, err := range c.Prompts(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
	}
	if !slices.Contains(names, testserver.PromptGreet) {
		t.Errorf("prompts %v", names)
	}
	got, err := c.GetPrompt(ctx, &mcp.GetPromptParams{Name: testserver.PromptGreet, Arguments: map[string]string{"name": "bob"}})
	if err != nil || !strings.Contains(got.Messages[0].Content.(*mcp.TextContent).Text, "bob") {
		t.Errorf("get prompt = %+v, %v", got, err)
	}
	_, err = c.GetPrompt(ctx, &mcp.GetPromptParams{Name: testserver.PromptGreet})
	var ce *CallError
	var je *jsonrpc.Error
	if !errors.As(err, &ce) || ce.Cause != states.CauseServer || !errors.As(err, &je) || ce.Retried {
		t.Errorf("a prompt missing its argument: %v", err)
	}
	comp, err := c.Complete(ctx, &mcp.CompleteParams{
		Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: testserver.PromptGreet},
		Argument: mcp.CompleteParamsArgument{Name: "name", Value: ""},
	})
	if err != nil || len(comp.Completion.Values) == 0 {
		t.Errorf("complete = %+v, %v", comp, err)
	}
	if err := c.Ping(ctx, nil); err != nil {
		t.Errorf("ping: %v", err)
	}
	info, ok := c.Server()
	if !ok || info.Implementation == nil || info.Implementation.Name != "mcptestserver" || info.ProtocolVersion == "" || info.Capabilities.Resources == nil {
		t.Errorf("server info %+v", info)
	}
	// A nil map of arguments goes out as {}, never null.
	if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "counter"}); err != nil {
		t.Errorf("a call with no arguments: %v", err)
	}
	// The list handlers: once as the session came up, again when the lists change.
	prompts.waitFor(t, "the prompts as listed", func(got []int) bool { return len(got) >= 1 }, 10*time.Second)
	if _, err := c.callText(ctx, "change_prompts", nil); err != nil {
		t.Fatal(err)
	}
	prompts.waitFor(t, "the changed prompts", func(got []int) bool { return len(got) >= 2 && got[len(got)-1] == got[0]+1 }, 10*time.Second)
	if _, err := c.callText(ctx, "change_resources", nil); err != nil {
		t.Fatal(err)
	}
	resources.waitFor(t, "the changed resources", func(got []int) bool { return len(got) >= 2 && got[len(got)-1] == got[0]+1 }, 10*time.Second)
	if l := c.Listed(); len(l.Prompts) != 2 || len(l.Tools) == 0 || len(l.Resources) == 0 || len(l.ResourceTemplates) == 0 {
		t.Errorf("Listed = %d tools, %d prompts, %d resources, %d templates", len(l.Tools), len(l.Prompts), len(l.Resources), len(l.ResourceTemplates))
	}
}

// TestHandlersBadInput: a handler that panics fails that request with an error the
// server sees, and the connection lives on; a handler that blocks is bounded by the
// request's context; a request for a capability not advertised gets method-not-found;
// a subscription the server refuses is an error and is not kept.
func TestHandlersBadInput(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	blocked := make(chan struct{})
	var logs testutil.SyncBuffer
	c := open(t, httpConfig(h), nil, func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		o.Handlers.CreateMessage = func(context.Context, *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
			panic("the model exploded, key sk-secret-123")
		}
		o.Handlers.Elicit = func(ctx context.Context, _ *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			close(blocked)
			<-ctx.Done() // until the server gives up on the request
			return nil, ctx.Err()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"prompt": "hi"}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "the client's handler failed (it panicked)") {
		t.Errorf("a panicking handler: %+v, %v", res, err)
	}
	// The panic's value, which may quote anything, is not the server's to see; the
	// log has the panic's stack, and its value only by its type.
	if text := res.Content[0].(*mcp.TextContent).Text; strings.Contains(text, "sk-secret-123") {
		t.Errorf("the server was told the panic's value: %q", text)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "panic=\"a string\"") || !strings.Contains(l, "TestHandlersBadInput") || strings.Contains(l, "sk-secret-123") {
		t.Errorf("the log of the panic (its stack, not its value):\n%s", l)
	}
	if text, err := c.callText(ctx, "echo", map[string]any{"text": "alive"}); err != nil || text != "alive" {
		t.Fatalf("after the panic: %q, %v", text, err)
	}

	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	start := time.Now()
	_, err = c.CallTool(short, &mcp.CallToolParams{Name: "elicit", Arguments: map[string]any{"message": "?"}})
	cancelShort()
	select {
	case <-blocked:
	case <-time.After(20 * time.Second):
		t.Fatalf("the server's elicitation never reached the handler (the call: %v)", err)
	}
	if took := time.Since(start); err == nil || took > 5*time.Second {
		t.Errorf("a call whose elicitation blocks: %v after %s", err, took)
	}
	if text, err := c.callText(ctx, "echo", map[string]any{"text": "still"}); err != nil || text != "still" {
		t.Fatalf("after the blocked handler: %q, %v", text, err)
	}

	plain := open(t, httpConfig(h), nil, nil)
	for tool, args := range map[string]map[string]any{"sample": {"prompt": "x"}, "elicit": {"message": "x"}} {
		res, err := plain.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		// The SDK's server refuses elicitation itself when the client did not
		// advertise it; sampling it sends, and gets method-not-found.
		if text := res.Content[0].(*mcp.TextContent).Text; err != nil || !res.IsError ||
			!strings.Contains(text, "method not found") && !strings.Contains(text, "does not support") {
			t.Errorf("%s without a handler: %q, %v", tool, text, err)
		}
	}

	if err := plain.Subscribe(ctx, &mcp.SubscribeParams{URI: "test://nowhere"}); err == nil {
		t.Error("a subscription the server refuses succeeded")
	}
	if got := plain.Subscriptions(); len(got) != 0 {
		t.Errorf("a refused subscription was kept: %v", got)
	}
}

// TestNilArgumentsSentAsObject: arguments left out, a nil map and a nil pointer all
// go on the wire as {} (TypeScript servers reject null), from a Conn and from
// Manager.Call.
func TestNilArgumentsSentAsObject(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	inner := testserver.NewHandler(testserver.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if bytes.Contains(b, []byte(`"tools/call"`)) {
				mu.Lock()
				bodies = append(bodies, string(b))
				mu.Unlock()
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close) // after the connections' cleanups: they end their sessions
	cfg := transport.Config{Name: "wire", HTTP: &transport.HTTP{URL: srv.URL}}
	c := open(t, cfg, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var nilStruct *struct{ X int }
	for _, args := range []any{nil, map[string]any(nil), nilStruct} {
		if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "counter", Arguments: args}); err != nil {
			t.Fatalf("CallTool(%#v): %v", args, err)
		}
	}
	m, err := NewManager(&Config{Servers: []ServerConfig{{Name: "wire", Transport: cfg}}}, ManagerOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if _, err := m.Call(ctx, "wire.counter", map[string]any(nil)); err != nil {
		t.Fatalf("Manager.Call: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 4 {
		t.Fatalf("the server saw %d tools/call requests, want 4: %q", len(bodies), bodies)
	}
	for _, b := range bodies {
		var req struct {
			Params struct {
				Arguments json.RawMessage `json:"arguments"`
			} `json:"params"`
		}
		if err := json.Unmarshal([]byte(b), &req); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if got := string(req.Params.Arguments); got != "{}" {
			t.Errorf("arguments on the wire = %s, want {}: %s", got, b)
		}
	}
}

// TestReadResourceKeepsNothing: on protocol 2026-07-28 the go-sdk's client keeps every
// resources/read result in its session, by URI, whatever its ttlMs, until the URI is
// read again: a long-lived connection reading many resources held everything it ever
// read (500 reads of 100 KiB: 54 MiB, for the session's life). A Conn's reads leave
// nothing there, and each reaches the server, a ttlMs notwithstanding.
func TestReadResourceKeepsNothing(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "big"}, nil)
	body := strings.Repeat("x", 128<<10)
	var reads atomic.Int64
	srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "big://{id}", Name: "big"}, func(_ context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		reads.Add(1)
		res := &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: r.Params.URI, Text: body}}}
		res.TTLMs = 60_000
		return res, nil
	})
	c := open(t, transport.Config{Name: "big", InMemory: &transport.InMemory{Server: srv}}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := c.Server(); info.ProtocolVersion < "2026-07-28" {
		t.Fatalf("protocol %s: the SDK caches reads from 2026-07-28 on", info.ProtocolVersion)
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	const n = 250
	for i := range n {
		res, err := c.ReadResource(ctx, &mcp.ReadResourceParams{URI: fmt.Sprintf("big://%d", i)})
		if err != nil || len(res.Contents) != 1 || len(res.Contents[0].Text) != len(body) {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	if grew := int64(heap()) - int64(before); grew > 12<<20 {
		t.Errorf("the heap grew by %d MiB over %d reads of 128 KiB whose results were dropped", grew>>20, n)
	}
	if _, err := c.ReadResource(ctx, &mcp.ReadResourceParams{URI: "big://0"}); err != nil {
		t.Fatal(err)
	}
	if got := reads.Load(); got != n+1 {
		t.Errorf("the server read %d times, want %d: every read reaches it, and nothing else does", got, n+1)
	}
}

// TestListsKeepNothing: the go-sdk's client (2026-07-28) keeps every page of prompts,
// resources and templates it lists, by the cursor that asked for it, until that cursor
// is asked for again: against a server whose cursors differ from one listing to the
// next, every walk of a list left its pages in the session (300 walks of a 64 KiB page:
// 20 MiB, unbounded). A Conn's listings leave nothing there.
func TestListsKeepNothing(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "rotating"}, nil)
	srv.AddPrompt(&mcp.Prompt{Name: "p"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{}, nil
	})
	srv.AddResource(&mcp.Resource{URI: "test://r", Name: "r"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	})
	var n atomic.Int64
	big := strings.Repeat("d", 64<<10)
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			var cursor string
			switch p := req.GetParams().(type) {
			case *mcp.ListPromptsParams:
				cursor = p.Cursor
			case *mcp.ListResourcesParams:
				cursor = p.Cursor
			default:
				return next(ctx, method, req)
			}
			// Two pages; the second's cursor is new each time, as if it held a time.
			next := ""
			if cursor == "" {
				next = fmt.Sprintf("page-2-%d", n.Add(1))
			}
			switch method {
			case "prompts/list":
				r := &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{{Name: "p", Description: big}}, NextCursor: next}
				r.TTLMs = 60_000
				return r, nil
			default:
				r := &mcp.ListResourcesResult{Resources: []*mcp.Resource{{URI: "test://r", Name: "r", Description: big}}, NextCursor: next}
				r.TTLMs = 60_000
				return r, nil
			}
		}
	})
	c := open(t, transport.Config{Name: "rotating", InMemory: &transport.InMemory{Server: srv}}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	const walks = 150
	for range walks {
		got := 0
		for _, err := range c.Prompts(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			got++
		}
		for _, err := range c.Resources(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			got++
		}
		if got != 4 {
			t.Fatalf("a walk listed %d items, want 4 (two pages each; none from a cache)", got)
		}
	}
	if grew := int64(heap()) - int64(before); grew > 8<<20 {
		t.Errorf("the heap grew by %d MiB over %d walks whose results were dropped", grew>>20, walks)
	}
}

// TestSubscriptionsSurviveStatelessRestart: on protocol 2026-07-28 over streamable
// HTTP the server is stateless, and a subscription is a subscriptions/listen stream it
// holds. The server restarts: the stream ends, and nothing else tells (a probe reaches
// the new process and passes). The connection stayed ready, said it was subscribed,
// and no update came again. A listen the server had acknowledged and then ended is
// now the end of the session: the next one subscribes again and reports the resource
// updated once for the gap, and updates come.
func TestSubscriptionsSurviveStatelessRestart(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{Stateless: true})
	updated := newSeen[string]()
	c := open(t, httpConfig(h), nil, func(o *Options) {
		o.Handlers.ResourceUpdated = func(_ context.Context, p *mcp.ResourceUpdatedNotificationParams) { updated.add(p.URI) }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	uri := testserver.ResourceA
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.callText(ctx, "touch", map[string]any{"uri": uri}); err != nil || n != "1" {
		t.Fatalf("touch: %q, %v", n, err)
	}
	updated.waitFor(t, "an update", func(got []string) bool { return len(got) == 1 }, 10*time.Second)
	first := c.session()
	h.Restart(true)
	c.waitNewSession(first, 10*time.Second)
	// The new session's listen is acknowledged before calls move to it.
	if n, err := c.callText(ctx, "touch", map[string]any{"uri": uri}); err != nil || n != "1" {
		t.Fatalf("touch after the restart: %q (subscribers), %v\n%s", n, err, c.timeline())
	}
	got := updated.waitFor(t, "the gap's update and a new one", func(got []string) bool { return len(got) >= 3 }, 10*time.Second)
	if diff := cmp.Diff([]string{uri, uri, uri}, got); diff != "" {
		t.Errorf("updates (-want +got):\n%s", diff)
	}
}

// TestLogLevelStateless: on protocol 2026-07-28 over streamable HTTP the server keeps
// no session, and the level a request carries in its _meta filters the log messages
// sent while it runs. The go-sdk sends logging/setLevel without the _meta such a
// server requires: it was refused (HTTP 400), so SetLoggingLevel always failed, the
// level was never kept, and no request carried one: the server sent no log message at
// all, whatever its level. The level is now kept without asking a server that could
// not keep it, and every request carries it, on every later session too.
func TestLogLevelStateless(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{Stateless: true})
	logs := newSeen[string]()
	c := open(t, httpConfig(h), nil, func(o *Options) {
		o.Handlers.LoggingMessage = func(_ context.Context, p *mcp.LoggingMessageParams) { logs.add(string(p.Level)) }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for level, want := range map[string]string{"info": "filtered", "error": "sent"} {
			if text, err := c.callText(ctx, "log", map[string]any{"level": level, "text": "x"}); err != nil || text != want {
				t.Errorf("%s: an %s message: %q, %v; want %q", when, level, text, err, want)
			}
		}
	}
	check("first session")
	first := c.session()
	h.Restart(true)
	c.waitNewSession(first, 10*time.Second)
	check("after a restart")
	got := logs.waitFor(t, "two error messages", func(got []string) bool { return len(got) >= 2 }, 10*time.Second)
	if diff := cmp.Diff([]string{"error", "error"}, got); diff != "" {
		t.Errorf("log messages (-want +got):\n%s", diff)
	}
}

// TestListsOfADroppedCapability: a server restarts as one without prompts and
// resources (a new version, a feature switched off). The handlers were never told:
// PromptsChanged and ResourcesChanged kept what the old server had (the gateway went
// on showing them), while Listed said nothing. A session whose server has no prompts
// (resources) has an empty list of them, delivered as any change is, and the lists
// come back with a server that has them again.
func TestListsOfADroppedCapability(t *testing.T) {
	bare := mcp.NewServer(&mcp.Implementation{Name: "bare", Version: "1"}, nil)
	mcp.AddTool(bare, &mcp.Tool{Name: "echo"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	servers := []*mcp.Server{testserver.New(testserver.Options{}), bare, testserver.New(testserver.Options{})}
	var dials atomic.Int32
	prompts, resources := newSeen[int](), newSeen[int]()
	c := open(t, transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: servers[0]}}, nil, func(o *Options) {
		o.Handlers.PromptsChanged = func(p []*mcp.Prompt) { prompts.add(len(p)) }
		o.Handlers.ResourcesChanged = func(r []*mcp.Resource, tt []*mcp.ResourceTemplate) { resources.add(len(r) + len(tt)) }
		o.dial = func(ctx context.Context, cfg transport.Config, opts transport.Options) (transport.Client, error) {
			cfg.InMemory = &transport.InMemory{Server: servers[min(int(dials.Add(1))-1, len(servers)-1)]}
			return transport.DialClient(ctx, cfg, opts)
		}
	})
	prompts.waitFor(t, "the first prompts", func(got []int) bool { return len(got) == 1 }, 10*time.Second)
	np, nr := prompts.all()[0], resources.waitFor(t, "the first resources", func(got []int) bool { return len(got) == 1 }, 10*time.Second)[0]
	if np == 0 || nr == 0 {
		t.Fatalf("the test server listed %d prompts and %d resources", np, nr)
	}
	for range 2 {
		first := c.session()
		c.Reconnect()
		c.waitNewSession(first, 10*time.Second)
	}
	want := []int{np, 0, np}
	if got := prompts.waitFor(t, "the prompts of each server", func(got []int) bool { return len(got) >= 3 }, 10*time.Second); !slices.Equal(got, want) {
		t.Errorf("PromptsChanged saw %v prompts, want %v", got, want)
	}
	want = []int{nr, 0, nr}
	if got := resources.waitFor(t, "the resources of each server", func(got []int) bool { return len(got) >= 3 }, 10*time.Second); !slices.Equal(got, want) {
		t.Errorf("ResourcesChanged saw %v resources, want %v", got, want)
	}
}

// TestPingStateless: on protocol 2026-07-28 over streamable HTTP the go-sdk sends ping
// without the _meta a stateless server requires: Conn.Ping failed against every such
// server (HTTP 400), however well it was. It is answered there as the connection's own
// probe is, by a request the server takes.
func TestPingStateless(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{Stateless: true})
	c := open(t, httpConfig(h), nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		if err := c.Ping(ctx, nil); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	}
	h.Stop()
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	defer pcancel()
	var ce *CallError
	if err := c.Ping(pctx, nil); !errors.As(err, &ce) {
		t.Errorf("Ping of a server that is gone: %v, want a *CallError", err)
	}
}

// TestListenCutKeepsCallsInFlight: a proxy in front of a stateless server (one over
// streamable HTTP on protocol 2026-07-28) cuts its long-lived streams, the
// subscriptions/listen ones among them (nginx's proxy_read_timeout, 60 s by default,
// cuts any stream quiet for that long). The server no longer holds the subscription;
// a planned reconnect subscribes a new session, while a call in flight, not idempotent,
// finishes on the old one: it is answered, not failed as one that may have run.
func TestListenCutKeepsCallsInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ct, c, updated, uri := cutSubscribed(ctx, t, nil)
	first := c.session()
	held := make(chan error, 1)
	go func() {
		_, err := c.callText(ctx, "hold", map[string]any{"ms": 1500})
		held <- err
	}()
	time.Sleep(300 * time.Millisecond) // the call is in flight
	ct.cut()
	c.waitNewSession(first, 10*time.Second)
	if err := <-held; err != nil {
		t.Errorf("the call in flight when the listens were cut: %v\n%s", err, c.timeline())
	}
	if n, err := c.callText(ctx, "touch", map[string]any{"uri": uri}); err != nil || n != "1" {
		t.Fatalf("touch after the cut: %q (subscribers), %v\n%s", n, err, c.timeline())
	}
	got := updated.waitFor(t, "the gap's update and a new one", func(got []string) bool { return len(got) >= 2 }, 10*time.Second)
	if diff := cmp.Diff([]string{uri, uri}, got); diff != "" {
		t.Errorf("updates (-want +got):\n%s", diff)
	}
	if n := c.count(states.Ready, states.TearingDown) + c.count(states.Probing, states.TearingDown); n != 0 {
		t.Errorf("the session was torn down %d times:\n%s", n, c.timeline())
	}
}

// A cutter is a stateless test server (protocol 2026-07-28) over streamable HTTP at
// url, behind a front that cuts every subscriptions/listen stream open when cut is
// called (the server's handler sees its request end, and answers the listen), and
// answers with 503, while refuse is set, every new session (server/discover, and the
// initialize the SDK then falls back to), and the next refuseDiscover
// server/discover requests.
type cutter struct {
	url            string
	cut            func()
	refuse         atomic.Bool
	refuseDiscover atomic.Int32
}

// cutSubscribed opens a connection through a listenCutter, subscribed to one
// resource (uri), with the updates it reports; pol nil means fastPolicies.
func cutSubscribed(ctx context.Context, t *testing.T, pol *machine.Policies) (ct *cutter, c *conn, updated *seen[string], uri string) {
	t.Helper()
	ct, updated, uri = listenCutter(t), newSeen[string](), testserver.ResourceA
	c = open(t, transport.Config{Name: "cut", HTTP: &transport.HTTP{URL: ct.url}}, pol, func(o *Options) {
		o.Handlers.ResourceUpdated = func(_ context.Context, p *mcp.ResourceUpdatedNotificationParams) { updated.add(p.URI) }
	})
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	return ct, c, updated, uri
}

func listenCutter(t *testing.T) *cutter {
	ct := &cutter{}
	srv := testserver.New(testserver.Options{})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
	var mu sync.Mutex
	var cuts []context.CancelFunc
	ct.cut = func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range cuts {
			c()
		}
		cuts = nil
	}
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Mcp-Method") {
		case "subscriptions/listen":
			ctx, cancel := context.WithCancel(r.Context())
			mu.Lock()
			cuts = append(cuts, cancel)
			mu.Unlock()
			r = r.WithContext(ctx)
		case "server/discover", "": // and the initialize the SDK falls back to
			discover := r.Header.Get("Mcp-Method") != ""
			if ct.refuse.Load() || discover && ct.refuseDiscover.Add(-1) >= 0 {
				http.Error(w, "not now", http.StatusServiceUnavailable)
				return
			}
		}
		sdk.ServeHTTP(w, r)
	}))
	t.Cleanup(h.Close)
	t.Cleanup(ct.cut)
	ct.url = h.URL
	return ct
}

// TestListenCutWhileNoSessionOpens: the listens are cut while the server opens no new
// session: the planned reconnect fails (one failure), and the old session, which no
// longer hears of its subscription, is torn down: its server still answers, but the
// session has lost what it was opened with. The connection reconnects as after any
// failure, each failed attempt counted once, and is subscribed again once the server
// opens sessions. The old session used to serve on until a probe failed it, which
// counted the one failure twice, and without probes (keepalive_interval 0) it served
// on for good, deaf to its subscription.
func TestListenCutWhileNoSessionOpens(t *testing.T) {
	for name, keepalive := range map[string]time.Duration{"probes": 300 * time.Millisecond, "no probes": 0} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			pol := fastPolicies()
			pol.KeepaliveInterval = keepalive
			pol.BreakerThreshold = 100 // every failure shows in the count
			ct, c, updated, uri := cutSubscribed(ctx, t, pol)
			first, before := c.session(), len(c.transitions())
			ct.refuse.Store(true)
			ct.cut()
			c.waitFor(func(states.State) bool { return c.count(states.BackingOff, states.Connecting) >= 2 }, 10*time.Second)
			ct.refuse.Store(false)
			c.waitNewSession(first, 10*time.Second)
			if n, err := c.callText(ctx, "touch", map[string]any{"uri": uri}); err != nil || n != "1" {
				t.Fatalf("touch after the cut: %q (subscribers), %v\n%s", n, err, c.timeline())
			}
			updated.waitFor(t, "the gap's update and a new one", func(got []string) bool { return len(got) >= 2 }, 10*time.Second)
			// Every failure counted is a connect that failed: the failed replace,
			// then the failed attempts after the old session's teardown.
			failed := 0
			for _, tr := range c.transitions()[before:] {
				if tr.Trigger == states.ConnectFailed.String() {
					failed++
				}
				if tr.To == states.Ready && tr.Trigger == states.Connected.String() {
					break
				}
				if tr.Failures != failed {
					t.Fatalf("%s: %d failures counted after %d failed connects\n%s", tr, tr.Failures, failed, c.timeline())
				}
			}
			if n := c.count(states.Replacing, states.Ready); n != 1 {
				t.Errorf("%d failed replaces, want 1\n%s", n, c.timeline())
			}
		})
	}
}

// TestNoFallbackFromAStatelessServer: a new session of a server that spoke 2026-07-28
// finds its server/discover answered with 503 (a load balancer while the server
// restarts). The go-sdk then falls back to initialize, which a stateless server takes:
// the session spoke 2025-11-25 to a server that keeps no session, so that its
// subscriptions, its log level and the server's requests and notifications reached
// nothing, and nothing told. The dial fails instead, and the next one speaks
// 2026-07-28 again: subscribed, with updates.
func TestNoFallbackFromAStatelessServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ct, c, updated, uri := cutSubscribed(ctx, t, nil)
	first := c.session()
	ct.refuseDiscover.Store(1)
	ct.cut()
	c.waitNewSession(first, 10*time.Second)
	if info, _ := c.Server(); info.ProtocolVersion != "2026-07-28" {
		t.Errorf("the new session speaks %q\n%s", info.ProtocolVersion, c.timeline())
	}
	if n, err := c.callText(ctx, "touch", map[string]any{"uri": uri}); err != nil || n != "1" {
		t.Fatalf("touch: %q (subscribers), %v\n%s", n, err, c.timeline())
	}
	updated.waitFor(t, "the gap's update and a new one", func(got []string) bool { return len(got) >= 2 }, 10*time.Second)
}

// TestNoFallbackOnFirstConnect: as TestNoFallbackFromAStatelessServer, on the
// connection's first connect: nothing says yet that the server speaks 2026-07-28,
// and its server/discover gets a 503. The go-sdk fell back to initialize, which the
// stateless server took without a session of its own (no Mcp-Session-Id): the
// connection served on 2025-11-25 a server that kept nothing of it, its subscriptions
// silently dead, until the session happened to end. A fallback that has no session to
// keep what it is given fails the connect instead; the next speaks 2026-07-28.
func TestNoFallbackOnFirstConnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ct := listenCutter(t)
	ct.refuseDiscover.Store(1)
	updated := newSeen[string]()
	c := open(t, transport.Config{Name: "cut", HTTP: &transport.HTTP{URL: ct.url}}, nil, func(o *Options) {
		o.Handlers.ResourceUpdated = func(_ context.Context, p *mcp.ResourceUpdatedNotificationParams) { updated.add(p.URI) }
	})
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := c.Server(); info.ProtocolVersion != "2026-07-28" {
		t.Errorf("the session speaks %q\n%s", info.ProtocolVersion, c.timeline())
	}
	if n := c.count(states.Connecting, states.BackingOff); n != 1 {
		t.Errorf("%d failed connects, want 1 (the fallback)\n%s", n, c.timeline())
	}
	uri := testserver.ResourceA
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.callText(ctx, "touch", map[string]any{"uri": uri}); err != nil || n != "1" {
		t.Fatalf("touch: %q (subscribers), %v\n%s", n, err, c.timeline())
	}
	updated.waitFor(t, "the update", func(got []string) bool { return len(got) >= 1 }, 10*time.Second)
}

// discoverRefused serves a test server over streamable HTTP (with opts) behind a front
// that answers every server/discover with refuse, which the server never sees, and
// returns its URL and how many it refused.
func discoverRefused(t *testing.T, opts *mcp.StreamableHTTPOptions, refuse func(http.ResponseWriter)) (string, *atomic.Int32) {
	t.Helper()
	srv := testserver.New(testserver.Options{})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, opts)
	refused := new(atomic.Int32)
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") == "server/discover" {
			refused.Add(1)
			refuse(w)
			return
		}
		sdk.ServeHTTP(w, r)
	}))
	t.Cleanup(h.Close)
	return h.URL, refused
}

// TestFallbackToASessionKept: a server on 2025-11-25 only, stateful, whose
// server/discover gets a 503 on a first connect: the go-sdk's fallback to initialize
// opens a session (Mcp-Session-Id) that keeps what it is given, and serves.
func TestFallbackToASessionKept(t *testing.T) {
	url, refused := discoverRefused(t, nil, func(w http.ResponseWriter) {
		http.Error(w, "not now", http.StatusServiceUnavailable)
	})
	c := open(t, transport.Config{Name: "old", HTTP: &transport.HTTP{URL: url}}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := c.Server(); info.ProtocolVersion != "2025-11-25" || refused.Load() == 0 {
		t.Errorf("the session speaks %q after %d refused server/discover", info.ProtocolVersion, refused.Load())
	}
	if n := c.count(states.Connecting, states.BackingOff); n != 0 {
		t.Errorf("%d failed connects\n%s", n, c.timeline())
	}
}

// TestFallbackOfAServerThatSaidNo: a server on 2025-11-25 that keeps no session
// (stateless by design) answers the server/discover it does not know with HTTP 500
// and a JSON-RPC error, method not found (as servers that put every JSON-RPC error in
// a 5xx do). That is an answer, from the server, not a load balancer's: the fallback
// to initialize is kept, without a session of the server's. Taken for no answer, it
// was refused on every connect, and such a server was never reached.
func TestFallbackOfAServerThatSaidNo(t *testing.T) {
	url, refused := discoverRefused(t, &mcp.StreamableHTTPOptions{Stateless: true}, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found: server/discover"}}`)
	})
	c := open(t, transport.Config{Name: "old", HTTP: &transport.HTTP{URL: url}}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("%v\n%s", err, c.timeline())
	}
	if info, _ := c.Server(); info.ProtocolVersion != "2025-11-25" || refused.Load() == 0 {
		t.Errorf("the session speaks %q after %d refused server/discover", info.ProtocolVersion, refused.Load())
	}
	if n := c.count(states.Connecting, states.BackingOff); n != 0 {
		t.Errorf("%d failed connects\n%s", n, c.timeline())
	}
	if got, err := c.callText(ctx, "echo", map[string]any{"text": "hi"}); err != nil || got != "hi" {
		t.Errorf("echo: %q, %v", got, err)
	}
}

// TestSetLoggingLevelUnknown: a level that is not one of the protocol's eight is the
// caller's mistake, refused before anything is sent (cause request), on every
// protocol. Over streamable HTTP on 2026-07-28, where no server is asked (see
// TestLogLevelStateless), it was kept, and every later request carried it.
func TestSetLoggingLevelUnknown(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{Stateless: true})
	for name, cfg := range map[string]transport.Config{
		"stateless": httpConfig(h),
		"memory":    {Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}},
	} {
		t.Run(name, func(t *testing.T) {
			c := open(t, cfg, nil, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
				t.Fatal(err)
			}
			for _, level := range []mcp.LoggingLevel{"bogus", "", "WARNING"} {
				err := c.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level})
				var ce *CallError
				if !errors.As(err, &ce) || ce.Cause != states.CauseRequest {
					t.Errorf("SetLoggingLevel(%q) = %v, want a *CallError of cause request", level, err)
				}
			}
			if text, err := c.callText(ctx, "log", map[string]any{"level": "info", "text": "x"}); err != nil || text != "filtered" {
				t.Errorf("an info message after the refused levels: %q, %v; want it filtered (the level is still warning)", text, err)
			}
		})
	}
}

// TestServerEndedListenInMemory: on protocol 2026-07-28 over stdio or in memory, a
// server ends a resource's subscriptions/listen that it had agreed to, by itself (a
// go-sdk server never does; another may, shutting part of itself down). It no longer
// sends the resource's updates; the connection went on listing the subscription, and
// no update came again. As over streamable HTTP, a planned reconnect subscribes a new
// session, which reports the resource updated once for the gap.
func TestServerEndedListenInMemory(t *testing.T) {
	srv := testserver.New(testserver.Options{})
	var mu sync.Mutex
	var cuts []context.CancelFunc
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "subscriptions/listen" {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				mu.Lock()
				cuts = append(cuts, cancel)
				mu.Unlock()
			}
			return next(ctx, method, req)
		}
	})
	cut := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range cuts {
			c()
		}
		cuts = nil
	}
	t.Cleanup(cut)
	updated := newSeen[string]()
	c := open(t, transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: srv}}, nil, func(o *Options) {
		o.Handlers.ResourceUpdated = func(_ context.Context, p *mcp.ResourceUpdatedNotificationParams) { updated.add(p.URI) }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	uri := testserver.ResourceA
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	first := c.session()
	cut()
	c.waitNewSession(first, 10*time.Second)
	if n, err := c.callText(ctx, "touch", map[string]any{"uri": uri}); err != nil || n != "1" {
		t.Fatalf("touch after the server ended the listen: %q (subscribers), %v\n%s", n, err, c.timeline())
	}
	got := updated.waitFor(t, "the gap's update and a new one", func(got []string) bool { return len(got) >= 2 }, 10*time.Second)
	if diff := cmp.Diff([]string{uri, uri}, got); diff != "" {
		t.Errorf("updates (-want +got):\n%s", diff)
	}
}

// TestOldSessionsListenEndedKeepsTheNewOne: a listen of a session that a newer one
// has replaced (it drains its calls, or waits to be closed) ends: a proxy cuts it, or
// the server drops it. The new session listens on; nothing is to be done. It set off
// a planned reconnect, which replaced the new session for nothing.
func TestOldSessionsListenEndedKeepsTheNewOne(t *testing.T) {
	ct := listenCutter(t)
	c := open(t, transport.Config{Name: "cut", HTTP: &transport.HTTP{URL: ct.url}}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: testserver.ResourceA}); err != nil {
		t.Fatal(err)
	}
	old := c.current.Load()
	c.Reconnect()
	c.waitNewSession(old.id, 10*time.Second)
	c.waitState(states.Ready, 10*time.Second)
	second := c.session()
	c.listenLost(old, fmt.Errorf("%w: cut", transport.ErrListenEnded))
	time.Sleep(500 * time.Millisecond)
	if now := c.session(); now != second {
		t.Errorf("the old session's listen ended: session %d replaced %d\n%s", now, second, c.timeline())
	}
}
