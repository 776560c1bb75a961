package testserver

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPServer is a test server on a loopback HTTP port, with faults a test can
// switch on and off. Streamable HTTP by default; Options.SSE for legacy SSE,
// Options.Stateless for stateless streamable HTTP. Options.HangClose makes
// DELETE hang. Its crash tool stops the HTTP server (see Stop), as if the
// process had died.
//
// Everything it starts is stopped by the test's cleanup.
type HTTPServer struct {
	tb      testing.TB
	opts    Options
	release chan struct{} // closed at cleanup: ends every hang

	mu      sync.Mutex
	srv     *httptest.Server   // nil while stopped
	stopped []*httptest.Server // closed for good at cleanup
	addr    string
	handler http.Handler   // the current generation's MCP handler
	server  *mcp.Server    // the current generation's server
	servers []*mcp.Server  // every generation, to close their sessions at cleanup
	frozen  chan struct{}  // non-nil while frozen; closed by Thaw
	status  int            // if non-zero, the status every POST gets
	counts  map[string]int // requests seen, by JSON-RPC method or HTTP method
	crashes sync.WaitGroup // Stops started by the crash tool
}

// StartHTTP starts a test server on 127.0.0.1 with a free port.
func StartHTTP(tb testing.TB, opts Options) *HTTPServer {
	tb.Helper()
	h := &HTTPServer{tb: tb, opts: opts, release: make(chan struct{}), counts: map[string]int{}}
	h.opts.Crash = func() {
		h.crashes.Add(1)
		go func() {
			defer h.crashes.Done()
			h.Stop()
		}()
	}
	h.newGeneration()
	h.srv = httptest.NewServer(h)
	h.addr = h.srv.Listener.Addr().String()
	tb.Cleanup(h.cleanup)
	return h
}

// newGeneration makes a new server and handler, which know no session.
// Called with mu held, or before h is shared.
func (h *HTTPServer) newGeneration() {
	h.server = newServer(h.opts, h.release)
	h.servers = append(h.servers, h.server)
	h.handler = mcpHandler(h.server, h.opts)
}

// URL returns the MCP endpoint. It stays the same across Restart.
func (h *HTTPServer) URL() string { return "http://" + h.addr + "/mcp" }

// Server returns the current MCP server (a new one after Restart(true)).
func (h *HTTPServer) Server() *mcp.Server {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.server
}

// Count returns how many requests reached the HTTP handler with this JSON-RPC
// method ("ping", "tools/list", "notifications/initialized", ...; "response"
// for a JSON-RPC response the client posted), or this HTTP method for
// requests without a JSON-RPC body ("GET", "DELETE"). Requests are counted
// when they arrive, frozen or not.
func (h *HTTPServer) Count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[key]
}

// Freeze makes the server accept connections and requests but answer nothing
// until Thaw: new requests wait before reaching the MCP handler, and responses
// (and event streams) in progress stop at their next write.
func (h *HTTPServer) Freeze() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.frozen == nil {
		h.frozen = make(chan struct{})
	}
}

// Thaw ends a Freeze: everything that waited proceeds.
func (h *HTTPServer) Thaw() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.frozen != nil {
		close(h.frozen)
		h.frozen = nil
	}
}

// SetStatus makes every POST get this HTTP status (and no body) without
// reaching the MCP handler; 0 restores normal service.
func (h *HTTPServer) SetStatus(code int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.status = code
}

// Stop closes the listener and every connection at once: clients get
// connection refused from now on. It does not wait for the handlers of the
// requests it cut off (the SDK's SSE handler, for one, waits for the tool
// calls of its session); cleanup does. Stop is idempotent; Restart starts
// again.
func (h *HTTPServer) Stop() {
	h.mu.Lock()
	srv := h.srv
	h.srv = nil
	if srv != nil {
		h.stopped = append(h.stopped, srv)
	}
	h.mu.Unlock()
	if srv != nil {
		srv.Config.SetKeepAlivesEnabled(false)
		srv.Listener.Close()
		srv.CloseClientConnections()
	}
}

// Restart stops the server (if running) and starts it again on the same
// address. With forgetSessions the new server knows none of the old sessions
// (requests carrying their IDs get 404, as from a restarted process);
// otherwise sessions survive, as across a network blip.
func (h *HTTPServer) Restart(forgetSessions bool) {
	h.tb.Helper()
	h.Stop()
	if forgetSessions {
		h.mu.Lock()
		h.newGeneration()
		h.mu.Unlock()
	}
	var l net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		if l, err = net.Listen("tcp", h.addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		h.tb.Fatalf("restarting the test server on %s: %v", h.addr, err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	h.mu.Lock()
	h.srv = srv
	h.mu.Unlock()
}

func (h *HTTPServer) cleanup() {
	close(h.release)
	h.Thaw()
	h.Stop()
	h.crashes.Wait()
	h.mu.Lock()
	servers, stopped := h.servers, h.stopped
	h.mu.Unlock()
	for _, s := range servers {
		for ss := range s.Sessions() {
			_ = ss.Close()
		}
	}
	for _, srv := range stopped {
		srv.Close()
	}
}

// ServeHTTP implements http.Handler: it counts, applies the faults, and hands
// the request to the current MCP handler.
func (h *HTTPServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Method
	if r.Method == http.MethodPost {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		key = rpcMethod(body)
	}
	h.mu.Lock()
	h.counts[key]++
	status := h.status
	handler := h.handler
	h.mu.Unlock()

	if !h.wait(r) {
		return
	}
	if status != 0 && r.Method == http.MethodPost {
		http.Error(w, http.StatusText(status), status)
		return
	}
	hangDelete(h.opts.HangClose, h.release, handler).ServeHTTP(&frozenWriter{ResponseWriter: w, h: h, r: r}, r)
}

// wait blocks while the server is frozen. It reports false if the request
// ended (or the harness was cleaned up) first.
func (h *HTTPServer) wait(r *http.Request) bool {
	h.mu.Lock()
	frozen := h.frozen
	h.mu.Unlock()
	if frozen == nil {
		return true
	}
	select {
	case <-frozen:
		return true
	case <-r.Context().Done():
	case <-h.release:
	}
	return false
}

// rpcMethod returns the method of a JSON-RPC message (the first of a batch),
// "response" for a response, or "POST" if body is not JSON-RPC.
func rpcMethod(body []byte) string {
	type msg struct {
		Method string `json:"method"`
	}
	var m msg
	if err := json.Unmarshal(body, &m); err != nil {
		var batch []msg
		if err := json.Unmarshal(body, &batch); err != nil || len(batch) == 0 {
			return http.MethodPost
		}
		m = batch[0]
	}
	if m.Method == "" {
		return "response"
	}
	return m.Method
}

// frozenWriter holds every write while its server is frozen.
type frozenWriter struct {
	http.ResponseWriter
	h *HTTPServer
	r *http.Request
}

// WriteHeader writes the header once the server is not frozen.
func (w *frozenWriter) WriteHeader(code int) {
	if w.h.wait(w.r) {
		w.ResponseWriter.WriteHeader(code)
	}
}

// Write writes once the server is not frozen.
func (w *frozenWriter) Write(b []byte) (int, error) {
	if !w.h.wait(w.r) {
		return 0, http.ErrHandlerTimeout
	}
	return w.ResponseWriter.Write(b)
}

// FlushError flushes unless frozen (http.ResponseController uses it).
func (w *frozenWriter) FlushError() error {
	if !w.h.wait(w.r) {
		return http.ErrHandlerTimeout
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush implements http.Flusher.
func (w *frozenWriter) Flush() { _ = w.FlushError() }

// Unwrap gives http.ResponseController the underlying writer.
func (w *frozenWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
