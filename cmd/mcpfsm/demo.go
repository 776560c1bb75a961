package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", "", `
Show a connection's lifecycle on a live server. The demo starts the project's
example MCP server in this process (streamable HTTP on loopback), opens one
mcpfsm connection to it with short policies, and plays a fault tour:

  1. connect, and call the stateful counter tool;
  2. a planned reconnect: the new session opens while the old one serves,
     then the old one closes; no call waits and no budget is spent;
  3. the server restarts and forgets its sessions: the next call is retried
     on a new session, transparently (HTTP 404, session expired);
  4. the server freezes: a probe finds it, the session is torn down, the
     reconnects time out until the breaker opens, and calls fail fast;
  5. the server thaws: a trial connect after the cooldown succeeds, the
     breaker closes, and calls work again;
  6. the server goes down and comes back: the same, seen from a dead server.

Every transition is printed as it happens, with its trigger and cause, and a
summary ends the tour. It takes about fifteen seconds.`, stderr)
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() != 0 {
		fmt.Fprintln(stderr, "mcpfsm demo: takes no arguments")
		return 2
	}
	d := &demo{out: stdout, start: time.Now()}
	if err := d.run(ctx); err != nil {
		fmt.Fprintln(stderr, "mcpfsm demo:", errorText(err))
		return 1
	}
	return 0
}

// demoPolicies are the default lifecycle's policies made short enough for a tour.
func demoPolicies() *machine.Policies {
	p := mcpfsm.DefaultSpec().Defaults()
	p.ConnectTimeout = 1500 * time.Millisecond
	p.ProbeTimeout = 500 * time.Millisecond
	p.TeardownTimeout = 500 * time.Millisecond
	p.KeepaliveInterval = time.Second
	p.BackoffBase = 200 * time.Millisecond
	p.BackoffMax = 2 * time.Second
	p.BreakerThreshold = 3
	p.BreakerCooldown = time.Second
	p.BreakerCooldownMax = 4 * time.Second
	return &p
}

type demo struct {
	out   io.Writer
	start time.Time

	mu       sync.Mutex // serializes output, and guards what follows
	trs      []machine.Transition
	okCalls  int
	badCalls int
	fastFail int
}

func (d *demo) printf(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, format, args...)
}

// observe prints a transition as it happens; it runs on the connection's owner.
func (d *demo) observe(tr machine.Transition) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.trs = append(d.trs, tr)
	line := fmt.Sprintf("   %+8.3fs  %-12s → %-12s  %s", tr.At.Sub(d.start).Seconds(), tr.From, tr.To, tr.Trigger)
	if tr.Cause != states.CauseNone {
		line += " (" + tr.Cause.String()
		if tr.Err != nil {
			line += ": " + printable(tr.Err.Error(), 90)
		}
		line += ")"
	}
	fmt.Fprintln(d.out, line)
}

func (d *demo) run(ctx context.Context) error {
	srv, err := startExampleServer("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.close(cctx)
	}()
	pol := demoPolicies()
	d.printf("mcpfsm demo: an example MCP server at %s and one connection to it, with short policies:\n", srv.URL())
	d.printf("keepalive every %s, probe timeout %s, backoff from %s, breaker after %d failures, cooldown from %s.\n",
		pol.KeepaliveInterval, pol.ProbeTimeout, pol.BackoffBase, pol.BreakerThreshold, pol.BreakerCooldown)

	conn, err := mcpfsm.Open(transport.Config{Name: "example", HTTP: &transport.HTTP{URL: srv.URL()}}, mcpfsm.Options{
		Policies: pol, Observer: d.observe, History: 256,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	step := func(title string) { d.printf("\n▶ %s\n", title) }

	step("Connect, and call the stateful counter tool")
	for range 3 {
		d.call(ctx, conn, "counter", nil)
	}

	step("A planned reconnect: the new session first, then the old one closes")
	conn.Reconnect()
	d.call(ctx, conn, "counter", nil) // on the old session, or the new one: it never waits
	if err := d.wait(ctx, conn, func(tr machine.Transition) bool { return tr.From == states.Retiring }, 10*time.Second); err != nil {
		return err
	}
	d.call(ctx, conn, "counter", nil)
	d.printf("   (no call waited and no budget was spent; on the new session the counter starts over)\n")

	step("The server restarts and forgets its sessions")
	// Right after a probe, with the next one well away, so that a call, not the next
	// probe, is what finds the expired session. (A probe spared by a recent answer
	// brings the next one closer: it is due an interval after that answer.)
	if err := d.quiet(ctx, conn, 500*time.Millisecond); err != nil {
		return err
	}
	if err := srv.restart(true); err != nil {
		return err
	}
	d.call(ctx, conn, "counter", nil)
	d.printf("   (the session had expired: the call ran once, on a new session, where the counter starts over)\n")
	if err := d.healthy(ctx, conn); err != nil {
		return err
	}

	step("The server freezes: it accepts requests and answers none")
	srv.freeze()
	frozen := time.Now()
	if err := d.wait(ctx, conn, func(tr machine.Transition) bool { return tr.From == states.Probing && tr.To == states.TearingDown }, 10*time.Second); err != nil {
		return err
	}
	detected := time.Since(frozen)
	if err := d.wait(ctx, conn, func(tr machine.Transition) bool { return tr.To == states.BreakerOpen }, 15*time.Second); err != nil {
		return err
	}
	d.call(ctx, conn, "echo", map[string]any{"text": "still there?"})

	step("The server thaws")
	srv.thaw()
	thawed := time.Now()
	if err := d.wait(ctx, conn, func(tr machine.Transition) bool { return tr.To == states.Ready }, 15*time.Second); err != nil {
		return err
	}
	recovered := time.Since(thawed)
	d.call(ctx, conn, "echo", map[string]any{"text": "hello again"})
	if err := d.healthy(ctx, conn); err != nil {
		return err
	}

	step("The server goes down, and comes back")
	srv.stop()
	d.call(ctx, conn, "echo", map[string]any{"text": "are you there?"}) // finds out now, not at the next probe
	if err := d.wait(ctx, conn, func(tr machine.Transition) bool { return tr.To == states.BreakerOpen }, 15*time.Second); err != nil {
		return err
	}
	d.call(ctx, conn, "echo", map[string]any{"text": "anyone there?"})
	if err := srv.restart(true); err != nil {
		return err
	}
	if err := d.wait(ctx, conn, func(tr machine.Transition) bool { return tr.To == states.Ready }, 15*time.Second); err != nil {
		return err
	}
	d.call(ctx, conn, "echo", map[string]any{"text": "welcome back"})

	step("Close")
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := conn.Close(cctx); err != nil {
		return err
	}
	d.summary(pol, detected, recovered)
	return nil
}

// call makes one call and prints its outcome.
func (d *demo) call(ctx context.Context, conn *mcpfsm.Conn, tool string, args any) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	var rep mcpfsm.CallReport
	res, err := conn.CallTool(mcpfsm.WithReport(ctx, &rep), &mcp.CallToolParams{Name: tool, Arguments: args})
	took := time.Since(start).Round(time.Millisecond)
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case err == nil:
		d.okCalls++
		fmt.Fprintf(d.out, "   call %s → %s   (%s)\n", tool, resultText(res), took)
	case failedFast(err, rep):
		d.fastFail++
		fmt.Fprintf(d.out, "   call %s failed fast in %s: %s\n", tool, took, printable(err.Error(), 120))
	default:
		d.badCalls++
		fmt.Fprintf(d.out, "   call %s failed after %s: %s\n", tool, took, printable(err.Error(), 120))
	}
}

// failedFast reports whether a call failed fast: it was never sent, because its
// connection was in a state whose calls fail fast (the breaker open). A call whose
// session broke under it and whose retry found the breaker open wraps
// ErrUnavailable too, but it was sent, and counts as failed (it once counted as
// failed fast, after 531 ms).
func failedFast(err error, rep mcpfsm.CallReport) bool {
	return errors.Is(err, mcpfsm.ErrUnavailable) && rep.Attempts == 0
}

// healthy waits until a probe passes, which clears the failure count.
func (d *demo) healthy(ctx context.Context, conn *mcpfsm.Conn) error {
	return d.wait(ctx, conn, func(tr machine.Transition) bool { return tr.Trigger == "probe_ok" }, 10*time.Second)
}

// quiet waits until a probe has passed and the next one is at least gap away.
func (d *demo) quiet(ctx context.Context, conn *mcpfsm.Conn, gap time.Duration) error {
	for range 20 {
		if err := d.healthy(ctx, conn); err != nil {
			return err
		}
		if next := conn.Status().Next; next != nil && time.Until(next.At) >= gap {
			return nil
		}
	}
	return errors.New("no quiet moment between probes")
}

// wait waits for a transition accepted by ok, among those not seen yet.
func (d *demo) wait(ctx context.Context, conn *mcpfsm.Conn, ok func(machine.Transition) bool, within time.Duration) error {
	d.mu.Lock()
	seen := len(d.trs)
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	_, err := conn.WaitState(ctx, func(states.State) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, tr := range d.trs[seen:] {
			if ok(tr) {
				return true
			}
		}
		return false
	})
	return err
}

func (d *demo) summary(pol *machine.Policies, detected, recovered time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	in := map[states.State]time.Duration{}
	failures := 0
	for i, tr := range d.trs {
		if i+1 < len(d.trs) {
			in[tr.To] += d.trs[i+1].At.Sub(tr.At)
		}
		if tr.Cause.Counts() {
			failures++
		}
	}
	var parts []string
	for st, dur := range in {
		parts = append(parts, fmt.Sprintf("%s %.1fs", st, dur.Seconds()))
	}
	sort.Strings(parts)
	fmt.Fprintf(d.out, "\nSummary\n")
	fmt.Fprintf(d.out, "  transitions:           %d, of which %d carried a failure that counts\n", len(d.trs), failures)
	fmt.Fprintf(d.out, "  calls:                 %d answered, %d failed fast (breaker open), %d failed\n", d.okCalls, d.fastFail, d.badCalls)
	fmt.Fprintf(d.out, "  frozen server found:   after %s (keepalive %s + probe timeout %s)\n", detected.Round(time.Millisecond), pol.KeepaliveInterval, pol.ProbeTimeout)
	fmt.Fprintf(d.out, "  ready after the thaw:  %s (within the breaker's cooldown of up to %s)\n", recovered.Round(time.Millisecond), pol.BreakerCooldownMax)
	fmt.Fprintf(d.out, "  time per state:        %s\n", strings.Join(parts, ", "))
}

func resultText(res *mcp.CallToolResult) string {
	if res.IsError {
		return "tool error"
	}
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			return fmt.Sprintf("%q", t.Text)
		}
	}
	return "(no text)"
}
