package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// cancelBound is how soon a backend's handler must see its call cancelled once the
// front cancelled it or went away: generous, for a loaded machine.
const cancelBound = 5 * time.Second

// stdioDrainGrace is how long the stdio front, at the end of its stdin, lets the
// requests in flight be answered before the go-sdk cancels them (transport's
// drainGrace: a host that writes its requests and closes stdin gets their answers).
const stdioDrainGrace = 5 * time.Second

// cancelBackends are the backends of the cancellation tests: the test server over
// stdio on 2025-11-25 and 2026-07-28, and over streamable HTTP, stateful (2025-11-25)
// and stateless (2026-07-28; its handlers end with their POST, as the 2026-07-28
// protocol has a cancel be: the go-sdk's server does that only when asked, with
// PropagateRequestCancellation).
func cancelBackends(t *testing.T) []mcpfsm.ServerConfig {
	t.Helper()
	h25 := httptest.NewServer(testserver.NewHandler(testserver.Options{}))
	t.Cleanup(h25.Close)
	srv26 := testserver.New(testserver.Options{})
	h26 := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv26 },
		&mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true}))
	t.Cleanup(h26.Close)
	overHTTP := func(name, url string) mcpfsm.ServerConfig {
		return mcpfsm.ServerConfig{Name: name, Policies: quick(), Transport: transport.Config{Name: name, HTTP: &transport.HTTP{URL: url}}}
	}
	return []mcpfsm.ServerConfig{
		stdio(t, "s25", testserver.Options{ProtocolVersions: []string{"2025-11-25"}}),
		stdio(t, "s26", testserver.Options{}),
		overHTTP("h25", h25.URL),
		overHTTP("h26", h26.URL),
	}
}

// A cancelFront opens a front session of one kind, and returns it with what cuts
// it off (its client gone: the HTTP connections closed, the stdio front's stdin).
type cancelFront struct {
	name string
	open func(t *testing.T) (cs *mcp.ClientSession, gone func())
}

func cancelFronts(g *gateway.Gateway, url string) []cancelFront {
	overStdio := func(version string) func(t *testing.T) (*mcp.ClientSession, func()) {
		return func(t *testing.T) (*mcp.ClientSession, func()) {
			toServer, fromClient := io.Pipe()
			toClient, fromServer := io.Pipe()
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan struct{})
			go func() { _ = g.Server().Run(ctx, transport.ServerStdio(toServer, fromServer)); close(ran) }()
			t.Cleanup(func() {
				_ = fromClient.Close()
				_ = toClient.Close()
				select {
				case <-ran:
				case <-time.After(waitFor):
					t.Error("the stdio front's Run did not return once its client was gone")
				}
				cancel()
			})
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-front", Version: "1"}, nil).Connect(callCtx(t),
				&mcp.IOTransport{Reader: toClient, Writer: fromClient}, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })
			return cs, func() { _ = fromClient.Close(); _ = toClient.Close() }
		}
	}
	overHTTP := func(version string) func(t *testing.T) (*mcp.ClientSession, func()) {
		return func(t *testing.T) (*mcp.ClientSession, func()) {
			conns := &trackConns{}
			hc := &http.Client{Transport: &http.Transport{DialContext: conns.dial}}
			return httpFront(t, url, version, hc), conns.closeAll
		}
	}
	return []cancelFront{
		{"stdio-2025-11-25", overStdio("2025-11-25")},
		{"stdio-2026-07-28", overStdio("2026-07-28")},
		{"http-2025-11-25", overHTTP("2025-11-25")},
		{"http-2026-07-28", overHTTP("2026-07-28")},
	}
}

// backendCount is a count of backend server's stats, read through the front session cs.
func backendCount(t *testing.T, cs *mcp.ClientSession, server, key string) int {
	t.Helper()
	res := call(t, cs, server+"__stats", nil)
	var out map[string]int
	if err := jsonUnmarshal(text(res), &out); err != nil {
		t.Fatalf("%s stats %q: %v", server, text(res), err)
	}
	return out[key]
}

// waitCount waits until a count of server's stats passes before, and returns how
// long that took; it fails the test past limit.
func waitCount(t *testing.T, cs *mcp.ClientSession, server, key string, before int, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for backendCount(t, cs, server, key) <= before {
		if time.Since(start) > limit {
			t.Fatalf("%s: %q still %d after %v", server, key, before, limit)
		}
		time.Sleep(5 * time.Millisecond) // polling the backend's counts: no event to await
	}
	return time.Since(start)
}

// TestGateway_CancelReachesTheBackend: for each front transport (stdio and
// streamable HTTP, each on 2025-11-25 and 2026-07-28: stateful and stateless) and
// each backend (stdio and HTTP, on 2025-11-25 and 2026-07-28), a call the front
// cancels (notifications/cancelled, or the abort of a 2026-07-28 POST) and a call
// whose front client goes away (its HTTP connections closed, the stdio front's
// stdin closed) ends the backend handler's context within cancelBound (the stdio
// front's stdin end after its grace for answers, stdioDrainGrace), and the front's
// call returns.
func TestGateway_CancelReachesTheBackend(t *testing.T) {
	g := start(t, config(cancelBackends(t)...), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	watcher := front(t, g, nil, "2025-11-25")
	waitTools(t, watcher, func(names []string) bool {
		return has("s25__hold")(names) && has("s26__hold")(names) && has("h25__hold")(names) && has("h26__hold")(names)
	})
	for _, f := range cancelFronts(g, url) {
		for _, server := range []string{"s25", "s26", "h25", "h26"} {
			for _, fault := range []string{"cancel", "gone"} {
				t.Run(f.name+"/"+server+"/"+fault, func(t *testing.T) {
					cs, gone := f.open(t)
					started := backendCount(t, watcher, server, "started held")
					ended := backendCount(t, watcher, server, "ended held")
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					errc := make(chan error, 1)
					go func() {
						_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: server + "__hold", Arguments: map[string]any{"ms": 600000}})
						errc <- err
					}()
					waitCount(t, watcher, server, "started held", started, waitFor)
					if fault == "cancel" {
						cancel()
					} else {
						gone()
					}
					bound := cancelBound
					if fault == "gone" && strings.HasPrefix(f.name, "stdio") {
						// Its stdin's end: the call is given the front's grace first.
						bound += stdioDrainGrace
					}
					took := waitCount(t, watcher, server, "ended held", ended, bound)
					select {
					case err := <-errc:
						if err == nil {
							t.Error("the front's call answered")
						}
					case <-time.After(waitFor):
						t.Fatal("the front's call did not return")
					}
					t.Logf("the backend's handler ended %v after the %s", took.Round(time.Millisecond), fault)
				})
			}
		}
	}
}

// waitIdle waits until no hold call of server still runs: every one started
// answered or saw its context end.
func waitIdle(t *testing.T, cs *mcp.ClientSession, server string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		res := call(t, cs, server+"__stats", nil)
		var st map[string]int
		if err := jsonUnmarshal(text(res), &st); err != nil {
			t.Fatal(err)
		}
		if st["started held"] == st["ended held"]+st["answered held"] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: hold calls still running: %v", server, st)
		}
		time.Sleep(5 * time.Millisecond) // polling the backend's counts: no event to await
	}
}

// TestGateway_CancelRacingTheAnswer: calls cancelled (by their deadline) about when
// their backend answers them, from every front transport to every backend: each
// returns by its deadline (with its answer or its cancellation), no backend handler
// is left running, the gateway's books of calls and requests in flight are back to
// none, and the calls cancelled on stdio backends, which answer them, no longer
// count for attribution.
func TestGateway_CancelRacingTheAnswer(t *testing.T) {
	defer gateway.SetCutLinger(time.Hour)()
	g := start(t, config(cancelBackends(t)...), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	watcher := front(t, g, nil, "2025-11-25")
	servers := []string{"s25", "s26", "h25", "h26"}
	waitTools(t, watcher, func(names []string) bool {
		return has("s25__hold")(names) && has("s26__hold")(names) && has("h25__hold")(names) && has("h26__hold")(names)
	})
	const n = 24
	for _, f := range cancelFronts(g, url) {
		t.Run(f.name, func(t *testing.T) {
			cs, _ := f.open(t)
			errs := make(chan error, n*len(servers))
			for i := range n {
				for _, server := range servers {
					go func() {
						// The answer at i%6 ms, the cancel at (i*5)%7 ms.
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration((i*5)%7)*time.Millisecond)
						defer cancel()
						_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: server + "__hold", Arguments: map[string]any{"ms": i % 6}})
						if err != nil && ctx.Err() == nil {
							errs <- err
							return
						}
						errs <- nil
					}()
				}
			}
			deadline := time.After(waitFor)
			for range n * len(servers) {
				select {
				case err := <-errs:
					if err != nil {
						t.Errorf("a call failed before its deadline: %v", err)
					}
				case <-deadline:
					t.Fatal("calls did not return")
				}
			}
			for _, server := range servers {
				waitIdle(t, watcher, server)
			}
			deadlineKept := time.Now().Add(waitFor)
			for {
				s := g.Sizes()
				if s["calls"] == 0 && s["inflight"] == 0 && s["cut:s25"] == 0 && s["cut:s26"] == 0 {
					break
				}
				if time.Now().After(deadlineKept) {
					t.Fatalf("after the racing cancels the gateway keeps %v", s)
				}
				time.Sleep(10 * time.Millisecond) // polling the gateway's books: no event to await
			}
		})
	}
}

// rawStdio is a stdio front session driven line by line.
type rawStdio struct {
	t     *testing.T
	in    *io.PipeWriter
	lines chan string
}

func openRawStdio(t *testing.T, g *gateway.Gateway) *rawStdio {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { _ = g.Server().Run(ctx, transport.ServerStdio(inR, outW)); close(ran) }()
	r := &rawStdio{t: t, in: inW, lines: make(chan string, 1024)}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			select {
			case r.lines <- sc.Text():
			default: // a test that reads none: the front must not wait on it
			}
		}
	}()
	t.Cleanup(func() {
		_ = inW.Close()
		select {
		case <-ran:
		case <-time.After(waitFor):
			t.Error("the stdio front's Run did not return once its stdin closed")
		}
		cancel()
		_ = outR.Close()
		<-read
	})
	r.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	r.answer(0, waitFor)
	r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return r
}

func (r *rawStdio) send(line string) {
	r.t.Helper()
	if _, err := io.WriteString(r.in, line+"\n"); err != nil {
		r.t.Fatalf("writing to the stdio front: %v", err)
	}
}

// answer returns the answer to request id, failing the test if none comes within
// limit.
func (r *rawStdio) answer(id int, limit time.Duration) string {
	r.t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case l := <-r.lines:
			if strings.Contains(l, fmt.Sprintf(`"id":%d,`, id)) || strings.Contains(l, fmt.Sprintf(`"id":%d}`, id)) {
				return l
			}
		case <-deadline:
			r.t.Fatalf("no answer to request %d within %v", id, limit)
		}
	}
}

// TestGateway_CancelHostile: a stdio front client sends notifications/cancelled
// that name no request of its (unknown IDs, another session's request IDs), that
// are malformed (no params, null, an object or a boolean for the ID, a 1 MB
// reason), and 20,000 cancels of one call of its in a row: the gateway goes on
// answering it at once, another session's call runs on untouched, the call named
// is cancelled at its backend once (one notifications/cancelled reaches it) and
// gets no answer, and the gateway keeps no request in flight after.
func TestGateway_CancelHostile(t *testing.T) {
	g := start(t, config(stdio(t, "s25", testserver.Options{ProtocolVersions: []string{"2025-11-25"}})), gateway.Options{})
	watcher := front(t, g, nil, "2025-11-25")
	waitTools(t, watcher, has("s25__hold"))
	other := front(t, g, nil, "2025-11-25")
	started := backendCount(t, watcher, "s25", "started held")
	ended := backendCount(t, watcher, "s25", "ended held")
	otherCtx, cancelOther := context.WithCancel(context.Background())
	defer cancelOther()
	otherDone := make(chan error, 1)
	go func() {
		_, err := other.CallTool(otherCtx, &mcp.CallToolParams{Name: "s25__hold", Arguments: map[string]any{"ms": 600000}})
		otherDone <- err
	}()
	waitCount(t, watcher, "s25", "started held", started, waitFor)

	raw := openRawStdio(t, g)
	const cancel = `{"jsonrpc":"2.0","method":"notifications/cancelled","params":%s}`
	hostile := []string{
		`{"jsonrpc":"2.0","method":"notifications/cancelled"}`,
		fmt.Sprintf(cancel, `null`),
		fmt.Sprintf(cancel, `[]`),
		fmt.Sprintf(cancel, `{}`),
		fmt.Sprintf(cancel, `{"requestId":null}`),
		fmt.Sprintf(cancel, `{"requestId":{}}`),
		fmt.Sprintf(cancel, `{"requestId":[1]}`),
		fmt.Sprintf(cancel, `{"requestId":true}`),
		fmt.Sprintf(cancel, `{"requestId":1.5}`),
		fmt.Sprintf(cancel, `{"requestId":-1}`),
		fmt.Sprintf(cancel, `{"requestId":1e300}`),
		fmt.Sprintf(cancel, `{"requestId":"x","reason":"`+strings.Repeat("r", 1<<20-200)+`"}`),
	}
	for id := range 64 { // the other session's request IDs, and more
		hostile = append(hostile, fmt.Sprintf(cancel, fmt.Sprintf(`{"requestId":%d}`, id)), fmt.Sprintf(cancel, fmt.Sprintf(`{"requestId":"%d"}`, id)))
	}
	for i, line := range hostile {
		raw.send(line)
		if i%8 == 0 {
			raw.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, 1000+i))
			raw.answer(1000+i, cancelBound)
		}
	}
	raw.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"s25__echo","arguments":{"text":"still"}}}`)
	if got := raw.answer(1, cancelBound); !strings.Contains(got, "still") {
		t.Fatalf("echo after the hostile cancels: %s", got)
	}
	if n := backendCount(t, watcher, "s25", "ended held"); n != ended {
		t.Fatalf("another session's call was cancelled by cancels naming no request of the sender's")
	}
	select {
	case err := <-otherDone:
		t.Fatalf("another session's call returned: %v", err)
	default:
	}

	// The flood: 20,000 cancels of one call in flight, unknown IDs between them.
	cancelled := backendCount(t, watcher, "s25", "notifications/cancelled")
	started = backendCount(t, watcher, "s25", "started held")
	raw.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"s25__hold","arguments":{"ms":600000}}}`)
	waitCount(t, watcher, "s25", "started held", started, waitFor)
	flood := time.Now()
	for i := range 20000 {
		if i%2 == 0 {
			raw.send(fmt.Sprintf(cancel, `{"requestId":7}`))
		} else {
			raw.send(fmt.Sprintf(cancel, fmt.Sprintf(`{"requestId":%d}`, 100000+i)))
		}
	}
	t.Logf("20,000 cancels written in %v", time.Since(flood).Round(time.Millisecond))
	took := waitCount(t, watcher, "s25", "ended held", ended, cancelBound)
	raw.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	raw.answer(2, cancelBound)
	if n := backendCount(t, watcher, "s25", "notifications/cancelled") - cancelled; n != 1 {
		t.Errorf("the backend got %d notifications/cancelled for the call cancelled 10,000 times, want 1", n)
	}
	t.Logf("the flooded call's handler ended %v after the flood was written", took.Round(time.Millisecond))
	for deadline := time.Now().Add(waitFor); g.Sizes()["inflight"] != 1; time.Sleep(10 * time.Millisecond) { // the other session's call
		if time.Now().After(deadline) {
			t.Fatalf("requests in flight after the flood: %v", g.Sizes())
		}
	}
	// The cancelled call got no answer (the stdio front writes none, as MCP asks).
	raw.send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	for {
		l := <-raw.lines
		if strings.Contains(l, `"id":7,`) || strings.Contains(l, `"id":7}`) {
			t.Errorf("the cancelled call was answered: %s", l)
		}
		if strings.Contains(l, `"id":3,`) || strings.Contains(l, `"id":3}`) {
			break
		}
	}
	cancelOther()
	if err := <-otherDone; err == nil {
		t.Error("the other session's call answered")
	}
}

// TestGateway_CancelIsOfItsRequestOverHTTP: on a stateful HTTP session, the answer
// the gateway does not write for a cancel is that of the request the cancel names,
// on the POST that carried it, and nothing else under its ID: a batch cancelling a
// call in flight and reusing its ID (MCP forbids it) gets the go-sdk's refusal
// (400, -32600 under the ID), the call's answer not written; and a request reusing
// the ID of one answered before its cancel came gets its answer. The cancels were
// kept by ID for the session, for a minute: the later request's answer was dropped
// (200, no body: its client waited for it for ever), and, where a cancel came
// before a reuse of the ID of the call in flight, the go-sdk's refusal of it (400,
// no body: seen 1 time in 150 in a hostile client's race).
func TestGateway_CancelIsOfItsRequestOverHTTP(t *testing.T) {
	g := start(t, config(stdio(t, "s", testserver.Options{})), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	watcher := front(t, g, nil, "2025-03-26")
	waitTools(t, watcher, has("s__hold"))
	h := rawSession(t, url, "2025-03-26")
	started := backendCount(t, watcher, "s", "started held")
	held := make(chan string, 1)
	go func() {
		resp := postWith(t, url, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"s__hold","arguments":{"ms":600000}}}`, h)
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		held <- string(got)
	}()
	waitCount(t, watcher, "s", "started held", started, waitFor)
	resp := postWith(t, url, `[{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}},{"jsonrpc":"2.0","id":5,"method":"ping"}]`, h)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var refusal errorAnswer
	if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(data, &refusal) != nil || string(refusal.ID) != "5" || refusal.Error == nil || refusal.Error.Code != -32600 {
		t.Errorf("a batch cancelling the call in flight and reusing its ID: %s %q, want 400 and -32600 under 5", resp.Status, data)
	}
	// The cancel, in a POST refused whole, never reached the session: the call is
	// cancelled now, and its answer is not written.
	resp = postWith(t, url, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`, h)
	resp.Body.Close()
	select {
	case got := <-held:
		if strings.Contains(got, `"id":5`) {
			t.Errorf("the cancelled call was answered: %.300s", got)
		}
	case <-time.After(cancelBound):
		t.Fatal("the cancelled call's POST was held open")
	}
	// A cancel that comes after its request's answer; then the ID again.
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":6,"method":"ping"}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":6}}`,
		`{"jsonrpc":"2.0","id":6,"method":"ping"}`,
	} {
		resp := postWith(t, url, body, h)
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(body, `"id":6`) && !strings.Contains(string(data), `{"jsonrpc":"2.0","id":6,"result":{}}`) {
			t.Errorf("%s: %s %q, want its answer", body, resp.Status, data)
		}
	}
	if n := g.AnswerlessKept(); n != 0 {
		t.Errorf("the gateway keeps %d cancels, with no request of theirs in flight", n)
	}
}

// TestGateway_CancelNotificationOverHTTP: a stateful HTTP front client (2025-11-25)
// cancels a call with notifications/cancelled alone, in a POST of its own, leaving
// the call's POST open (the go-sdk's client also aborts it; the spec asks only for
// the notification): the backend's handler ends within cancelBound, the call's POST
// ends without an answer to the cancelled request (it carried the go-sdk server's
// {"code":0,"message":"context canceled"}), and a cancel naming that request ID
// from another session cancels nothing.
func TestGateway_CancelNotificationOverHTTP(t *testing.T) {
	g := start(t, config(stdio(t, "s25", testserver.Options{ProtocolVersions: []string{"2025-11-25"}})), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	watcher := front(t, g, nil, "2025-11-25")
	waitTools(t, watcher, has("s25__hold"))
	postTo := func(session, body string) *http.Response {
		t.Helper()
		headers := map[string]string{"Mcp-Protocol-Version": "2025-11-25"}
		if session != "" {
			headers["Mcp-Session-Id"] = session
		}
		return postWith(t, url, body, headers)
	}
	open := func() string {
		t.Helper()
		resp := postTo("", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		id := resp.Header.Get("Mcp-Session-Id")
		if id == "" {
			t.Fatalf("initialize: %s, no session", resp.Status)
		}
		resp = postTo(id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		resp.Body.Close()
		return id
	}
	a, b := open(), open()
	started := backendCount(t, watcher, "s25", "started held")
	ended := backendCount(t, watcher, "s25", "ended held")
	body := make(chan string, 1)
	go func() {
		resp := postTo(a, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"s25__hold","arguments":{"ms":600000}}}`)
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		body <- resp.Status + " " + string(got)
	}()
	waitCount(t, watcher, "s25", "started held", started, waitFor)
	// Session b names a's request: nothing is cancelled.
	resp := postTo(b, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	resp.Body.Close()
	resp = postTo(b, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n := backendCount(t, watcher, "s25", "ended held"); n != ended {
		t.Fatal("a cancel from another session cancelled the call")
	}
	resp = postTo(a, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	resp.Body.Close()
	took := waitCount(t, watcher, "s25", "ended held", ended, cancelBound)
	select {
	case got := <-body:
		if strings.Contains(got, `"id":5`) {
			t.Errorf("the cancelled request was answered (MCP asks the receiver not to; the TypeScript SDK's client reports an answer to an unknown request): %.300s", got)
		}
	case <-time.After(cancelBound):
		t.Fatal("the cancelled call's POST was held open")
	}
	t.Logf("the backend's handler ended %v after the cancel", took.Round(time.Millisecond))

	// A flood of cancels naming no request: the gateway keeps none of them (nor
	// b's naming a's request above), and the session's next call is answered.
	for i := range 4096 + 200 {
		resp := postTo(a, fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, 100000+i))
		resp.Body.Close()
	}
	if n := g.AnswerlessKept(); n != 0 {
		t.Errorf("the gateway keeps %d cancels naming no request in flight", n)
	}
	// Cancels for a session the gateway does not have are not kept.
	before := g.AnswerlessKept()
	for i := range 50 {
		resp := postTo("no-such-session", fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, i))
		resp.Body.Close()
	}
	if n := g.AnswerlessKept(); n != before {
		t.Errorf("cancels for an unknown session: the gateway keeps %d, had %d", n, before)
	}
	// a's flood took none of b's room: b's cancelled call is not answered either.
	ended = backendCount(t, watcher, "s25", "ended held")
	started = backendCount(t, watcher, "s25", "started held")
	go func() {
		resp := postTo(b, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"s25__hold","arguments":{"ms":600000}}}`)
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		body <- resp.Status + " " + string(got)
	}()
	waitCount(t, watcher, "s25", "started held", started, waitFor)
	resp = postTo(b, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	resp.Body.Close()
	waitCount(t, watcher, "s25", "ended held", ended, cancelBound)
	select {
	case got := <-body:
		if strings.Contains(got, `"id":7`) {
			t.Errorf("after another session's flood of cancels, a cancelled request was answered: %.300s", got)
		}
	case <-time.After(cancelBound):
		t.Fatal("the cancelled call's POST was held open")
	}
	resp = postTo(a, `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"s25__echo","arguments":{"text":"still"}}}`)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(got), "still") {
		t.Errorf("a call after the flood of cancels: %s %.300s", resp.Status, got)
	}
}

// TestGateway_CancelDuringSampling: a front client cancels a call while the
// backend's sampling request for it is being asked of that client: the backend's
// call is cancelled, and the gateway cancels the sampling request it made of the
// front client (whose handler's context ends), for every backend. Over the stdio
// front; over stateful HTTP the gateway's cancel goes to the call's stream, which
// the go-sdk's client has closed by then (see docs/reliability.md, "Hostile
// testing, 2026-11-28: cancellation through the gateway").
func TestGateway_CancelDuringSampling(t *testing.T) {
	g := start(t, config(cancelBackends(t)...), gateway.Options{})
	watcher := front(t, g, nil, "2025-11-25")
	waitTools(t, watcher, func(names []string) bool {
		return has("s25__sample")(names) && has("s26__sample")(names) && has("h25__sample")(names) && has("h26__sample")(names)
	})
	asked := make(chan struct{}, 64)
	over := make(chan struct{}, 64)
	opts := &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Sampling: &mcp.SamplingCapabilities{}},
		CreateMessageHandler: func(ctx context.Context, _ *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			asked <- struct{}{}
			<-ctx.Done()
			over <- struct{}{}
			return nil, ctx.Err()
		},
	}
	fronts := []struct {
		name string
		open func(t *testing.T) *mcp.ClientSession
	}{
		{"stdio-2025-11-25", func(t *testing.T) *mcp.ClientSession {
			toServer, fromClient := io.Pipe()
			toClient, fromServer := io.Pipe()
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan struct{})
			go func() { _ = g.Server().Run(ctx, transport.ServerStdio(toServer, fromServer)); close(ran) }()
			t.Cleanup(func() { _ = fromClient.Close(); _ = toClient.Close(); <-ran; cancel() })
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-front", Version: "1"}, opts).Connect(callCtx(t),
				&mcp.IOTransport{Reader: toClient, Writer: fromClient}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })
			return cs
		}},
	}
	for _, f := range fronts {
		for _, server := range []string{"s25", "s26", "h25", "h26"} {
			t.Run(f.name+"/"+server, func(t *testing.T) {
				cs := f.open(t)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				errc := make(chan error, 1)
				go func() {
					_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: server + "__sample", Arguments: map[string]any{"prompt": "p"}})
					errc <- err
				}()
				select {
				case <-asked:
				case err := <-errc:
					t.Fatalf("the call returned before the front was asked: %v", err)
				case <-time.After(waitFor):
					t.Fatal("the front client was never asked to sample")
				}
				start := time.Now()
				cancel()
				select {
				case <-over:
					t.Logf("the front's sampling handler ended %v after the cancel", time.Since(start).Round(time.Millisecond))
				case <-time.After(cancelBound):
					t.Errorf("the front's sampling request for the cancelled call was never cancelled")
				}
				select {
				case <-errc:
				case <-time.After(waitFor):
					t.Fatal("the front's call did not return")
				}
			})
		}
	}
}

// TestGateway_ReloadRemovingABackendCancelsItsCall: a reload that removes a backend
// with a front call in flight to it has the backend told that the call is cancelled
// (over streamable HTTP on 2025-11-25, notifications/cancelled; on 2026-07-28, its
// POST ended) before its connection closes, and returns at once: it no longer waits
// for the backend's close, which the backend held (on 2025-11-25 the go-sdk's server
// holds the session's DELETE until its calls end) for the whole teardown_timeout, the
// call running on. The front's call ends with a tool error saying the reload removed
// the server.
func TestGateway_ReloadRemovingABackendCancelsItsCall(t *testing.T) {
	journal := filepath.Join(t.TempDir(), "journal")
	pol := quick()
	pol.TeardownTimeout = 5 * time.Second
	h25 := testserver.StartHTTP(t, testserver.Options{Journal: journal})
	srv26 := testserver.New(testserver.Options{Journal: journal})
	h26 := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv26 },
		&mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true}))
	t.Cleanup(h26.Close)
	overHTTP := func(name, url string) mcpfsm.ServerConfig {
		return mcpfsm.ServerConfig{Name: name, Policies: pol, Transport: transport.Config{Name: name, HTTP: &transport.HTTP{URL: url}}}
	}
	keep := inMemory("keep", testserver.Options{})
	for _, backend := range []mcpfsm.ServerConfig{overHTTP("h25", h25.URL()), overHTTP("h26", h26.URL)} {
		t.Run(backend.Name, func(t *testing.T) {
			g := start(t, config(keep, backend), gateway.Options{})
			cs := front(t, g, nil, "2025-11-25")
			waitTools(t, cs, has(backend.Name+"__journal"))
			done := make(chan *mcp.CallToolResult, 1)
			go func() {
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: backend.Name + "__journal", Arguments: map[string]any{"id": backend.Name, "ms": 60_000}})
				if err != nil {
					res = toolError(err.Error())
				}
				done <- res
			}()
			runs := func(key string) int {
				r, err := testserver.ReadJournal(journal)
				if err != nil {
					t.Fatal(err)
				}
				return r[key]
			}
			for deadline := time.Now().Add(waitFor); runs(backend.Name) == 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the call never reached the backend")
				}
			}
			start := time.Now()
			if _, err := g.Reload(callCtx(t), config(keep)); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > pol.TeardownTimeout/2 {
				t.Errorf("the reload took %v: it waited for the backend's close", took.Round(time.Millisecond))
			}
			for runs("cancelled "+backend.Name) == 0 {
				if time.Since(start) > cancelBound {
					t.Fatalf("the backend was not told the call was cancelled within %v of the reload", cancelBound)
				}
				time.Sleep(5 * time.Millisecond) // polling the backend's journal: no event to await
			}
			select {
			case res := <-done:
				if !res.IsError || !strings.Contains(text(res), fmt.Sprintf("server %q was removed by a reload while the request ran", backend.Name)) {
					t.Errorf("the call to the removed server answered %q, want a tool error saying the reload removed it", text(res))
				}
			case <-time.After(waitFor):
				t.Fatal("the call to the removed server did not end")
			}
		})
	}
}

// TestGateway_CancelsOfManyPOSTs: two sessions, each with 16 calls in flight at
// once, one POST each, under the same IDs (0 to 15); the first session's client
// cancels its even calls, each from a POST of its own on a connection of its own.
// The cancelled calls' POSTs end without an answer; every other call, the other
// session's of the same IDs included (noted first), is answered with its result.
// A call of a batch cancelled so loses its answer alone. Nothing is kept once the
// POSTs have ended.
func TestGateway_CancelsOfManyPOSTs(t *testing.T) {
	g := start(t, config(stdio(t, "s", testserver.Options{})), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	watcher := front(t, g, nil, "2025-03-26")
	waitTools(t, watcher, has("s__hold"))
	a, b := rawSession(t, url, "2025-03-26"), rawSession(t, url, "2025-03-26")
	// post posts body in session h, and returns what the POST answered (or why
	// it failed): a goroutine's, so without t.
	post := func(h map[string]string, body string) string {
		resp, err := frontPost(url, body, h)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return err.Error()
		}
		return resp.Status + " " + string(data)
	}
	const n = 16
	call := func(id, ms int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"s__hold","arguments":{"ms":%d}}}`, id, ms)
	}
	type answer struct {
		session string
		id      int
		got     string
	}
	answers := make(chan answer, 2*n)
	started := backendCount(t, watcher, "s", "started held")
	for id := range n { // b's first: its POSTs are noted before a's
		go func() { answers <- answer{"b", id, post(b, call(id, 2000))} }()
	}
	waitCount(t, watcher, "s", "started held", started+n-1, waitFor)
	for id := range n {
		ms := 2000
		if id%2 == 0 {
			ms = 600000 // cancelled
		}
		go func() { answers <- answer{"a", id, post(a, call(id, ms))} }()
	}
	waitCount(t, watcher, "s", "started held", started+2*n-1, waitFor)
	cancelled := make(chan string, n/2)
	for id := 0; id < n; id += 2 {
		go func() {
			cancelled <- post(a, fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, id))
		}()
	}
	for range n / 2 {
		if got := <-cancelled; !strings.HasPrefix(got, "202 ") {
			t.Errorf("a cancel's POST: %.200s, want 202", got)
		}
	}
	deadline := time.After(cancelBound + 2*time.Second)
	for range 2 * n {
		var got answer
		select {
		case got = <-answers:
		case <-deadline:
			t.Fatal("POSTs were held open past their calls' end")
		}
		id := fmt.Sprintf(`"id":%d,`, got.id)
		if got.session == "a" && got.id%2 == 0 {
			if strings.Contains(got.got, id) {
				t.Errorf("session a's cancelled call %d was answered: %.300s", got.id, got.got)
			}
			continue
		}
		if !strings.Contains(got.got, id+`"result"`) {
			t.Errorf("session %s's call %d: %.300s, want its result", got.session, got.id, got.got)
		}
	}
	// A call of a batch cancelled: that answer alone is dropped.
	started = backendCount(t, watcher, "s", "started held")
	batch := make(chan string, 1)
	go func() { batch <- post(a, "["+call(100, 600000)+","+call(101, 1000)+"]") }()
	waitCount(t, watcher, "s", "started held", started+1, waitFor)
	if got := post(a, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":100}}`); !strings.HasPrefix(got, "202 ") {
		t.Errorf("a cancel's POST: %.200s, want 202", got)
	}
	select {
	case got := <-batch:
		if strings.Contains(got, `"id":100,`) || !strings.Contains(got, `"id":101,"result"`) {
			t.Errorf("a batch whose call 100 was cancelled: %.400s, want 101's result alone", got)
		}
	case <-time.After(cancelBound + 2*time.Second):
		t.Fatal("the batch's POST was held open past its calls' end")
	}
	if kept := g.AnswerlessKept(); kept != 0 {
		t.Errorf("the gateway keeps %d cancels once the POSTs have ended", kept)
	}
}
