package mcpfsm

import (
	"context"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/stats"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// The latency benchmarks play a fault against a test server over streamable HTTP on
// loopback, one fault per op (run them with -benchtime=Nx), and report how long the
// connection took to notice or get over it, next to the bound its policies promise.
// They report; they assert no timing.

// latencyPolicies are the default policies with short real durations.
func latencyPolicies() *machine.Policies {
	p := DefaultSpec().Defaults()
	p.ConnectTimeout = 3 * time.Second
	p.ProbeTimeout = 200 * time.Millisecond
	p.TeardownTimeout = time.Second
	p.KeepaliveInterval = 500 * time.Millisecond
	p.BackoffBase = 300 * time.Millisecond
	p.BackoffMax = 2 * time.Second
	p.BreakerThreshold = 20 // the recovery must not wait for a breaker's cooldown
	return &p
}

// recorder keeps a connection's transitions, and calls on, if set, with each as it is
// published (on the owner goroutine).
type recorder struct {
	mu  sync.Mutex
	trs []machine.Transition
	on  func(machine.Transition)
}

func (r *recorder) observe(tr machine.Transition) {
	r.mu.Lock()
	r.trs = append(r.trs, tr)
	on := r.on
	r.mu.Unlock()
	if on != nil {
		on(tr)
	}
}

func (r *recorder) transitions() []machine.Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.trs)
}

func (r *recorder) setOn(on func(machine.Transition)) {
	r.mu.Lock()
	r.on = on
	r.mu.Unlock()
}

// first returns the first transition at or after t from one state to another.
func (r *recorder) first(after time.Time, from, to states.State) (machine.Transition, bool) {
	for _, tr := range r.transitions() {
		if tr.From == from && tr.To == to && !tr.At.Before(after) {
			return tr, true
		}
	}
	return machine.Transition{}, false
}

// openHTTP opens a Conn to h with pol, recording its transitions, and waits until it
// is ready. It returns the connection and the duration of its first connect.
func openHTTP(b *testing.B, h *testserver.HTTPServer, pol *machine.Policies, rec *recorder) (*Conn, time.Duration) {
	b.Helper()
	c, err := Open(transport.Config{Name: "latency", HTTP: &transport.HTTP{URL: h.URL()}},
		Options{Policies: pol, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Observer: rec.observe, History: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(context.Background()) })
	waitState(b, c, states.Ready, 10*time.Second)
	start, _ := rec.first(time.Time{}, states.Idle, states.Connecting)
	ready, _ := rec.first(time.Time{}, states.Connecting, states.Ready)
	return c, ready.At.Sub(start.At)
}

func waitState(b *testing.B, c *Conn, want states.State, within time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if st, err := c.m.Wait(ctx, func(s states.State) bool { return s == want }); err != nil {
		b.Fatalf("waiting for %s: %v (state %s)", want, err, st)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkDetection: a server freezes (it accepts requests and answers nothing) just
// after a probe passed, the worst moment; the connection must notice by its next probe
// failing, within keepalive_interval + probe_timeout. It reports detect-ms (median),
// bound-ms (keepalive_interval + probe_timeout) and detect/bound, the worst ratio seen
// (goal 1.05).
func BenchmarkDetection(b *testing.B) {
	pol := latencyPolicies()
	bound := pol.KeepaliveInterval + pol.ProbeTimeout
	var detect []float64
	worst := 0.0
	for b.Loop() {
		h := testserver.StartHTTP(b, testserver.Options{})
		rec := &recorder{}
		var frozen atomic.Int64
		rec.setOn(func(tr machine.Transition) {
			if tr.From == states.Probing && tr.To == states.Ready && frozen.Load() == 0 {
				h.Freeze()
				frozen.Store(time.Now().UnixNano())
			}
		})
		c, _ := openHTTP(b, h, pol, rec)
		waitState(b, c, states.TearingDown, 10*time.Second)
		at := time.Unix(0, frozen.Load())
		found, ok := rec.first(at, states.Probing, states.TearingDown)
		if !ok || found.Cause != states.CauseTimeout {
			b.Fatalf("the frozen server was not found by a probe that timed out: %v", found)
		}
		d := found.At.Sub(at)
		detect = append(detect, ms(d))
		worst = max(worst, float64(d)/float64(bound))
		h.Thaw()
		c.Close(context.Background())
	}
	b.ReportMetric(stats.Median(detect), "detect-ms")
	b.ReportMetric(ms(bound), "bound-ms")
	b.ReportMetric(worst, "detect/bound")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRecovery: a server stops, and comes back while the connection waits out its
// second backoff; the connection must be ready once that wait is over and one connect
// has been made. It reports recovery-ms (from the server's return to ready, median);
// recovery/bound, the median ratio of the recovery to its bound: the wait that
// remained when the server returned (until the retry the timer scheduled) plus one
// connect (the connection's first, on a healthy server) (goal 1); worst-recovery/bound,
// the largest; and retries, the most connect attempts any recovery took after the
// server was back (goal 1: the first one succeeds).
func BenchmarkRecovery(b *testing.B) {
	pol := latencyPolicies()
	var recovery, ratios []float64
	worst, retries := 0.0, 0
	for b.Loop() {
		h := testserver.StartHTTP(b, testserver.Options{})
		rec := &recorder{}
		c, connect := openHTTP(b, h, pol, rec)
		backoffs := make(chan time.Time, 8)
		rec.setOn(func(tr machine.Transition) {
			if tr.To == states.BackingOff {
				backoffs <- tr.At
			}
		})
		h.Stop()
		<-backoffs
		<-backoffs // the second wait, after a connect was refused
		time.Sleep(20 * time.Millisecond)
		h.Restart(true)
		back := time.Now()
		waitState(b, c, states.Ready, 10*time.Second)
		retry, ok := rec.first(back, states.BackingOff, states.Connecting)
		ready, _ := rec.first(back, states.Connecting, states.Ready)
		if !ok {
			b.Fatal("no connect after the server came back")
		}
		took := ready.At.Sub(back)
		bound := retry.At.Sub(back) + connect
		recovery = append(recovery, ms(took))
		ratios = append(ratios, float64(took)/float64(bound))
		worst = max(worst, float64(took)/float64(bound))
		tries := 0
		for _, tr := range rec.transitions() {
			if tr.To == states.Connecting && !tr.At.Before(back) {
				tries++
			}
		}
		retries = max(retries, tries)
		if testing.Verbose() {
			b.Logf("back %s before the retry; ready %s after the retry (first connect %s)",
				retry.At.Sub(back), ready.At.Sub(retry.At), connect)
		}
		c.Close(context.Background())
	}
	b.ReportMetric(stats.Median(recovery), "recovery-ms")
	b.ReportMetric(stats.Median(ratios), "recovery/bound")
	b.ReportMetric(worst, "worst-recovery/bound")
	b.ReportMetric(float64(retries), "retries")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRecycle: a probe finds the session older than max_session_age and recycles
// it, against a healthy server, while 4 goroutines call a tool in a loop (a pause of
// 1ms between calls). A recycle is
// make before break: the new session connects while the old one serves, calls move to
// it, and the old one finishes its calls and closes in the background. It reports
// recycle-ms, from the probe's decision to calls running on the new session (median);
// recycle/connect, that median over the median of one connect to the same server (dial,
// initialize, list tools: what a connect does), timed on a session of its own right
// after each recycle, under the same load (goal 2); worst-recycle/connect, the slowest
// recycle over the slowest of those connects (like with like: on a shared machine both
// have a tail several times their median), and worst-recycle/median-connect; retire-ms, how long the old session took
// to finish its calls and close (median); no-session-ms, the longest time calls had no
// session during a recycle (0: they never wait); and failed-calls (goal 0).
func BenchmarkRecycle(b *testing.B) {
	pol := latencyPolicies()
	pol.KeepaliveInterval = 200 * time.Millisecond
	pol.MaxSessionAge = 300 * time.Millisecond
	h := testserver.StartHTTP(b, testserver.Options{})
	rec := &recorder{}
	c, _ := openHTTP(b, h, pol, rec)
	retired := make(chan machine.Transition, 64)
	rec.setOn(func(tr machine.Transition) {
		if tr.From == states.Retiring {
			retired <- tr
		}
	})

	ctx, stop := context.WithCancel(context.Background())
	var calls, failed atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: benchArgs}); err != nil && ctx.Err() == nil {
					failed.Add(1)
				}
				calls.Add(1)
				time.Sleep(time.Millisecond) // a steady load that leaves the CPUs some room
			}
		})
	}
	// oneConnect times what a connect does, on a session of its own.
	oneConnect := func() time.Duration {
		start := time.Now()
		s, err := transport.DialClient(ctx, c.cfg.Load().cfg, transport.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.ListTools(ctx); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		_ = s.Close(ctx)
		return took
	}
	var costs, connects, retires []float64
	noSession := 0.0
	for b.Loop() {
		done := <-retired
		trs := rec.transitions()
		i := slices.IndexFunc(trs, func(tr machine.Transition) bool { return tr.Seq == done.Seq })
		var decided, serving machine.Transition
		for _, tr := range slices.Backward(trs[:i]) {
			if tr.From == states.Replacing && tr.To == states.Retiring {
				serving = tr
			}
			if tr.To == states.Replacing {
				decided = tr
				break
			}
		}
		if decided.From != states.Probing || decided.Trigger != states.Recycle.String() || serving.Seq == 0 {
			b.Fatalf("a session retired without a probe's recycle before it: %v", trs[max(0, i-4):i+1])
		}
		for j := slices.IndexFunc(trs, func(tr machine.Transition) bool { return tr.Seq == decided.Seq }); j < i; j++ {
			if c.spec.Calls(trs[j].To) != machine.Serve {
				noSession = max(noSession, ms(trs[j+1].At.Sub(trs[j].At)))
			}
		}
		cost := serving.At.Sub(decided.At)
		connect := oneConnect()
		costs = append(costs, ms(cost))
		connects = append(connects, ms(connect))
		retires = append(retires, ms(done.At.Sub(serving.At)))
		if testing.Verbose() {
			b.Logf("recycle %s (one connect %s); the old session closed %s later", cost, connect, done.At.Sub(serving.At))
		}
	}
	stop()
	wg.Wait()
	b.ReportMetric(stats.Median(costs), "recycle-ms")
	b.ReportMetric(stats.Median(connects), "connect-ms")
	b.ReportMetric(stats.Median(costs)/stats.Median(connects), "recycle/connect")
	b.ReportMetric(slices.Max(costs)/slices.Max(connects), "worst-recycle/connect")
	b.ReportMetric(slices.Max(costs)/stats.Median(connects), "worst-recycle/median-connect")
	b.ReportMetric(stats.Median(retires), "retire-ms")
	b.ReportMetric(noSession, "no-session-ms")
	b.ReportMetric(float64(failed.Load()), "failed-calls")
	b.ReportMetric(float64(calls.Load()), "calls")
	b.ReportMetric(0, "ns/op")
}
