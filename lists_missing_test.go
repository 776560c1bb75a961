package mcpfsm

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
)

// TestListsTheServerDoesNotHave: a server that answers a list it does not have with
// method-not-found (-32601) has none of it, and the connection comes up. Servers in
// the wild declare a capability and leave one of its lists out: a Python server with
// resources and no template handler answers resources/templates/list so, and a
// TypeScript server without tools answers tools/list so. Every connect failed the
// handshake on it (a protocol failure, counted), so the connection never came up, and
// its breaker opened; a gateway's backend with resources never served.
func TestListsTheServerDoesNotHave(t *testing.T) {
	for _, tc := range []struct {
		name string
		caps map[string]any
		has  map[string]any // the lists answered, by method
	}{
		{"resources without templates", map[string]any{"resources": map[string]any{}, "tools": map[string]any{}}, map[string]any{
			"tools/list":     map[string]any{"tools": []any{map[string]any{"name": "t", "inputSchema": map[string]any{"type": "object"}}}},
			"resources/list": map[string]any{"resources": []any{map[string]any{"name": "r", "uri": "test://r"}}},
		}},
		{"no tools at all", map[string]any{"prompts": map[string]any{}}, map[string]any{
			"prompts/list": map[string]any{"prompts": []any{map[string]any{"name": "p"}}},
		}},
		{"prompts declared, not answered", map[string]any{"tools": map[string]any{}, "prompts": map[string]any{}}, map[string]any{
			"tools/list": map[string]any{"tools": []any{}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(testutil.RawHTTPServer(false, func(method string) any {
				switch method {
				case "initialize":
					return map[string]any{"protocolVersion": "2025-11-25", "capabilities": tc.caps,
						"serverInfo": map[string]any{"name": "partial", "version": "0"}}
				case "ping":
					return map[string]any{}
				}
				return tc.has[method]
			}))
			t.Cleanup(srv.Close)
			var mu sync.Mutex
			var got struct {
				tools     []string
				prompts   []string
				resources []string
				templates int
			}
			c := open(t, transport.Config{Name: "partial", HTTP: &transport.HTTP{URL: srv.URL}}, nil, func(o *Options) {
				o.Handlers.ToolsChanged = func(ts []*mcp.Tool) {
					mu.Lock()
					defer mu.Unlock()
					got.tools = []string{}
					for _, x := range ts {
						got.tools = append(got.tools, x.Name)
					}
				}
				o.Handlers.PromptsChanged = func(ps []*mcp.Prompt) {
					mu.Lock()
					defer mu.Unlock()
					got.prompts = []string{}
					for _, x := range ps {
						got.prompts = append(got.prompts, x.Name)
					}
				}
				o.Handlers.ResourcesChanged = func(rs []*mcp.Resource, ts []*mcp.ResourceTemplate) {
					mu.Lock()
					defer mu.Unlock()
					got.resources = []string{}
					for _, x := range rs {
						got.resources = append(got.resources, x.URI)
					}
					got.templates = len(ts)
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.WaitReady(ctx); err != nil {
				t.Fatalf("%v\n%s", err, c.timeline())
			}
			for _, tr := range c.transitions() {
				if tr.Trigger == string(states.ConnectFailed) {
					t.Errorf("a connect failed: %v\n%s", tr, c.timeline())
				}
			}
			want := map[string][]string{"tools": {}, "prompts": {}, "resources": {}}
			for method, list := range tc.has {
				for _, key := range []string{"tools", "prompts", "resources"} {
					if method == key+"/list" {
						for _, it := range list.(map[string]any)[key].([]any) {
							m := it.(map[string]any)
							name, _ := m["name"].(string)
							if key == "resources" {
								name = m["uri"].(string)
							}
							want[key] = append(want[key], name)
						}
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(want, map[string][]string{"tools": got.tools, "prompts": got.prompts, "resources": got.resources}); diff != "" {
				t.Errorf("lists delivered (-want +got):\n%s", diff)
			}
			if got.templates != 0 {
				t.Errorf("%d templates, want none", got.templates)
			}
		})
	}
}
