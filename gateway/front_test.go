package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestGateway_NoNotificationsBeforeInitialize: a front session that has not sent
// initialize (a stdio host slow to send it: the stdio front's session is open from
// the gateway's start) is told nothing: the go-sdk's server told it of every change
// of the gateway's lists, before the capabilities were agreed. Once initialized it
// is told.
func TestGateway_NoNotificationsBeforeInitialize(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	changed := make(chan struct{}, 16)
	witness := front(t, g, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		changed <- struct{}{}
	}}, "2025-11-25")
	waitTools(t, witness, has("a__echo"))

	send, lines := stdioPipe(t, g)
	time.Sleep(100 * time.Millisecond) // the session is open

	reload := func(servers ...string) {
		t.Helper()
		sc := config()
		for _, s := range servers {
			sc.Servers = append(sc.Servers, inMemory(s, testserver.Options{}))
		}
		for len(changed) > 0 {
			<-changed
		}
		if _, err := g.Reload(callCtx(t), sc); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changed:
		case <-time.After(waitFor):
			t.Fatal("the witness was not told of the change")
		}
		time.Sleep(200 * time.Millisecond) // the others are told too
	}
	reload("a", "b")
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"slow host","version":"1"}}}`)
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, `{"jsonrpc":"2.0","id":1,"result":`) {
			t.Errorf("before initialize was answered, the session was sent %s", line)
		}
	case <-time.After(waitFor):
		t.Fatal("initialize was not answered")
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	reload("a")
	select {
	case line := <-lines:
		if !strings.Contains(line, `"method":"notifications/`) || !strings.Contains(line, `/list_changed"`) {
			t.Errorf("once initialized, the session was sent %s, want a list's change", line)
		}
	case <-time.After(waitFor):
		t.Fatal("once initialized, the session was not told of a change")
	}
}
