package transport

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type dialKey struct{}

type callKey struct{}

// TestHandlerContexts pins which context the handlers of the caller's client
// (Options.MCPClient) run with. A notification's handler (tools/list_changed)
// runs with a context carrying the values of the context given to Dial (not
// its end: Dial's has ended by then), on every protocol. A server's request
// made while it serves a call (sampling from a tool) differs: on protocol
// 2025-11-25 (streamable HTTP here) it is a request of its own, and its
// handler's context carries Dial's values; on 2026-07-28 (stdio here) the
// SDK's client fulfils it inside the call (multi round-trip, SEP-2322), and
// its handler's context is the call's.
func TestHandlerContexts(t *testing.T) {
	for _, tc := range []struct {
		kind
		protocol string
		sample   string // the value the sampling handler sees
	}{
		{kind{"stdio", func(t *testing.T, o testserver.Options) Config {
			cfg := stdioConfig(t, o)
			cfg.Stdio.Args = append([]string{"-sampling-tool"}, cfg.Stdio.Args...)
			return cfg
		}}, "2026-07-28", "call"},
		{kind{"http", func(t *testing.T, o testserver.Options) Config {
			srv := testserver.New(o)
			testserver.AddSamplingTool(srv)
			h := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
			t.Cleanup(h.Close)
			return Config{Name: "http-test", HTTP: &HTTP{URL: h.URL}}
		}}, "2025-11-25", "dial"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := make(chan string, 8)
			values := func(ctx context.Context) string {
				var v []string
				for _, k := range []any{dialKey{}, callKey{}} {
					if s, ok := ctx.Value(k).(string); ok {
						v = append(v, s)
					}
				}
				return strings.Join(v, ",")
			}
			client := NewClient(&mcp.Implementation{Name: "api-test", Version: "1"}, &mcp.ClientOptions{
				ToolListChangedHandler: func(ctx context.Context, _ *mcp.ToolListChangedRequest) {
					seen <- "tools " + values(ctx)
				},
				CreateMessageHandler: func(ctx context.Context, _ *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
					seen <- "sample " + values(ctx)
					return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "sampled"}}, nil
				},
			})
			ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), dialKey{}, "dial"), dialTimeout)
			s, err := Dial(ctx, tc.start(t, testserver.Options{}), Options{
				MCPClient:      client,
				OnToolsChanged: func() { t.Error("OnToolsChanged called with MCPClient set") },
			})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close(callCtx(t)) })
			if s.client != nil {
				t.Error("the session took a shared client although MCPClient is set")
			}
			if got := s.ProtocolVersion(); got != tc.protocol {
				t.Fatalf("protocol %s, want %s", got, tc.protocol)
			}
			cctx := context.WithValue(callCtx(t), callKey{}, "call")
			res, err := s.CallTool(cctx, &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"text": "hi"}})
			if err != nil || resultText(res) != "sampled" {
				t.Fatalf("sample = %v (%s), %v", res, resultText(res), err)
			}
			if got := recvString(t, seen); got != "sample "+tc.sample {
				t.Errorf("the sampling handler saw %q, want %q", got, "sample "+tc.sample)
			}
			if _, err := s.CallTool(cctx, &mcp.CallToolParams{Name: "change_tools"}); err != nil {
				t.Fatal(err)
			}
			if got := recvString(t, seen); got != "tools dial" {
				t.Errorf("the tool-list handler saw %q, want %q", got, "tools dial")
			}
		})
	}
}

func recvString(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(callTimeout):
		t.Fatal("no handler was called")
		return ""
	}
}

// TestNewClientAdvertisesNoRoots: sessions advertise roots only when the
// caller's Capabilities asks for them (the SDK's nil Capabilities means
// roots).
func TestNewClientAdvertisesNoRoots(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  Options
		roots bool
	}{
		{"shared client", Options{}, false},
		{"NewClient", Options{MCPClient: NewClient(nil, nil)}, false},
		{"asked", Options{MCPClient: NewClient(nil, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{RootsV2: &mcp.RootCapabilities{}}})}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dial(t, memoryConfig(testserver.Options{}), tc.opts)
			caps := s.ss.InitializeParams().Capabilities
			if got := caps != nil && (caps.RootsV2 != nil || caps.Roots.ListChanged); got != tc.roots {
				t.Errorf("roots advertised: %v, want %v (%+v)", got, tc.roots, caps)
			}
			if got := s.InitializeResult().ServerInfo.Name; got != testserver.Name {
				t.Errorf("InitializeResult().ServerInfo.Name = %q", got)
			}
		})
	}
}

// TestRequest: Request runs a request on the SDK session and wraps its
// failure as an *Error of the given op and name.
func TestRequest(t *testing.T) {
	s := dial(t, memoryConfig(testserver.Options{}), Options{})
	if err := s.Request(callCtx(t), OpRequest, "", func(ctx context.Context, cs *mcp.ClientSession) error {
		return cs.Ping(ctx, nil)
	}); err != nil {
		t.Errorf("Request(ping) = %v", err)
	}
	err := s.Request(callCtx(t), "get prompt", "nope", func(ctx context.Context, cs *mcp.ClientSession) error {
		_, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "nope"})
		return err
	})
	var te *Error
	var je *jsonrpc.Error
	if !errors.As(err, &te) || te.Op != "get prompt" || te.Tool != "nope" || !errors.As(err, &je) {
		t.Errorf("Request = %v, want an *Error of op \"get prompt\" for \"nope\" wrapping the server's error", err)
	}
	var c Client = s
	if c.ID() != "" || c.InitializeResult() == nil {
		t.Errorf("Client: ID %q, InitializeResult %v", c.ID(), c.InitializeResult())
	}
}
