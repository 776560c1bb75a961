package testserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file holds the MCP features beyond tools: resources (static,
// templated, subscribable), prompts, completion, log messages, progress, the
// tools that ask the client for sampling, elicitation and roots, and the
// per-session record the state tool reports. They are always on; none
// changes what the tools of server.go do.

// The resources of the test server.
const (
	// ResourceA and ResourceB are the static resources, always listed.
	ResourceA = "test://static/a"
	ResourceB = "test://static/b"
	// ResourceExtra is the static resource change_resources adds and removes.
	ResourceExtra = "test://static/extra"
	// ItemTemplate is the resource template: any id reads as an item.
	ItemTemplate = "test://items/{id}"
	// itemPrefix is what every URI of ItemTemplate starts with.
	itemPrefix = "test://items/"
)

// The prompts of the test server.
const (
	// PromptGreet is the prompt greet {name (required), greeting}.
	PromptGreet = "greet"
	// PromptExtra is the prompt change_prompts adds and removes.
	PromptExtra = "extra"
)

// CompletionNames are the values completion offers for the name argument
// of the greet prompt; CompletionIDs those for the id variable of
// ItemTemplate. Completion returns those that start with the value typed.
var (
	CompletionNames = []string{"alice", "alicia", "bob", "carol"}
	CompletionIDs   = []string{"apple", "apricot", "banana", "cherry"}
)

// maxRecorded bounds each list a session's record keeps, so that a long
// benchmark against one session does not grow the server without bound.
const maxRecorded = 100

// SessionState is what the state tool reports about the session that calls
// it (decode it with State).
type SessionState struct {
	// ID is the session's ID: "" on stdio, in memory and on stateless HTTP.
	ID string `json:"id"`
	// Protocol is the protocol version the client asked for (in initialize,
	// or in the request's _meta on 2026-07-28).
	Protocol string `json:"protocol"`
	// LogLevel is the level of the last logging/setLevel the session
	// received; "" if none.
	LogLevel string `json:"logLevel"`
	// LogLevels are the levels of the first 100 logging/setLevel, in order.
	LogLevels []string `json:"logLevels"`
	// Subscriptions are the URIs the session is subscribed to now, sorted.
	// On protocol 2026-07-28 a subscription lasts as long as its
	// subscriptions/listen request.
	Subscriptions []string `json:"subscriptions"`
	// Subscribed are the URIs of the first 100 subscribes the session made
	// (by resources/subscribe or subscriptions/listen), in order, including
	// refused ones.
	Subscribed []string `json:"subscribed"`
	// RootsListChanged counts the notifications/roots/list_changed received.
	RootsListChanged int `json:"rootsListChanged"`
	// Methods are the methods of the first 100 requests and notifications
	// the session received, in the order the server began handling them
	// (this call's tools/call included; each round of a multi-round-trip
	// call is a tools/call of its own). Requests the client sent without
	// waiting for an answer in between may appear in either order.
	Methods []string `json:"methods"`
	// Tools counts the tools/call requests the session received, by tool (every
	// one, not only the first 100).
	Tools map[string]int `json:"tools"`
}

// State decodes the text of a state tool result.
func State(res *mcp.CallToolResult) (SessionState, error) {
	var s SessionState
	if res == nil || len(res.Content) != 1 {
		return s, errors.New("state: want one content")
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return s, errors.New("state: want text content")
	}
	err := json.Unmarshal([]byte(tc.Text), &s)
	return s, err
}

// featureState is the state of the features of this file.
type featureState struct {
	srv *mcp.Server

	mu        sync.Mutex
	sessions  map[*mcp.ServerSession]*sessionRecord
	pruneAt   int            // prune dead sessions' records when there are this many
	versions  map[string]int // touches per resource URI
	extraRes  bool           // ResourceExtra is listed
	extraProm bool           // PromptExtra is listed
}

// sessionRecord is what one session sent the server.
type sessionRecord struct {
	level      string // of the last logging/setLevel
	levels     []string
	subs       map[string]bool
	subscribed []string
	roots      int
	methods    []string
	tools      map[string]int // tools/call requests, by tool
}

// logSent is the context key under which the log tool learns whether its
// message went out (the sending middleware sets it).
type logSent struct{}

// featureOptions sets the server options the features need.
func (st *server) featureOptions(o *mcp.ServerOptions) {
	o.SupportedProtocolVersions = st.opts.ProtocolVersions
	o.SubscribeHandler = st.subscribe
	o.UnsubscribeHandler = st.unsubscribe
	o.CompletionHandler = complete
	o.RootsListChangedHandler = func(_ context.Context, req *mcp.RootsListChangedRequest) {
		st.record(req.Session, func(r *sessionRecord) { r.roots++ })
	}
}

// addFeatures adds the resources, prompts and tools of this file to s.
func (st *server) addFeatures(s *mcp.Server) {
	st.feat.srv = s
	st.feat.sessions = map[*mcp.ServerSession]*sessionRecord{}
	st.feat.versions = map[string]int{}
	st.feat.pruneAt = 64
	s.AddReceivingMiddleware(st.recordMiddleware)
	s.AddSendingMiddleware(logSentMiddleware)

	for _, uri := range []string{ResourceA, ResourceB} {
		st.addStatic(s, uri)
	}
	s.AddResourceTemplate(&mcp.ResourceTemplate{
		Name:        "item",
		URITemplate: ItemTemplate,
		Description: "Any id reads as an item.",
		MIMEType:    "text/plain",
	}, st.readResource)
	st.addGreet(s)

	// The tools that ask the client change nothing on the server.
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}
	mcp.AddTool(s, &mcp.Tool{
		Name: "touch",
		Description: "Bumps the version of the resource uri and sends notifications/resources/updated " +
			"to the sessions subscribed to it; returns how many sessions are subscribed.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(bool)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
		URI string `json:"uri"`
	}) (*mcp.CallToolResult, any, error) {
		if in.URI == "" {
			return nil, nil, errors.New("uri is required")
		}
		n := st.touch(in.URI)
		if err := s.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: in.URI}); err != nil {
			return nil, nil, err
		}
		return text(strconv.Itoa(n)), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "change_resources",
		Description: "Adds or removes the resource " + ResourceExtra + ", so that the resource list changes.",
	}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		if st.toggleResource(s) {
			return text("added " + ResourceExtra), nil, nil
		}
		return text("removed " + ResourceExtra), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "change_prompts",
		Description: "Adds or removes the prompt " + PromptExtra + ", so that the prompt list changes.",
	}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		if st.togglePrompt(s) {
			return text("added " + PromptExtra), nil, nil
		}
		return text("removed " + PromptExtra), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name: "log",
		Description: "Sends text as notifications/message at level, through the session's logger " +
			"(which drops it below the level the client set); returns sent or filtered.",
		Annotations: readOnly,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Level string `json:"level"`
		Text  string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		if !slices.Contains(levels, in.Level) {
			return nil, nil, fmt.Errorf("unknown level %q", in.Level)
		}
		sent := new(bool)
		ctx = context.WithValue(ctx, logSent{}, sent)
		if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: mcp.LoggingLevel(in.Level), Logger: Name, Data: in.Text}); err != nil {
			return nil, nil, err
		}
		if *sent {
			return text("sent"), nil, nil
		}
		return text("filtered"), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name: "slow_progress",
		Description: "Takes steps steps of ms milliseconds each, sending notifications/progress after each " +
			"(if the call has a progress token), then returns \"progressed N\".",
		Annotations: readOnly,
	}, st.slowProgress)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "sample",
		Description: "Asks the client for sampling/createMessage with prompt; returns the model's text.",
		Annotations: readOnly,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Prompt string `json:"prompt"`
	}) (*mcp.CallToolResult, any, error) {
		resp, pending, err := ask(ctx, req, "sample", sampling(in.Prompt), nil)
		if pending != nil || err != nil {
			return pending, nil, err
		}
		got, err := sampledText(resp)
		if err != nil {
			return nil, nil, err
		}
		return text(got), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name: "elicit",
		Description: "Asks the client for elicitation/create with message (a form with one string, answer); " +
			"returns the action, then a space and the content as JSON if there is any. With progress, " +
			"sends notifications/progress \"asking\" before it asks and \"answered\" once answered (if the " +
			"call has a progress token).",
		Annotations: readOnly,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Message  string `json:"message"`
		Progress bool   `json:"progress,omitempty"`
	}) (*mcp.CallToolResult, any, error) {
		progress := func(n float64, msg string) error {
			if token := req.Params.GetProgressToken(); in.Progress && token != nil {
				return req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: n, Total: 2, Message: msg})
			}
			return nil
		}
		if err := progress(1, "asking"); err != nil {
			return nil, nil, err
		}
		resp, pending, err := ask(ctx, req, "elicit", elicitation(in.Message), nil)
		if pending != nil || err != nil {
			return pending, nil, err
		}
		if err := progress(2, "answered"); err != nil {
			return nil, nil, err
		}
		got, err := elicitedText(resp)
		if err != nil {
			return nil, nil, err
		}
		return text(got), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "roots",
		Description: "Asks the client for roots/list; returns the roots' URIs as a JSON array.",
		Annotations: readOnly,
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		resp, pending, err := ask(ctx, req, "roots", &mcp.ListRootsParams{}, nil)
		if pending != nil || err != nil {
			return pending, nil, err
		}
		lr, ok := resp.(*mcp.ListRootsResult)
		if !ok {
			return nil, nil, fmt.Errorf("roots: got %T", resp)
		}
		uris := []string{}
		for _, r := range lr.Roots {
			uris = append(uris, r.URI)
		}
		b, err := json.Marshal(uris)
		if err != nil {
			return nil, nil, err
		}
		return text(string(b)), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name: "sample_then_elicit",
		Description: "Asks the client for sampling, then for elicitation, in one call; returns the " +
			"model's text and the elicitation's answer (as elicit does) on two lines.",
		Annotations: readOnly,
	}, sampleThenElicit)
	mcp.AddTool(s, &mcp.Tool{
		Name: "elicit_complete",
		Description: "Sends notifications/elicitation/complete with elicitationId id to the calling session " +
			"(as a server does when a URL-mode elicitation finishes); returns \"sent\".",
		Annotations: readOnly,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		ID string `json:"id"`
	}) (*mcp.CallToolResult, any, error) {
		if err := req.Session.NotifyElicitationComplete(ctx, &mcp.ElicitationCompleteParams{ElicitationID: in.ID}); err != nil {
			return nil, nil, err
		}
		return text("sent"), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "state",
		Description: "Returns, as JSON, what the calling session sent this server: log levels, subscriptions, roots/list_changed, methods.",
		Annotations: readOnly,
	}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		b, err := json.Marshal(st.state(req.Session))
		if err != nil {
			return nil, nil, err
		}
		return text(string(b)), nil, nil
	})
}

// record applies f to the record of ss, making it if need be.
func (st *server) record(ss *mcp.ServerSession, f func(*sessionRecord)) {
	if ss == nil {
		return
	}
	fs := &st.feat
	fs.mu.Lock()
	r := fs.sessions[ss]
	grow := r == nil && len(fs.sessions) >= fs.pruneAt
	fs.mu.Unlock()
	live := map[*mcp.ServerSession]bool{}
	if grow {
		// Sessions that ended leave their records behind (a stateless HTTP
		// server makes a session per request): drop them now and then, by
		// what the SDK still knows. Sessions takes the server's lock, so
		// not under ours.
		for ss := range fs.srv.Sessions() {
			live[ss] = true
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if grow {
		for old := range fs.sessions {
			if old != ss && !live[old] {
				delete(fs.sessions, old)
			}
		}
		fs.pruneAt = 2*len(fs.sessions) + 64
	}
	if r = fs.sessions[ss]; r == nil {
		r = &sessionRecord{subs: map[string]bool{}}
		fs.sessions[ss] = r
	}
	f(r)
}

// recordMiddleware records each method a session receives, and the levels
// of logging/setLevel.
func (st *server) recordMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
			st.record(ss, func(r *sessionRecord) {
				r.methods = appendBounded(r.methods, method)
				if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && p != nil {
					if r.tools == nil {
						r.tools = map[string]int{}
					}
					r.tools[p.Name]++
				}
				if p, ok := req.GetParams().(*mcp.SetLoggingLevelParams); ok && p != nil {
					r.level = string(p.Level)
					r.levels = appendBounded(r.levels, r.level)
				}
			})
		}
		return next(ctx, method, req)
	}
}

func appendBounded(list []string, s string) []string {
	if len(list) >= maxRecorded {
		return list
	}
	return append(list, s)
}

// state returns the record of ss.
func (st *server) state(ss *mcp.ServerSession) SessionState {
	out := SessionState{ID: ss.ID()}
	if p := ss.InitializeParams(); p != nil {
		out.Protocol = p.ProtocolVersion
	}
	st.record(ss, func(r *sessionRecord) {
		out.LogLevel = r.level
		out.LogLevels = slices.Clone(r.levels)
		for uri := range r.subs {
			out.Subscriptions = append(out.Subscriptions, uri)
		}
		out.Subscribed = slices.Clone(r.subscribed)
		out.RootsListChanged = r.roots
		out.Methods = slices.Clone(r.methods)
		out.Tools = maps.Clone(r.tools)
	})
	slices.Sort(out.Subscriptions)
	return out
}

// subscribe accepts a subscription to a resource the server has (a static
// one or any item) and records it; it rejects any other URI.
func (st *server) subscribe(_ context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	ok := st.known(uri)
	st.record(req.Session, func(r *sessionRecord) {
		r.subscribed = appendBounded(r.subscribed, uri)
		if ok {
			r.subs[uri] = true
		}
	})
	if !ok {
		return mcp.ResourceNotFoundError(uri)
	}
	return nil
}

func (st *server) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	st.record(req.Session, func(r *sessionRecord) { delete(r.subs, req.Params.URI) })
	return nil
}

// known reports whether uri names a resource the server has now.
func (st *server) known(uri string) bool {
	if id, ok := strings.CutPrefix(uri, itemPrefix); ok {
		return id != "" && !strings.Contains(id, "/")
	}
	st.feat.mu.Lock()
	defer st.feat.mu.Unlock()
	return uri == ResourceA || uri == ResourceB || (uri == ResourceExtra && st.feat.extraRes)
}

// touch bumps the version of uri and returns how many live sessions are
// subscribed to it.
func (st *server) touch(uri string) int {
	live := slices.Collect(st.feat.srv.Sessions())
	fs := &st.feat
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.versions[uri]++
	n := 0
	for _, ss := range live {
		if r := fs.sessions[ss]; r != nil && r.subs[uri] {
			n++
		}
	}
	return n
}

// addStatic adds the static resource uri.
func (st *server) addStatic(s *mcp.Server, uri string) {
	name := strings.TrimPrefix(uri, "test://static/")
	s.AddResource(&mcp.Resource{
		Name:        name,
		URI:         uri,
		Description: "Static resource " + name + "; touch changes its version.",
		MIMEType:    "text/plain",
	}, st.readResource)
}

// readResource reads a static resource as "<name> v<version>" and an item as
// "item <id> v<version>", the version being how many times touch touched it.
func (st *server) readResource(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	if !st.known(uri) {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	st.feat.mu.Lock()
	v := st.feat.versions[uri]
	st.feat.mu.Unlock()
	body := strings.TrimPrefix(uri, "test://static/")
	if id, ok := strings.CutPrefix(uri, itemPrefix); ok {
		body = "item " + id
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{
		URI: uri, MIMEType: "text/plain", Text: body + " v" + strconv.Itoa(v),
	}}}, nil
}

// toggleResource adds ResourceExtra, or removes it, and reports whether it
// added it. The SDK sends notifications/resources/list_changed.
func (st *server) toggleResource(s *mcp.Server) (added bool) {
	st.feat.mu.Lock()
	st.feat.extraRes = !st.feat.extraRes
	added = st.feat.extraRes
	st.feat.mu.Unlock()
	if added {
		st.addStatic(s, ResourceExtra)
	} else {
		s.RemoveResources(ResourceExtra)
	}
	return added
}

// togglePrompt adds PromptExtra, or removes it, and reports whether it added
// it. The SDK sends notifications/prompts/list_changed.
func (st *server) togglePrompt(s *mcp.Server) (added bool) {
	st.feat.mu.Lock()
	st.feat.extraProm = !st.feat.extraProm
	added = st.feat.extraProm
	st.feat.mu.Unlock()
	if added {
		s.AddPrompt(&mcp.Prompt{Name: PromptExtra, Description: "Says extra."},
			func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "extra"}}}}, nil
			})
	} else {
		s.RemovePrompts(PromptExtra)
	}
	return added
}

// addGreet adds the prompt greet {name, greeting}: one user message
// "<greeting>, <name>!" (greeting "Hello" by default). A missing name is an
// invalid-params error.
func (st *server) addGreet(s *mcp.Server) {
	s.AddPrompt(&mcp.Prompt{
		Name:        PromptGreet,
		Description: "Greets name.",
		Arguments: []*mcp.PromptArgument{
			{Name: "name", Description: "Who to greet.", Required: true},
			{Name: "greeting", Description: "The greeting; Hello if not given."},
		},
	}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		name := req.Params.Arguments["name"]
		if name == "" {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "greet: missing required argument name"}
		}
		greeting := req.Params.Arguments["greeting"]
		if greeting == "" {
			greeting = "Hello"
		}
		return &mcp.GetPromptResult{
			Description: "A greeting.",
			Messages:    []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: greeting + ", " + name + "!"}}},
		}, nil
	})
}

// complete completes the name argument of greet from CompletionNames and the
// id variable of ItemTemplate from CompletionIDs, by prefix. Anything else
// is an invalid-params error.
func complete(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	ref, arg := req.Params.Ref, req.Params.Argument
	var from []string
	switch {
	case ref.Type == "ref/prompt" && ref.Name == PromptGreet && arg.Name == "name":
		from = CompletionNames
	case ref.Type == "ref/resource" && ref.URI == ItemTemplate && arg.Name == "id":
		from = CompletionIDs
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: fmt.Sprintf("nothing to complete for %s %s%s argument %q", ref.Type, ref.Name, ref.URI, arg.Name)}
	}
	values := []string{}
	for _, v := range from {
		if strings.HasPrefix(v, arg.Value) {
			values = append(values, v)
		}
	}
	return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: values, Total: len(values)}}, nil
}

// levels are the logging levels, least severe first.
var levels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// logSentMiddleware tells the log tool that its message went out: the SDK's
// session logger drops messages below the client's level before sending.
func logSentMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if sent, ok := ctx.Value(logSent{}).(*bool); ok && method == "notifications/message" && err == nil {
			*sent = true
		}
		return res, err
	}
}

// progressArgs are the arguments of slow_progress.
type progressArgs struct {
	Ms    int `json:"ms"`
	Steps int `json:"steps"`
}

// slowProgress takes in.Steps steps of in.Ms milliseconds, each followed by a
// progress notification with the call's token (progress i of total steps).
func (st *server) slowProgress(ctx context.Context, req *mcp.CallToolRequest, in progressArgs) (*mcp.CallToolResult, any, error) {
	if in.Steps < 1 {
		return nil, nil, errors.New("steps must be at least 1")
	}
	token := req.Params.GetProgressToken()
	for i := 1; i <= in.Steps; i++ {
		t := time.NewTimer(time.Duration(in.Ms) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, nil, ctx.Err()
		case <-st.release:
			t.Stop()
			return nil, nil, errors.New("released")
		}
		if token == nil {
			continue
		}
		err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: token,
			Progress:      float64(i),
			Total:         float64(in.Steps),
			Message:       fmt.Sprintf("step %d of %d", i, in.Steps),
		})
		if err != nil {
			return nil, nil, err
		}
	}
	return text("progressed " + strconv.Itoa(in.Steps)), nil, nil
}

// sampleThenElicit asks for sampling, then for elicitation. On protocol
// 2026-07-28 that takes two input-required rounds; the model's text rides
// from the first to the second in the request state.
func sampleThenElicit(ctx context.Context, req *mcp.CallToolRequest, in struct {
	Prompt  string `json:"prompt,omitempty"`
	Message string `json:"message,omitempty"`
}) (*mcp.CallToolResult, any, error) {
	if in.Prompt == "" {
		in.Prompt = "sample_then_elicit"
	}
	if in.Message == "" {
		in.Message = "sample_then_elicit"
	}
	carried := map[string]string{}
	if rs := req.Params.RequestState; rs != "" {
		if err := json.Unmarshal([]byte(rs), &carried); err != nil {
			return nil, nil, fmt.Errorf("bad request state: %w", err)
		}
	}
	sampled, ok := carried["sample"]
	if !ok {
		resp, pending, err := ask(ctx, req, "sample", sampling(in.Prompt), carried)
		if pending != nil || err != nil {
			return pending, nil, err
		}
		if sampled, err = sampledText(resp); err != nil {
			return nil, nil, err
		}
		carried["sample"] = sampled
	}
	resp, pending, err := ask(ctx, req, "elicit", elicitation(in.Message), carried)
	if pending != nil || err != nil {
		return pending, nil, err
	}
	elicited, err := elicitedText(resp)
	if err != nil {
		return nil, nil, err
	}
	return text(sampled + "\n" + elicited), nil, nil
}

// ask gets the client's answer to ir during a tool call. Before protocol
// 2026-07-28 it sends ir as a request to the client and waits for the answer.
// From 2026-07-28 on the server may not send such requests (SEP-2322): ask
// returns the answer if the call is a retry that carries it under key, else
// a pending result asking for it, with carried as the request state for the
// retry.
func ask(ctx context.Context, req *mcp.CallToolRequest, key string, ir mcp.InputRequest, carried map[string]string) (mcp.InputResponse, *mcp.CallToolResult, error) {
	ss := req.Session
	if !multiRoundTrip(ss) {
		switch p := ir.(type) {
		case *mcp.CreateMessageParams:
			res, err := ss.CreateMessage(ctx, p)
			if err != nil {
				return nil, nil, err
			}
			// The same answer as on 2026-07-28, where it comes with tools.
			return &mcp.CreateMessageWithToolsResult{Content: []mcp.Content{res.Content}, Model: res.Model, Role: res.Role}, nil, nil
		case *mcp.ElicitParams:
			res, err := ss.Elicit(ctx, p)
			return res, nil, err
		case *mcp.ListRootsParams:
			res, err := ss.ListRoots(ctx, p)
			return res, nil, err
		default:
			return nil, nil, fmt.Errorf("cannot ask for %T", ir)
		}
	}
	if resp, ok := req.Params.InputResponses[key]; ok {
		return resp, nil, nil
	}
	pending := &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{key: ir}}
	if len(carried) > 0 {
		b, err := json.Marshal(carried)
		if err != nil {
			return nil, nil, err
		}
		pending.RequestState = string(b)
	}
	return nil, pending, nil
}

// multiRoundTrip reports whether ss speaks protocol 2026-07-28 or later, the
// way the SDK decides it.
func multiRoundTrip(ss *mcp.ServerSession) bool {
	p := ss.InitializeParams()
	return p == nil || p.ProtocolVersion >= "2026-07-28"
}

func sampling(prompt string) *mcp.CreateMessageParams {
	return &mcp.CreateMessageParams{
		Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: prompt}}},
		MaxTokens: 100,
	}
}

func elicitation(message string) *mcp.ElicitParams {
	return &mcp.ElicitParams{
		Message: message,
		RequestedSchema: map[string]any{
			"type":       "object",
			"properties": map[string]any{"answer": map[string]any{"type": "string"}},
		},
	}
}

// sampledText is the text of a sampling answer.
func sampledText(resp mcp.InputResponse) (string, error) {
	res, ok := resp.(*mcp.CreateMessageWithToolsResult)
	if !ok {
		return "", fmt.Errorf("sampling: got %T", resp)
	}
	if len(res.Content) != 1 {
		return "", fmt.Errorf("sampling: got %d contents, want 1", len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return "", fmt.Errorf("sampling: got %T, want text", res.Content[0])
	}
	return tc.Text, nil
}

// elicitedText is an elicitation answer as text: the action, then a space
// and the content as JSON if there is any.
func elicitedText(resp mcp.InputResponse) (string, error) {
	res, ok := resp.(*mcp.ElicitResult)
	if !ok {
		return "", fmt.Errorf("elicitation: got %T", resp)
	}
	if res.Content == nil {
		return res.Action, nil
	}
	b, err := json.Marshal(res.Content)
	if err != nil {
		return "", err
	}
	return res.Action + " " + string(b), nil
}
