package gateway_test

import (
	"context"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestGateway_CutCallsKeepNoRequest: a call the front cancelled counts for a while
// (see cutLinger), and a backend's session watches it for the backend's end of it
// (for good over streamable HTTP, where no late answer is read: until the session
// ends or more are watched); neither may keep the front's request: each kept its
// parameters, so cancelled calls with 512 KiB of parameters each held 512 KiB (1,024 of them per
// backend, more per session).
func TestGateway_CutCallsKeepNoRequest(t *testing.T) {
	h := httptest.NewServer(testserver.NewHandler(testserver.Options{}))
	t.Cleanup(h.Close)
	g := start(t, config(mcpfsm.ServerConfig{Name: "h25", Policies: quick(),
		Transport: transport.Config{Name: "h25", HTTP: &transport.HTTP{URL: h.URL}}}), gateway.Options{})
	watcher := front(t, g, nil, "2025-11-25")
	waitTools(t, watcher, has("h25__hold"))
	cs := front(t, g, nil, "2025-11-25")
	const calls, size = 40, 512 << 10
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	for range calls {
		started := backendCount(t, watcher, "h25", "started held")
		ended := backendCount(t, watcher, "h25", "ended held")
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "h25__hold", Arguments: map[string]any{"ms": 600000},
				Meta: mcp.Meta{"pad": strings.Repeat("x", size)}})
			errc <- err
		}()
		waitCount(t, watcher, "h25", "started held", started, waitFor)
		cancel()
		<-errc
		waitCount(t, watcher, "h25", "ended held", ended, cancelBound)
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	if grew := int64(ms.HeapAlloc) - int64(before); grew > calls*size/2 {
		t.Errorf("after %d cancelled calls of %d KiB, the heap grew %d KiB", calls, size>>10, grew>>10)
	}
	t.Logf("heap: %d KiB before, %d KiB after", before>>10, ms.HeapAlloc>>10)
}
