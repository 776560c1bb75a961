package mcpfsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

// The lifecycle's promises to callers (issue 17 items 15 to 21 and 23, issue 13's
// failures that retrying cannot fix).

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestScenario_MissingCommandSaysWhy: a stdio server whose command does not exist
// reaches the parked state after one attempt; a call fails at once, saying the file
// does not exist; over a virtual hour there are at most 12 attempts; and fixing the
// config with Reload connects at once.
func TestScenario_MissingCommandSaysWhy(t *testing.T) {
	missing := transport.Config{Name: "missing", Stdio: &transport.Stdio{Command: "/nonexistent/mcp-server"}}
	t.Run("parked", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			attempts := 0
			c, err := Open(missing, Options{Logger: quietLogger(), Observer: func(tr machine.Transition) {
				mu.Lock()
				defer mu.Unlock()
				if tr.To == states.Connecting {
					attempts++
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := c.WaitState(ctx, func(st states.State) bool { return st == states.Parked }); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			if attempts != 1 {
				t.Errorf("parked after %d attempts, want 1", attempts)
			}
			mu.Unlock()
			start := time.Now()
			_, err = c.CallTool(ctx, &mcp.CallToolParams{Name: "echo"})
			var ce *CallError
			if !errors.As(err, &ce) || !errors.Is(err, ErrUnavailable) || !errors.Is(err, fs.ErrNotExist) ||
				ce.State != states.Parked || ce.Cause != states.CauseConfig || !strings.Contains(err.Error(), "no such file or directory") {
				t.Errorf("a call while parked: %v", err)
			}
			if time.Since(start) != 0 {
				t.Errorf("the call waited %s", time.Since(start))
			}
			time.Sleep(time.Hour)
			mu.Lock()
			n := attempts
			mu.Unlock()
			if n < 2 || n > 12 {
				t.Errorf("%d attempts in a virtual hour, want a few re-checks and at most 12", n)
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("reload fixes it", func(t *testing.T) {
		cfg := &Config{Servers: []ServerConfig{{Name: "s", Transport: missing}}}
		m, err := NewManager(cfg, ManagerOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := m.Conn("s").WaitState(ctx, func(st states.State) bool { return st == states.Parked }); err != nil {
			t.Fatal(err)
		}
		fixed := stdioConfig(t, testserver.Options{})
		fixed.Name = "s"
		start := time.Now()
		if _, err := m.Reload(ctx, &Config{Servers: []ServerConfig{{Name: "s", Transport: fixed}}}); err != nil {
			t.Fatal(err)
		}
		if err := m.Conn("s").WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("ready %s after the reload, want at once (not after the park interval)", took)
		}
	})
}

// TestNotReadySaysWhy (issue 17 item 19): a server that exits at once (/bin/false): a
// call that waits out its context says why the connection is not ready.
func TestNotReadySaysWhy(t *testing.T) {
	c := open(t, transport.Config{Name: "false", Stdio: &transport.Stdio{Command: "/bin/false"}}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := c.WaitReady(ctx)
	waited := errors.Is(err, ErrNotReady) && errors.Is(err, context.DeadlineExceeded)
	if !waited && !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "last failure, lost") || !strings.Contains(err.Error(), `mcp server "false": dial`) {
		t.Errorf("WaitReady on /bin/false: %v", err)
	}
}

// TestPoliciesFromGoAreValidated (issue 17 item 15): policies set in Go are checked
// whole at Open, NewManager, Reload and SetPolicies; an unset field is refused, not
// taken for a default.
func TestPoliciesFromGoAreValidated(t *testing.T) {
	mem := transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}
	partial := machine.Policies{KeepaliveInterval: time.Second}
	if _, err := Open(mem, Options{Policies: &partial}); err == nil || !strings.Contains(err.Error(), "breaker_threshold 0 is less than 1") {
		t.Errorf("Open with policies mostly unset: %v", err)
	}
	cfg := &Config{Servers: []ServerConfig{{Name: "mem", Transport: mem, Policies: partial}}}
	if _, err := NewManager(cfg, ManagerOptions{}); err == nil || !strings.Contains(err.Error(), "invalid policies") {
		t.Errorf("NewManager with policies mostly unset: %v", err)
	}
	m, err := NewManager(&Config{Servers: []ServerConfig{{Name: "mem", Transport: mem}}}, ManagerOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	if _, err := m.Reload(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "invalid policies") {
		t.Errorf("Reload with policies mostly unset: %v", err)
	}
	if err := m.Conn("mem").SetPolicies(partial); err == nil {
		t.Error("SetPolicies with policies mostly unset succeeded")
	}
}

// TestManagerClosed (issue 17 item 16): after Close a Manager refuses everything with
// ErrClosed, and a Reload, after or racing with Close, opens nothing that stays open.
func TestManagerClosed(t *testing.T) {
	mem := func(name string) ServerConfig {
		return ServerConfig{Name: name, Transport: transport.Config{Name: name, InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}}
	}
	ctx := context.Background()
	for i := range 20 {
		m, err := NewManager(&Config{Servers: []ServerConfig{mem("a")}}, ManagerOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		more := &Config{Servers: []ServerConfig{mem("a"), mem("b"), mem("c")}}
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = m.Reload(ctx, more) })
		if i%2 == 0 {
			time.Sleep(time.Millisecond)
		}
		if err := m.Close(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if _, err := m.Reload(ctx, more); !errors.Is(err, ErrClosed) {
			t.Fatalf("Reload after Close: %v", err)
		}
		if _, err := m.Call(ctx, "a.echo", nil); !errors.Is(err, ErrClosed) {
			t.Fatalf("a call after Close: %v", err)
		}
		if len(m.Servers()) != 0 {
			t.Fatalf("servers after Close: %v", m.Servers())
		}
	}
	goleak.VerifyNone(t, goleak.IgnoreCurrent())
}

// TestReloadMovesWaitingCalls (issue 17 item 17): a call waiting for a server whose
// lifecycle a Reload changes did not run: it is sent on the new connection.
func TestReloadMovesWaitingCalls(t *testing.T) {
	waits := make(chan struct{}, 1)
	testHookWaits = func(string) {
		select {
		case waits <- struct{}{}:
		default:
		}
	}
	defer func() { testHookWaits = nil }()
	dead := testserver.StartHTTP(t, testserver.Options{})
	dead.Stop()
	live := testserver.StartHTTP(t, testserver.Options{})
	pol := fastPolicies()
	pol.BreakerThreshold = 1000 // the call waits: no breaker to fail it fast
	cfg := &Config{Servers: []ServerConfig{{Name: "s", Transport: transport.Config{Name: "s", HTTP: &transport.HTTP{URL: dead.URL()}}, Policies: *pol}}}
	m, err := NewManager(cfg, ManagerOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := m.Call(ctx, "s.echo", map[string]any{"text": "moved"})
		done <- err
	}()
	other, err := LoadSpec("other.yaml", []byte(strings.Replace(string(DefaultSpecYAML()), "default: 10s", "default: 11s", 1)))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-waits: // the call is waiting
	case <-ctx.Done():
		t.Fatal("the call never waited")
	}
	moved := &Config{Servers: []ServerConfig{{Name: "s", Transport: transport.Config{Name: "s", HTTP: &transport.HTTP{URL: live.URL()}}, Spec: other, Policies: *pol}}}
	if res, err := m.Reload(ctx, moved); err != nil || len(res.Reconnected) != 1 {
		t.Fatalf("reload: %s, %v", res, err)
	}
	if err := <-done; err != nil {
		t.Errorf("the waiting call: %v", err)
	}
}

// TestReconnectIsSeenByTheNextWait (issue 17 item 18): Reconnect, then WaitReady, with
// the breaker open and the server back: the wait never sees the open breaker.
func TestReconnectIsSeenByTheNextWait(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	pol := fastPolicies()
	pol.BreakerThreshold = 1
	pol.BreakerCooldown = time.Hour // only a reconnect leaves the breaker
	pol.BreakerCooldownMax = time.Hour
	c := open(t, httpConfig(h), pol, nil)
	for i := range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c.waitState(states.Ready, 20*time.Second)
		h.Stop()
		c.Reconnect()
		c.waitState(states.BreakerOpen, 20*time.Second)
		h.Restart(false)
		c.Reconnect()
		if err := c.WaitReady(ctx); err != nil {
			t.Fatalf("round %d: WaitReady right after Reconnect: %v\n%s", i, err, c.timeline())
		}
		cancel()
	}
}

// TestHealthySessionResetsFailures (issue 17 item 21): without probes
// (keepalive_interval 0), a session that lived a breaker cooldown and answered a call
// proves the connection healthy: drops spread over time, each followed by a working
// reconnect, do not add up to an open breaker.
func TestHealthySessionResetsFailures(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	pol := fastPolicies()
	pol.KeepaliveInterval = 0
	pol.BreakerThreshold = 3
	pol.BreakerCooldown = 100 * time.Millisecond
	c := open(t, httpConfig(h), pol, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 5 {
		c.waitState(states.Ready, 20*time.Second)
		time.Sleep(pol.BreakerCooldown + 50*time.Millisecond)
		if _, err := c.callText(ctx, "echo", map[string]any{"text": fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		old := c.session()
		h.Restart(true)
		time.Sleep(50 * time.Millisecond)
		if _, err := c.callText(ctx, "echo", map[string]any{"text": "again"}); err != nil {
			t.Fatalf("drop %d: %v\n%s", i, err, c.timeline())
		}
		if c.session() == old {
			t.Fatalf("drop %d made no new session", i)
		}
	}
	if n := c.count(states.TearingDown, states.BreakerOpen) + c.count(states.Connecting, states.BreakerOpen); n != 0 {
		t.Errorf("the breaker opened %d times over five separate drops:\n%s", n, c.timeline())
	}
}

// TestProbesSkippedWhileCallsAnswer (issue 17 item 23): a session that answered a call
// within the keepalive interval needs no probe: a steady stream of calls sends no
// ping; once calls stop, probes resume.
func TestProbesSkippedWhileCallsAnswer(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	pol := fastPolicies()
	// A second between probes: a call answered less than 0.9 s (the interval less its
	// jitter) before a probe is due skips it, and calls come every 100 ms, so a stall
	// of up to some 800 ms on a loaded machine sends no ping.
	pol.KeepaliveInterval = time.Second
	c := open(t, httpConfig(h), pol, nil)
	c.waitState(states.Ready, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := h.Count("ping")
	for end := time.Now().Add(3 * pol.KeepaliveInterval); time.Now().Before(end); {
		if _, err := c.callText(ctx, "echo", map[string]any{"text": "x"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pol.KeepaliveInterval / 10)
	}
	probes := c.count(states.Ready, states.Probing)
	if pings := h.Count("ping") - before; pings != 0 || probes == 0 {
		t.Errorf("%d pings during a steady stream of calls (%d probes due); want none sent", pings, probes)
	}
	idle := h.Count("ping")
	deadline := time.Now().Add(10 * time.Second)
	for h.Count("ping") == idle && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if h.Count("ping") == idle {
		t.Error("no probe reached the server once calls stopped")
	}
}

// TestReloadLeavesParked (issue 13): a config reload, even one that changes nothing for
// a parked server or only retunes its policies, makes it look again at once.
func TestReloadLeavesParked(t *testing.T) {
	for _, retune := range []bool{false, true} {
		t.Run(map[bool]string{false: "unchanged", true: "retuned"}[retune], func(t *testing.T) {
			dir := t.TempDir()
			bin := dir + "/server"
			cfg := &Config{Servers: []ServerConfig{{Name: "s", Transport: transport.Config{Name: "s", Stdio: &transport.Stdio{Command: bin}}}}}
			m, err := NewManager(cfg, ManagerOptions{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := m.Conn("s").WaitState(ctx, func(st states.State) bool { return st == states.Parked }); err != nil {
				t.Fatal(err)
			}
			// The command is installed; the config is the same, or retunes a policy.
			if err := os.Symlink(testserver.Build(t), bin); err != nil {
				t.Fatal(err)
			}
			next := cfg
			if retune {
				s := cfg.Servers[0]
				s.Policies = DefaultSpec().Defaults()
				s.Policies.KeepaliveInterval *= 2
				next = &Config{Servers: []ServerConfig{s}}
			}
			res, err := m.Reload(ctx, next)
			if err != nil || len(res.Unchanged)+len(res.Retuned) != 1 || (len(res.Retuned) == 1) != retune {
				t.Fatalf("reload: %s, %v", res, err)
			}
			start := time.Now()
			if err := m.Conn("s").WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("ready %s after the reload, not at once", took)
			}
		})
	}
}
