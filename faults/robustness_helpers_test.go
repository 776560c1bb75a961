package faults_test

// Helpers of the churn, long-run and secrets tests (churn_test.go, longrun_test.go,
// secrets_test.go). The fault matrix (matrix_*_test.go, package faults) has its own.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

// A processBaseline is what a test must leave as it found: goroutines, open file
// descriptors, child processes.
type processBaseline struct {
	goroutines goleak.Option
	fds        map[string]string
	children   []int
}

// takeBaseline records the process's state. It first makes the runtime open what it
// opens once per process (the network poller), so that it is part of the baseline.
func takeBaseline(t *testing.T) processBaseline {
	t.Helper()
	if l, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		l.Close()
	}
	return processBaseline{goroutines: goleak.IgnoreCurrent(), fds: testutil.OpenFiles(), children: testutil.ChildPIDs()}
}

// check fails the test unless the process is back to the baseline within a grace
// period: no goroutine, descriptor or child process the test started is left.
func (b processBaseline) check(t *testing.T) {
	t.Helper()
	goleak.VerifyNone(t, b.goroutines)
	var extraFDs []string
	var extraKids []int
	deadline := time.Now().Add(10 * time.Second)
	for {
		extraFDs, extraKids = nil, nil
		for fd, target := range testutil.OpenFiles() {
			if b.fds[fd] != target {
				extraFDs = append(extraFDs, fd+" → "+target)
			}
		}
		for _, pid := range testutil.ChildPIDs() {
			if !slices.Contains(b.children, pid) {
				extraKids = append(extraKids, pid)
			}
		}
		if len(extraFDs) == 0 && len(extraKids) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	slices.Sort(extraFDs)
	if len(extraFDs) > 0 {
		t.Errorf("%d file descriptors left open: %v", len(extraFDs), extraFDs)
	}
	if len(extraKids) > 0 {
		t.Errorf("child processes left: %v", extraKids)
	}
}

// journalServer is an MCP server that journals every run of its tools, so a test can
// tell from the server's side whether a call ran, and how many times.
//
//   - record {id}: not idempotent (no annotations); journals id and returns it.
//   - read {id}: read-only; journals id and returns it.
//
// It can drop every session it has (as a server that restarts its workers does).
type journalServer struct {
	srv *mcp.Server

	mu   sync.Mutex
	runs map[string]int
}

type idArgs struct {
	ID string `json:"id"`
}

func newJournalServer() *journalServer {
	j := &journalServer{runs: map[string]int{}}
	j.srv = mcp.NewServer(&mcp.Implementation{Name: "journal", Version: "test"}, nil)
	run := func(_ context.Context, _ *mcp.CallToolRequest, in idArgs) (*mcp.CallToolResult, any, error) {
		j.mu.Lock()
		j.runs[in.ID]++
		j.mu.Unlock()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.ID}}}, nil, nil
	}
	mcp.AddTool(j.srv, &mcp.Tool{Name: "record", Description: "Journals its id; not idempotent."}, run)
	mcp.AddTool(j.srv, &mcp.Tool{Name: "read", Description: "Journals its id; read-only.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, run)
	return j
}

// ran returns how many times the server ran a call with this id.
func (j *journalServer) ran(id string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.runs[id]
}

// dropSessions closes every session from the server's side.
func (j *journalServer) dropSessions() {
	for ss := range j.srv.Sessions() {
		_ = ss.Close()
	}
}

// flappingHTTP serves a journalServer over streamable HTTP on a fixed loopback
// address, and can go down (connections refused), come back, and restart forgetting
// its sessions (their IDs get 404).
type flappingHTTP struct {
	tb   testing.TB
	j    *journalServer
	sse  bool // legacy HTTP+SSE instead of streamable HTTP
	addr string

	mu      sync.Mutex
	srv     *httptest.Server
	handler http.Handler
	stopped []*httptest.Server
}

func startFlappingHTTP(tb testing.TB, j *journalServer) *flappingHTTP {
	return startFlapping(tb, j, false)
}

// startFlapping starts a flappingHTTP serving streamable HTTP, or legacy SSE.
func startFlapping(tb testing.TB, j *journalServer, sse bool) *flappingHTTP {
	f := &flappingHTTP{tb: tb, j: j, sse: sse}
	f.handler = f.newHandler()
	f.srv = httptest.NewServer(f)
	f.addr = f.srv.Listener.Addr().String()
	tb.Cleanup(f.close)
	return f
}

func (f *flappingHTTP) newHandler() http.Handler {
	if f.sse {
		return mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return f.j.srv }, nil)
	}
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return f.j.srv }, nil)
}

// URL is the MCP endpoint, the same across restarts.
func (f *flappingHTTP) URL() string { return "http://" + f.addr + "/mcp" }

func (f *flappingHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	h := f.handler
	f.mu.Unlock()
	h.ServeHTTP(w, r)
}

// down closes the listener and every connection: clients get refused.
func (f *flappingHTTP) down() {
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	if srv != nil {
		f.stopped = append(f.stopped, srv)
	}
	f.mu.Unlock()
	if srv != nil {
		srv.Config.SetKeepAlivesEnabled(false)
		srv.Listener.Close()
		srv.CloseClientConnections()
	}
}

// up listens again on the same address. With forget, the server knows none of the
// sessions it had.
func (f *flappingHTTP) up(forget bool) {
	f.mu.Lock()
	running := f.srv != nil
	if forget {
		f.handler = f.newHandler()
	}
	f.mu.Unlock()
	if running {
		return
	}
	var l net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		if l, err = net.Listen("tcp", f.addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		f.tb.Errorf("listening again on %s: %v", f.addr, err)
		return
	}
	srv := httptest.NewUnstartedServer(f)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	f.mu.Lock()
	f.srv = srv
	f.mu.Unlock()
}

// forget makes the server forget every session, without cutting the connections in
// progress: requests already being handled finish on the old sessions, new ones with
// their IDs get 404.
func (f *flappingHTTP) forget() {
	f.mu.Lock()
	f.handler = f.newHandler()
	f.mu.Unlock()
}

func (f *flappingHTTP) close() {
	f.down()
	f.j.dropSessions()
	f.mu.Lock()
	stopped := f.stopped
	f.mu.Unlock()
	for _, s := range stopped {
		s.Close()
	}
}

// errorTexts returns the texts an error shows (Error, %v, %+v, %#v), and those of
// every error it wraps (errors.Unwrap, single and multiple) down to and including
// each *transport.Error: what mcpfsm produced, which must never show a secret.
func errorTexts(err error) []string {
	ours, _ := chainTexts(err)
	return ours
}

// chainTexts walks err's whole chain and returns the texts of the errors down to
// and including each *transport.Error (ours), and those of the errors beneath one
// (raw): the cause a *transport.Error wraps unchanged, as the SDK, the OS or the
// server produced it, so that errors.Is and errors.As see through it. The raw texts
// are searched too, to prove that redaction was needed (they quote the secrets the
// server or the SDK put there) and that each quote has a *transport.Error above it
// that redacted it.
func chainTexts(err error) (ours, raw []string) {
	var walk func(err error, under bool)
	walk = func(err error, under bool) {
		if err == nil {
			return
		}
		texts := renderings(err)
		if under {
			raw = append(raw, texts...)
		} else {
			ours = append(ours, texts...)
		}
		if _, ok := err.(*transport.Error); ok {
			under = true
		}
		switch x := err.(type) {
		case interface{ Unwrap() []error }:
			for _, k := range x.Unwrap() {
				walk(k, under)
			}
		case interface{ Unwrap() error }:
			walk(x.Unwrap(), under)
		}
	}
	walk(err, false)
	return ours, raw
}

// renderings returns the ways an error is commonly printed.
func renderings(err error) []string {
	return []string{err.Error(), fmt.Sprintf("%v", err), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err), fmt.Sprintf("%s", err)}
}
