package mcpfsm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/simulate"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The alternative lifecycles of docs/lifecycles (issue 13): each loads, validates,
// renders, simulates and runs a real connection with no Go written for it.

func loadLifecycle(t *testing.T, name string) *machine.Spec {
	t.Helper()
	spec, err := LoadSpecFile(filepath.Join("docs", "lifecycles", name))
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestLifecycleQuarantine: a state the default lifecycle does not have. In a
// simulation, a server that keeps sending garbage ends quarantined; for real, an HTTP
// server that fails every handshake does too, and calls fail fast there with the last
// failure.
func TestLifecycleQuarantine(t *testing.T) {
	spec := loadLifecycle(t, "quarantine.yaml")
	if info, ok := spec.State("quarantined"); !ok || info.Calls != machine.FailFast {
		t.Fatalf("quarantined: %+v, %v", info, ok)
	}
	for _, g := range []string{spec.DOT(machine.GraphOptions{}), spec.Mermaid(machine.GraphOptions{})} {
		if !strings.Contains(g, "quarantined") {
			t.Error("the picture lacks the quarantine")
		}
	}
	sc := simulate.Scenario{
		Name: "garbage", Duration: 2 * time.Hour, Timeline: []simulate.Change{{At: 0, Condition: simulate.Garbage}},
		Calls: simulate.Calls{Every: time.Minute},
	}
	sum := simulate.Run(spec, nil, sc, 1).Summary
	if sum.TimeIn["quarantined"] < time.Hour || sum.ConnectAttempts > 30 {
		t.Errorf("simulated garbage: %v in quarantine, %d connect attempts", sum.TimeIn["quarantined"], sum.ConnectAttempts)
	}

	// A server that answers every request with a JSON-RPC error fails every handshake.
	var mu sync.Mutex
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		posts++
		mu.Unlock()
		if req.ID == nil { // a notification
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"not today"}}`, req.ID)
	}))
	defer srv.Close()
	pol := *fastPolicies()
	c := open(t, transport.Config{Name: "bad", HTTP: &transport.HTTP{URL: srv.URL}}, &pol, func(o *Options) { o.Spec = spec })
	c.waitState("quarantined", 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo"})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "quarantined") || !strings.Contains(err.Error(), "not today") {
		t.Errorf("a call in quarantine: %v", err)
	}
	if n := c.count(states.HalfOpen, states.BreakerOpen); n > 0 {
		t.Errorf("the breaker cycled %d times before the quarantine:\n%s", n, c.timeline())
	}
}

// TestLifecycleBreakBeforeMake: with break before make, a planned reconnect of a stdio
// server closes the old process before it starts the new one: never two at once.
func TestLifecycleBreakBeforeMake(t *testing.T) {
	spec := loadLifecycle(t, "break-before-make.yaml")
	if _, ok := spec.State(states.Replacing); ok {
		t.Fatal("break before make declares replacing")
	}
	sum := simulate.Run(spec, nil, simulate.Builtin()["restarts"], 1).Summary
	if sum.Calls.Answered == 0 {
		t.Errorf("simulated restarts: %+v", sum.Calls)
	}
	var mu sync.Mutex
	var events []string
	pol := fastPolicies()
	pol.KeepaliveInterval = 0 // no probe that fails in between to add its own open and close
	c := open(t, stdioConfig(t, testserver.Options{}), pol, func(o *Options) {
		o.Spec = spec
		o.onOpen = func(s *session) { mu.Lock(); events = append(events, fmt.Sprint("open ", s.id)); mu.Unlock() }
		o.onClose = func(s *session) { mu.Lock(); events = append(events, fmt.Sprint("close ", s.id)); mu.Unlock() }
	})
	c.waitState(states.Ready, 20*time.Second)
	for range 3 {
		old := c.session()
		c.Reconnect()
		c.waitNewSession(old, 20*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"open 1", "close 1", "open 2", "close 2", "open 3", "close 3", "open 4"}
	if strings.Join(events, ", ") != strings.Join(want, ", ") {
		t.Errorf("sessions opened and closed: %v, want each closed before the next opens", events)
	}
	for _, tr := range c.transitions() {
		if tr.Failures != 0 {
			t.Errorf("a planned reconnect spent budget: %v", tr)
		}
	}
}

// TestIssue13Reproduction: issue 13's reproduction, ready's close edge without the
// action that once set what the closing guard reads, in today's format
// (testdata/issue13/reproduction.yaml). It loads, and a real connection that reached
// ready closes at once: ready, tearing-down, closed, never back round through
// backing-off, because the engine sets closing when Close is asked (rule 4). The file
// as it was then is refused with every problem at once
// (machine/testdata/invalid/issue13_reproduction.err).
func TestIssue13Reproduction(t *testing.T) {
	spec, err := LoadSpecFile(filepath.Join("testdata", "issue13", "reproduction.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pol := *fastPolicies()
	pol.KeepaliveInterval = 0 // no probe under way when Close comes: the path is ready's
	c := open(t, stdioConfig(t, testserver.Options{}), &pol, func(o *Options) { o.Spec = spec })
	c.waitState(states.Ready, 20*time.Second)
	before := len(c.transitions())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v\n%s", err, c.timeline())
	}
	if took, bound := time.Since(start), pol.TeardownTimeout+time.Second; took > bound {
		t.Errorf("Close took %s, want at most %s", took, bound)
	}
	var path []string
	for _, tr := range c.transitions()[before:] {
		path = append(path, fmt.Sprintf("%s -> %s", tr.From, tr.To))
	}
	want := []string{"ready -> tearing-down", "tearing-down -> closed"}
	if diff := cmp.Diff(want, path); diff != "" {
		t.Errorf("the path after Close (-want +got):\n%s", diff)
	}
}
