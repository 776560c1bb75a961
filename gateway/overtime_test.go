package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file is the gateway over time: what it keeps must follow what is present
// (sessions, servers, calls), not the number of past events.

// kept is what the gateway keeps of its past (g.Sizes), that must go back to base.
func kept(g *gateway.Gateway) map[string]int {
	s := g.Sizes()
	delete(s, "regTools") // the present servers' tools
	return s
}

// waitKept waits until what g keeps is base again, and fails the test, saying after
// what, if it is not by waitFor.
func waitKept(t *testing.T, g *gateway.Gateway, base map[string]int, after string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		diff := cmp.Diff(base, kept(g))
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (-before +after):\n%s", after, diff)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGateway_CutCallsOfRemovedServers: the calls the front cancelled are kept for
// attribution (cutLinger) by server; those of a server a reload removed were kept for
// good, with their front sessions: a gateway whose config renames its servers now
// and then (--watch) grew with every name it ever had.
func TestGateway_CutCallsOfRemovedServers(t *testing.T) {
	defer gateway.SetCutLinger(50 * time.Millisecond)()
	g := start(t, config(inMemory("a0", testserver.Options{})), gateway.Options{SweepInterval: 20 * time.Millisecond})
	cs := front(t, g, nil, "2025-11-25")
	waitTools(t, cs, has("a0__hold"))
	base := kept(g)
	for i := 1; i <= 10; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: fmt.Sprintf("a%d__hold", i-1), Arguments: map[string]any{"ms": 60000}})
		cancel()
		if err == nil {
			t.Fatal("a call of 60s was not cancelled at 20ms")
		}
		next := fmt.Sprintf("a%d", i)
		if _, err := g.Reload(callCtx(t), config(inMemory(next, testserver.Options{}))); err != nil {
			t.Fatal(err)
		}
		waitTools(t, cs, has(next+"__hold"))
	}
	waitKept(t, g, base, "what the gateway keeps after 10 reloads, each removing a server a call was cancelled at")
}

// TestGateway_SubscriptionsBounded: a front client subscribing to URIs a backend's
// template matches, a new one each time, subscribed the backend to each (on
// 2026-07-28 a subscriptions/listen stream of its own, 12 KB and two goroutines in
// process: 5,000 made 10,000 goroutines and 58 MB), without bound. A session now
// holds at most so many, and the sessions together at most so many URIs; a URI
// subscribed already costs the backend nothing more.
func TestGateway_SubscriptionsBounded(t *testing.T) {
	defer gateway.SetMaxSubscriptions(3, 5)()
	g := start(t, config(inMemory("b", testserver.Options{})), gateway.Options{})
	a := front(t, g, nil, "2025-11-25")
	b := front(t, g, nil, "2025-11-25")
	waitTools(t, a, has("b__echo"))
	waitTemplates(t, a)
	item := func(i int) string { return fmt.Sprintf("test://items/%d", i) }
	subscribe := func(cs *mcp.ClientSession, uri string) string {
		if err := cs.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: uri}); err != nil {
			return err.Error()
		}
		return ""
	}
	var got []string
	for _, step := range []struct {
		cs  *mcp.ClientSession
		uri string
	}{
		{a, item(1)}, {a, item(2)}, {a, item(3)}, {a, item(4)}, // the fourth of a session
		{b, item(1)}, {b, item(5)}, {b, item(6)}, // shared, then two new ones: five URIs
		{b, item(3)}, // a URI subscribed already, but one more of b's
	} {
		got = append(got, subscribe(step.cs, step.uri))
	}
	unsubscribe := func(cs *mcp.ClientSession, uri string) {
		if err := cs.Unsubscribe(callCtx(t), &mcp.UnsubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	c := front(t, g, nil, "2025-11-25")
	unsubscribe(b, item(5))
	got = append(got, subscribe(b, item(7))) // 1, 2, 3, 6, 7: five URIs
	got = append(got, subscribe(c, item(8))) // a sixth
	got = append(got, subscribe(c, item(2))) // subscribed already
	unsubscribe(a, item(3))
	got = append(got, subscribe(c, item(8))) // 1, 2, 6, 7, 8
	perSession := "this session has 3 subscriptions, as many as it may"
	all := "subscribed to 5 resources, as many as the gateway holds"
	want := []string{"", "", "", perSession, "", "", "", perSession, "", all, "", ""}
	if len(got) != len(want) {
		t.Fatalf("%d answers, want %d: %q", len(got), len(want), got)
	}
	for i := range want {
		if (want[i] == "") != (got[i] == "") || !strings.Contains(got[i], want[i]) {
			t.Errorf("subscribe %d: %q, want %q", i, got[i], want[i])
		}
	}
}

// TestGateway_UndeliveredListChangesQuiet: a front session over HTTP that opened no
// GET stream (the spec lets a client not open one) cannot be sent a notification
// that belongs to no request; the go-sdk drops it and logged a warning for each
// session at each change: 20 such sessions and one reload adding a server made 60
// warnings (tools, prompts, resources), and a gateway with its 10,000 sessions made
// 30,000 at each reload, that drowned real ones (serve drops records past its
// queue). They are debug records now; a notification that fails otherwise still
// warns. The records are matched by the go-sdk's text: the debug records are
// looked for too, so that a go-sdk saying it otherwise (or no longer) fails here
// rather than warns again, or is demoted unseen.
func TestGateway_UndeliveredListChangesQuiet(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		if strings.Contains(string(p), `msg="calling notifications/`) {
			mu.Lock()
			lines = append(lines, string(p))
			mu.Unlock()
		}
		return len(p), nil
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	logged := func(level string) (out []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if level == "" || strings.Contains(l, "level="+level+" ") {
				out = append(out, l)
			}
		}
		return out
	}
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{Logger: log})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	watcher := httpFront(t, url, "2025-11-25", nil) // with its GET stream
	waitTools(t, watcher, has("a__echo"))
	for range 20 {
		resp := post(t, url, initializeBody, "", "")
		id := resp.Header.Get("Mcp-Session-Id")
		resp.Body.Close()
		if id == "" {
			t.Fatalf("initialize: %s, no session", resp.Status)
		}
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if _, err := g.Reload(callCtx(t), config(inMemory("a", testserver.Options{}), inMemory("c", testserver.Options{}))); err != nil {
		t.Fatal(err)
	}
	waitTools(t, watcher, has("c__echo"))
	time.Sleep(100 * time.Millisecond) // the last list changes sent
	if got := logged("WARN"); len(got) > 0 {
		t.Errorf("%d warnings after a reload, with 20 sessions without a GET stream; the first:\n%s", len(got), got[0])
	}
	if got := logged("DEBUG"); !slices.ContainsFunc(got, func(l string) bool {
		return strings.Contains(l, "undelivered message: stream not connected or already closed")
	}) {
		t.Errorf("no debug record of an undelivered list change (the go-sdk's text changed?); records of notifications:\n%s", strings.Join(logged(""), ""))
	}
}

// TestGateway_StdioRunStoppedQuietly: a stdio front stopped by its Run's context
// (serve's SIGTERM or Ctrl-C, an ordinary shutdown) logs no error: the go-sdk's
// "server run cancelled" was an error record on every shutdown of a stdio-launched
// gateway, which a host shows as the server's failure. It is a debug record.
func TestGateway_StdioRunStoppedQuietly(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		lines = append(lines, string(p))
		mu.Unlock()
		return len(p), nil
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{Logger: log})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Server().Run(ctx, transport.ServerStdio(inR, outW)) }()
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	cancel()
	<-done
	inW.Close()
	outW.Close()
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(lines, "")
	if strings.Contains(all, "level=ERROR") {
		t.Errorf("an error logged as the stdio front was stopped:\n%s", all)
	}
	if !strings.Contains(all, `level=DEBUG msg="server run cancelled"`) {
		t.Errorf("no debug record of the stop (the go-sdk's text changed?):\n%s", all)
	}
}

// TestGateway_SessionsChurnLeavesNothing: front sessions that come, subscribe, set
// their log level, give their roots, cancel a call, leave one mid-sampling, and go
// without a word (their connection cut), a hundred of them: once the sweeper has
// run, what the gateway keeps is what it kept before, and so are its goroutines.
func TestGateway_SessionsChurnLeavesNothing(t *testing.T) {
	// The sampling of a call goes to its session once the last session's cut
	// calls no longer count.
	defer gateway.SetCutLinger(time.Millisecond)()
	sc := inMemory("b", testserver.Options{})
	sc.Transport.ProtocolVersion = "2025-11-25" // sampling as a request of the backend's
	g := start(t, config(sc), gateway.Options{SweepInterval: 50 * time.Millisecond})
	keep := front(t, g, nil, "2025-11-25")
	waitTools(t, keep, has("b__sample"))
	base, before := kept(g), settledGoroutines(0)
	for i := range 100 {
		time.Sleep(2 * time.Millisecond) // the last session's cut calls count no more
		sp, cp := net.Pipe()
		ss, err := g.Server().Connect(context.Background(), &mcp.IOTransport{Reader: sp, Writer: sp}, nil)
		if err != nil {
			t.Fatal(err)
		}
		asked, quit := make(chan struct{}, 1), make(chan struct{})
		c := mcp.NewClient(&mcp.Implementation{Name: "churn", Version: "1"}, &mcp.ClientOptions{
			CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				asked <- struct{}{}
				<-quit
				return nil, errors.New("gone")
			},
		})
		c.AddRoots(&mcp.Root{URI: fmt.Sprintf("file:///churn/%d", i)})
		cs, err := c.Connect(callCtx(t), &mcp.IOTransport{Reader: cp, Writer: cp}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SetLoggingLevel(callCtx(t), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
			t.Fatal(err)
		}
		for _, uri := range []string{testserver.ResourceA, fmt.Sprintf("test://items/%d", i)} {
			if err := cs.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: uri}); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "b__hold", Arguments: map[string]any{"ms": 60000}})
		cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "b__sample", Arguments: map[string]any{"prompt": "p"}})
		}()
		select {
		case <-asked:
		case <-done:
			t.Fatal("the front client was never asked to sample")
		}
		cp.Close() // gone, mid-sampling
		close(quit)
		<-done
		_ = cs.Wait()
		_ = ss.Wait()
	}
	waitKept(t, g, base, "what the gateway keeps after 100 sessions came and went")
	if after := settledGoroutines(before); after > before {
		t.Errorf("%d goroutines after 100 sessions came and went, %d before", after, before)
	}
}

// settledGoroutines returns the number of goroutines once it is at most want, or
// has stopped falling for a while (want 0: after 100ms).
func settledGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m <= want || (m == n && want == 0) {
			return m
		}
		n = m
	}
	return n
}

// TestGateway_AbandonedSubscriptionsForgotten: the go-sdk's server forgets the
// subscriptions of a session that ends, but kept an entry for each of their URIs,
// for good: clients subscribing to URIs a backend's template matches, a new one each
// time, and leaving without unsubscribing, grew the gateway by some 330 bytes a URI
// (980 KB for the 3,000 here), for ever. The sweeper has the front server forget them.
func TestGateway_AbandonedSubscriptionsForgotten(t *testing.T) {
	sc := inMemory("b", testserver.Options{})
	sc.Transport.ProtocolVersion = "2025-11-25" // no listen stream per URI to end meanwhile
	g := start(t, config(sc), gateway.Options{SweepInterval: 20 * time.Millisecond})
	keep := front(t, g, nil, "2025-11-25")
	waitTools(t, keep, has("b__echo"))
	waitTemplates(t, keep)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	uri := 0
	abandon := func() { // a session subscribes to 1,000 URIs of its own and is gone
		sp, cp := net.Pipe()
		ss, err := g.Server().Connect(context.Background(), &mcp.IOTransport{Reader: sp, Writer: sp}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := mcp.NewClient(&mcp.Implementation{Name: "gone", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.IOTransport{Reader: cp, Writer: cp}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		for range 1000 {
			uri++
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: fmt.Sprintf("test://items/%d", uri)}); err != nil {
				t.Fatal(err)
			}
		}
		cp.Close()
		_ = cs.Wait()
		_ = ss.Wait()
		for kept(g)["subCount"] > 0 {
			if ctx.Err() != nil {
				t.Fatal("the sweeper never forgot the ended session's subscriptions")
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // the sweep over
		settledGoroutines(0)
	}
	heapNow := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	abandon() // the maps grown once
	before := heapNow()
	for range 3 {
		abandon()
	}
	grown := heapNow() - before
	t.Logf("the heap grew by %d KB for 3,000 URIs subscribed to by sessions gone", grown>>10)
	if grown > 300<<10 {
		t.Errorf("the heap grew by %d KB for 3,000 URIs subscribed to by sessions gone, want it back (under 300 KB)", grown>>10)
	}
}

// TestGateway_SubscriptionsBoundedConcurrently: the bounds were checked before the
// backend's subscribe and counted after it, so that subscribes sent together (a
// session's, up to its 1,024 requests in flight; the sessions', together) all passed
// the check: a session held as many subscriptions as it sent at once, the gateway as
// many resources as its sessions did. A subscribe under way now counts.
func TestGateway_SubscriptionsBoundedConcurrently(t *testing.T) {
	defer gateway.SetMaxSubscriptions(3, 5)()
	g := start(t, config(inMemory("b", testserver.Options{})), gateway.Options{})
	item := func(i int) string { return fmt.Sprintf("test://items/%d", i) }
	burst := func(n, from int, cs func(i int) *mcp.ClientSession) int {
		var mu sync.Mutex
		var wg sync.WaitGroup
		ok := 0
		for i := range n {
			c := cs(i)
			wg.Go(func() {
				if err := c.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: item(from + i)}); err == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return ok
	}
	a := front(t, g, nil, "2025-11-25")
	waitTools(t, a, has("b__echo"))
	waitTemplates(t, a)
	if n := burst(20, 0, func(int) *mcp.ClientSession { return a }); n != 3 {
		t.Errorf("one session's 20 subscribes at once: %d took, want 3", n)
	}
	var sessions []*mcp.ClientSession
	for range 20 {
		sessions = append(sessions, front(t, g, nil, "2025-11-25"))
	}
	if n := burst(20, 100, func(i int) *mcp.ClientSession { return sessions[i] }); n != 2 {
		t.Errorf("20 sessions' subscribes at once, 3 of 5 resources held: %d took, want 2", n)
	}
}

// TestGateway_SweepSparesASessionBegunMeanwhile: the sweeper looked at the front
// sessions, then read the gateway's books: a session that began between the two and
// subscribed meanwhile was in the books and not in the look, taken for ended, and its
// subscription dropped (the backend unsubscribed, the go-sdk's entry forgotten) while
// its client waited for updates.
func TestGateway_SweepSparesASessionBegunMeanwhile(t *testing.T) {
	sc := inMemory("b", testserver.Options{})
	sc.Transport.ProtocolVersion = "2025-11-25"
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var (
		once sync.Once
		late = make(chan *mcp.ClientSession, 1)
		fail = make(chan error, 1)
	)
	var gp atomic.Pointer[gateway.Gateway]
	t.Cleanup(gateway.SetSweepLooked(func() {
		g := gp.Load()
		if g == nil {
			return // not started yet
		}
		once.Do(func() { // a session begins, and subscribes, as the sweep reads its books
			sp, cp := net.Pipe()
			if _, err := g.Server().Connect(context.Background(), &mcp.IOTransport{Reader: sp, Writer: sp}, nil); err != nil {
				fail <- err
				return
			}
			c := mcp.NewClient(&mcp.Implementation{Name: "late", Version: "1"}, nil)
			cs, err := c.Connect(ctx, &mcp.IOTransport{Reader: cp, Writer: cp}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err == nil {
				err = cs.Subscribe(ctx, &mcp.SubscribeParams{URI: testserver.ResourceA})
			}
			if err != nil {
				fail <- err
				return
			}
			late <- cs
		})
	}))
	g := start(t, config(sc), gateway.Options{SweepInterval: 20 * time.Millisecond})
	// The late session subscribes once the gateway shows the backend's resource
	// (subscribing before, it got "Resource not found" on a loaded machine).
	shown := front(t, g, nil, "2025-11-25")
	for {
		res, err := shown.ListResources(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(res.Resources, func(r *mcp.Resource) bool { return r.URI == testserver.ResourceA }) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the gateway never showed the backend's resource")
		case <-time.After(10 * time.Millisecond):
		}
	}
	gp.Store(g)
	var cs *mcp.ClientSession
	select {
	case cs = <-late:
		t.Cleanup(func() { _ = cs.Close() })
	case err := <-fail:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("no sweep ran")
	}
	time.Sleep(200 * time.Millisecond) // ten sweeps more
	if got := g.Manager().Conn("b").Subscriptions(); !slices.Contains(got, testserver.ResourceA) {
		t.Errorf("the backend's subscriptions: %q; the live session's subscription was dropped by a sweep", got)
	}
	if n := kept(g)["subs"]; n != 1 {
		t.Errorf("the gateway keeps subscriptions of %d sessions, want the live one's", n)
	}
}
