package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A versionBackend is a test server behind the gateway, as server "a", with a tool
// wait that blocks until its call is cancelled (or 30 s pass), telling the test
// when it began and when its context ended.
type versionBackend struct {
	name string
	make func(t *testing.T, started, cancelled chan struct{}) mcpfsm.ServerConfig
}

// addWait adds the tool wait to s.
func addWait(s *mcp.Server, started, cancelled chan struct{}) {
	mcp.AddTool(s, &mcp.Tool{Name: "wait", Description: "Waits to be cancelled."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			started <- struct{}{}
			t := time.NewTimer(30 * time.Second)
			defer t.Stop()
			select {
			case <-ctx.Done():
				cancelled <- struct{}{}
				return nil, nil, ctx.Err()
			case <-t.C:
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "not cancelled"}}}, nil, nil
			}
		})
}

var versionBackends = []versionBackend{
	{"mem-2025", func(t *testing.T, started, cancelled chan struct{}) mcpfsm.ServerConfig {
		s := testserver.New(testserver.Options{ProtocolVersions: []string{"2025-11-25"}})
		addWait(s, started, cancelled)
		return mcpfsm.ServerConfig{Name: "a", Policies: quick(), Transport: transport.Config{Name: "a", InMemory: &transport.InMemory{Server: s}}}
	}},
	{"mem-2026", func(t *testing.T, started, cancelled chan struct{}) mcpfsm.ServerConfig {
		s := testserver.New(testserver.Options{})
		addWait(s, started, cancelled)
		return mcpfsm.ServerConfig{Name: "a", Policies: quick(), Transport: transport.Config{Name: "a", InMemory: &transport.InMemory{Server: s}}}
	}},
	{"http-2025", func(t *testing.T, started, cancelled chan struct{}) mcpfsm.ServerConfig {
		h := testserver.StartHTTP(t, testserver.Options{ProtocolVersions: []string{"2025-11-25"}})
		addWait(h.Server(), started, cancelled)
		return mcpfsm.ServerConfig{Name: "a", Policies: quick(), Transport: transport.Config{Name: "a", HTTP: &transport.HTTP{URL: h.URL()}}}
	}},
	{"http-2026", func(t *testing.T, started, cancelled chan struct{}) mcpfsm.ServerConfig {
		h := testserver.StartHTTP(t, testserver.Options{})
		addWait(h.Server(), started, cancelled)
		return mcpfsm.ServerConfig{Name: "a", Policies: quick(), Transport: transport.Config{Name: "a", HTTP: &transport.HTTP{URL: h.URL()}}}
	}},
}

// A versionFront is a way a front client reaches the gateway.
type versionFront struct {
	name, version string
	open          func(t *testing.T, g *gateway.Gateway, version string, opts *mcp.ClientOptions) *mcp.ClientSession
}

func memFront(t *testing.T, g *gateway.Gateway, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	return frontOf(t, g, mcp.NewClient(&mcp.Implementation{Name: "front", Version: "1"}, opts), version)
}

func httpFrontOf(t *testing.T, g *gateway.Gateway, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	return httpFrontWith(t, serveHTTP(t, g, gateway.HTTPOptions{}), version, nil, opts)
}

// stdioFront connects a go-sdk client to the gateway's stdio front, over pipes.
func stdioFront(t *testing.T, g *gateway.Gateway, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = g.Server().Run(ctx, transport.ServerStdio(inR, outW)); outW.Close(); close(done) }()
	c := mcp.NewClient(&mcp.Implementation{Name: "stdio-front", Version: "1"}, opts)
	cs, err := c.Connect(callCtx(t), &mcp.IOTransport{Reader: outR, Writer: inW}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		cancel()
		inW.Close()
		<-done
	})
	return cs
}

var versionFronts = []versionFront{
	{"mem", "2025-11-25", memFront}, {"mem", "2026-07-28", memFront},
	{"http", "2025-11-25", httpFrontOf}, {"http", "2026-07-28", httpFrontOf},
	{"stdio", "2025-11-25", stdioFront}, {"stdio", "2026-07-28", stdioFront},
}

// TestGateway_VersionsMatrix: every front (in memory, streamable HTTP, stdio; on
// 2025-11-25 and 2026-07-28) against every backend (in memory and streamable HTTP; on
// 2025-11-25 and 2026-07-28): a log message at the level the front asked for, a
// call's progress, a cancelled call, a resource update, a list change.
func TestGateway_VersionsMatrix(t *testing.T) {
	for _, b := range versionBackends {
		for _, f := range versionFronts {
			t.Run(f.name+"-"+f.version[:4]+"/"+b.name, func(t *testing.T) {
				versionsCase(t, b, f)
			})
		}
	}
}

func versionsCase(t *testing.T, b versionBackend, f versionFront) {
	started, cancelled := make(chan struct{}, 4), make(chan struct{}, 4)
	g := start(t, config(b.make(t, started, cancelled)), gateway.Options{})
	logs := make(chan string, 64)
	progress := make(chan float64, 64)
	updated := make(chan string, 64)
	changed := make(chan struct{}, 64)
	cs := f.open(t, g, f.version, &mcp.ClientOptions{
		Capabilities:          &mcp.ClientCapabilities{},
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) { logs <- fmt.Sprint(r.Params.Data) },
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			progress <- r.Params.Progress
		},
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updated <- r.Params.URI },
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	waitTools(t, cs, has("a__wait"))
	newer := f.version >= "2026-07-28"
	var meta mcp.Meta
	if newer {
		meta = mcp.Meta{mcp.MetaKeyLogLevel: "debug"}
	} else if err := cs.SetLoggingLevel(callCtx(t), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	await := func(what string, ch any) {
		t.Helper()
		var ok bool
		tm := time.NewTimer(5 * time.Second)
		defer tm.Stop()
		switch ch := ch.(type) {
		case chan string:
			select {
			case <-ch:
				ok = true
			case <-tm.C:
			}
		case chan struct{}:
			select {
			case <-ch:
				ok = true
			case <-tm.C:
			}
		}
		if !ok {
			t.Errorf("%s: never came", what)
		}
	}

	// Log.
	res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__log", Arguments: map[string]any{"level": "debug", "text": "hello"}, Meta: meta})
	if err != nil || text(res) != "sent" {
		t.Errorf("log: %v %q", err, text(res))
	} else {
		await("the log message", logs)
	}

	// Progress.
	pm := mcp.Meta{"progressToken": "tok"}
	merge := func(a, b mcp.Meta) mcp.Meta {
		out := mcp.Meta{}
		for k, v := range a {
			out[k] = v
		}
		for k, v := range b {
			out[k] = v
		}
		return out
	}
	res, err = cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__slow_progress", Arguments: map[string]any{"ms": 5, "steps": 3}, Meta: merge(pm, meta)})
	if err != nil || res.IsError {
		t.Errorf("slow_progress: %v %s", err, text(res))
	}
	// The go-sdk's client may hand the last one over after the call has returned,
	// and drop it then (see TestGateway_ProgressLoggingCancel): two of three.
	for n := 0; n < 2; n++ {
		select {
		case <-progress:
		case <-time.After(5 * time.Second):
			t.Errorf("progress: %d notifications of 3", n)
			n = 2
		}
	}

	// Cancel.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__wait", Meta: meta})
		done <- err
	}()
	select {
	case <-started:
		cancel()
		await("the backend's cancellation", cancelled)
	case <-time.After(5 * time.Second):
		t.Error("wait never reached the backend")
		cancel()
	}
	<-done

	// Subscribe.
	uri := "test://static/a"
	if err := cs.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Errorf("subscribe: %v", err)
	} else {
		// A 2026-07-28 listen may be acknowledged before the backend has the
		// subscription: touched until an update comes.
		got := false
		for deadline := time.Now().Add(5 * time.Second); !got && time.Now().Before(deadline); {
			res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__touch", Arguments: map[string]any{"uri": uri}, Meta: meta})
			if err != nil || res.IsError {
				t.Fatalf("touch: %v %s", err, text(res))
			}
			select {
			case <-updated:
				got = true
			case <-time.After(100 * time.Millisecond):
			}
		}
		if !got {
			t.Error("the resource update: never came")
		}
	}

	// List changed.
	for len(changed) > 0 {
		<-changed
	}
	call(t, cs, "a__change_tools", nil)
	await("the tool list change", changed)
	if !strings.Contains(fmt.Sprint(toolNames(t, cs)), "a__extra") {
		t.Errorf("the front's tools after the change: %v", toolNames(t, cs))
	}
}

// TestGateway_CloseCancelsHTTPBackendCalls: the gateway closing with a front call in
// flight cancels the call on its backend over streamable HTTP, on 2025-11-25 and on
// 2026-07-28, as it does on one in memory. (It did not: the go-sdk sends
// notifications/cancelled on a goroutine of its own once the call has returned, and
// the backend's connection was closed first; the backend ran the call on, 30 s here,
// and the 2025-11-25 session's DELETE, which the backend holds until its calls end,
// held the close for the teardown's 2 s.)
func TestGateway_CloseCancelsHTTPBackendCalls(t *testing.T) {
	for _, b := range versionBackends {
		for _, f := range versionFronts[:2] {
			t.Run(f.name+"-"+f.version[:4]+"/"+b.name, func(t *testing.T) {
				started, cancelled := make(chan struct{}, 4), make(chan struct{}, 4)
				g, err := gateway.New(config(b.make(t, started, cancelled)), gateway.Options{Logger: quiet()})
				if err != nil {
					t.Fatal(err)
				}
				cs := f.open(t, g, f.version, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
				waitTools(t, cs, has("a__wait"))
				done := make(chan error, 1)
				go func() {
					_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "a__wait"})
					done <- err
				}()
				<-started
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := g.Close(ctx); err != nil {
					t.Errorf("close: %v", err)
				}
				select {
				case <-cancelled:
				case <-time.After(5 * time.Second):
					t.Errorf("the backend's call was not cancelled within 5s of the gateway's close")
				}
				if err := <-done; err == nil {
					t.Error("the front call succeeded")
				}
			})
		}
	}
}

// TestGateway_LogOfANewerRequestAmongOthers: a front client on 2026-07-28 over
// streamable HTTP (no session: the go-sdk's server makes one for each request) whose
// call logs while another request is in flight to the same backend, its own or
// another client's, gets the call's log message at the level its request asked for;
// a request asking for error only does not get the debug message. (It did not get
// it: the backend's message names no call, the calls in flight came from two front
// sessions, and the message went to every front session at the session's level,
// which a 2026-07-28 request's session does not have.) On every backend, 2025-11-25
// and 2026-07-28, in memory and over HTTP.
func TestGateway_LogOfANewerRequestAmongOthers(t *testing.T) {
	for _, b := range versionBackends {
		t.Run(b.name, func(t *testing.T) {
			started, cancelled := make(chan struct{}, 4), make(chan struct{}, 4)
			g := start(t, config(b.make(t, started, cancelled)), gateway.Options{})
			url := serveHTTP(t, g, gateway.HTTPOptions{})
			handler, logs := collect()
			cs := httpFrontWith(t, url, "2026-07-28", nil, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}, LoggingMessageHandler: handler})
			otherHandler, otherLogs := collect()
			other := httpFrontWith(t, url, "2026-07-28", nil, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}, LoggingMessageHandler: otherHandler})
			waitTools(t, cs, has("a__wait"))
			wait := func(cs *mcp.ClientSession, level string) func() {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() {
					defer close(done)
					_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__wait", Meta: mcp.Meta{mcp.MetaKeyLogLevel: level}})
				}()
				<-started
				return func() { cancel(); <-done; <-cancelled }
			}
			stopMine := wait(cs, "debug")
			stopOther := wait(other, "error")
			if got := logAt(t, cs, "debug", "mine", "debug"); got != "sent" {
				t.Fatalf("a debug message in a request asking for debug: the backend %s it", got)
			}
			select {
			case got := <-logs:
				if got != "mine" {
					t.Errorf("the client got %q", got)
				}
			case <-time.After(waitFor):
				t.Error("the call's debug message did not reach its client")
			}
			stopMine()
			stopOther()
			if got := logAt(t, other, "error", "last", "error"); got != "sent" {
				t.Fatalf("an error message in a request asking for error: the backend %s it", got)
			}
			select {
			case got := <-otherLogs:
				if got != "last" {
					t.Errorf("the client asking for error got %q before its own error message", got)
				}
			case <-time.After(waitFor):
				t.Error("the error message did not reach its client")
			}
		})
	}
}

// TestGateway_LogOfOneOfASessionsRequests: a front session on 2026-07-28 (stdio, in
// memory) with two calls in flight to a backend, one asking for debug messages and
// one for error only, gets the debug message the first one's call sends. (It did
// not: the message names no call, and went to the session's latest call, whose
// level let it through not.) On a 2025-11-25 and a 2026-07-28 backend.
func TestGateway_LogOfOneOfASessionsRequests(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			s := testserver.New(testserver.Options{ProtocolVersions: []string{version}})
			started, release := make(chan struct{}, 1), make(chan struct{})
			mcp.AddTool(s, &mcp.Tool{Name: "late_log", Description: "Logs at debug once released."},
				func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
					started <- struct{}{}
					<-release
					if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "debug", Data: "late"}); err != nil {
						return nil, nil, err
					}
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "logged"}}}, nil, nil
				})
			sc := mcpfsm.ServerConfig{Name: "a", Policies: quick(), Transport: transport.Config{Name: "a", InMemory: &transport.InMemory{Server: s}}}
			g := start(t, config(sc), gateway.Options{})
			handler, logs := collect()
			cs := front(t, g, &mcp.ClientOptions{LoggingMessageHandler: handler}, "2026-07-28")
			waitTools(t, cs, has("a__late_log"))
			lateDone := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__late_log", Meta: mcp.Meta{mcp.MetaKeyLogLevel: "debug"}})
				lateDone <- err
			}()
			<-started
			ctx, cancel := context.WithCancel(context.Background())
			holdDone := make(chan struct{})
			go func() {
				defer close(holdDone)
				_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__slow", Arguments: map[string]any{"ms": 30_000}, Meta: mcp.Meta{mcp.MetaKeyLogLevel: "error"}})
			}()
			defer func() { cancel(); <-holdDone }()
			for deadline := time.Now().Add(waitFor); backendCalls(t, cs, "slow") == 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("slow never reached the backend")
				}
			}
			close(release)
			if err := <-lateDone; err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-logs:
				if got != "late" {
					t.Errorf("the session got %q", got)
				}
			case <-time.After(5 * time.Second):
				t.Error("the debug message of the call that asked for debug did not reach the session")
			}
		})
	}
}

// TestGateway_HTTPClientGoneCancels: a front client over streamable HTTP whose
// connection drops with a call in flight (no notifications/cancelled: the request
// ends), on 2025-11-25 (a session) and 2026-07-28 (none), has the call cancelled on
// every backend kind.
func TestGateway_HTTPClientGoneCancels(t *testing.T) {
	for _, b := range versionBackends {
		for _, v := range []string{"2025-11-25", "2026-07-28"} {
			t.Run(v+"/"+b.name, func(t *testing.T) {
				started, cancelled := make(chan struct{}, 4), make(chan struct{}, 4)
				g := start(t, config(b.make(t, started, cancelled)), gateway.Options{})
				url := serveHTTP(t, g, gateway.HTTPOptions{})
				tc := &trackConns{}
				hc := &http.Client{Transport: &http.Transport{DialContext: tc.dial}}
				cs := httpFront(t, url, v, hc)
				waitTools(t, cs, has("a__wait"))
				done := make(chan struct{})
				go func() {
					defer close(done)
					_, _ = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "a__wait"})
				}()
				<-started
				tc.closeAll()
				select {
				case <-cancelled:
				case <-time.After(5 * time.Second):
					t.Error("the backend's call was not cancelled when the client's connection dropped")
				}
				<-done
			})
		}
	}
}

// TestGateway_ResultTypeOnlyOn2026: a front session on 2025-03-26, 2025-06-18 or
// 2025-11-25 gets the results of tools/call, prompts/get and resources/read without
// resultType, a field those versions do not have (a go-sdk server leaves it out for
// them); a 2026-07-28 request gets "resultType":"complete". The gateway passed on
// the 2026-07-28 backend's resultType to every front session.
func TestGateway_ResultTypeOnlyOn2026(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	// The prompts and resources are listed apart from the tools: all waited for
	// (under load the prompt was once not listed yet: "shows no prompt").
	cs := front(t, g, nil, "")
	waitTools(t, cs, has("a__echo"))
	for deadline := time.Now().Add(waitFor); ; time.Sleep(10 * time.Millisecond) {
		prompts, err1 := cs.ListPrompts(callCtx(t), nil)
		resources, err2 := cs.ListResources(callCtx(t), nil)
		if err1 == nil && err2 == nil && slices.ContainsFunc(prompts.Prompts, func(p *mcp.Prompt) bool { return p.Name == "a__greet" }) &&
			slices.ContainsFunc(resources.Resources, func(r *mcp.Resource) bool { return r.URI == "test://static/a" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backend's prompt and resource were never listed: %v %v", err1, err2)
		}
	}
	requests := map[string]string{
		"3": `"tools/call","params":{"name":"a__echo","arguments":{"text":"hi"}`,
		"4": `"prompts/get","params":{"name":"a__greet","arguments":{"name":"bob"}`,
		"5": `"resources/read","params":{"uri":"test://static/a"`,
	}
	for _, version := range []string{"2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"} {
		send, answer := stdioLines(t, g)
		meta := ""
		if version == "2026-07-28" {
			meta = "," + meta2026
		} else {
			send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + version + `","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`)
			if a := answer("1"); !strings.Contains(a, `"protocolVersion":"`+version+`"`) {
				t.Fatalf("%s: initialize: %.300s", version, a)
			}
			send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		}
		for id, r := range requests {
			send(`{"jsonrpc":"2.0","id":` + id + `,"method":` + r + meta + `}}`)
			a := answer(id)
			if !strings.Contains(a, `"result"`) {
				t.Fatalf("%s: %.20s: %.300s", version, r, a)
			}
			if got, want := strings.Contains(a, `"resultType"`), version == "2026-07-28"; got != want {
				t.Errorf("%s: %.20s: resultType in the answer is %v, want %v: %.300s", version, r, got, want, a)
			}
			if version == "2026-07-28" && !strings.Contains(a, `"resultType":"complete"`) {
				t.Errorf("%s: %.20s: %.300s", version, r, a)
			}
		}
	}
}
