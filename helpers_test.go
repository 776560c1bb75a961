package mcpfsm

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// fastPolicies are the default policies scaled down for tests over real sockets: short
// real durations, so a fault plays out in a second or two. The probe timeout stays at
// a second: a loaded 2-core machine running -race can take hundreds of milliseconds to
// answer a healthy probe, and a tighter timeout (rightly) recycles the session.
func fastPolicies() *machine.Policies {
	p := DefaultSpec().Defaults()
	p.ConnectTimeout = 3 * time.Second
	p.ProbeTimeout = time.Second
	p.TeardownTimeout = 500 * time.Millisecond
	p.KeepaliveInterval = 300 * time.Millisecond
	p.BackoffBase = 50 * time.Millisecond
	p.BackoffMax = 500 * time.Millisecond
	p.BreakerThreshold = 3
	p.BreakerCooldown = 400 * time.Millisecond
	p.BreakerCooldownMax = 2 * time.Second
	return &p
}

// conn is a Conn under test with a record of its transitions.
type conn struct {
	*Conn
	t   *testing.T
	mu  sync.Mutex
	trs []machine.Transition
}

// open opens a connection to cfg with the given policies (fastPolicies when nil), and
// closes it at cleanup.
func open(t *testing.T, cfg transport.Config, pol *machine.Policies, tweak func(*Options)) *conn {
	t.Helper()
	if pol == nil {
		pol = fastPolicies()
	}
	c := &conn{t: t}
	opts := Options{
		Policies: pol, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Rand: rand.New(rand.NewPCG(7, 7)), History: 256,
		Observer: func(tr machine.Transition) {
			c.mu.Lock()
			c.trs = append(c.trs, tr)
			c.mu.Unlock()
		},
	}
	if tweak != nil {
		tweak(&opts)
	}
	var err error
	if c.Conn, err = Open(cfg, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			var stacks strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			t.Errorf("Close: %v (state %s)\n%s\ngoroutines:\n%s", err, c.State(), c.timeline(), stacks.String())
		}
	})
	return c
}

func (c *conn) transitions() []machine.Transition {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]machine.Transition(nil), c.trs...)
}

// timeline renders the transitions for failure messages.
func (c *conn) timeline() string {
	var b strings.Builder
	trs := c.transitions()
	for _, tr := range trs {
		fmt.Fprintf(&b, "  %8s %v failures=%d\n", tr.At.Sub(trs[0].At).Round(time.Millisecond), tr, tr.Failures)
	}
	return b.String()
}

// waitFor waits until the connection reaches a state accepted by ok.
func (c *conn) waitFor(ok func(states.State) bool, within time.Duration) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if st, err := c.m.Wait(ctx, ok); err != nil {
		c.t.Fatalf("waiting: %v (state %s)\n%s", err, st, c.timeline())
	}
}

func (c *conn) waitState(want states.State, within time.Duration) {
	c.t.Helper()
	c.waitFor(func(s states.State) bool { return s == want }, within)
}

// count returns how many transitions went from one state to another.
func (c *conn) count(from, to states.State) int {
	n := 0
	for _, tr := range c.transitions() {
		if tr.From == from && tr.To == to {
			n++
		}
	}
	return n
}

// callText calls a tool and returns its text.
func (c *conn) callText(ctx context.Context, tool string, args any) (string, error) {
	res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", err
	}
	if res.IsError || len(res.Content) != 1 {
		return "", fmt.Errorf("tool %s answered %+v", tool, res)
	}
	return res.Content[0].(*mcp.TextContent).Text, nil
}

func stdioConfig(t *testing.T, opts testserver.Options) transport.Config {
	return transport.Config{Name: "stdio-server", Stdio: &transport.Stdio{Command: testserver.Build(t), Args: testserver.Args(opts)}}
}

func httpConfig(h *testserver.HTTPServer) transport.Config {
	return transport.Config{Name: "http-server", HTTP: &transport.HTTP{URL: h.URL()}}
}

// goid returns the current goroutine's id, from its stack header.
func goid() int {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	f := strings.Fields(string(buf[:n]))
	id, _ := strconv.Atoi(f[1])
	return id
}

// waitServerCalls waits until the server has received at least n tools/call requests
// for the named tool, as its state tool reports for the session the calls share (a
// stdio or stateful HTTP session).
func (c *conn) waitServerCalls(tool string, n int, within time.Duration) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "state"})
		if err != nil {
			c.t.Fatalf("state: %v", err)
		}
		st, err := testserver.State(res)
		if err != nil {
			c.t.Fatal(err)
		}
		if st.Tools[tool] >= n {
			return
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("the server received %d calls of %s, want %d", st.Tools[tool], tool, n)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
