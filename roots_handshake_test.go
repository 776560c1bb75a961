package mcpfsm

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// holdInitialize is an HTTP transport that holds the initialize POST until a roots
// change has been sent (or 2 s have passed), so that the change comes during the
// handshake, and tells the test when it holds it.
type holdInitialize struct {
	held, sent         chan struct{}
	holdOnce, sentOnce sync.Once
}

func (h *holdInitialize) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		switch {
		case bytes.Contains(body, []byte(`"method":"initialize"`)):
			h.holdOnce.Do(func() {
				close(h.held)
				select {
				case <-h.sent:
				case <-time.After(2 * time.Second):
				}
			})
		case bytes.Contains(body, []byte(`"method":"notifications/roots/list_changed"`)):
			defer h.sentOnce.Do(func() { close(h.sent) })
		}
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestInterop_RootsChangedWhileConnecting: the roots change while a session is in its
// handshake (its initialize in flight), as when a gateway's front client gives its
// roots while the backends connect. The go-sdk tells every session of the client,
// that one included, and sent server-everything over streamable HTTP a
// notifications/roots/list_changed before it had a session: the server answered 400,
// the SDK closed the connection, and the connect failed (a failure counted, a
// backoff). Now a session is told of a change only once its handshake is over; it
// asks for the roots when it is initialized and gets the new ones.
func TestInterop_RootsChangedWhileConnecting(t *testing.T) {
	script := everythingServer(t)
	url := startEverythingHTTP(t, script)
	hold := &holdInitialize{held: make(chan struct{}), sent: make(chan struct{})}
	var n interopNotes
	c := open(t, transport.Config{Name: "everything", HTTP: &transport.HTTP{URL: url, Client: &http.Client{Transport: hold}}}, nil, everythingOptions(&n, nil))
	select {
	case <-hold.held:
	case <-time.After(20 * time.Second):
		t.Fatalf("no initialize\n%s", c.timeline())
	}
	if err := c.SetRoots(&mcp.Root{URI: "file:///interop/changed", Name: "changed"}); err != nil {
		t.Fatal(err)
	}
	c.waitState(states.Ready, 20*time.Second)
	if got := c.count(states.Connecting, states.Ready); got != 1 || len(c.transitions()) != 2 {
		t.Errorf("the first connect did not come up:\n%s", c.timeline())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitUntil(t, 10*time.Second, "the new roots on the server", func() bool {
		got, err := toolText(c.CallTool(ctx, &mcp.CallToolParams{Name: "get-roots-list"}))
		return err == nil && strings.Contains(got, "file:///interop/changed") && !strings.Contains(got, "file:///interop/root")
	})
}
