package transport

import (
	"net/http/httptest"
	"testing"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
)

// TestAServerWithoutTools: a server that has no tools, and answers tools/list (and
// ping) with method-not-found, has none: ListTools returns an empty list, and Probe
// takes the answer for the sign of life it is. (ListTools failed: every connect of
// such a server failed its handshake. Probe failed as well, so a server without tools
// or ping was taken for dead at each keepalive.)
func TestAServerWithoutTools(t *testing.T) {
	srv := httptest.NewServer(testutil.RawHTTPServer(false, func(method string) any {
		if method == "initialize" {
			return map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"prompts": map[string]any{}},
				"serverInfo": map[string]any{"name": "toolless", "version": "0"}}
		}
		return nil
	}))
	t.Cleanup(srv.Close)
	s := dial(t, Config{Name: "toolless", HTTP: &HTTP{URL: srv.URL}}, Options{})
	tools, err := s.ListTools(callCtx(t))
	if err != nil || len(tools) != 0 {
		t.Errorf("ListTools = %v, %v; want an empty list and no error", tools, err)
	}
	for range 2 { // ping refused, then tools/list from the first on
		if err := s.Probe(callCtx(t)); err != nil {
			t.Errorf("Probe: %v, want nil (the server answered)", err)
		}
	}
}
