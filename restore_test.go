package mcpfsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// restoreStub is a stub session whose server, if slow is set, never answers a
// subscribe to slowURI (as a restore sends it) until the request's context ends. Other
// requests through Request succeed without reaching anything.
type restoreStub struct {
	stubClient
	slow  bool
	began chan struct{} // gets one value when the slow subscribe has begun
}

const slowURI = "test://slow"

func (r restoreStub) Request(ctx context.Context, _, name string, _ func(context.Context, *mcp.ClientSession) error) error {
	if r.slow && name == slowURI {
		select {
		case r.began <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// Subscribe is Request's, for the subscription's URI.
func (r restoreStub) Subscribe(ctx context.Context, uri string) error {
	return r.Request(ctx, transport.OpRequest, uri, nil)
}

// TestSubscribeDuringRestoreKeepsItsDeadline: a restore holds stateMu while it
// re-establishes the session state on a new session, for as long as connect_timeout.
// A Subscribe (or SetLoggingLevel, Unsubscribe) made meanwhile is sent on the session
// that serves (make before break) and answered at once, then waits for stateMu to
// record it, without its context: it returns when the restore gives up, long after its
// deadline. (Subscriptions, Roots and SetRoots block the same way.)
func TestSubscribeDuringRestoreKeepsItsDeadline(t *testing.T) {
	pol := *fastPolicies()
	pol.ConnectTimeout = 2 * time.Second
	var dials atomic.Int32
	began := make(chan struct{}, 1)
	c, err := Open(transport.Config{Name: "stub", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, Options{
		Logger: quietLogger(), Policies: &pol,
		dial: func(context.Context, transport.Config, transport.Options) (transport.Client, error) {
			return restoreStub{stubClient{res: &mcp.CallToolResult{}}, dials.Add(1) > 1, began}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: slowURI}); err != nil {
		t.Fatal(err)
	}
	c.Reconnect() // the new session's restore of slowURI hangs for connect_timeout
	select {
	case <-began: // the restore holds stateMu from here until connect_timeout
	case <-ctx.Done():
		t.Fatal("the new session's restore never began")
	}
	sctx, scancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer scancel()
	start := time.Now()
	err = c.Subscribe(sctx, &mcp.SubscribeParams{URI: "test://other"})
	if took := time.Since(start); took > time.Second {
		t.Errorf("Subscribe with a 200ms deadline returned after %s (err %v): it waited for the restore", took.Round(time.Millisecond), err)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Subscribe: %v", err)
	}
}

// TestUnsubscribeWhenTheServerDies: an Unsubscribe sent on a session whose server has
// just died fails with it, and its retry finds no session (the breaker opens, or
// nothing comes up before its deadline). No server holds the subscription any more, as
// when no session was up to begin with, and the Unsubscribe forgets it. It once failed
// and kept it: the next session, once the server was back, subscribed again.
func TestUnsubscribeWhenTheServerDies(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	pol := fastPolicies()
	pol.KeepaliveInterval = time.Hour // the Unsubscribe finds the death
	c := open(t, httpConfig(h), pol, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: testserver.ResourceA}); err != nil {
		t.Fatal(err)
	}
	h.Stop()
	uctx, ucancel := context.WithTimeout(ctx, time.Second)
	defer ucancel()
	if err := c.Unsubscribe(uctx, &mcp.UnsubscribeParams{URI: testserver.ResourceA}); err != nil {
		t.Errorf("Unsubscribe as the server died: %v (state %s)", err, c.State())
	}
	if subs := c.Subscriptions(); len(subs) != 0 {
		t.Errorf("after Unsubscribe, Subscriptions = %q", subs)
	}
	h.Restart(true)
	c.waitState(states.Ready, 10*time.Second)
	res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "state"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := testserver.State(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Subscriptions) != 0 {
		t.Errorf("the session after the server came back is subscribed to %q", st.Subscriptions)
	}
}

// rootsDeafServer is an HTTP test server that never answers the POST of a
// notifications/roots/list_changed (until the test ends), and serves everything else.
func rootsDeafServer(t *testing.T) string {
	ms := testserver.New(testserver.Options{})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms }, nil)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if strings.Contains(string(body), "notifications/roots/list_changed") {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		close(release)
		for ss := range ms.Sessions() {
			_ = ss.Close()
		}
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

// TestSetRootsDeafServerBlocksNothing: a server that does not take the
// notifications/roots/list_changed of a SetRoots holds it for as long as the go-sdk
// gives each notification round (10 s, twice: the roots removed, then those added).
// Manager.SetRoots held the Manager's lock all that time, and every request to every
// server, which takes that lock to find its connection, waited past its deadline (a
// call with a 1 s deadline returned after 19.8 s); Conn.SetRoots held the session
// state's lock, so that Roots, Subscriptions and a new session's restore (the owner,
// and so Close) waited too.
func TestSetRootsDeafServerBlocksNothing(t *testing.T) {
	pol := *fastPolicies()
	t.Run("manager", func(t *testing.T) {
		cfg := &Config{Servers: []ServerConfig{
			{Name: "deaf", Transport: transport.Config{Name: "deaf", HTTP: &transport.HTTP{URL: rootsDeafServer(t)}}, Policies: pol},
			{Name: "ok", Transport: transport.Config{Name: "ok", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, Policies: pol},
		}}
		m, err := NewManager(cfg, ManagerOptions{Logger: quietLogger(), Roots: []*mcp.Root{{URI: "file:///a"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range []string{"deaf", "ok"} {
			if err := m.Conn(s).WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
		}
		set := make(chan error, 1)
		go func() { set <- m.SetRoots(&mcp.Root{URI: "file:///b"}) }()
		time.Sleep(200 * time.Millisecond) // SetRoots waits on the deaf server
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		defer ccancel()
		start := time.Now()
		_, err = m.CallTool(cctx, "ok", &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
		if d := time.Since(start); err != nil || d > 2*time.Second {
			t.Errorf("a call to the other server with a 1 s deadline: %v after %v", err, d)
		}
		if err := m.Close(ctx); err != nil {
			t.Error(err)
		}
		if err := <-set; err != nil {
			t.Error(err)
		}
	})
	t.Run("conn", func(t *testing.T) {
		c := open(t, transport.Config{Name: "deaf", HTTP: &transport.HTTP{URL: rootsDeafServer(t)}}, &pol, func(o *Options) {
			o.Roots = []*mcp.Root{{URI: "file:///a"}}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		set := make(chan error, 1)
		go func() { set <- c.SetRoots(&mcp.Root{URI: "file:///b"}) }()
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		roots, subs := c.Roots(), c.Subscriptions()
		if d := time.Since(start); d > time.Second || len(roots) != 1 || roots[0].URI != "file:///b" || len(subs) != 0 {
			t.Errorf("Roots and Subscriptions: %v, %v after %v", roots, subs, d)
		}
		n := c.count(states.Replacing, states.Retiring)
		c.Reconnect()
		c.waitFor(func(states.State) bool { return c.count(states.Replacing, states.Retiring) > n }, 3*time.Second)
		start = time.Now()
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		defer ccancel()
		if err := c.Close(cctx); err != nil || time.Since(start) > 2*time.Second {
			t.Errorf("Close: %v after %v", err, time.Since(start))
		}
		if err := <-set; err != nil {
			t.Error(err)
		}
	})
}

// TestSubscribeWithoutURI: on protocol 2026-07-28 the go-sdk refuses a Subscribe or
// Unsubscribe without a URI before sending anything, with a plain error; it was taken
// for a lost session: torn down, sent again on the next (torn down too), and three of
// them opened the breaker for every caller. It is the caller's mistake (cause
// request), as the server's refusal is before 2026-07-28 (cause server), and the
// session serves on.
func TestSubscribeWithoutURI(t *testing.T) {
	for _, proto := range []string{"2025-11-25", ""} {
		name := proto
		if name == "" {
			name = "latest"
		}
		t.Run(name, func(t *testing.T) {
			o := testserver.Options{}
			if proto != "" {
				o.ProtocolVersions = []string{proto}
			}
			pol := fastPolicies()
			pol.KeepaliveInterval = time.Hour
			c := open(t, transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(o)}}, pol, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c.waitState(states.Ready, 10*time.Second)
			first := c.session()
			for range 3 {
				for _, f := range []func() error{
					func() error { return c.Subscribe(ctx, &mcp.SubscribeParams{}) },
					func() error { return c.Unsubscribe(ctx, &mcp.UnsubscribeParams{}) },
				} {
					err := f()
					var ce *CallError
					if err != nil && (!errors.As(err, &ce) || ce.Cause.Counts() || ce.Retried) {
						t.Errorf("without a URI: %v, want no error or a *CallError of a cause that does not count, not retried", err)
					}
				}
			}
			if _, err := c.callText(ctx, "echo", map[string]any{"text": "x"}); err != nil {
				t.Fatal(err)
			}
			if c.session() != first || c.count(states.Ready, states.TearingDown) != 0 {
				t.Errorf("the session was replaced:\n%s", c.timeline())
			}
			if subs := c.Subscriptions(); len(subs) != 0 {
				t.Errorf("Subscriptions = %q", subs)
			}
		})
	}
}

// noURIStub is a stub session that, if strict, refuses a subscription without a URI as
// a 2026-07-28 session does.
type noURIStub struct {
	stubClient
	strict bool
}

func (s noURIStub) Subscribe(_ context.Context, uri string) error {
	if s.strict && uri == "" {
		return &transport.Error{Server: "stub", Op: transport.OpRequest, Err: transport.ErrInvalidRequest}
	}
	return nil
}

// TestRestoreDropsWhatCannotBeSent: a subscription without a URI, which a server
// before 2026-07-28 accepted, cannot be sent to a session on 2026-07-28; its restore
// drops it, as it drops one the server refuses, and the session comes up with the
// others. (Failing the restore would fail every connect for good.)
func TestRestoreDropsWhatCannotBeSent(t *testing.T) {
	var dials atomic.Int32
	c := open(t, transport.Config{Name: "stub", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, nil, func(o *Options) {
		o.dial = func(context.Context, transport.Config, transport.Options) (transport.Client, error) {
			return noURIStub{stubClient{res: &mcp.CallToolResult{}}, dials.Add(1) > 1}, nil
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, uri := range []string{"", "test://kept"} {
		if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	first := c.session()
	c.Reconnect()
	c.waitNewSession(first, 10*time.Second)
	if diff := cmp.Diff([]string{"test://kept"}, c.Subscriptions()); diff != "" {
		t.Errorf("Subscriptions after the restore (-want +got):\n%s", diff)
	}
	if n := c.count(states.Replacing, states.Ready); n != 0 {
		t.Errorf("the replacement failed %d times:\n%s", n, c.timeline())
	}
}

// slowSubStub is a stub session whose Subscribe takes delay (or until its context
// ends).
type slowSubStub struct {
	stubClient
	delay time.Duration
}

func (s slowSubStub) Subscribe(ctx context.Context, _ string) error {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestBusyStateDuringRestoreKeepsDeadlines: a new session's restore starts over while
// the session state changes under it, and its last round (after restoreRounds) held
// the session state's lock for the whole restore, so that a busy user could not
// starve the swap. Against a server slow to subscribe, every Subscribe made meanwhile
// waited for that lock past its deadline (as Subscriptions, Roots, SetRoots did, and
// a Manager's SetRoots and Reload, with the Manager's lock held). The last round now
// holds back only the recording of changes, each waiting with its own context.
func TestBusyStateDuringRestoreKeepsDeadlines(t *testing.T) {
	pol := *fastPolicies()
	pol.KeepaliveInterval = time.Hour
	pol.ConnectTimeout = 20 * time.Second
	const delay = 800 * time.Millisecond // each round of the new session's restore
	var dials atomic.Int32
	c := open(t, transport.Config{Name: "stub", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, &pol, func(o *Options) {
		o.Roots = []*mcp.Root{}
		o.dial = func(context.Context, transport.Config, transport.Options) (transport.Client, error) {
			var d time.Duration
			if dials.Add(1) > 1 {
				d = delay
			}
			return slowSubStub{stubClient{res: &mcp.CallToolResult{}}, d}, nil
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: "test://0"}); err != nil {
		t.Fatal(err)
	}
	first := c.session()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var worst, worstRead atomic.Int64
	note := func(w *atomic.Int64, d time.Duration) {
		for old := w.Load(); int64(d) > old && !w.CompareAndSwap(old, int64(d)); old = w.Load() {
		}
	}
	wg.Go(func() { // a state change every 150ms: each round of the restore sees one
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
			sctx, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
			start := time.Now()
			_ = c.Subscribe(sctx, &mcp.SubscribeParams{URI: fmt.Sprintf("test://%d", i)})
			scancel()
			note(&worst, time.Since(start))
			start = time.Now()
			_, _ = c.Subscriptions(), c.Roots()
			_ = c.SetRoots(&mcp.Root{URI: fmt.Sprintf("file:///%d", i)})
			note(&worstRead, time.Since(start))
		}
	})
	c.Reconnect()
	c.waitNewSession(first, 20*time.Second)
	close(stop)
	wg.Wait()
	if d := time.Duration(worst.Load()); d > delay/2 {
		t.Errorf("a Subscribe with a 100ms deadline returned after %v", d)
	}
	if d := time.Duration(worstRead.Load()); d > delay/2 {
		t.Errorf("Subscriptions, Roots and SetRoots took %v", d)
	}
}

// TestUpdatedOnceEndsWithTheSession: the updates a new session reports once (one per
// subscription, for what may have been missed) go to a handler whose context ends when
// that session closes, and Close waits for it: a handler that waited on its context
// outlived Close for ever (its context was never cancelled).
func TestUpdatedOnceEndsWithTheSession(t *testing.T) {
	started, returned := make(chan struct{}, 4), make(chan struct{}, 4)
	c := open(t, transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, nil, func(o *Options) {
		o.Handlers.ResourceUpdated = func(ctx context.Context, _ *mcp.ResourceUpdatedNotificationParams) {
			started <- struct{}{}
			<-ctx.Done()
			returned <- struct{}{}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: testserver.ResourceA}); err != nil {
		t.Fatal(err)
	}
	first := c.session()
	c.Reconnect()
	c.waitNewSession(first, 20*time.Second)
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("no update reported after the reconnect")
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := c.Close(cctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-returned:
	default:
		t.Fatal("Close returned while the handler of the reconnect's update was still running: its context did not end")
	}
}

// TestRecordWithEndedContext: a change recorded when nothing holds the record gate
// is recorded whatever its context says by then (here, an Unsubscribe while no
// session is up, recorded at once). lockRecord chose at random between a free gate
// and an ended context, so such a change, or one whose server had just accepted it
// as the caller's deadline passed, failed half the time as "given up before it was
// recorded".
func TestRecordWithEndedContext(t *testing.T) {
	c, err := Open(transport.Config{Name: "down", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, Options{
		Logger: quietLogger(), Policies: fastPolicies(),
		dial: func(context.Context, transport.Config, transport.Options) (transport.Client, error) {
			return nil, errors.New("down")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 50 {
		if err := c.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: testserver.ResourceA}); err != nil {
			t.Fatalf("Unsubscribe %d with no session up and the gate free: %v", i, err)
		}
	}
}

// TestConnectTimeoutSaysWhatHung: a restarted server that never answers the restore
// of the log level (logging/setLevel) holds every connect to connect_timeout. The
// failure said only "replace: no answer within 500ms (connect_timeout)": nothing of
// what had no answer. It names the request now, in the transition and the status.
func TestConnectTimeoutSaysWhatHung(t *testing.T) {
	srv := testserver.New(testserver.Options{})
	var hang atomic.Bool
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "logging/setLevel" && hang.Load() {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return next(ctx, method, req)
		}
	})
	pol := fastPolicies()
	pol.ConnectTimeout = 300 * time.Millisecond
	c := open(t, transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: srv}}, pol, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
		t.Fatal(err)
	}
	hang.Store(true)
	c.Reconnect()
	c.waitFor(func(states.State) bool { return c.count(states.Replacing, states.Ready) > 0 }, 10*time.Second)
	var failed machine.Transition
	for _, tr := range c.transitions() {
		if tr.From == states.Replacing && tr.To == states.Ready {
			failed = tr
		}
	}
	if failed.Cause != states.CauseTimeout || !strings.Contains(failed.Err.Error(), "no answer within 300ms (connect_timeout)") ||
		!strings.Contains(failed.Err.Error(), "logging/setLevel") {
		t.Errorf("the failed replace: %s; want a timeout naming logging/setLevel", failed)
	}
	if !errors.Is(failed.Err, machine.ErrEffectTimeout) {
		t.Errorf("the failed replace's error %v does not wrap machine.ErrEffectTimeout", failed.Err)
	}
}
