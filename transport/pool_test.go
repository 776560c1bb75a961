package transport

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// TestHTTPConnectionsKeptForConcurrentCalls: a session's calls made many at a time
// over streamable HTTP reuse their connections. The session's own transport (a
// clone of net/http's default) kept 2 idle connections to the server: 800 calls, 16
// at a time, opened 686 connections, one a call, each left in TIME_WAIT (at a few
// thousand calls a second through a gateway, the loopback's ephemeral ports run
// out within a minute).
func TestHTTPConnectionsKeptForConcurrentCalls(t *testing.T) {
	ms := testserver.New(testserver.Options{})
	srv := httptest.NewUnstartedServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms }, nil))
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	s := dial(t, Config{Name: "pool", HTTP: &HTTP{URL: srv.URL}}, Options{})
	before := conns.Load()
	const rounds, conc = 50, 16
	for range rounds {
		var wg sync.WaitGroup
		for range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := echo(callCtx(t), s, "x"); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	// The first round opens one a call; later rounds find them idle (a
	// connection still finishing its last answer may add a few).
	if n := conns.Load() - before; n > 3*conc {
		t.Errorf("%d calls, %d at a time, opened %d connections; want at most %d", rounds*conc, conc, n, 3*conc)
	}
}
