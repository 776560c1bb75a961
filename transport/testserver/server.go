package testserver

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// GarbageLine is what the stdio binary writes to stdout for Options.Garbage,
// GarbageOnSignal and ControlGarbage: a broken message, a line that starts as a
// JSON-RPC message and is not JSON, which ends a client's session.
const GarbageLine = `{"jsonrpc":"2.0", this is not JSON-RPC}` + "\n"

// NoiseLines is what the stdio binary writes to stdout for Options.Noise (and on
// SIGUSR2 with -on-usr2 noise): lines that are not messages and could not be one,
// as servers print banners and log records to stdout (a word, a log's bracket,
// JSON log records without a "jsonrpc" member, one with an "id" and an "error", a
// number and more on its line, a scalar).
// A client may skip them (mcpfsm does).
const NoiseLines = "Starting the test server on stdio...\n" +
	"[INFO] ready\n" +
	`{"level":"info","msg":"listening","time":"2026-11-28T12:00:00Z"}` + "\n" +
	`{"level":"warn","msg":"retrying","id":3,"error":"connection refused"}` + "\n" +
	"42 tools loaded\n" +
	"true\n"

// Options are the switches of a test server. Some apply to a transport only,
// as noted; New ignores those.
type Options struct {
	// Name is the server's implementation name; "mcptestserver" if empty.
	Name string
	// RefusePing answers ping with method-not-found (-32601).
	RefusePing bool
	// HangInitialize never answers initialize (nor server/discover): the
	// handshake hangs until the client gives up.
	HangInitialize bool
	// HangClose makes closing hang: the stdio binary ignores stdin EOF,
	// SIGTERM and SIGINT and keeps running (only SIGKILL ends it); an HTTP
	// server never answers DELETE.
	HangClose bool
	// Garbage (stdio binary) writes a broken message (GarbageLine) to stdout
	// before anything else.
	Garbage bool
	// Noise (stdio binary) writes NoiseLines to stdout before anything else:
	// lines that are not messages and could not be one, as servers print
	// banners and logs there.
	Noise bool
	// ExitStatus (stdio binary), if not zero, is the status the server exits with
	// when its stdin closes, so that every close of its session reports an error.
	ExitStatus int
	// Stateless (HTTP) serves stateless streamable HTTP, the only kind with
	// which the SDK negotiates protocol 2026-07-28.
	Stateless bool
	// SSE (HTTP) serves the legacy HTTP+SSE transport instead of streamable
	// HTTP.
	SSE bool
	// ToolsTTL, if positive, is the ttlMs cache hint of tools/list results
	// (which the SDK's client honours on protocol 2026-07-28).
	ToolsTTL time.Duration
	// Crash, if set, is what the crash tool does (in process only).
	Crash func()
	// SpawnGrandchild (stdio binary) starts a child process of the server,
	// in its process group, that sleeps forever holding the server's stdout
	// (so that the client's end sees no EOF while it lives).
	SpawnGrandchild bool
	// Grandchild is the pid the grandchild tool returns; the binary sets it
	// when it spawns one.
	Grandchild int

	// Journal, if set, is a file to which the tool journal (registered only
	// then) appends the id of each call it runs, one line each, so that a
	// test can count across restarts how many times a call ran (see
	// ReadJournal).
	Journal string
	// Control, if set, is a control file the server reads before handling
	// each request: faults switched on while their word is in the file, off
	// when it is removed (see Control and WriteControl).
	Control string
	// BurstTool registers the tool tools_changed_burst {n}, which makes the
	// server send notifications/tools/list_changed n times in a row.
	BurstTool bool
	// GarbageOnSignal (stdio binary) writes a broken message (GarbageLine) to
	// stdout each time the process receives SIGUSR1: garbage mid-session.
	GarbageOnSignal bool
	// ProtocolVersions, if not empty, are the only protocol versions the
	// server speaks (mcp.ServerOptions.SupportedProtocolVersions; each must
	// be one the SDK supports). Without 2026-07-28 the SDK's client falls
	// back to initialize on every transport, and the tools that ask the
	// client send it requests.
	ProtocolVersions []string
}

// Name is the default implementation name of the test server.
const Name = "mcptestserver"

// New returns a test server for in-process use (mcp.NewInMemoryTransports,
// or NewHandler). Its hangs last until the request's context ends.
func New(opts Options) *mcp.Server {
	return newServer(opts, nil)
}

// server is the state shared by one test server's handlers.
type server struct {
	opts    Options
	release <-chan struct{} // ends every hang when closed; nil: never

	mu       sync.Mutex
	counts   map[string]int
	counters map[*mcp.ServerSession]int
	extra    bool
	fault    faultState   // the switches of faults.go
	feat     featureState // the features of features.go
}

func newServer(opts Options, release <-chan struct{}) *mcp.Server {
	st := &server{opts: opts, release: release, counts: map[string]int{}, counters: map[*mcp.ServerSession]int{}}
	name := opts.Name
	if name == "" {
		name = Name
	}
	sopts := &mcp.ServerOptions{}
	st.featureOptions(sopts)
	if opts.ToolsTTL > 0 {
		ttl := int(opts.ToolsTTL / time.Millisecond)
		sopts.SetCacheable = func(_ context.Context, req mcp.Request, c *mcp.Cacheable) {
			if _, ok := req.(*mcp.ListToolsRequest); ok {
				c.TTLMs = ttl
			}
		}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "test"}, sopts)
	s.AddReceivingMiddleware(st.middleware)

	yes := true
	mcp.AddTool(s, &mcp.Tool{
		Name:        "echo",
		Description: "Returns its text.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		return text(in.Text), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "counter",
		Description: "Counts its calls in this session: 1, 2, 3...",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(bool)},
	}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		st.mu.Lock()
		st.counters[req.Session]++
		n := st.counters[req.Session]
		st.mu.Unlock()
		return text(strconv.Itoa(n)), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "slow",
		Description: "Sleeps ms milliseconds, then returns.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: new(bool)},
	}, st.sleep("slept"))
	mcp.AddTool(s, &mcp.Tool{
		Name:        "hold",
		Description: "Sleeps ms milliseconds, then returns; not idempotent, so never retried.",
	}, st.sleep("held"))
	mcp.AddTool(s, &mcp.Tool{
		Name:        "pid",
		Description: "Returns the server's process id.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return text(strconv.Itoa(os.Getpid())), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "crash",
		Description: "Dies without answering.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes},
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		if st.opts.Crash != nil {
			st.opts.Crash()
			// Whatever the hook did, this call is never answered.
			st.hang(ctx)
			return nil, nil, errors.New("crashed")
		}
		// Close the session from the server side. The close waits for this
		// handler, and once it has begun the answer is not written.
		go req.Session.Close()
		t := time.NewTimer(50 * time.Millisecond)
		defer t.Stop()
		<-t.C
		return nil, nil, errors.New("crashed")
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "change_tools",
		Description: "Adds or removes the tool extra, so that the tool list changes.",
	}, func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		if st.toggleExtra(s) {
			return text("added extra"), nil, nil
		}
		return text("removed extra"), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "grandchild",
		Description: "Returns the pid of the grandchild process, 0 if none.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return text(strconv.Itoa(opts.Grandchild)), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "stats",
		Description: "Counts, per method, what this server has received.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		st.mu.Lock()
		counts := maps.Clone(st.counts)
		st.mu.Unlock()
		b, err := json.Marshal(counts)
		if err != nil {
			return nil, nil, err
		}
		return text(string(b)), nil, nil
	})
	st.addFaultTools(s)
	st.addFeatures(s)
	return s
}

// middleware counts what the server receives and applies RefusePing and
// HangInitialize.
func (st *server) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		st.mu.Lock()
		st.counts[method]++
		st.mu.Unlock()
		switch {
		case st.opts.RefusePing && method == "ping":
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: ping"}
		case st.opts.HangInitialize && (method == "initialize" || method == "server/discover"):
			st.hang(ctx)
			return nil, errors.New("initialize abandoned")
		}
		if err := st.controlled(ctx, method); err != nil {
			return nil, err
		}
		return next(ctx, method, req)
	}
}

// sleepArgs are the arguments of the tools that wait.
type sleepArgs struct {
	Ms int `json:"ms"`
}

// sleep returns the handler of a tool that waits ms milliseconds, then answers with
// answer; it ends early when the call is canceled or the server is released. The
// server's stats count "started ANSWER" as it begins, "ended ANSWER" when its
// context ends first (the call was cancelled), "answered ANSWER" when it answers.
func (st *server) sleep(answer string) func(context.Context, *mcp.CallToolRequest, sleepArgs) (*mcp.CallToolResult, any, error) {
	return func(ctx context.Context, _ *mcp.CallToolRequest, in sleepArgs) (*mcp.CallToolResult, any, error) {
		st.mu.Lock()
		st.counts["started "+answer]++
		st.mu.Unlock()
		t := time.NewTimer(time.Duration(in.Ms) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			st.mu.Lock()
			st.counts["answered "+answer]++
			st.mu.Unlock()
			return text(answer), nil, nil
		case <-ctx.Done():
			st.mu.Lock()
			st.counts["ended "+answer]++
			st.mu.Unlock()
			return nil, nil, ctx.Err()
		case <-st.release:
			return nil, nil, errors.New("released")
		}
	}
}

// hang blocks until ctx ends or the server is released.
func (st *server) hang(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-st.release:
	}
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// Stats decodes the text of a stats tool result.
func Stats(res *mcp.CallToolResult) (map[string]int, error) {
	if res == nil || len(res.Content) != 1 {
		return nil, errors.New("stats: want one content")
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return nil, errors.New("stats: want text content")
	}
	var m map[string]int
	if err := json.Unmarshal([]byte(tc.Text), &m); err != nil {
		return nil, err
	}
	return m, nil
}

// toggleExtra adds the tool extra, or removes it, and reports whether it added it.
func (st *server) toggleExtra(s *mcp.Server) (added bool) {
	st.mu.Lock()
	st.extra = !st.extra
	added = st.extra
	st.mu.Unlock()
	if added {
		mcp.AddTool(s, &mcp.Tool{Name: "extra", Description: "Does nothing."},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return text("extra"), nil, nil
			})
	} else {
		s.RemoveTools("extra")
	}
	return added
}
