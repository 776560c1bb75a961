package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// exampleServer is the project's example MCP server (tools echo, counter, slow, ...)
// served over streamable HTTP on loopback, with switches that play faults: it can
// freeze (accept requests and answer nothing), restart (forgetting its sessions, as a
// restarted process does) and stop.
type exampleServer struct {
	addr string

	mu      sync.Mutex
	srv     *http.Server // nil while stopped
	handler http.Handler
	servers []*mcp.Server // every generation, whose sessions close ends
	frozen  chan struct{} // non-nil while frozen; closed by thaw
	serving sync.WaitGroup
}

// startExampleServer listens on addr (":0" style addresses pick a free port).
func startExampleServer(addr string) (*exampleServer, error) {
	e := &exampleServer{}
	e.newGeneration()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	e.addr = l.Addr().String()
	e.serve(l)
	return e, nil
}

// newGeneration makes a new server and handler, which know no session. Called with mu
// held, or before e is shared.
func (e *exampleServer) newGeneration() {
	server := testserver.New(testserver.Options{Name: "example-server"})
	e.servers = append(e.servers, server)
	e.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
}

// URL is the server's MCP endpoint.
func (e *exampleServer) URL() string { return "http://" + e.addr + "/mcp" }

func (e *exampleServer) serve(l net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(e.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	e.mu.Lock()
	e.srv = srv
	e.mu.Unlock()
	e.serving.Add(1)
	go func() {
		defer e.serving.Done()
		_ = srv.Serve(l)
	}()
}

func (e *exampleServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	frozen, h := e.frozen, e.handler
	e.mu.Unlock()
	if frozen != nil {
		select {
		case <-frozen:
		case <-r.Context().Done():
			return
		}
	}
	h.ServeHTTP(w, r)
}

// freeze makes the server stop answering until thaw.
func (e *exampleServer) freeze() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.frozen == nil {
		e.frozen = make(chan struct{})
	}
}

// thaw ends a freeze.
func (e *exampleServer) thaw() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.frozen != nil {
		close(e.frozen)
		e.frozen = nil
	}
}

// stop closes the listener and every connection: clients get connection refused.
func (e *exampleServer) stop() {
	e.mu.Lock()
	srv := e.srv
	e.srv = nil
	e.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
	e.serving.Wait()
}

// restartTime is how long a restart takes. A real process takes longer; an instant one
// races the client's pool of keep-alive connections, whose stale member can carry the
// next POST into a closed socket (EOF), which a client cannot tell from a crash
// mid-request.
const restartTime = 100 * time.Millisecond

// restart stops the server and starts it again on the same address; with
// forgetSessions it knows none of its old sessions, as a restarted process would not.
func (e *exampleServer) restart(forgetSessions bool) error {
	e.stop()
	time.Sleep(restartTime)
	if forgetSessions {
		e.mu.Lock()
		e.newGeneration()
		e.mu.Unlock()
	}
	var l net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if l, err = net.Listen("tcp", e.addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return err
	}
	e.serve(l)
	return nil
}

// close stops the server for good, ending every hang, and closes the sessions of
// every generation (a forgotten session lives on in its server until closed).
func (e *exampleServer) close(ctx context.Context) error {
	e.thaw()
	e.mu.Lock()
	srv, servers := e.srv, e.servers
	e.srv = nil
	e.mu.Unlock()
	var err error
	if srv != nil {
		err = srv.Shutdown(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			err = srv.Close()
		}
		e.serving.Wait()
	}
	for _, s := range servers {
		for ss := range s.Sessions() {
			_ = ss.Close()
		}
	}
	return err
}
