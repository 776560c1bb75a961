package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestGateway_Forwarding: elicitation and roots from a backend reach the front client
// that made the call (see also TestGateway_RootsPerCall), subscriptions and their updates, completion of
// a prompt's argument and of a template's variable.
func TestGateway_Forwarding(t *testing.T) {
	for _, version := range []string{"2025-11-25", ""} {
		t.Run("backend "+version, func(t *testing.T) {
			s := inMemory("a", testserver.Options{})
			s.Transport.ProtocolVersion = version
			g := start(t, config(s), gateway.Options{SweepInterval: 20 * time.Millisecond})
			updated := make(chan string, 8)
			copts := &mcp.ClientOptions{
				Capabilities: &mcp.ClientCapabilities{RootsV2: &mcp.RootCapabilities{ListChanged: true}},
				ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "from the front: " + req.Params.Message}}, nil
				},
				ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
					updated <- req.Params.URI
				},
			}
			c := mcp.NewClient(&mcp.Implementation{Name: "front"}, copts)
			c.AddRoots(&mcp.Root{URI: "file:///front"})
			cs := frontOf(t, g, c, "2025-11-25")
			waitTools(t, cs, has("a__elicit"))

			if res := call(t, cs, "a__elicit", map[string]any{"message": "yes?"}); res.IsError || !strings.Contains(text(res), "from the front: yes?") {
				t.Errorf("elicit: %q", text(res))
			}
			deadline := time.Now().Add(waitFor)
			for {
				res := call(t, cs, "a__roots", nil)
				if text(res) == `["file:///front"]` {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("roots: %q", text(res))
				}
				time.Sleep(10 * time.Millisecond)
			}

			if err := cs.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: "test://static/a"}); err != nil {
				t.Fatal(err)
			}
			call(t, cs, "a__touch", map[string]any{"uri": "test://static/a"})
			select {
			case uri := <-updated:
				if uri != "test://static/a" {
					t.Errorf("updated %q", uri)
				}
			case <-time.After(waitFor):
				t.Fatal("the backend's update did not reach the subscribed front session")
			}
			if err := cs.Unsubscribe(callCtx(t), &mcp.UnsubscribeParams{URI: "test://static/a"}); err != nil {
				t.Fatal(err)
			}
			if got := g.Manager().Conn("a").Subscriptions(); len(got) != 0 {
				t.Errorf("the backend is still subscribed after the last front unsubscribed: %v", got)
			}

			res, err := cs.Complete(callCtx(t), &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "a__greet"},
				Argument: mcp.CompleteParamsArgument{Name: "name", Value: "al"}})
			if err != nil || strings.Join(res.Completion.Values, ",") != "alice,alicia" {
				t.Errorf("complete a prompt: %v %v", res, err)
			}
			res, err = cs.Complete(callCtx(t), &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: "test://items/{id}"},
				Argument: mcp.CompleteParamsArgument{Name: "id", Value: "ap"}})
			if err != nil || strings.Join(res.Completion.Values, ",") != "apple,apricot" {
				t.Errorf("complete a template: %v %v", res, err)
			}
		})
	}
}

// TestGateway_RootsPerCall: a backend that asks for roots during a call gets the
// roots of the front client that made the call, not the union of every front
// session's, whatever the backend's protocol version (2026-07-28 asks inside the
// call's answer) and the front's; a front client without roots has the backend
// refused.
func TestGateway_RootsPerCall(t *testing.T) {
	for _, backend := range []string{"2025-11-25", ""} {
		for _, fronts := range []string{"2025-11-25", ""} {
			t.Run(fmt.Sprintf("backend %q, fronts %q", backend, fronts), func(t *testing.T) {
				s := inMemory("a", testserver.Options{})
				s.Transport.ProtocolVersion = backend
				g := start(t, config(s), gateway.Options{})
				var sessions []*mcp.ClientSession
				for _, name := range []string{"one", "two"} {
					c := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ClientOptions{
						Capabilities: &mcp.ClientCapabilities{RootsV2: &mcp.RootCapabilities{ListChanged: true}},
					})
					c.AddRoots(&mcp.Root{URI: "file:///" + name})
					sessions = append(sessions, frontOf(t, g, c, fronts))
				}
				waitTools(t, sessions[0], has("a__roots"))
				// Both fronts' roots are known, and the backends given their union:
				// a call answered from the union would show both. (A 2026-07-28
				// front is asked for its roots within its calls only.)
				deadline := time.Now().Add(waitFor)
				for fronts != "" && len(g.Manager().Conn("a").Roots()) != 2 {
					if time.Now().After(deadline) {
						t.Fatalf("the backends were given %v; want both fronts' roots", g.Manager().Conn("a").Roots())
					}
					time.Sleep(10 * time.Millisecond)
				}
				for round := range 3 {
					for i, name := range []string{"one", "two"} {
						res := call(t, sessions[i], "a__roots", nil)
						if want := `["file:///` + name + `"]`; res.IsError || text(res) != want {
							t.Errorf("round %d: front %q's call got the roots %s, want %s", round, name, text(res), want)
						}
					}
				}
				// A front client without roots: the backend is refused, not given
				// the others'. (On 2025-11-25 the backend's tool reports the refusal;
				// on 2026-07-28 the input request refused fails the call.)
				rootless := frontOf(t, g, mcp.NewClient(&mcp.Implementation{Name: "rootless", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}), fronts)
				res, err := rootless.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__roots", Arguments: map[string]any{}})
				if got := fmt.Sprint(err) + text(res); !strings.Contains(got, "the front client does not support roots") || (err == nil && !res.IsError) {
					t.Errorf("a rootless front client's call: %q; want the backend refused", got)
				}
			})
		}
	}
}

// TestGateway_SubscriptionsOfGoneSessions: a front session that ends without
// unsubscribing is forgotten, and the backend unsubscribed, by the sweep.
func TestGateway_SubscriptionsOfGoneSessions(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{SweepInterval: 10 * time.Millisecond})
	cs := front(t, g, nil, "2025-11-25")
	waitTools(t, cs, has("a__echo"))
	if err := cs.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: "test://static/b"}); err != nil {
		t.Fatal(err)
	}
	if got := g.Manager().Conn("a").Subscriptions(); len(got) != 1 {
		t.Fatalf("backend subscriptions %v", got)
	}
	_ = cs.Close()
	deadline := time.Now().Add(waitFor)
	for len(g.Manager().Conn("a").Subscriptions()) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the backend stayed subscribed for a front session that ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGateway_SubscribeRacesUnsubscribe: one front session subscribes to a URI just
// as the last other one unsubscribes from it; the backend stays subscribed, as the
// gateway's count says it must.
func TestGateway_SubscribeRacesUnsubscribe(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	one, two := front(t, g, nil, "2025-11-25"), front(t, g, nil, "2025-11-25")
	waitTools(t, one, has("a__echo"))
	const uri, rounds = "test://static/a", 150
	wrong := 0
	for range rounds {
		if err := one.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		go func() { errs <- one.Unsubscribe(callCtx(t), &mcp.UnsubscribeParams{URI: uri}) }()
		go func() { errs <- two.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: uri}) }()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if got := g.Manager().Conn("a").Subscriptions(); len(got) != 1 {
			wrong++
		}
		if err := two.Unsubscribe(callCtx(t), &mcp.UnsubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
		if got := g.Manager().Conn("a").Subscriptions(); len(got) != 0 {
			t.Fatalf("the backend is subscribed to %v with no front session subscribed", got)
		}
	}
	if wrong > 0 {
		t.Errorf("in %d of %d rounds the backend was not subscribed while a front session was", wrong, rounds)
	}
}

// TestGateway_SubscriptionFollowsReload: a reload that renames the server behind a
// subscribed URI (the old one closed, a new one listing the URI) moves the
// backend's subscription to the new server: the front sessions still subscribed get
// its updates, and their unsubscribes reach it. (They got nothing: the gateway kept
// the subscription on the server gone, and a subscribe again was taken for one it
// had.)
func TestGateway_SubscriptionFollowsReload(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	updated := make(chan string, 16)
	copts := &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
		updated <- req.Params.URI
	}}
	one, two := front(t, g, copts, "2025-11-25"), front(t, g, copts, "2025-11-25")
	waitTools(t, one, has("a__touch"))
	for _, cs := range []*mcp.ClientSession{one, two} {
		if err := cs.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: testserver.ResourceA}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Reload(callCtx(t), config(inMemory("b", testserver.Options{}))); err != nil {
		t.Fatal(err)
	}
	waitTools(t, one, has("b__touch"))
	deadline := time.Now().Add(waitFor)
	for len(g.Manager().Conn("b").Subscriptions()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the new server behind the URI was never subscribed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	call(t, one, "b__touch", map[string]any{"uri": testserver.ResourceA})
	for range 2 {
		select {
		case <-updated:
		case <-time.After(waitFor):
			t.Fatal("a front session subscribed before the reload got no update from the new server")
		}
	}
	for _, cs := range []*mcp.ClientSession{one, two} {
		if err := cs.Unsubscribe(callCtx(t), &mcp.UnsubscribeParams{URI: testserver.ResourceA}); err != nil {
			t.Fatal(err)
		}
	}
	if got := g.Manager().Conn("b").Subscriptions(); len(got) != 0 {
		t.Errorf("the new server is still subscribed after the last front unsubscribed: %v", got)
	}
}

// TestGateway_URLElicitationComplete: a backend's URL-mode elicitation goes to the
// front session that made the call, and the notification that ends it, sent once
// the call is over, reaches that session and no other. (It reached none: the gateway
// dropped notifications/elicitation/complete.)
func TestGateway_URLElicitationComplete(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "login", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "login"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Mode: "url", Message: "log in", URL: "https://example.com/login", ElicitationID: "el-7"})
		if err != nil {
			return nil, nil, err
		}
		ss := req.Session
		go func() { // the user logs in, later
			time.Sleep(50 * time.Millisecond)
			_ = ss.NotifyElicitationComplete(context.Background(), &mcp.ElicitationCompleteParams{ElicitationID: "el-7"})
		}()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Action}}}, nil, nil
	})
	sc := inMemory("login", testserver.Options{})
	sc.Transport.InMemory.Server = s
	sc.Transport.ProtocolVersion = "2025-11-25"
	g := start(t, config(sc), gateway.Options{})
	completed := make(chan string, 4)
	client := func(who string) *mcp.ClientSession {
		return front(t, g, &mcp.ClientOptions{
			Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "accept"}, nil
			},
			ElicitationCompleteHandler: func(_ context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
				completed <- who + " " + req.Params.ElicitationID
			},
		}, "2025-11-25")
	}
	a, _ := client("A"), client("B")
	waitTools(t, a, has("login__login"))
	if res := call(t, a, "login__login", nil); text(res) != "accept" {
		t.Fatalf("login: %q", text(res))
	}
	select {
	case got := <-completed:
		if got != "A el-7" {
			t.Errorf("the completion reached %q, want A", got)
		}
	case <-time.After(waitFor):
		t.Fatal("the elicitation's completion reached no front session")
	}
	time.Sleep(100 * time.Millisecond)
	if len(completed) > 0 {
		t.Errorf("the completion also reached %q", <-completed)
	}

	// A front client with forms only is not asked.
	forms := front(t, g, &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		t.Error("a front client without URL-mode elicitation was asked one")
		return &mcp.ElicitResult{Action: "decline"}, nil
	}}, "2025-11-25")
	if res := call(t, forms, "login__login", nil); !res.IsError || !strings.Contains(text(res), "does not support URL-mode elicitation") {
		t.Errorf("a front client with forms only: %q, want a refusal", text(res))
	}
}

// TestGateway_RootsChangedFlood: a front client that floods
// notifications/roots/list_changed and answers no roots/list is asked once at a time
// (each notification spawned an ask that waited 10 s for the answer: 20,000
// notifications, 20,000 goroutines and requests). Its answer, when it comes, is
// given to the backends, and a change announced meanwhile is asked for once more.
func TestGateway_RootsChangedFlood(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := g.Server().Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := ct.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); _ = ss.Wait() })
	ctx := callCtx(t)
	send := func(id any, method, params string) {
		t.Helper()
		var jid jsonrpc.ID
		if id != nil {
			jid, _ = jsonrpc.MakeID(id)
		}
		if err := conn.Write(ctx, &jsonrpc.Request{ID: jid, Method: method, Params: json.RawMessage(params)}); err != nil {
			t.Fatal(err)
		}
	}
	asks := make(chan jsonrpc.ID, 100)
	answers := make(chan *jsonrpc.Response, 10)
	go func() {
		for {
			m, err := conn.Read(context.Background())
			if err != nil {
				return
			}
			switch m := m.(type) {
			case *jsonrpc.Request:
				if m.Method == "roots/list" {
					select {
					case asks <- m.ID:
					default: // many: the test fails on the count
					}
				}
			case *jsonrpc.Response:
				answers <- m
			}
		}
	}()
	send(float64(1), "initialize", `{"protocolVersion":"2025-11-25","capabilities":{"roots":{"listChanged":true}},"clientInfo":{"name":"raw","version":"1"}}`)
	<-answers
	send(nil, "notifications/initialized", `{}`)
	first := <-asks
	before := runtime.NumGoroutine()
	for range 5000 {
		send(nil, "notifications/roots/list_changed", `{}`)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(asks); n > 0 {
		t.Errorf("%d more roots/list while the first was unanswered", n)
	}
	if grown := runtime.NumGoroutine() - before; grown > 50 {
		t.Errorf("%d more goroutines after 5,000 roots/list_changed", grown)
	}
	answer := func(id jsonrpc.ID, uri string) {
		t.Helper()
		if err := conn.Write(ctx, &jsonrpc.Response{ID: id, Result: json.RawMessage(`{"roots":[{"uri":"` + uri + `"}]}`)}); err != nil {
			t.Fatal(err)
		}
	}
	answer(first, "file:///stale")
	select {
	case again := <-asks:
		answer(again, "file:///now")
	case <-time.After(waitFor):
		t.Fatal("the change announced during the first ask was not asked for")
	}
	deadline := time.Now().Add(waitFor)
	for {
		got := g.Manager().Conn("a").Roots()
		if len(got) == 1 && got[0].URI == "file:///now" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the backends' roots: %v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGateway_BackendRequestWithoutParams: a backend that sends elicitation/create
// with "params": null gets an invalid-params error; the gateway does not panic (it
// did, on the go-sdk's goroutine for the request: the whole gateway went down).
func TestGateway_BackendRequestWithoutParams(t *testing.T) {
	g := start(t, config(rawBackend(t, "raw")), gateway.Options{})
	cs := front(t, g, &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		t.Error("the front client was asked an elicitation without params")
		return &mcp.ElicitResult{Action: "decline"}, nil
	}}, "2025-11-25")
	waitTools(t, cs, has("raw__elicit_null"))
	res := call(t, cs, "raw__elicit_null", nil)
	var reply struct {
		Error *jsonrpc.Error `json:"error"`
	}
	if err := json.Unmarshal([]byte(text(res)), &reply); err != nil || reply.Error == nil || reply.Error.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("the backend got %q, want an invalid-params error", text(res))
	}
}

// TestGateway_BackendRequestBadParams: a backend whose request's params do not
// decode (sampling/createMessage with a string for maxTokens) gets -32602 naming
// the field, in a short message: the go-sdk's client quoted the whole params back.
func TestGateway_BackendRequestBadParams(t *testing.T) {
	g := start(t, config(rawBackend(t, "raw")), gateway.Options{})
	cs := front(t, g, &mcp.ClientOptions{CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
		t.Error("the front client was asked a sampling whose params do not decode")
		return nil, errors.New("no")
	}}, "2025-11-25")
	waitTools(t, cs, has("raw__sample_bad"))
	res := call(t, cs, "raw__sample_bad", nil)
	var reply struct {
		ID    string         `json:"id"`
		Error *jsonrpc.Error `json:"error"`
	}
	if err := json.Unmarshal([]byte(text(res)), &reply); err != nil || reply.Error == nil || reply.Error.Code != jsonrpc.CodeInvalidParams || reply.ID != "raw-1" {
		t.Fatalf("the backend got %.300q, want an invalid-params error under its ID", text(res))
	}
	if !strings.Contains(reply.Error.Message, `"maxTokens"`) || len(text(res)) > 200 {
		t.Errorf("the backend got %d bytes: %.300q, want a short message naming maxTokens", len(text(res)), text(res))
	}
}

// TestGateway_UpdateFromAnotherServer: a backend's notifications/resources/updated
// for a URI the front's subscription went to another server for is not passed on: a
// backend cannot make the clients of another server's resource read it again (it
// could, as often as it liked). The server behind the URI still can.
func TestGateway_UpdateFromAnotherServer(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{}), rawBackend(t, "raw")), gateway.Options{})
	updated := make(chan string, 16)
	cs := front(t, g, &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
		updated <- req.Params.URI
	}}, "2025-11-25")
	waitTools(t, cs, has("raw__spoof_update"))
	waitTools(t, cs, has("a__touch"))
	if err := cs.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: testserver.ResourceA}); err != nil {
		t.Fatal(err)
	}
	call(t, cs, "raw__spoof_update", nil)
	call(t, cs, "a__touch", map[string]any{"uri": testserver.ResourceA}) // after the spoof, on another connection
	select {
	case <-updated:
	case <-time.After(waitFor):
		t.Fatal("the update of the server behind the URI did not reach the front")
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(updated); n > 0 {
		t.Errorf("%d more updates reached the front: another server's got through", n)
	}
}

// TestGateway_ElicitationSchemaTheSDKRefuses: a backend's form with a titled
// multi-select (items of type string with anyOf: the spec allows it, the go-sdk's
// checks do not) reaches a 2025-11-25 front client, and the client's accepted answer
// reaches the backend (the front server's ServerSession.Elicit checked the answer's
// schema by the go-sdk's rules and threw the answer away: the backend got "elicit
// schema property "choice" items must specify enum").
func TestGateway_ElicitationSchemaTheSDKRefuses(t *testing.T) {
	g := start(t, config(rawBackend(t, "raw")), gateway.Options{})
	c := mcp.NewClient(&mcp.Implementation{Name: "front"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return nil, errors.New("not reached: the middleware answers") // advertises elicitation
		},
	})
	var schema any
	// The go-sdk's client refuses the schema too: this client answers before it.
	c.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p, ok := req.GetParams().(*mcp.ElicitParams); ok && method == "elicitation/create" {
				schema = p.RequestedSchema
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"choice": []any{"value2"}}}, nil
			}
			return next(ctx, method, req)
		}
	})
	cs := frontOf(t, g, c, "2025-11-25")
	waitTools(t, cs, has("raw__elicit_titled_multi"))
	res := call(t, cs, "raw__elicit_titled_multi", nil)
	var reply struct {
		Result *mcp.ElicitResult `json:"result"`
		Error  *jsonrpc.Error    `json:"error"`
	}
	if err := json.Unmarshal([]byte(text(res)), &reply); err != nil || reply.Result == nil || reply.Result.Action != "accept" ||
		fmt.Sprint(reply.Result.Content["choice"]) != "[value2]" {
		t.Errorf("the backend got %s, want the accepted answer", text(res))
	}
	if !strings.Contains(fmt.Sprint(schema), "anyOf") {
		t.Errorf("the front client was asked with the schema %v", schema)
	}
}

// TestGateway_ListenEndUnsubscribesTheBackend: a 2026-07-28 front client subscribes
// through a subscriptions/listen stream; when the stream ends (its client cancels it:
// the go-sdk's Unsubscribe), the last front subscription to the URI is gone and the
// backend is unsubscribed. It stayed subscribed for good (and subscribed again by
// every reconnect): the go-sdk's server undoes a listen's subscriptions with the
// listen's context, ended by then, and the backend's unsubscribe was sent with it.
func TestGateway_ListenEndUnsubscribesTheBackend(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	cs := front(t, g, nil, "2026-07-28")
	waitTools(t, cs, has("a__touch"))
	subs := func() []string { return g.Manager().Conn("a").Subscriptions() }
	if err := cs.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: testserver.ResourceA}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitFor)
	for len(subs()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the backend was never subscribed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cs.Unsubscribe(callCtx(t), &mcp.UnsubscribeParams{URI: testserver.ResourceA}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(waitFor)
	for len(subs()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the backend is still subscribed after the front's listen ended: %v", subs())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
