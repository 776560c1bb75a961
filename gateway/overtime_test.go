package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file is the gateway over time: what it keeps must follow what is present
// (sessions, servers, calls), not the number of past events.

// kept is what the gateway keeps of its past (g.Sizes), that must go back to base.
func kept(g *gateway.Gateway) map[string]int {
	s := g.Sizes()
	delete(s, "regTools") // the present servers' tools
	return s
}

// TestGateway_CutCallsOfRemovedServers: the calls the front cancelled are kept for
// attribution (cutLinger) by server; those of a server a reload removed were kept for
// good, with their front sessions: a gateway whose config renames its servers now
// and then (--watch) grew with every name it ever had.
func TestGateway_CutCallsOfRemovedServers(t *testing.T) {
	defer gateway.SetCutLinger(50 * time.Millisecond)()
	g := start(t, config(inMemory("a0", testserver.Options{})), gateway.Options{SweepInterval: 20 * time.Millisecond})
	cs := front(t, g, nil, "2025-11-25")
	waitTools(t, cs, has("a0__hold"))
	base := kept(g)
	for i := 1; i <= 10; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: fmt.Sprintf("a%d__hold", i-1), Arguments: map[string]any{"ms": 60000}})
		cancel()
		if err == nil {
			t.Fatal("a call of 60s was not cancelled at 20ms")
		}
		next := fmt.Sprintf("a%d", i)
		if _, err := g.Reload(callCtx(t), config(inMemory(next, testserver.Options{}))); err != nil {
			t.Fatal(err)
		}
		waitTools(t, cs, has(next+"__hold"))
	}
	deadline := time.Now().Add(waitFor)
	for {
		diff := cmp.Diff(base, kept(g))
		if diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("what the gateway keeps after 10 reloads, each removing a server a call was cancelled at (-before +after):\n%s", diff)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGateway_SubscriptionsBounded: a front client subscribing to URIs a backend's
// template matches, a new one each time, subscribed the backend to each (on
// 2026-07-28 a subscriptions/listen stream of its own, 12 KB and two goroutines in
// process: 5,000 made 10,000 goroutines and 58 MB), without bound. A session now
// holds at most so many, and the sessions together at most so many URIs; a URI
// subscribed already costs the backend nothing more.
func TestGateway_SubscriptionsBounded(t *testing.T) {
	defer gateway.SetMaxSubscriptions(3, 5)()
	g := start(t, config(inMemory("b", testserver.Options{})), gateway.Options{})
	a := front(t, g, nil, "2025-11-25")
	b := front(t, g, nil, "2025-11-25")
	waitTools(t, a, has("b__echo"))
	item := func(i int) string { return fmt.Sprintf("test://items/%d", i) }
	subscribe := func(cs *mcp.ClientSession, uri string) string {
		if err := cs.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: uri}); err != nil {
			return err.Error()
		}
		return ""
	}
	var got []string
	for _, step := range []struct {
		cs  *mcp.ClientSession
		uri string
	}{
		{a, item(1)}, {a, item(2)}, {a, item(3)}, {a, item(4)}, // the fourth of a session
		{b, item(1)}, {b, item(5)}, {b, item(6)}, // shared, then two new ones: five URIs
		{b, item(3)}, // a URI subscribed already, but one more of b's
	} {
		got = append(got, subscribe(step.cs, step.uri))
	}
	unsubscribe := func(cs *mcp.ClientSession, uri string) {
		if err := cs.Unsubscribe(callCtx(t), &mcp.UnsubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	c := front(t, g, nil, "2025-11-25")
	unsubscribe(b, item(5))
	got = append(got, subscribe(b, item(7))) // 1, 2, 3, 6, 7: five URIs
	got = append(got, subscribe(c, item(8))) // a sixth
	got = append(got, subscribe(c, item(2))) // subscribed already
	unsubscribe(a, item(3))
	got = append(got, subscribe(c, item(8))) // 1, 2, 6, 7, 8
	perSession := "this session has 3 subscriptions, as many as it may"
	all := "subscribed to 5 resources, as many as the gateway holds"
	want := []string{"", "", "", perSession, "", "", "", perSession, "", all, "", ""}
	if len(got) != len(want) {
		t.Fatalf("%d answers, want %d: %q", len(got), len(want), got)
	}
	for i := range want {
		if (want[i] == "") != (got[i] == "") || !strings.Contains(got[i], want[i]) {
			t.Errorf("subscribe %d: %q, want %q", i, got[i], want[i])
		}
	}
}

// TestGateway_UndeliveredListChangesQuiet: a front session over HTTP that opened no
// GET stream (the spec lets a client not open one) cannot be sent a notification
// that belongs to no request; the go-sdk drops it and logged a warning for each
// session at each change: 20 such sessions and one reload adding a server made 60
// warnings (tools, prompts, resources), and a gateway with its 10,000 sessions made
// 30,000 at each reload, that drowned real ones (serve drops records past its
// queue). They are debug records now; a notification that fails otherwise still
// warns.
func TestGateway_UndeliveredListChangesQuiet(t *testing.T) {
	log, logged := logLines(`level=WARN msg="calling notifications/`)
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{Logger: log})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	watcher := httpFront(t, url, "2025-11-25", nil) // with its GET stream
	waitTools(t, watcher, has("a__echo"))
	for range 20 {
		resp := post(t, url, initializeBody, "", "")
		id := resp.Header.Get("Mcp-Session-Id")
		resp.Body.Close()
		if id == "" {
			t.Fatalf("initialize: %s, no session", resp.Status)
		}
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if _, err := g.Reload(callCtx(t), config(inMemory("a", testserver.Options{}), inMemory("c", testserver.Options{}))); err != nil {
		t.Fatal(err)
	}
	waitTools(t, watcher, has("c__echo"))
	time.Sleep(100 * time.Millisecond) // the last list changes sent
	if got := logged(); len(got) > 0 {
		t.Errorf("%d warnings after a reload, with 20 sessions without a GET stream; the first:\n%s", len(got), got[0])
	}
}
