package testserver

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// legacy is the newest protocol before 2026-07-28, where the server sends
// requests to the client and subscribes by resources/subscribe.
const legacy = "2025-11-25"

// A link connects a client to a fresh test server one way.
type link struct {
	name    string
	connect func(t *testing.T, c *mcp.Client) *mcp.ClientSession
}

var (
	// inMemory negotiates 2026-07-28, like stdio.
	linkInMemory = link{"inmemory", func(t *testing.T, c *mcp.Client) *mcp.ClientSession {
		return connectClient(t, c, inMemoryServer(t), "")
	}}
	linkInMemoryLegacy = link{"inmemory-legacy", func(t *testing.T, c *mcp.Client) *mcp.ClientSession {
		return connectClient(t, c, inMemoryServer(t), legacy)
	}}
	linkStdio = link{"stdio", func(t *testing.T, c *mcp.Client) *mcp.ClientSession {
		return connectClient(t, c, &mcp.CommandTransport{Command: exec.Command(Build(t))}, "")
	}}
	// linkStdioLegacy is a binary that speaks only the legacy protocol, to
	// a client that would speak 2026-07-28.
	linkStdioLegacy = link{"stdio-legacy", func(t *testing.T, c *mcp.Client) *mcp.ClientSession {
		cmd := exec.Command(Build(t), Args(Options{ProtocolVersions: []string{legacy}})...)
		cs := connectClient(t, c, &mcp.CommandTransport{Command: cmd}, "")
		if got := cs.InitializeResult().ProtocolVersion; got != legacy {
			t.Fatalf("negotiated %s with a server of %s only", got, legacy)
		}
		return cs
	}}
	// linkHTTP is stateful streamable HTTP, where the SDK negotiates the
	// legacy protocol.
	linkHTTP = link{"http", func(t *testing.T, c *mcp.Client) *mcp.ClientSession {
		return connectClient(t, c, &mcp.StreamableClientTransport{Endpoint: StartHTTP(t, Options{}).URL()}, "")
	}}
	// linkStateless is stateless streamable HTTP: 2026-07-28, a session per
	// request.
	linkStateless = link{"http-stateless", func(t *testing.T, c *mcp.Client) *mcp.ClientSession {
		return connectClient(t, c, &mcp.StreamableClientTransport{Endpoint: StartHTTP(t, Options{Stateless: true}).URL()}, "")
	}}
)

func inMemoryServer(t *testing.T) mcp.Transport {
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(Options{}).Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	return ct
}

func connectClient(t *testing.T, c *mcp.Client, tr mcp.Transport, protocol string) *mcp.ClientSession {
	t.Helper()
	cs, err := c.Connect(ctx(t), tr, &mcp.ClientSessionOptions{ProtocolVersion: protocol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// eachLink runs f on each link in a subtest, with a new peer.
func eachLink(t *testing.T, links []link, f func(t *testing.T, p *peer, cs *mcp.ClientSession)) {
	for _, l := range links {
		t.Run(l.name, func(t *testing.T) {
			p := newPeer()
			f(t, p, l.connect(t, p.client))
		})
	}
}

// A peer is a client with every handler set; its handlers report on
// channels and answer server requests.
type peer struct {
	client       *mcp.Client
	updated      chan string
	logs         chan *mcp.LoggingMessageParams
	progress     chan *mcp.ProgressNotificationParams
	resChanged   chan struct{}
	promptChange chan struct{}

	mu    sync.Mutex
	asked []string // the server requests answered, in order
}

// The root the peer starts with.
const root1 = "file:///root1"

func newPeer() *peer {
	p := &peer{
		updated:      make(chan string, 64),
		logs:         make(chan *mcp.LoggingMessageParams, 64),
		progress:     make(chan *mcp.ProgressNotificationParams, 64),
		resChanged:   make(chan struct{}, 64),
		promptChange: make(chan struct{}, 64),
	}
	p.client = mcp.NewClient(&mcp.Implementation{Name: "peer", Version: "1"}, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			prompt := ""
			if len(req.Params.Messages) == 1 {
				if tc, ok := req.Params.Messages[0].Content.(*mcp.TextContent); ok {
					prompt = tc.Text
				}
			}
			p.note("sampling")
			return &mcp.CreateMessageResult{Content: &mcp.TextContent{Text: "model: " + prompt}, Model: "m", Role: "assistant"}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			p.note("elicitation")
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes: " + req.Params.Message}}, nil
		},
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			p.updated <- req.Params.URI
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			p.logs <- req.Params
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			p.progress <- req.Params
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { p.resChanged <- struct{}{} },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { p.promptChange <- struct{}{} },
	})
	p.client.AddRoots(&mcp.Root{URI: root1})
	return p
}

func (p *peer) note(what string) {
	p.mu.Lock()
	p.asked = append(p.asked, what)
	p.mu.Unlock()
}

func (p *peer) answered() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.asked)
}

// receive returns the next value on ch, failing the test after 10s.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

// mustCall calls a tool that must succeed, and returns its text.
func mustCall(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(ctx(t), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("%s: tool error %+v", name, res.Content)
	}
	return res.Content[0].(*mcp.TextContent).Text
}

// state returns the state tool's report on cs's server session.
func state(t *testing.T, cs *mcp.ClientSession) SessionState {
	t.Helper()
	res, err := cs.CallTool(ctx(t), &mcp.CallToolParams{Name: "state"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := State(res)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitState polls the state tool until ok holds, and returns that state. On
// 2026-07-28 the SDK's Subscribe and Unsubscribe return before the server
// has seen them.
func waitState(t *testing.T, cs *mcp.ClientSession, what string, ok func(SessionState) bool) SessionState {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := state(t, cs)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: state %+v", what, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newProtocol(cs *mcp.ClientSession) bool {
	return cs.InitializeResult().ProtocolVersion >= "2026-07-28"
}

func TestResources(t *testing.T) {
	eachLink(t, []link{linkInMemory, linkInMemoryLegacy}, func(t *testing.T, _ *peer, cs *mcp.ClientSession) {
		caps := cs.InitializeResult().Capabilities
		if caps.Resources == nil || !caps.Resources.Subscribe || !caps.Resources.ListChanged {
			t.Errorf("resources capability %+v, want subscribe and listChanged", caps.Resources)
		}
		lr, err := cs.ListResources(ctx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		var uris []string
		for _, r := range lr.Resources {
			uris = append(uris, r.URI)
		}
		if want := []string{ResourceA, ResourceB}; !slices.Equal(uris, want) {
			t.Errorf("resources %q, want %q", uris, want)
		}
		lt, err := cs.ListResourceTemplates(ctx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(lt.ResourceTemplates) != 1 || lt.ResourceTemplates[0].URITemplate != ItemTemplate {
			t.Errorf("templates %+v, want one, %s", lt.ResourceTemplates, ItemTemplate)
		}
		for uri, want := range map[string]string{ResourceA: "a v0", ResourceB: "b v0", "test://items/42": "item 42 v0"} {
			if got := read(t, cs, uri); got != want {
				t.Errorf("read %s = %q, want %q", uri, got, want)
			}
		}
		// touch changes what a read returns (nobody is subscribed here).
		if got := mustCall(t, cs, "touch", map[string]any{"uri": "test://items/42"}); got != "0" {
			t.Errorf("touch = %q, want 0 subscribers", got)
		}
		if got := read(t, cs, "test://items/43"); got != "item 43 v0" {
			t.Errorf("read item 43 = %q", got)
		}
		if got := read(t, cs, "test://items/42"); got != "item 42 v1" {
			t.Errorf("read after touch = %q, want item 42 v1", got)
		}
		_, err = cs.ReadResource(ctx(t), &mcp.ReadResourceParams{URI: "test://nope"})
		if !errors.Is(err, &jsonrpc.Error{Code: mcp.CodeResourceNotFound}) {
			t.Errorf("read of an unknown resource: %v, want resource not found", err)
		}
	})
}

func read(t *testing.T, cs *mcp.ClientSession, uri string) string {
	t.Helper()
	res, err := cs.ReadResource(ctx(t), &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		t.Fatalf("read %s: %v", uri, err)
	}
	if len(res.Contents) != 1 {
		t.Fatalf("read %s: %d contents", uri, len(res.Contents))
	}
	return res.Contents[0].Text
}

// TestSubscribe subscribes with the SDK's own client: resources/subscribe on
// the legacy protocol, subscriptions/listen on 2026-07-28.
func TestSubscribe(t *testing.T) {
	const item = "test://items/7"
	eachLink(t, []link{linkInMemory, linkInMemoryLegacy, linkStdio, linkStdioLegacy, linkHTTP}, func(t *testing.T, p *peer, cs *mcp.ClientSession) {
		for _, uri := range []string{ResourceA, item} {
			if err := cs.Subscribe(ctx(t), &mcp.SubscribeParams{URI: uri}); err != nil {
				t.Fatal(err)
			}
		}
		both := []string{item, ResourceA}
		waitState(t, cs, "two subscriptions", func(s SessionState) bool { return slices.Equal(s.Subscriptions, both) })

		if got := mustCall(t, cs, "touch", map[string]any{"uri": ResourceA}); got != "1" {
			t.Errorf("touch = %q, want 1 subscriber", got)
		}
		if got := receive(t, p.updated, "update of a"); got != ResourceA {
			t.Errorf("updated %s, want %s", got, ResourceA)
		}
		if got := read(t, cs, ResourceA); got != "a v1" {
			t.Errorf("read after the update = %q, want a v1", got)
		}
		mustCall(t, cs, "touch", map[string]any{"uri": item})
		if got := receive(t, p.updated, "update of the item"); got != item {
			t.Errorf("updated %s, want %s", got, item)
		}

		if err := cs.Unsubscribe(ctx(t), &mcp.UnsubscribeParams{URI: ResourceA}); err != nil {
			t.Fatal(err)
		}
		waitState(t, cs, "unsubscribed", func(s SessionState) bool { return slices.Equal(s.Subscriptions, []string{item}) })
		if got := mustCall(t, cs, "touch", map[string]any{"uri": ResourceA}); got != "0" {
			t.Errorf("touch after unsubscribe = %q, want 0", got)
		}
		// Updates of one session arrive in order: had a's gone out, it
		// would come first.
		mustCall(t, cs, "touch", map[string]any{"uri": item})
		if got := receive(t, p.updated, "update of the item"); got != item {
			t.Errorf("updated %s after unsubscribing from it", got)
		}

		// An unknown resource is refused. On 2026-07-28 the SDK's
		// Subscribe returns before the server answers, so the error is
		// seen only on the legacy protocol; the server records both.
		err := cs.Subscribe(ctx(t), &mcp.SubscribeParams{URI: "test://nope"})
		if !newProtocol(cs) && !errors.Is(err, &jsonrpc.Error{Code: mcp.CodeResourceNotFound}) {
			t.Errorf("subscribe to an unknown resource: %v, want resource not found", err)
		}
		s := waitState(t, cs, "the refused subscribe", func(s SessionState) bool { return slices.Contains(s.Subscribed, "test://nope") })
		if !slices.Equal(s.Subscriptions, []string{item}) {
			t.Errorf("subscriptions %q after a refused one", s.Subscriptions)
		}
		// In any order: on 2026-07-28 the SDK sends each listen without waiting for
		// the server, which handles them concurrently.
		got := slices.Sorted(slices.Values(s.Subscribed))
		if want := []string{"test://items/7", "test://nope", ResourceA}; !slices.Equal(got, want) {
			t.Errorf("subscribed %q, want %q in any order", s.Subscribed, want)
		}
	})
}

func TestPromptsAndCompletion(t *testing.T) {
	eachLink(t, []link{linkInMemory, linkInMemoryLegacy}, func(t *testing.T, _ *peer, cs *mcp.ClientSession) {
		lp, err := cs.ListPrompts(ctx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(lp.Prompts) != 1 || lp.Prompts[0].Name != PromptGreet || len(lp.Prompts[0].Arguments) != 2 || !lp.Prompts[0].Arguments[0].Required {
			t.Errorf("prompts %+v, want greet with a required argument and an optional one", lp.Prompts)
		}
		for _, c := range []struct {
			args map[string]string
			want string
		}{
			{map[string]string{"name": "bob"}, "Hello, bob!"},
			{map[string]string{"name": "bob", "greeting": "Hi"}, "Hi, bob!"},
		} {
			res, err := cs.GetPrompt(ctx(t), &mcp.GetPromptParams{Name: PromptGreet, Arguments: c.args})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Messages) != 1 || res.Messages[0].Content.(*mcp.TextContent).Text != c.want {
				t.Errorf("greet %v = %+v, want %q", c.args, res.Messages, c.want)
			}
		}
		_, err = cs.GetPrompt(ctx(t), &mcp.GetPromptParams{Name: PromptGreet, Arguments: map[string]string{"greeting": "Hi"}})
		if !errors.Is(err, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams}) {
			t.Errorf("greet without name: %v, want invalid params", err)
		}

		if cs.InitializeResult().Capabilities.Completions == nil {
			t.Error("no completions capability")
		}
		for _, c := range []struct {
			ref   *mcp.CompleteReference
			arg   string
			value string
			want  []string
		}{
			{&mcp.CompleteReference{Type: "ref/prompt", Name: PromptGreet}, "name", "ali", []string{"alice", "alicia"}},
			{&mcp.CompleteReference{Type: "ref/prompt", Name: PromptGreet}, "name", "", CompletionNames},
			{&mcp.CompleteReference{Type: "ref/prompt", Name: PromptGreet}, "name", "zed", []string{}},
			{&mcp.CompleteReference{Type: "ref/resource", URI: ItemTemplate}, "id", "ap", []string{"apple", "apricot"}},
		} {
			res, err := cs.Complete(ctx(t), &mcp.CompleteParams{Ref: c.ref, Argument: mcp.CompleteParamsArgument{Name: c.arg, Value: c.value}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Completion.Values, c.want) || res.Completion.Total != len(c.want) {
				t.Errorf("complete %s %q = %+v, want %q", c.arg, c.value, res.Completion, c.want)
			}
		}
		_, err = cs.Complete(ctx(t), &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: PromptGreet}, Argument: mcp.CompleteParamsArgument{Name: "greeting"}})
		if !errors.Is(err, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams}) {
			t.Errorf("completing an argument without values: %v, want invalid params", err)
		}
	})
}

func TestListsChange(t *testing.T) {
	eachLink(t, []link{linkInMemory, linkInMemoryLegacy, linkHTTP}, func(t *testing.T, p *peer, cs *mcp.ClientSession) {
		for _, want := range []string{"added " + ResourceExtra, "removed " + ResourceExtra} {
			if got := mustCall(t, cs, "change_resources", nil); got != want {
				t.Errorf("change_resources = %q, want %q", got, want)
			}
			receive(t, p.resChanged, "resources/list_changed")
			lr, err := cs.ListResources(ctx(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			listed := slices.ContainsFunc(lr.Resources, func(r *mcp.Resource) bool { return r.URI == ResourceExtra })
			if added := strings.HasPrefix(want, "added"); listed != added {
				t.Errorf("after %q the extra resource is listed: %v", want, listed)
			}
			if listed {
				if got := read(t, cs, ResourceExtra); got != "extra v0" {
					t.Errorf("read extra = %q", got)
				}
			}
		}
		for _, want := range []string{"added " + PromptExtra, "removed " + PromptExtra} {
			if got := mustCall(t, cs, "change_prompts", nil); got != want {
				t.Errorf("change_prompts = %q, want %q", got, want)
			}
			receive(t, p.promptChange, "prompts/list_changed")
			lp, err := cs.ListPrompts(ctx(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			listed := slices.ContainsFunc(lp.Prompts, func(p *mcp.Prompt) bool { return p.Name == PromptExtra })
			if added := strings.HasPrefix(want, "added"); listed != added {
				t.Errorf("after %q the extra prompt is listed: %v", want, listed)
			}
			if listed {
				res, err := cs.GetPrompt(ctx(t), &mcp.GetPromptParams{Name: PromptExtra})
				if err != nil || res.Messages[0].Content.(*mcp.TextContent).Text != "extra" {
					t.Errorf("get extra = %+v, %v", res, err)
				}
			}
		}
	})
}

// TestLog: on the legacy protocol the level is the session's, set by
// logging/setLevel; on 2026-07-28 the SDK takes it from each request's _meta
// only. The server records every setLevel either way.
func TestLog(t *testing.T) {
	eachLink(t, []link{linkInMemory, linkInMemoryLegacy, linkStdio, linkStdioLegacy, linkHTTP}, func(t *testing.T, p *peer, cs *mcp.ClientSession) {
		logAt := func(level, text string, meta mcp.Meta) string {
			t.Helper()
			res, err := cs.CallTool(ctx(t), &mcp.CallToolParams{Name: "log", Arguments: map[string]any{"level": level, "text": text}, Meta: meta})
			if err != nil || res.IsError {
				t.Fatalf("log: %v %+v", err, res)
			}
			return res.Content[0].(*mcp.TextContent).Text
		}
		if got := logAt("error", "before any level", nil); got != "filtered" {
			t.Errorf("log before setLevel: %s, want filtered", got)
		}
		for _, level := range []mcp.LoggingLevel{"debug", "warning"} {
			if err := cs.SetLoggingLevel(ctx(t), &mcp.SetLoggingLevelParams{Level: level}); err != nil {
				t.Fatal(err)
			}
		}
		s := state(t, cs)
		if s.LogLevel != "warning" || !slices.Equal(s.LogLevels, []string{"debug", "warning"}) {
			t.Errorf("state: level %q, levels %q; want warning, [debug warning]", s.LogLevel, s.LogLevels)
		}
		var meta mcp.Meta
		if newProtocol(cs) {
			if got := logAt("error", "no level in _meta", nil); got != "filtered" {
				t.Errorf("log on 2026-07-28 without a level in _meta: %s, want filtered", got)
			}
			meta = mcp.Meta{mcp.MetaKeyLogLevel: "warning"}
		}
		if got := logAt("info", "quiet", meta); got != "filtered" {
			t.Errorf("log info at level warning: %s, want filtered", got)
		}
		if got := logAt("error", "loud", meta); got != "sent" {
			t.Errorf("log error at level warning: %s, want sent", got)
		}
		m := receive(t, p.logs, "log message")
		if m.Level != "error" || m.Data != "loud" || m.Logger != Name {
			t.Errorf("log message %+v", m)
		}
		res, err := cs.CallTool(ctx(t), &mcp.CallToolParams{Name: "log", Arguments: map[string]any{"level": "loud", "text": "x"}})
		if err != nil || !res.IsError {
			t.Errorf("log at an unknown level: %v, %+v; want a tool error", err, res)
		}
	})
}

func TestProgress(t *testing.T) {
	eachLink(t, []link{linkInMemory, linkStdio, linkHTTP}, func(t *testing.T, p *peer, cs *mcp.ClientSession) {
		params := &mcp.CallToolParams{Name: "slow_progress", Arguments: map[string]any{"ms": 5, "steps": 3}}
		params.SetProgressToken("tok-1")
		res, err := cs.CallTool(ctx(t), params)
		if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "progressed 3" {
			t.Fatalf("slow_progress: %v %+v", err, res)
		}
		for i := 1; i <= 3; i++ {
			n := receive(t, p.progress, "progress")
			if n.ProgressToken != "tok-1" || n.Progress != float64(i) || n.Total != 3 {
				t.Errorf("progress %+v, want tok-1 %d of 3", n, i)
			}
		}
		if got := mustCall(t, cs, "slow_progress", map[string]any{"ms": 1, "steps": 1}); got != "progressed 1" {
			t.Errorf("slow_progress without a token = %q", got)
		}
		res, err = cs.CallTool(ctx(t), &mcp.CallToolParams{Name: "slow_progress", Arguments: map[string]any{"ms": 1}})
		if err != nil || !res.IsError {
			t.Errorf("slow_progress with no steps: %v %+v, want a tool error", err, res)
		}
	})
}

// TestAskClient: the tools that ask the client get the client's handlers'
// answers: by requests to the client on the legacy protocol, by input
// requests (SEP-2322) on 2026-07-28.
func TestAskClient(t *testing.T) {
	eachLink(t, []link{linkInMemory, linkInMemoryLegacy, linkStdio, linkStdioLegacy, linkHTTP, linkStateless}, func(t *testing.T, p *peer, cs *mcp.ClientSession) {
		if got := mustCall(t, cs, "sample", map[string]any{"prompt": "hi"}); got != "model: hi" {
			t.Errorf("sample = %q", got)
		}
		if got := mustCall(t, cs, "elicit", map[string]any{"message": "ok?"}); got != `accept {"answer":"yes: ok?"}` {
			t.Errorf("elicit = %q", got)
		}
		if got := mustCall(t, cs, "roots", nil); got != `["`+root1+`"]` {
			t.Errorf("roots = %q", got)
		}
		before := len(p.answered())
		got := mustCall(t, cs, "sample_then_elicit", map[string]any{"prompt": "p", "message": "m"})
		if want := "model: p\naccept {\"answer\":\"yes: m\"}"; got != want {
			t.Errorf("sample_then_elicit = %q, want %q", got, want)
		}
		if asked := p.answered()[before:]; !slices.Equal(asked, []string{"sampling", "elicitation"}) {
			t.Errorf("sample_then_elicit asked %q, want sampling then elicitation", asked)
		}
	})
}

func TestAskClientWithoutHandlers(t *testing.T) {
	for _, protocol := range []string{"", legacy} {
		t.Run(fmt.Sprintf("protocol=%q", protocol), func(t *testing.T) {
			c := mcp.NewClient(&mcp.Implementation{Name: "bare", Version: "1"}, nil)
			cs := connectClient(t, c, inMemoryServer(t), protocol)
			for _, name := range []string{"sample", "elicit"} {
				res, err := cs.CallTool(ctx(t), &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
				if err == nil && !res.IsError {
					t.Errorf("%s answered by a client without a handler: %+v", name, res.Content)
				}
			}
		})
	}
}

func TestRootsListChanged(t *testing.T) {
	eachLink(t, []link{linkInMemory, linkInMemoryLegacy, linkStdio, linkStdioLegacy, linkHTTP}, func(t *testing.T, p *peer, cs *mcp.ClientSession) {
		if n := state(t, cs).RootsListChanged; n != 0 {
			t.Errorf("%d roots/list_changed before any change", n)
		}
		p.client.AddRoots(&mcp.Root{URI: "file:///root2"})
		waitState(t, cs, "roots/list_changed", func(s SessionState) bool { return s.RootsListChanged == 1 })
		if got := mustCall(t, cs, "roots", nil); got != `["`+root1+`","file:///root2"]` {
			t.Errorf("roots after the change = %q", got)
		}
	})
}

func TestStateMethods(t *testing.T) {
	eachLink(t, []link{linkInMemoryLegacy, linkInMemory}, func(t *testing.T, _ *peer, cs *mcp.ClientSession) {
		if err := cs.SetLoggingLevel(ctx(t), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
			t.Fatal(err)
		}
		s := state(t, cs)
		want := []string{"initialize", "notifications/initialized", "logging/setLevel", "tools/call"}
		methods := s.Methods
		if newProtocol(cs) {
			want = []string{"server/discover", "logging/setLevel", "tools/call"}
			// The peer's list-changed handlers make the SDK open a
			// subscriptions/listen after server/discover, without waiting: the
			// server may record it after the calls that follow, so the state is
			// polled until it has (each poll is one more tools/call).
			s = waitState(t, cs, "subscriptions/listen", func(s SessionState) bool {
				return slices.Contains(s.Methods, "subscriptions/listen")
			})
			methods = slices.DeleteFunc(slices.Clone(s.Methods), func(m string) bool { return m == "subscriptions/listen" })
			if len(methods) != len(s.Methods)-1 {
				t.Errorf("methods %q, want one subscriptions/listen", s.Methods)
			}
			for len(methods) > len(want) && methods[len(methods)-1] == "tools/call" {
				methods = methods[:len(methods)-1] // the polls' own calls
			}
		}
		if !slices.Equal(methods, want) {
			t.Errorf("methods %q, want %q", s.Methods, want)
		}
		if s.Protocol != cs.InitializeResult().ProtocolVersion {
			t.Errorf("protocol %q, want %q", s.Protocol, cs.InitializeResult().ProtocolVersion)
		}
	})
	// Two sessions of one server have their own records.
	h := StartHTTP(t, Options{})
	one := connect(t, &mcp.StreamableClientTransport{Endpoint: h.URL()})
	two := connect(t, &mcp.StreamableClientTransport{Endpoint: h.URL()})
	if err := one.SetLoggingLevel(ctx(t), &mcp.SetLoggingLevelParams{Level: "error"}); err != nil {
		t.Fatal(err)
	}
	s1, s2 := state(t, one), state(t, two)
	if s1.ID != one.ID() || s2.ID != two.ID() || s1.ID == "" || s1.ID == s2.ID {
		t.Errorf("session IDs %q %q, want %q %q", s1.ID, s2.ID, one.ID(), two.ID())
	}
	if s1.LogLevel != "error" || s2.LogLevel != "" {
		t.Errorf("levels %q %q, want error and none", s1.LogLevel, s2.LogLevel)
	}
}

// TestRecordsOfEndedSessions: a server that sees many sessions keeps records
// of few more than the live ones.
func TestRecordsOfEndedSessions(t *testing.T) {
	st := &server{counts: map[string]int{}, counters: map[*mcp.ServerSession]int{}}
	opts := &mcp.ServerOptions{}
	st.featureOptions(opts)
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, opts)
	st.addFeatures(s)
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	for range 300 {
		sst, ct := mcp.NewInMemoryTransports()
		ss, err := s.Connect(context.Background(), sst, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := c.Connect(ctx(t), ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs.Close()
		ss.Wait()
	}
	st.feat.mu.Lock()
	n := len(st.feat.sessions)
	st.feat.mu.Unlock()
	if n > 100 {
		t.Errorf("%d session records after 300 sessions that ended", n)
	}
}

func TestProtocolVersions(t *testing.T) {
	if got, want := Args(Options{ProtocolVersions: []string{legacy, "2025-06-18"}}), []string{"-protocols", legacy + ",2025-06-18"}; !slices.Equal(got, want) {
		t.Errorf("Args = %q, want %q", got, want)
	}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(Options{ProtocolVersions: []string{legacy}}).Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs := connect(t, ct)
	if got := cs.InitializeResult().ProtocolVersion; got != legacy {
		t.Errorf("negotiated %s with a server of %s only", got, legacy)
	}
	// The binary refuses a version the SDK does not know.
	out, err := exec.Command(Build(t), "-protocols", "1999-01-01").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "1999-01-01") {
		t.Errorf("-protocols 1999-01-01: %v, %s", err, out)
	}
}
