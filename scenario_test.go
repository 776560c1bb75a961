package mcpfsm

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

// The known failure scenarios of ../shared/notes/failures.md, each against a real server:
// a real subprocess over stdio, or real HTTP on loopback.

// TestScenario_PlannedReconnectSpendsNoBudget: 20 planned recycles in a row, each
// closing the replaced session with an error (the stdio server exits with status 3
// whenever its stdin closes); the machine never backs off or gives up, and the failure
// count stays 0.
func TestScenario_PlannedReconnectSpendsNoBudget(t *testing.T) {
	c := open(t, stdioConfig(t, testserver.Options{ExitStatus: 3}), nil, nil)
	c.waitState(states.Ready, 20*time.Second)
	for i := range 20 {
		c.Reconnect()
		if err := c.m.Sync(context.Background()); err != nil { // the recycle and what follows
			t.Fatal(err)
		}
		c.waitState(states.Ready, 20*time.Second)
		if _, err := c.callText(context.Background(), "echo", map[string]any{"text": strconv.Itoa(i)}); err != nil {
			t.Fatalf("call after recycle %d: %v", i, err)
		}
	}
	teardownErrors := 0
	for _, tr := range c.transitions() {
		if tr.Failures != 0 || tr.To == states.BackingOff || tr.To == states.BreakerOpen {
			t.Fatalf("a planned recycle spent budget: %v\n%s", tr, c.timeline())
		}
		if tr.Trigger == states.Retired.String() && tr.Err != nil {
			teardownErrors++
			if tr.Cause != states.CauseArtifact {
				t.Errorf("close error classified %s: %v", tr.Cause, tr.Err)
			}
		}
	}
	if n := c.count(states.Retiring, states.Ready); n != 20 || teardownErrors != 20 {
		t.Errorf("%d planned reconnects, %d teardown errors; want 20 and 20\n%s", n, teardownErrors, c.timeline())
	}
}

// TestScenario_JoinedTeardownErrorCounts: the error of a planned close joined with a
// real transport failure is counted. The session's Close returns its own (artifact)
// error joined with a connection-refused error taken from a real call to a stopped
// server, as a cleanup path that meets a dead server would; a planned reconnect closes
// the replaced session so.
func TestScenario_JoinedTeardownErrorCounts(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	hs := dialForTest(t, httpConfig(h))
	h.Stop()
	var refused error
	for range 3 { // the first POST may fail on the stale pooled connection instead
		if _, refused = hs.CallTool(context.Background(), nil); errors.Is(refused, syscall.ECONNREFUSED) {
			break
		}
	}
	if !errors.Is(refused, syscall.ECONNREFUSED) {
		t.Fatalf("could not get a refused connection: %v", refused)
	}
	c := open(t, stdioConfig(t, testserver.Options{ExitStatus: 3}), nil, func(o *Options) {
		o.dial = func(ctx context.Context, cfg transport.Config, opts transport.Options) (transport.Client, error) {
			s, err := transport.Dial(ctx, cfg, opts)
			if err != nil {
				return nil, err
			}
			return joinOnClose{s, refused}, nil
		}
	})
	c.waitState(states.Ready, 20*time.Second)
	c.Reconnect()
	c.waitFor(func(states.State) bool { return c.count(states.Retiring, states.Ready) > 0 }, 20*time.Second)
	for _, tr := range c.transitions() {
		if tr.From == states.Retiring {
			if tr.Failures != 1 || tr.Cause != states.CauseLost || !errors.Is(tr.Err, syscall.ECONNREFUSED) {
				t.Errorf("close of the replaced session = %v (failures %d), want lost, counted", tr, tr.Failures)
			}
			break
		}
	}
}

// joinOnClose is a real session whose Close joins a real transport failure to its own
// error.
type joinOnClose struct {
	*transport.Session
	join error
}

func (j joinOnClose) Close(ctx context.Context) error {
	return errors.Join(j.Session.Close(ctx), j.join)
}

func dialForTest(t *testing.T, cfg transport.Config) *transport.Session {
	t.Helper()
	s, err := transport.Dial(context.Background(), cfg, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// TestScenario_StaleIdleConnectionDetected: a streamable HTTP server frozen while the
// client is idle is detected within keepalive interval + probe timeout, the session is
// recycled when it thaws, and the first call after the idle period succeeds.
func TestScenario_StaleIdleConnectionDetected(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	pol := fastPolicies()
	c := open(t, httpConfig(h), pol, nil)
	c.waitState(states.Ready, 20*time.Second)
	c.waitFor(func(states.State) bool { return c.count(states.Probing, states.Ready) > 0 }, 10*time.Second) // first probe passed
	frozen := time.Now()
	h.Freeze()
	c.waitState(states.TearingDown, 10*time.Second)
	detect := time.Since(frozen)
	var detection *machineTransition
	for _, tr := range c.transitions() {
		if tr.To == states.TearingDown {
			detection = &machineTransition{tr.Trigger, tr.Cause}
		}
	}
	if detection == nil || detection.trigger != "probe_failed" || detection.cause != states.CauseTimeout {
		t.Errorf("detected by %+v, want probe_failed with cause timeout\n%s", detection, c.timeline())
	}
	// Generous: the bound is interval + probe timeout; the slack is for a loaded machine.
	if bound := pol.KeepaliveInterval + pol.ProbeTimeout; detect > bound+time.Second {
		t.Errorf("detected after %v, want about %v at most", detect, bound)
	}
	t.Logf("frozen server detected after %v (interval %v + probe timeout %v)", detect.Round(time.Millisecond), pol.KeepaliveInterval, pol.ProbeTimeout)
	time.Sleep(300 * time.Millisecond) // idle while frozen
	h.Thaw()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if got, err := c.callText(ctx, "echo", map[string]any{"text": "after the idle period"}); err != nil || got != "after the idle period" {
		t.Fatalf("first call after thaw = %q, %v\n%s", got, err, c.timeline())
	}
	if n := c.count(states.Connecting, states.Ready) + c.count(states.HalfOpen, states.Ready); n < 2 {
		t.Errorf("the session was not recycled:\n%s", c.timeline())
	}
}

type machineTransition struct {
	trigger string
	cause   states.Cause
}

// TestScenario_BreakerHalfOpenRecovers: with the server down, the breaker opens at the
// threshold, calls fail fast, one half-open trial comes after the cooldown, a failed
// trial re-opens with a longer cooldown; with the server back, the connection is ready
// and its counters reset.
func TestScenario_BreakerHalfOpenRecovers(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	pol := fastPolicies()
	pol.BreakerCooldownJitter = 0
	c := open(t, httpConfig(h), pol, nil)
	c.waitState(states.Ready, 20*time.Second)
	h.Stop()
	c.Reconnect() // find out now rather than at the next probe
	c.waitState(states.BreakerOpen, 20*time.Second)
	if tr := c.transitions(); tr[len(tr)-1].Failures != pol.BreakerThreshold {
		t.Errorf("breaker opened at %d failures, want %d\n%s", tr[len(tr)-1].Failures, pol.BreakerThreshold, c.timeline())
	}

	// Calls fail fast, well before their context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	var rep CallReport
	_, err := c.CallTool(WithReport(ctx, &rep), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
	waited := ctx.Err() != nil
	cancel()
	var ce *CallError
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ce) || ce.State != states.BreakerOpen || waited ||
		!errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("call while open = %v, want ErrUnavailable at once, with the last failure (connection refused)", err)
	}
	if rep.Attempts != 0 {
		t.Errorf("a call that failed fast reports %d attempts, want 0: it was never sent", rep.Attempts)
	}

	// Two failed trials: each re-opens the breaker with a longer cooldown.
	c.waitFor(func(states.State) bool { return c.count(states.HalfOpen, states.BreakerOpen) >= 2 }, 20*time.Second)
	var opened, tried []time.Time
	for _, tr := range c.transitions() {
		switch {
		case tr.To == states.BreakerOpen:
			opened = append(opened, tr.At)
		case tr.From == states.BreakerOpen && tr.To == states.HalfOpen:
			tried = append(tried, tr.At)
		}
	}
	if len(tried) < 2 || len(opened) < 2 {
		t.Fatalf("trials %v, openings %v", tried, opened)
	}
	first, second := tried[0].Sub(opened[0]), tried[1].Sub(opened[1])
	if first < pol.BreakerCooldown || second < 2*pol.BreakerCooldown {
		t.Errorf("cooldowns %v then %v, want at least %v then %v", first, second, pol.BreakerCooldown, 2*pol.BreakerCooldown)
	}
	// One trial per cooldown: between two trials, the breaker opened exactly once.
	opens := 0
	for _, tr := range c.transitions() {
		switch {
		case tr.To == states.BreakerOpen:
			opens++
		case tr.From == states.BreakerOpen && tr.To == states.HalfOpen:
			if opens != 1 {
				t.Errorf("a trial after %d openings of the breaker, want 1:\n%s", opens, c.timeline())
			}
			opens = 0
		case tr.From == states.BreakerOpen:
			t.Errorf("the breaker was left other than by a trial: %v", tr)
		}
	}

	h.Restart(false)
	c.waitState(states.Ready, 20*time.Second)
	trs := c.transitions()
	if last := trs[len(trs)-1]; last.From != states.HalfOpen || last.Failures != 0 || last.Attempts != 0 {
		t.Errorf("recovery = %v failures=%d attempts=%d, want half-open → ready with counters reset", last, last.Failures, last.Attempts)
	}
	if _, err := c.callText(context.Background(), "echo", map[string]any{"text": "back"}); err != nil {
		t.Errorf("call after recovery: %v", err)
	}
}

// TestScenario_OwnerGoroutineOpensAndCloses: every open and close of a session runs on
// the owner, within the same activation that published the transition leading to it
// (the owner is a role that one goroutine at a time holds; an idle machine holds none),
// and never on a caller's goroutine; 64 goroutines call at once; the stateful counter
// keeps counting across calls and probes, so there was one persistent session and not
// one per call.
func TestScenario_OwnerGoroutineOpensAndCloses(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	var mu sync.Mutex
	type mark struct {
		what string // "transition", "open" or "close"
		g    int
	}
	var marks []mark          // in the order they happened
	callerG := map[int]bool{} // the test's goroutine and the callers'
	callerG[goid()] = true
	note := func(what string) { mu.Lock(); marks = append(marks, mark{what, goid()}); mu.Unlock() }
	// Probes must pass under the load of 64 callers on a small machine: a probe
	// timeout of fastPolicies' 300ms would (rightly) recycle the session mid-test.
	pol := fastPolicies()
	pol.ProbeTimeout = 5 * time.Second
	var c *conn
	c = open(t, httpConfig(h), pol, func(o *Options) {
		observe := o.Observer
		o.Observer = func(tr machine.Transition) {
			note("transition")
			observe(tr)
		}
		o.onOpen = func(*session) { note("open") }
		o.onClose = func(*session) { note("close") }
	})
	c.waitState(states.Ready, 20*time.Second)
	const callers, each = 64, 20
	seen := make(chan int, callers*each)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mu.Lock()
			callerG[goid()] = true
			mu.Unlock()
			for range each {
				text, err := c.callText(context.Background(), "counter", nil)
				if err != nil {
					t.Error(err)
					return
				}
				n, _ := strconv.Atoi(text)
				seen <- n
			}
		}()
	}
	wg.Wait()
	close(seen)
	got := map[int]bool{}
	for n := range seen {
		got[n] = true
	}
	for n := 1; n <= callers*each; n++ {
		if !got[n] {
			t.Fatalf("the counter skipped %d: not one persistent session (%d distinct values)", n, len(got))
		}
	}
	if c.count(states.Ready, states.Probing) == 0 {
		c.waitFor(func(states.State) bool { return c.count(states.Probing, states.Ready) > 0 }, 10*time.Second)
	}
	if text, _ := c.callText(context.Background(), "counter", nil); text != strconv.Itoa(callers*each+1) {
		t.Errorf("after probes the counter says %s, want %d", text, callers*each+1)
	}
	c.Reconnect()
	c.waitFor(func(states.State) bool { return c.count(states.Retiring, states.Ready) >= 1 }, 20*time.Second)
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	opens, closes, last := 0, 0, -1
	for i, m := range marks {
		if callerG[m.g] {
			t.Errorf("mark %d: a %s ran on a caller's goroutine %d", i, m.what, m.g)
		}
		switch m.what {
		case "transition":
			last = m.g
			continue
		case "open":
			opens++
		case "close":
			closes++
		}
		if m.g != last {
			t.Errorf("mark %d: a session %s ran on goroutine %d, but the transition before it was published on %d: not the owner's activation",
				i, m.what, m.g, last)
		}
	}
	if opens != 2 || closes != 2 {
		t.Errorf("%d opens and %d closes, want 2 and 2", opens, closes)
	}
}

// TestScenario_SessionExpiredReinitAndRetry: the HTTP server restarts and forgets its
// sessions; the next call succeeds transparently on a new session; a non-idempotent
// call whose outcome is ambiguous is not run again.
func TestScenario_SessionExpiredReinitAndRetry(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	// The test's own pool, so that the stale keep-alive connections of the server
	// before the restart can be dropped: a POST sent onto one of them gets EOF, which
	// cannot be told from a crash mid-request (such a call may have run, and counter
	// is not retried). A client would see that too; this test is about the 404.
	pool := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(pool.CloseIdleConnections)
	cfg := httpConfig(h)
	cfg.HTTP.Client = &http.Client{Transport: pool}
	c := open(t, cfg, nil, nil)
	c.waitState(states.Ready, 20*time.Second)
	if text, _ := c.callText(context.Background(), "counter", nil); text != "1" {
		t.Fatalf("counter = %q", text)
	}
	h.Restart(true)
	pool.CloseIdleConnections()
	// counter is not idempotent, but the server did not run a call it answered with 404.
	text, err := c.callText(context.Background(), "counter", nil)
	if err != nil || text != "1" {
		t.Fatalf("first call after the restart = %q, %v; want 1 from a new session\n%s", text, err, c.timeline())
	}
	expired := false
	for _, tr := range c.transitions() {
		expired = expired || tr.Cause == states.CauseExpired
	}
	if !expired {
		t.Errorf("no transition with cause expired:\n%s", c.timeline())
	}

	// An ambiguous failure: the server dies with the crash call in flight, and comes
	// back at once, so that a retry (which must not happen: crash is not idempotent,
	// and it may have run) would reach it and be counted.
	before := h.Count("tools/call")
	done := make(chan error, 1)
	go func() {
		_, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "crash"})
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		conn, err := net.DialTimeout("tcp", strings.TrimSuffix(strings.TrimPrefix(h.URL(), "http://"), "/mcp"), time.Second)
		if err != nil {
			break // stopped by the crash
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("the crash did not stop the server")
		}
		time.Sleep(time.Millisecond)
	}
	h.Restart(true)
	err = <-done
	var ce *CallError
	if !errors.Is(err, ErrMayHaveRun) || !errors.As(err, &ce) || ce.Retried || !ce.Cause.Counts() {
		t.Fatalf("ambiguous crash call = %v, want a CallError wrapping ErrMayHaveRun, not retried", err)
	}
	sessions := c.count(states.Connecting, states.Ready) + c.count(states.HalfOpen, states.Ready)
	c.waitFor(func(states.State) bool {
		return c.count(states.Connecting, states.Ready)+c.count(states.HalfOpen, states.Ready) > sessions
	}, 20*time.Second)
	if _, err := c.callText(context.Background(), "echo", map[string]any{"text": "after"}); err != nil {
		t.Fatal(err)
	}
	if n := h.Count("tools/call") - before; n != 2 { // the crash, then the echo
		t.Errorf("the crash call reached the server %d times, want once (and the echo after it)", n-1)
	}
}

// TestScenario_StdioServerCrashRespawns: the stdio child is killed (SIGKILL); calls in
// flight get typed errors; it is respawned after backoff; no zombie remains.
func TestScenario_StdioServerCrashRespawns(t *testing.T) {
	c := open(t, stdioConfig(t, testserver.Options{}), nil, nil)
	c.waitState(states.Ready, 20*time.Second)
	pidText, err := c.callText(context.Background(), "pid", nil)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(pidText)
	errs := make(chan error, 8)
	for range cap(errs) {
		go func() {
			_, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "hold", Arguments: map[string]any{"ms": 30000}})
			errs <- err
		}()
	}
	c.waitServerCalls("hold", cap(errs), 10*time.Second) // the calls reached the server
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range cap(errs) {
		err := <-errs
		var ce *CallError
		if !errors.As(err, &ce) || ce.Cause != states.CauseLost || !errors.Is(err, ErrMayHaveRun) {
			t.Errorf("a call in flight got %v, want a CallError with cause lost that may have run", err)
		}
		// Issue 17 item 20: the error tells the session's fate, not "while ready".
		if msg := err.Error(); strings.Contains(msg, "while ready") || !strings.Contains(msg, "the session broke (lost)") {
			t.Errorf("a call whose session died says %q", msg)
		}
	}
	c.waitFor(func(states.State) bool { return c.count(states.Connecting, states.Ready) >= 2 }, 20*time.Second)
	if n := c.count(states.TearingDown, states.BackingOff); n != 1 {
		t.Errorf("respawned without backing off first:\n%s", c.timeline())
	}
	if text, err := c.callText(context.Background(), "pid", nil); err != nil || text == pidText {
		t.Errorf("pid after respawn = %q, %v; want a new process", text, err)
	}
	if z := testutil.Zombies(); len(z) != 0 {
		t.Errorf("zombie children: %v", z)
	}
}

// TestScenario_CloseDuringConnectIsPrompt: Close while connecting to a server that never
// answers returns within the teardown timeout, with no goroutine left.
func TestScenario_CloseDuringConnectIsPrompt(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, hang := range []struct {
		name string
		cfg  func(t *testing.T) transport.Config
	}{
		{"stdio", func(t *testing.T) transport.Config { return stdioConfig(t, testserver.Options{HangInitialize: true}) }},
		{"http", func(t *testing.T) transport.Config {
			return httpConfig(testserver.StartHTTP(t, testserver.Options{HangInitialize: true}))
		}},
	} {
		t.Run(hang.name, func(t *testing.T) {
			pol := fastPolicies()
			pol.ConnectTimeout = time.Minute
			c, err := Open(hang.cfg(t), Options{Policies: pol})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := c.m.Wait(ctx, func(s states.State) bool { return s == states.Connecting }); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // well into the handshake
			start := time.Now()
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// The teardown timeout runs from Close; a second more is for Close's own
			// return, and an interrupted connect's (a child killed and reaped), on a
			// loaded machine.
			took := time.Since(start)
			if limit := pol.TeardownTimeout + time.Second; took > limit {
				t.Errorf("Close took %v, more than the teardown timeout %v and a second", took, pol.TeardownTimeout)
			}
			t.Logf("Close during connect took %v", took.Round(time.Millisecond))
			if c.State() != states.Closed {
				t.Errorf("state = %s", c.State())
			}
			if z := testutil.Zombies(); len(z) != 0 {
				t.Errorf("zombie children: %v", z)
			}
		})
	}
}

// TestToolsListChangedCoalesces: a burst of tools/list_changed notifications costs a
// few re-lists, not one each; the Tools snapshot and the OnTools event end with the
// server's final list.
func TestToolsListChangedCoalesces(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	var mu sync.Mutex
	var lists [][]string
	pol := fastPolicies()
	pol.ProbeTimeout = 5 * time.Second // 201 concurrent calls load the machine; see above
	c := open(t, httpConfig(h), pol, func(o *Options) {
		o.Handlers.ToolsChanged = func(tools []*mcp.Tool) {
			var names []string
			for _, tool := range tools {
				names = append(names, tool.Name)
			}
			mu.Lock()
			lists = append(lists, names)
			mu.Unlock()
		}
	})
	c.waitState(states.Ready, 20*time.Second)
	listsBefore := h.Count("tools/list")
	const changes = 201 // odd: the extra tool is there at the end
	var wg sync.WaitGroup
	for range changes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "change_tools", Arguments: nil}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	hasExtra := func(tools []*mcp.Tool) bool {
		for _, tool := range tools {
			if tool.Name == "extra" {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for !hasExtra(c.Listed().Tools) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // any re-list still running ends
	relists := h.Count("tools/list") - listsBefore
	if !hasExtra(c.Listed().Tools) {
		t.Fatalf("Tools() lacks the extra tool after %d changes", changes)
	}
	if relists < 1 || relists > changes/4 {
		t.Errorf("%d changes cost %d re-lists; want them coalesced", changes, relists)
	}
	mu.Lock()
	defer mu.Unlock()
	if last := lists[len(lists)-1]; !slices.Contains(last, "extra") {
		t.Errorf("the last OnTools event lists %v", last)
	}
	t.Logf("%d tools/list_changed notifications cost %d re-lists", changes, relists)
}
