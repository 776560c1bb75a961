package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// windowFront is a front session of a window test: a client that serves sampling
// and takes log messages, each reported under its name.
type windowFront struct {
	cs   *mcp.ClientSession
	logs chan string
}

func newWindowFront(t *testing.T, g *gateway.Gateway, who string, progress chan<- struct{}) *windowFront {
	t.Helper()
	f := &windowFront{logs: make(chan string, 16)}
	f.cs = front(t, g, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "answered by " + who}}, nil
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			f.logs <- fmt.Sprint(req.Params.Data)
		},
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			if progress != nil {
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		},
	}, "2025-11-25")
	if err := f.cs.SetLoggingLevel(callCtx(t), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	return f
}

// cutCall has f call slow_progress on server b, and cancels the call once the
// backend runs it (its first progress came).
func cutCall(t *testing.T, f *windowFront, progress <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(callCtx(t))
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := f.cs.CallTool(ctx, &mcp.CallToolParams{Name: "b__slow_progress", Arguments: map[string]any{"ms": 20, "steps": 100000},
			Meta: mcp.Meta{"progressToken": "cut"}})
		errc <- err
	}()
	select {
	case <-progress:
	case err := <-errc:
		t.Fatalf("the call to cut returned before it ran: %v", err)
	case <-time.After(waitFor):
		t.Fatal("the call to cut never ran")
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cut call was not cancelled")
	}
}

// TestGateway_CutWindowEndsWithTheBackendsAnswer: a call a front session cancels
// counted for attribution for cutLinger (30 s) whatever its backend did: a backend
// that answers the cancelled call (as go-sdk servers do, at once) is done with it,
// yet for those 30 s its log messages went to every front session and, on
// 2025-11-25, its sampling requests during another session's call were refused
// ("cancelled them lately"). With a stateless HTTP front every request is a session
// of its own, so one cancel anywhere blocked everyone. Now the backend's session
// tells the gateway when it reads the late answer, and the call no longer counts
// (cutLinger here is an hour: only that can end it).
func TestGateway_CutWindowEndsWithTheBackendsAnswer(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		for _, kind := range []string{"stdio", "in-memory"} {
			t.Run(version+"/"+kind, func(t *testing.T) {
				defer gateway.SetCutLinger(time.Hour)()
				finished := make(chan string, 4)
				defer gateway.SetServerFinished(func(server string) { finished <- server })()
				ended := make(chan bool, 16)
				defer gateway.SetCallEnded(func(_ string, cut bool) { ended <- cut })()
				opts := testserver.Options{ProtocolVersions: []string{version}}
				var sc mcpfsm.ServerConfig
				if kind == "stdio" {
					sc = stdio(t, "b", opts)
				} else {
					sc = inMemory("b", opts)
					sc.Transport.ProtocolVersion = version
				}
				g := start(t, config(sc), gateway.Options{})
				progress := make(chan struct{}, 1)
				a := newWindowFront(t, g, "A", nil)
				b := newWindowFront(t, g, "B", progress)
				waitTools(t, a.cs, has("b__slow_progress"))

				cutCall(t, b, progress)
				select {
				case cut := <-ended:
					if !cut {
						t.Fatal("the cancelled call ended uncut")
					}
				case <-time.After(waitFor):
					t.Fatal("the cancelled call never ended at the gateway")
				}
				select {
				case server := <-finished:
					if server != "b" {
						t.Fatalf("finished: %q", server)
					}
				case <-time.After(waitFor):
					t.Fatalf("the backend answered the cancelled call, and the gateway was never told it is done with it (sizes %v)", g.Sizes())
				}
				if n := g.Sizes()["cut"]; n != 0 {
					t.Fatalf("%d cut calls still count", n)
				}

				// A's log message goes to A alone, on its call.
				if got := text(call(t, a.cs, "b__log", map[string]any{"level": "info", "text": "A's line"})); got != "sent" {
					t.Fatalf("log: %q", got)
				}
				select {
				case got := <-a.logs:
					if got != "A's line" {
						t.Errorf("A got %q", got)
					}
				case <-time.After(waitFor):
					t.Fatal("A never got its call's log message")
				}
				select {
				case got := <-b.logs:
					t.Errorf("B got A's call's log message %q (it was sent to every session)", got)
				default:
				}
				if version == "2025-11-25" {
					// A backend's request during A's call is asked of A.
					if got := text(call(t, a.cs, "b__sample", map[string]any{"prompt": "A's question"})); got != "answered by A" {
						t.Errorf("A's sampling: %q", got)
					}
				}
			})
		}
	}
}

// TestGateway_CutWindowEndsWithTheBackendsSession: a backend that does not answer a
// cancelled call (over streamable HTTP its answer is never read either: the go-sdk
// closes the call's stream) may still be running it, and the call counts for
// attribution, its sampling refused; once the backend's session that ran it has
// ended (a reconnect), nothing of that run can reach the gateway any more, and
// the call no longer counts. (It counted for cutLinger, 30 s, after the reconnect
// too.)
func TestGateway_CutWindowEndsWithTheBackendsSession(t *testing.T) {
	for _, kind := range []string{"in-memory", "http"} {
		t.Run(kind, func(t *testing.T) { cutWindowEndsWithTheBackendsSession(t, kind) })
	}
}

func cutWindowEndsWithTheBackendsSession(t *testing.T, kind string) {
	defer gateway.SetCutLinger(time.Hour)()
	finished := make(chan string, 4)
	defer gateway.SetServerFinished(func(server string) { finished <- server })()
	release := make(chan struct{})
	defer close(release)
	running := make(chan struct{}, 1)
	s := mcp.NewServer(&mcp.Implementation{Name: "deaf", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "deaf"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		running <- struct{}{}
		<-release // cancelled or not
		return &mcp.CallToolResult{}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "sample"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 5,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "q"}}}})
		if err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{res.Content}}, nil, nil
	})
	sc := inMemory("b", testserver.Options{})
	sc.Transport.InMemory.Server = s
	if kind == "http" {
		h := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
		t.Cleanup(h.Close)
		t.Cleanup(h.CloseClientConnections)
		sc.Transport = transport.Config{Name: "b", HTTP: &transport.HTTP{URL: h.URL}}
	}
	sc.Transport.ProtocolVersion = "2025-11-25"
	ended := make(chan bool, 16)
	defer gateway.SetCallEnded(func(_ string, cut bool) { ended <- cut })()
	g := start(t, config(sc), gateway.Options{})
	a := newWindowFront(t, g, "A", nil)
	b := newWindowFront(t, g, "B", nil)
	waitTools(t, a.cs, has("b__deaf"))

	ctx, cancel := context.WithCancel(callCtx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := b.cs.CallTool(ctx, &mcp.CallToolParams{Name: "b__deaf"})
		errc <- err
	}()
	<-running
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cut call was not cancelled")
	}
	select {
	case cut := <-ended:
		if !cut {
			t.Fatal("the cancelled call ended uncut")
		}
	case <-time.After(waitFor):
		t.Fatal("the cancelled call never ended at the gateway")
	}
	// The backend runs it still: A's call's sampling is refused.
	if got := text(call(t, a.cs, "b__sample", nil)); !strings.Contains(got, "cancelled them lately") {
		t.Fatalf("A's sampling while B's cancelled call may run: %q", got)
	}
	select {
	case <-finished:
		t.Fatal("told the backend was done with a call it still runs")
	default:
	}

	g.Manager().Conn("b").Reconnect()
	select {
	case <-finished:
	case <-time.After(waitFor):
		t.Fatalf("the backend's session ended, and the gateway was never told (sizes %v)", g.Sizes())
	}
	if got := text(call(t, a.cs, "b__sample", nil)); got != "answered by A" {
		t.Errorf("A's sampling after the reconnect: %q", got)
	}
}
