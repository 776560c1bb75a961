package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serveHTTP serves the gateway over streamable HTTP on loopback.
func serveHTTP(t *testing.T, g *gateway.Gateway, o gateway.HTTPOptions) string {
	t.Helper()
	srv := httptest.NewServer(g.Handler(o))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

// httpFront connects a go-sdk client over streamable HTTP on protocol version.
func httpFront(t *testing.T, url, version string, hc *http.Client) *mcp.ClientSession {
	t.Helper()
	return httpFrontWith(t, url, version, hc, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
}

// httpFrontWith is httpFront with a client of opts.
func httpFrontWith(t *testing.T, url, version string, hc *http.Client, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "http-front", Version: "1"}, opts)
	cs, err := c.Connect(callCtx(t), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestGateway_HTTP: both protocol modes over one handler (a session for 2025-11-25,
// none for 2026-07-28), and the bearer token.
func TestGateway_HTTP(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{Token: "s3cret"})
	hc := &http.Client{Transport: bearerTransport{"s3cret"}}
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		cs := httpFront(t, url, version, hc)
		if got := cs.InitializeResult().ProtocolVersion; got != version {
			t.Errorf("negotiated %s, want %s", got, version)
		}
		if (cs.ID() != "") != (version == "2025-11-25") {
			t.Errorf("%s: session ID %q", version, cs.ID())
		}
		waitTools(t, cs, has("a__echo"))
		if res := call(t, cs, "a__echo", map[string]any{"text": version}); text(res) != version {
			t.Errorf("%s: echo %q", version, text(res))
		}
	}
	// The scheme's name is case-insensitive; the token is not.
	for auth, want := range map[string]int{
		"":              http.StatusUnauthorized,
		"Bearer s3cre":  http.StatusUnauthorized,
		"Bearer S3CRET": http.StatusUnauthorized,
		"Basic s3cret":  http.StatusUnauthorized,
		"Bearers3cret":  http.StatusUnauthorized,
		"bearer s3cret": http.StatusOK,
		"BEARER s3cret": http.StatusOK,
	} {
		resp := post(t, url, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`, "Authorization", auth)
		resp.Body.Close()
		if resp.StatusCode != want || (want == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer")) {
			t.Errorf("Authorization %q: %s, want %d", auth, resp.Status, want)
		}
	}
}

// TestGateway_BadFrontClients: a front client that sends garbage, floods requests, or
// goes away mid-call leaves the backend unaffected (another front session is served at
// once), and the call of the one that went away is cancelled on the backend.
func TestGateway_BadFrontClients(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	good := httpFront(t, url, "2025-11-25", nil)
	waitTools(t, good, has("a__echo"))

	// Garbage: bodies that are not JSON-RPC, in a session and out of one.
	for _, body := range []string{"{", "null", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":7}`, strings.Repeat("x", 1<<20)} {
		for _, sid := range []string{"", good.ID()} {
			resp := post(t, url, body, "Mcp-Session-Id", sid)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 500 {
				t.Errorf("garbage %.20q: %s", body, resp.Status)
			}
		}
	}
	if res := call(t, good, "a__echo", map[string]any{"text": "after garbage"}); text(res) != "after garbage" {
		t.Errorf("after garbage: %q", text(res))
	}

	// A flood: 300 calls at once from one session; another is served meanwhile.
	flood := httpFront(t, url, "2025-11-25", nil)
	var wg sync.WaitGroup
	errs := make(chan error, 300)
	for i := range 300 {
		wg.Go(func() {
			res, err := flood.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__slow", Arguments: map[string]any{"ms": 50 + i%50}})
			if err == nil && res.IsError {
				err = fmt.Errorf("%s", text(res))
			}
			errs <- err
		})
	}
	begin := time.Now()
	if res := call(t, good, "a__echo", map[string]any{"text": "during the flood"}); text(res) != "during the flood" {
		t.Errorf("during the flood: %q", text(res))
	}
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("another session waited %v during the flood", took)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a flood call: %v", err)
			break
		}
	}

	// Gone mid-call: a client whose connection drops with a call in flight (no
	// DELETE, no cancel notification). The backend's call is cancelled.
	before := backendStats(t, good)["notifications/cancelled"]
	slowBefore := backendCalls(t, good, "slow")
	conns := &trackConns{}
	hc := &http.Client{Transport: &http.Transport{DialContext: conns.dial}}
	gone := httpFront(t, url, "2025-11-25", hc)
	go func() {
		_, _ = gone.CallTool(context.Background(), &mcp.CallToolParams{Name: "a__slow", Arguments: map[string]any{"ms": 60000}})
	}()
	waitBackendCalls(t, good, "slow", slowBefore)
	conns.closeAll()
	waitStats(t, good, func(s map[string]int) bool { return s["notifications/cancelled"] > before })
	if res := call(t, good, "a__echo", map[string]any{"text": "still"}); text(res) != "still" {
		t.Errorf("after a client went away: %q", text(res))
	}
}

// trackConns dials and remembers connections, to drop them all at once.
type trackConns struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (tc *trackConns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		tc.mu.Lock()
		tc.conns = append(tc.conns, c)
		tc.mu.Unlock()
	}
	return c, err
}

func (tc *trackConns) closeAll() {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for _, c := range tc.conns {
		_ = c.Close()
	}
}

// TestGateway_StdioClientGone: a front client over a stream (stdio: here a pair of
// pipes) that goes away with a call in flight, as a host that dies does: the
// backend's call is cancelled.
func TestGateway_StdioClientGone(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	watcher := front(t, g, nil, "")
	waitTools(t, watcher, has("a__slow"))
	before := backendStats(t, watcher)["notifications/cancelled"]
	slowBefore := backendCalls(t, watcher, "slow")
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	ss, err := g.Server().Connect(context.Background(), &mcp.IOTransport{Reader: toServer, Writer: fromServer}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "gone"}, nil).Connect(callCtx(t), &mcp.IOTransport{Reader: toClient, Writer: fromClient}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "a__slow", Arguments: map[string]any{"ms": 60000}})
	}()
	waitBackendCalls(t, watcher, "slow", slowBefore)
	_ = fromClient.Close() // the host is gone: EOF on the gateway's stdin
	_ = toClient.Close()
	waitStats(t, watcher, func(s map[string]int) bool { return s["notifications/cancelled"] > before })
	_ = ss.Wait()
	<-done
	_ = cs.Close()
}

// TestGateway_DeleteWithCallInFlight: a client that ends its session (HTTP DELETE)
// with a call in flight is answered at once, and the call is cancelled (the SDK's
// close of the session waits for its requests: the DELETE once waited for the whole
// call, which ran on at the backend).
func TestGateway_DeleteWithCallInFlight(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	cs := httpFront(t, url, "2025-11-25", nil)
	waitTools(t, cs, has("a__hold"))
	done := holdInFlight(cs, 600000)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("DELETE with a call in flight: %v after %v", err, time.Since(start))
	}
	resp.Body.Close()
	if d := time.Since(start); resp.StatusCode != http.StatusNoContent || d > 5*time.Second {
		t.Errorf("DELETE: %s after %v, want 204 at once", resp.Status, d)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight did not end with its session")
	}
}

// post sends body to the front as a client would, with header set to value unless
// value is empty.
func post(t *testing.T, url, body, header, value string) *http.Response {
	t.Helper()
	var headers map[string]string
	if value != "" {
		headers = map[string]string{header: value}
	}
	return postWith(t, url, body, headers)
}

// rawSession opens a stateful session of the front at url on protocol version with
// plain HTTP requests (initialize, then notifications/initialized) and returns the
// headers a request of the session carries.
func rawSession(t *testing.T, url, version string) map[string]string {
	t.Helper()
	resp := post(t, url, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"`+version+`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, "", "")
	sid := resp.Header.Get("Mcp-Session-Id")
	resp.Body.Close()
	if sid == "" {
		t.Fatalf("initialize opened no session: %s", resp.Status)
	}
	post(t, url, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, "Mcp-Session-Id", sid).Body.Close()
	return map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": version}
}

// postWith sends body to the front as a client would, with headers.
func postWith(t *testing.T, url, body string, headers map[string]string) *http.Response {
	t.Helper()
	resp, err := frontPost(url, body, headers)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// frontPost sends body to the front as a client would, with headers (without a
// t: for goroutines).
func frontPost(url, body string, headers map[string]string) (*http.Response, error) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return http.DefaultClient.Do(req)
}

// teeBodies keeps a copy of every response body of POSTs whose request body
// contains mark.
type teeBodies struct {
	mark string
	mu   sync.Mutex
	got  []*bytes.Buffer
}

func (tb *teeBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	var marked bool
	if r.Body != nil && r.GetBody != nil {
		if b, err := r.GetBody(); err == nil {
			data, _ := io.ReadAll(b)
			marked = bytes.Contains(data, []byte(tb.mark))
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || !marked {
		return resp, err
	}
	buf := &bytes.Buffer{}
	tb.mu.Lock()
	tb.got = append(tb.got, buf)
	tb.mu.Unlock()
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, lockedWriter{&tb.mu, buf}), resp.Body}
	return resp, nil
}

// lockedWriter writes to w with mu held: the client may still read a body (its
// stream's end, after the answer the test reads) while the test reads what it got.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestGateway_ProgressBeforeResult: a call's progress goes out on its response
// stream before its result, all of it, on a 2026-07-28 front (stateless HTTP) as
// before it (forward flushes the call's outbox): on 2026-07-28 the backend's last
// progress could be sent after the result, on a stream that had ended, and lost.
func TestGateway_ProgressBeforeResult(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) { progressBeforeResult(t, url, version) })
	}
}

func progressBeforeResult(t *testing.T, url, version string) {
	tb := &teeBodies{mark: "front-token"}
	cs := httpFront(t, url, version, &http.Client{Transport: tb})
	waitTools(t, cs, has("a__slow_progress"))
	const steps = 20
	for i := range 10 {
		res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__slow_progress", Arguments: map[string]any{"ms": 0, "steps": steps},
			Meta: mcp.Meta{"progressToken": "front-token"}})
		if err != nil || res.IsError {
			t.Fatalf("slow_progress: %v %s", err, text(res))
		}
		tb.mu.Lock()
		body := tb.got[len(tb.got)-1].String()
		tb.mu.Unlock()
		result := strings.Index(body, `"result"`)
		if n := strings.Count(body[:max(result, 0)], "notifications/progress"); result < 0 || n != steps {
			t.Fatalf("call %d: %d progress notifications before the result on its stream, want %d:\n%s", i, n, steps, body)
		}
	}
}

// TestGateway_ProgressAcrossRounds: on a 2026-07-28 front, a call that asks the
// front client something (an input-required result, then the client's retry)
// sends its progress on the stream of the round it is in, before that round's
// answer: what the backend sends after the client's answer goes on the retry's
// stream (it went to the first request's, which had ended, and was lost), and what
// it sent before asking goes out before the input requests.
func TestGateway_ProgressAcrossRounds(t *testing.T) {
	s := inMemory("a", testserver.Options{})
	s.Transport.ProtocolVersion = "2025-11-25" // its elicitation is a request during the call
	g := start(t, config(s), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	tb := &teeBodies{mark: "progress-tok"}
	cs := httpFrontWith(t, url, "2026-07-28", &http.Client{Transport: tb}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes"}}, nil
		},
	})
	waitTools(t, cs, has("a__elicit"))
	for i := range 10 {
		res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__elicit", Arguments: map[string]any{"message": "ok?", "progress": true},
			Meta: mcp.Meta{"progressToken": "progress-tok"}})
		if err != nil || res.IsError || !strings.Contains(text(res), "accept") {
			t.Fatalf("elicit: %v %s, want the front's accept", err, text(res))
		}
		tb.mu.Lock()
		rounds := tb.got[len(tb.got)-2:]
		first, retry := rounds[0].String(), rounds[1].String()
		tb.mu.Unlock()
		asking, asked := strings.Index(first, `"asking"`), strings.Index(first, `"inputRequests"`)
		if asking < 0 || asked < asking {
			t.Fatalf("call %d: the first round's stream, want the progress sent before asking, then the input requests:\n%s", i, first)
		}
		answered, result := strings.Index(retry, `"answered"`), strings.Index(retry, `"content"`)
		if answered < 0 || result < answered || !strings.Contains(retry[:max(answered, 0)], "progress-tok") {
			t.Fatalf("call %d: the retry's stream, want the progress sent after the answer, under the retry's token, then the result:\n%s", i, retry)
		}
	}
}

// TestGateway_ParkedCallNotInFlight: a 2026-07-28 call parked between two rounds
// (its client asked, and not yet called again) is not a call in flight to its
// backend: another front session's call there can be asked for sampling (it was
// refused as "2 front sessions have requests in flight"), and the parked call
// resumes when its client calls again.
func TestGateway_ParkedCallNotInFlight(t *testing.T) {
	s := inMemory("a", testserver.Options{})
	s.Transport.ProtocolVersion = "2025-11-25" // its requests during a call name no call
	g := start(t, config(s), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	asked, release := make(chan struct{}), make(chan struct{})
	parked := httpFrontWith(t, url, "2026-07-28", nil, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			close(asked)
			<-release
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "later"}}, nil
		},
	})
	other := front(t, g, &mcp.ClientOptions{
		CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "sampled"}}, nil
		},
	}, "2025-11-25")
	waitTools(t, other, has("a__sample"))
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := parked.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__elicit", Arguments: map[string]any{"message": "ok?"}})
		if err != nil {
			res = toolErr(err)
		}
		done <- res
	}()
	select {
	case <-asked: // its first round is over: parked
	case <-time.After(waitFor):
		t.Fatal("the parked front was never asked")
	}
	if res := call(t, other, "a__sample", map[string]any{"prompt": "p"}); res.IsError || !strings.Contains(text(res), "sampled") {
		t.Errorf("another session's sampling beside a parked call: %q (error %v), want its own answer", text(res), res.IsError)
	}
	close(release)
	select {
	case res := <-done:
		if res.IsError || !strings.Contains(text(res), "later") {
			t.Errorf("the parked call, resumed: %q (error %v)", text(res), res.IsError)
		}
	case <-time.After(waitFor):
		t.Fatal("the parked call did not resume")
	}
}

func toolErr(err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
}

// TestGateway_ParkedCallsBounded: past maxParked calls parked at once to a backend
// (their clients asked and not calling again), the oldest is given up: its
// client's retry is told the requestState is not held, and the others go on. (They
// were bounded only by the connection's 256 requests to the front at once, each
// held up to five minutes: clients that never call again held them all, and every
// other client's sampling there was refused.)
func TestGateway_ParkedCallsBounded(t *testing.T) {
	defer gateway.SetMaxParked(2)()
	s := inMemory("a", testserver.Options{})
	s.Transport.ProtocolVersion = "2025-11-25"
	g := start(t, config(s), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	asked, release := make(chan struct{}, 3), make(chan struct{})
	cs := httpFrontWith(t, url, "2026-07-28", nil, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- struct{}{}
			<-release
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "late"}}, nil
		},
	})
	waitTools(t, cs, has("a__elicit"))
	results := make(chan string, 3)
	for i := range 3 {
		go func() {
			res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__elicit", Arguments: map[string]any{"message": fmt.Sprint(i)}})
			switch {
			case err != nil:
				results <- err.Error()
			default:
				results <- text(res)
			}
		}()
		select {
		case <-asked: // parked, in this order
		case <-time.After(waitFor):
			t.Fatalf("call %d was never parked", i)
		}
	}
	close(release)
	var answered, refused int
	for range 3 {
		select {
		case r := <-results:
			switch {
			case strings.Contains(r, "late"):
				answered++
			case strings.Contains(r, "not one this gateway holds"):
				refused++
			default:
				t.Errorf("a parked call ended with %q", r)
			}
		case <-time.After(waitFor):
			t.Fatal("a parked call did not end")
		}
	}
	if answered != 2 || refused != 1 {
		t.Errorf("three calls parked at a bound of two: %d answered, %d refused, want 2 and 1", answered, refused)
	}
}

// TestGateway_InitializeOutOfTurn: a request before initialize (a POST with no
// session that is no initialize), and a second initialize on a session, get
// JSON-RPC's -32600 under their IDs: the go-sdk answered both with an error of code
// 0, no JSON-RPC code, over HTTP 200 (having opened a session for the first), and
// logged an error for each. The first gets HTTP 400, as MCP asks of a request
// without a session ID other than initialize; a ping is still answered (the go-sdk
// takes it before initialize), and so is the body whether the body memory holds it
// or not (no bound).
func TestGateway_InitializeOutOfTurn(t *testing.T) {
	var log bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return log.Write(p)
	}), nil))
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{Logger: logger})
	for _, memory := range []int64{0, -1} {
		url := serveHTTP(t, g, gateway.HTTPOptions{BodyMemory: memory})
		read := func(resp *http.Response) string {
			t.Helper()
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		resp := post(t, url, `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`, "", "")
		if body := read(resp); resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(body, `{"jsonrpc":"2.0","id":7,"error":{"code":-32600,`) {
			t.Errorf("body memory %d: tools/list before initialize: %s %s, want 400 and -32600 under its ID", memory, resp.Status, body)
		}
		resp = post(t, url, `[{"jsonrpc":"2.0","id":8,"method":"ping"},{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"a__echo"}}]`, "", "")
		if body := read(resp); resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(body, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,`) {
			t.Errorf("body memory %d: a batch with a call before initialize: %s %s, want 400 and -32600", memory, resp.Status, body)
		}
		resp = post(t, url, `{"jsonrpc":"2.0","id":10,"method":"ping"}`, "", "")
		if body := read(resp); resp.StatusCode != http.StatusOK || !strings.Contains(body, `{"jsonrpc":"2.0","id":10,"result":{}}`) {
			t.Errorf("body memory %d: a ping before initialize: %s %s", memory, resp.Status, body)
		}
		// A body over the go-sdk's limit gets 413, as it does on a session (the
		// body read whole to be looked at, without the body memory, got 400).
		big := `{"jsonrpc":"2.0","id":12,"method":"initialize","params":{"pad":"` + strings.Repeat("x", mcp.DefaultMaxRequestBodyBytes) + `"}}`
		resp = post(t, url, big, "", "")
		if body := read(resp); resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("body memory %d: a body over the limit without a session: %s %.200s, want 413", memory, resp.Status, body)
		}
		cs := httpFront(t, url, "2025-11-25", nil)
		resp = post(t, url, `{"jsonrpc":"2.0","id":11,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, "Mcp-Session-Id", cs.ID())
		if body := read(resp); !strings.Contains(body, `{"jsonrpc":"2.0","id":11,"error":{"code":-32600,`) {
			t.Errorf("body memory %d: a second initialize: %s %s, want -32600 under its ID", memory, resp.Status, body)
		}
		if _, err := cs.ListTools(callCtx(t), nil); err != nil {
			t.Errorf("body memory %d: the session after a second initialize: %v", memory, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("a client's requests out of turn logged errors:\n%s", log.String())
	}
}
