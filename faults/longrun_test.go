package faults_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

var updateLongRun = flag.Bool("update-longrun", false, "rewrite the long-run section of docs/reliability.md")

// The long run: 24 simulated hours of one connection on the default lifecycle
// (transitions.yaml, default policies) against a scripted server that is dead for the
// first 12 hours and then flaps on the schedule below. It runs the real Machine (owner
// goroutine, timers, mailbox) under testing/synctest, so the day takes well under a
// second; only the server is scripted.
//
// It measures what ../shared/notes/failures.md complains of: how often a client tries a
// dead server ("respawned about 3,000 times in 63 hours", "every tick"), whether it
// gives up ("after 5 reconnects"), and how soon a server that returns is in use again.
//
// go test ./faults -run TestLongRun -args -update-longrun rewrites the long-run section
// of docs/reliability.md; the test fails when that section is stale.

const (
	longRunDead  = 12 * time.Hour
	longRunTotal = 24 * time.Hour
	// warmup is the start of the dead half not held to the hourly goal: the first
	// backoffs and the breaker's first, short cooldowns.
	warmup = 10 * time.Minute
	// goalPerHour is issue 4's goal for connect attempts per hour against a dead server.
	goalPerHour = 12

	refuseLatency  = 2 * time.Millisecond  // a dead server's refusal
	connectLatency = 20 * time.Millisecond // dial, initialize, tools/list against a live one
	probeLatency   = 5 * time.Millisecond
	closeLatency   = 5 * time.Millisecond
)

// A segment is a stretch of the schedule during which the server is up or down.
type segment struct {
	up bool
	d  time.Duration
}

// flapCycle is the flapping half's schedule, two hours repeated from hour 12 to hour 24:
// a long stay up, a 5 s blip (recovered within the backoff), a 3 min outage (long
// enough to open the breaker), three 20 s ups separated by 20 s downs (shorter than a
// keepalive, so failures carry over and the breaker opens while the server is up half
// the time), a shorter stay up, a 35 min outage (the cooldown grows to its cap), and 10
// minutes up, which run into the next cycle's first stay up (so the day ends with the
// server up).
var flapCycle = []segment{
	{true, 40 * time.Minute},
	{false, 5 * time.Second},
	{true, 14*time.Minute + 55*time.Second},
	{false, 3 * time.Minute},
	{true, 20 * time.Second},
	{false, 20 * time.Second},
	{true, 20 * time.Second},
	{false, 20 * time.Second},
	{true, 20 * time.Second},
	{false, 20 * time.Second},
	{true, 15 * time.Minute},
	{false, 35 * time.Minute},
	{true, 10 * time.Minute},
}

// schedule returns the whole day: dead for longRunDead, then flapCycle until the end,
// with adjacent segments of the same state merged.
func schedule() []segment {
	out := []segment{{false, longRunDead}}
	for at := longRunDead; at < longRunTotal; {
		for _, s := range flapCycle {
			s.d = min(s.d, longRunTotal-at)
			if s.d <= 0 {
				break
			}
			at += s.d
			if last := &out[len(out)-1]; last.up == s.up {
				last.d += s.d
				continue
			}
			out = append(out, s)
		}
	}
	return out
}

// How a down server behaves.
const (
	// downCrashed: the process is gone. A connect is refused at once, and a live
	// session ends at the moment the server goes down (the session watcher reports it,
	// as transport's OnEnd does for a stdio child that exits or a closed stream).
	downCrashed = "crashed"
	// downSilent: the server is frozen (a dropped NAT flow, a stopped process). A
	// connect or probe hangs until its timeout; nothing reports a live session's end,
	// so only the probe can find it; a teardown hangs until it is forced.
	downSilent = "silent"
)

// longRunServer is the scripted server: the machine's Effects.
type longRunServer struct {
	mode  string
	start time.Time
	post  func(machine.Event)

	mu       sync.Mutex
	up       bool
	edge     chan struct{} // closed and replaced at each change of up
	next     uint64
	session  uint64          // the live session, 0 if none
	attempts []time.Duration // when each connect began, since start
}

var (
	errRefused = errors.New("dial tcp 127.0.0.1:7777: connect: connection refused")
	errExited  = errors.New("server exited: EOF")
)

func (s *longRunServer) state() (up bool, edge <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up, s.edge
}

// setUp changes the server's state; a crash ends the live session at once.
func (s *longRunServer) setUp(up bool) {
	s.mu.Lock()
	s.up = up
	close(s.edge)
	s.edge = make(chan struct{})
	lost := s.session
	if up || s.mode != downCrashed {
		lost = 0
	}
	s.mu.Unlock()
	if lost != 0 {
		s.post(machine.Event{Trigger: states.Lost, Cause: effects.Classify(errExited, false), Err: errExited, Session: lost})
	}
}

// waitUp blocks while the server is down and silent, until ctx ends. It reports
// whether the server is up.
func (s *longRunServer) waitUp(ctx context.Context) bool {
	for {
		up, edge := s.state()
		if up || s.mode != downSilent {
			return up
		}
		select {
		case <-edge:
		case <-ctx.Done():
			return false
		}
	}
}

// ended is the outcome of an effect whose context ended: its timeout, or Close.
func ended(ctx context.Context) (states.Cause, error) {
	err := context.Cause(ctx)
	return effects.Classify(err, false), err
}

var _ effects.Effects = (*longRunServer)(nil)

// Connect dials the scripted server: refused at once while it is crashed, hanging
// until the connect timeout while it is silent.
func (s *longRunServer) Connect(ctx context.Context, inv machine.Invocation) machine.Event {
	s.mu.Lock()
	s.attempts = append(s.attempts, time.Since(s.start))
	s.mu.Unlock()
	if !s.waitUp(ctx) {
		if ctx.Err() != nil {
			cause, err := ended(ctx)
			return machine.Event{Trigger: states.ConnectFailed, Cause: cause, Err: err}
		}
		time.Sleep(refuseLatency)
		return machine.Event{Trigger: states.ConnectFailed, Cause: effects.Classify(errRefused, false), Err: errRefused}
	}
	time.Sleep(connectLatency)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.up {
		return machine.Event{Trigger: states.ConnectFailed, Cause: states.CauseLost, Err: errExited}
	}
	s.next++
	s.session = s.next
	return machine.Event{Trigger: states.Connected, Session: s.session}
}

// Replace is a planned reconnect's connect. The day never asks for one (no Reconnect,
// and max_session_age is 0 by default, so no probe recycles), but a connect is what it
// would be.
func (s *longRunServer) Replace(ctx context.Context, inv machine.Invocation) machine.Event {
	return s.Connect(ctx, inv)
}

// Probe checks the live session.
func (s *longRunServer) Probe(ctx context.Context, inv machine.Invocation) machine.Event {
	s.mu.Lock()
	id := s.session
	s.mu.Unlock()
	if !s.waitUp(ctx) {
		if ctx.Err() != nil {
			cause, err := ended(ctx)
			return machine.Event{Trigger: states.ProbeFailed, Cause: cause, Err: err, Session: id}
		}
		return machine.Event{Trigger: states.ProbeFailed, Cause: states.CauseLost, Err: errExited, Session: id}
	}
	time.Sleep(probeLatency)
	return machine.Event{Trigger: states.ProbeOK, Session: id}
}

// Teardown closes the live session: at once while the server is crashed, forced at
// the teardown timeout while it is silent.
func (s *longRunServer) Teardown(ctx context.Context, inv machine.Invocation) machine.Event {
	s.mu.Lock()
	s.session = 0
	s.mu.Unlock()
	return s.close(ctx, states.TornDown)
}

// Retire closes a replaced session (see Replace: the day has none).
func (s *longRunServer) Retire(ctx context.Context, inv machine.Invocation) machine.Event {
	return s.close(ctx, states.Retired)
}

func (s *longRunServer) close(ctx context.Context, outcome states.Trigger) machine.Event {
	if !s.waitUp(ctx) && ctx.Err() != nil {
		// Forced at the teardown timeout: our own doing, an artifact.
		return machine.Event{Trigger: outcome, Cause: states.CauseArtifact, Err: context.Cause(ctx)}
	}
	time.Sleep(closeLatency)
	return machine.Event{Trigger: outcome}
}

// A longRun is one day's record.
type longRun struct {
	mode     string
	pol      machine.Policies
	sched    []segment
	attempts []time.Duration
	trs      []machine.Transition // At is relative to the start (time.Time{} + offset)
	final    states.State
}

// runLongRun plays one day in a synctest bubble.
func runLongRun(t *testing.T, mode string) *longRun {
	var run *longRun
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		spec := mcpfsm.DefaultSpec()
		srv := &longRunServer{mode: mode, start: start, edge: make(chan struct{})}
		var mu sync.Mutex
		var trs []machine.Transition
		m := machine.New(spec, machine.Options{
			Name: "longrun", Effects: srv, History: -1,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Rand:   rand.New(rand.NewPCG(2026, 4)),
			Observer: func(tr machine.Transition) {
				tr.At = time.Time{}.Add(tr.At.Sub(start))
				mu.Lock()
				trs = append(trs, tr)
				mu.Unlock()
			},
		})
		srv.post = func(ev machine.Event) { m.Post(ev) }
		m.Start()

		sched := schedule()
		for _, seg := range sched {
			srv.setUp(seg.up)
			time.Sleep(seg.d)
		}
		final := m.State()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Fatalf("Close after the day: %v (state %s)", err, m.State())
		}
		srv.mu.Lock()
		defer srv.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		run = &longRun{mode: mode, pol: spec.Defaults(), sched: sched, attempts: srv.attempts, trs: trs, final: final}
	})
	return run
}

// An upPeriod is one stretch of the flapping half with the server up.
type upPeriod struct {
	at, d    time.Duration // since the start of the day
	from     states.State  // the connection's state when the server came up
	recovery time.Duration // from the server up to ready; -1 if it went down first
}

// figures are what a day shows.
type figures struct {
	deadHours        []int // connect attempts in each hour of the dead half
	deadWarmup       int   // in its first 10 minutes
	deadMaxHour      int   // most in any hour-long window of the dead half after warmup
	deadTotal        int
	flapHours        []int
	flapDownTime     time.Duration
	flapDownTries    int
	ups              []upPeriod
	maxRecovery      time.Duration
	beyondCap        int           // recoveries longer than breaker_cooldown_max plus a connect (its jitter)
	missed           int           // up periods that ended before the connection was ready
	longestMissed    time.Duration // the longest of them
	readyShare       float64       // of the flapping half's up time, the share with a session
	maxDetect        time.Duration // from the server going down to the connection leaving ready
	unnoticed        int           // outages over before the connection noticed them
	longestUnnoticed time.Duration
	total            int
	sessions         int
	breakerOpens     int
	maxCooldownGap   time.Duration // the longest wait between two attempts against the dead server
}

func (r *longRun) figures() figures {
	var f figures
	f.total = len(r.attempts)
	f.deadHours = make([]int, longRunDead/time.Hour)
	f.flapHours = make([]int, (longRunTotal-longRunDead)/time.Hour)
	var dead []time.Duration
	for _, a := range r.attempts {
		switch {
		case a < longRunDead:
			f.deadHours[a/time.Hour]++
			f.deadTotal++
			dead = append(dead, a)
			if a < warmup {
				f.deadWarmup++
			}
		case a < longRunTotal:
			f.flapHours[(a-longRunDead)/time.Hour]++
		}
	}
	// The most attempts in any hour-long window inside the dead half after warmup: a
	// window holding the most attempts can be taken to start at one.
	for i, a := range dead {
		if i > 0 {
			f.maxCooldownGap = max(f.maxCooldownGap, a-dead[i-1])
		}
		if a < warmup || a+time.Hour > longRunDead {
			continue
		}
		n := 0
		for _, b := range dead[i:] {
			if b < a+time.Hour {
				n++
			}
		}
		f.deadMaxHour = max(f.deadMaxHour, n)
	}
	// The last window ending at the end of the dead half.
	n := 0
	for _, a := range dead {
		if a >= longRunDead-time.Hour {
			n++
		}
	}
	f.deadMaxHour = max(f.deadMaxHour, n)

	spec := mcpfsm.DefaultSpec()
	withSession := func(st states.State) bool { return spec.Calls(st) == machine.Serve }
	stateAt := func(at time.Duration) states.State {
		st := states.Idle
		for _, tr := range r.trs {
			if tr.At.Sub(time.Time{}) > at {
				break
			}
			st = tr.To
		}
		return st
	}
	hasSession := func(from, to time.Duration) time.Duration {
		var in time.Duration
		st, since := states.Idle, time.Duration(0)
		for _, tr := range r.trs {
			at := tr.At.Sub(time.Time{})
			if withSession(st) {
				in += max(0, min(at, to)-max(since, from))
			}
			st, since = tr.To, at
		}
		if withSession(st) {
			in += max(0, to-max(since, from))
		}
		return in
	}
	for _, tr := range r.trs {
		if tr.To == states.Ready && (tr.From == states.Connecting || tr.From == states.HalfOpen) {
			f.sessions++
		}
		if tr.To == states.BreakerOpen && tr.From != states.HalfOpen {
			f.breakerOpens++
		}
	}
	at := time.Duration(0)
	var upTime, readyTime time.Duration
	for _, seg := range r.sched {
		if at >= longRunDead {
			if seg.up {
				p := upPeriod{at: at, d: seg.d, from: stateAt(at), recovery: -1}
				if withSession(p.from) {
					p.recovery = 0 // the outage went unnoticed, or a probe waited it out
				}
				for _, tr := range r.trs {
					if p.recovery >= 0 {
						break
					}
					ta := tr.At.Sub(time.Time{})
					if ta >= at && ta < at+seg.d && tr.To == states.Ready && tr.From != states.Probing {
						p.recovery = ta - at
						break
					}
				}
				if p.recovery > r.pol.BreakerCooldownMax+connectLatency {
					f.beyondCap++
				}
				if p.recovery < 0 {
					f.missed++
					f.longestMissed = max(f.longestMissed, seg.d)
				} else {
					f.maxRecovery = max(f.maxRecovery, p.recovery)
				}
				f.ups = append(f.ups, p)
				upTime += seg.d
				readyTime += hasSession(at, at+seg.d)
			} else {
				f.flapDownTime += seg.d
				for _, a := range r.attempts {
					if a >= at && a < at+seg.d {
						f.flapDownTries++
					}
				}
				// Detection: from the server going down to the connection leaving
				// ready or probing, if it had a session then. An outage may end before
				// anything notices it.
				if withSession(stateAt(at)) {
					found := false
					for _, tr := range r.trs {
						ta := tr.At.Sub(time.Time{})
						if ta >= at && ta <= at+seg.d && !withSession(tr.To) {
							f.maxDetect = max(f.maxDetect, ta-at)
							found = true
							break
						}
					}
					if !found {
						f.unnoticed++
						f.longestUnnoticed = max(f.longestUnnoticed, seg.d)
					}
				}
			}
		}
		at += seg.d
	}
	if upTime > 0 {
		f.readyShare = float64(readyTime) / float64(upTime)
	}
	return f
}

// recoveryBound is the longest a returning server may wait to be in use: the breaker's
// longest cooldown (its jitter only shortens it) and one connect.
func recoveryBound(p machine.Policies) time.Duration {
	return p.BreakerCooldownMax + connectLatency
}

func TestLongRun(t *testing.T) {
	var sections []string
	var figs []figures
	for _, mode := range []string{downCrashed, downSilent} {
		t.Run(mode, func(t *testing.T) {
			r := runLongRun(t, mode)
			f := r.figures()
			t.Logf("dead half, attempts per hour: %v (first 10 min: %d; most in any hour after them: %d; total %d)", f.deadHours, f.deadWarmup, f.deadMaxHour, f.deadTotal)
			t.Logf("flapping half, attempts per hour: %v; recovery max %v over %d up periods (%d missed, longest %v); ready %.1f%% of up time; detection max %v",
				f.flapHours, f.maxRecovery, len(f.ups), f.missed, f.longestMissed, 100*f.readyShare, f.maxDetect)

			// The goal: at most 12 attempts an hour against a dead server after the
			// first 10 minutes, and never giving up.
			if f.deadMaxHour > goalPerHour {
				t.Errorf("%d connect attempts in an hour against the dead server, goal ≤ %d: %v", f.deadMaxHour, goalPerHour, f.deadHours)
			}
			for h, n := range f.deadHours {
				if n == 0 {
					t.Errorf("no connect attempt in hour %d against the dead server: the connection gave up", h)
				}
			}
			// The server returning is in use again within the cooldown cap plus a
			// connect, whenever it stays up that long.
			bound := recoveryBound(r.pol)
			for _, p := range f.ups {
				if p.recovery > bound || p.recovery < 0 && p.d > bound {
					t.Errorf("server up at %v for %v (connection %s then): ready after %v, want within %v", p.at, p.d, p.from, p.recovery, bound)
				}
			}
			if r.final != states.Ready && r.final != states.Probing {
				t.Errorf("at the end of the day, with the server up, the connection is %s", r.final)
			}
			if mode == downSilent {
				// A frozen server is found by the probe: within an interval and a
				// probe timeout.
				if limit := r.pol.KeepaliveInterval + r.pol.ProbeTimeout; f.maxDetect > limit || f.longestUnnoticed > limit {
					t.Errorf("a frozen server was found after %v (longest outage unnoticed %v), want within %v", f.maxDetect, f.longestUnnoticed, limit)
				}
			} else if f.unnoticed > 0 || f.maxDetect > 0 {
				t.Errorf("crashes unnoticed: %d; found after %v, want at once", f.unnoticed, f.maxDetect)
			}
			sections = append(sections, r.markdown(f))
			figs = append(figs, f)
		})
	}
	if t.Failed() || len(sections) != 2 {
		return
	}
	pol := mcpfsm.DefaultSpec().Defaults()
	section := longRunIntro(pol) + strings.Join(sections, "\n") + longRunReading(pol, figs[0], figs[1])
	syncDocSection(t, "../docs/reliability.md", "<!-- longrun:begin -->", "<!-- longrun:end -->", section, *updateLongRun,
		"go test ./faults -run TestLongRun -args -update-longrun")
}

// syncDocSection rewrites the text between begin and end in path with want (under
// update), or fails the test if it differs.
func syncDocSection(t *testing.T, path, begin, end, want string, update bool, how string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %s ... %s section", path, begin, end)
	}
	have := text[i+len(begin) : j]
	want = "\n" + want
	if have == want {
		return
	}
	if !update {
		t.Errorf("the section %s of %s is stale; run %s\n--- have\n%s\n--- want\n%s", begin, path, how, have, want)
		return
	}
	// Re-read just before writing: others may edit other sections of the file.
	data, err = os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text = string(data)
	i, j = strings.Index(text, begin), strings.Index(text, end)
	text = text[:i+len(begin)] + want + text[j:]
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func longRunIntro(p machine.Policies) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Generated by `go test ./faults -run TestLongRun -args -update-longrun` (faults/longrun_test.go);\n")
	fmt.Fprintf(&b, "the test fails when this section is stale.\n\n")
	fmt.Fprintf(&b, "One connection on the default lifecycle and default policies (backoff %v ×%g up to %v, breaker after %d failures,\n",
		p.BackoffBase, p.BackoffMultiplier, p.BackoffMax, p.BreakerThreshold)
	fmt.Fprintf(&b, "cooldown %v ×%g up to %v ± %g, keepalive %v, probe timeout %v, connect timeout %v), run for 24 simulated hours\n",
		p.BreakerCooldown, p.BreakerCooldownMultiplier, p.BreakerCooldownMax, p.BreakerCooldownJitter, p.KeepaliveInterval, p.ProbeTimeout, p.ConnectTimeout)
	b.WriteString("by the real Machine under `testing/synctest` against a scripted server: dead for the first 12 hours, then\n")
	b.WriteString("flapping on a two-hour cycle repeated until hour 24: up 40 min, down 5 s, up 14 min 55 s, down 3 min,\n")
	b.WriteString("three times (up 20 s, down 20 s), up 15 min, down 35 min, up 10 min (which runs into the next cycle's\n")
	b.WriteString("40 min). Two ways of being down:\n\n")
	b.WriteString("- **crashed**: a connect is refused in 2 ms; a live session's end is reported at once (the session watcher).\n")
	b.WriteString("- **silent**: the server is frozen; a connect hangs to `connect_timeout`, a probe to `probe_timeout`, and\n")
	b.WriteString("  nothing reports a live session's end, so the probe must find it.\n\n")
	fmt.Fprintf(&b, "Goal (issue 4): at most %d connect attempts an hour against the dead server after its first 10 minutes,\n", goalPerHour)
	fmt.Fprintf(&b, "and a server that returns is in use again within the cooldown cap (%v; its jitter only shortens a cooldown) plus a connect.\n",
		p.BreakerCooldownMax)
	return b.String()
}

func (r *longRun) markdown(f figures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Down means %s\n\n", r.mode)
	b.WriteString("| dead half, hour | " + strings.Join(hourHeads(0, len(f.deadHours)), " | ") + " |\n")
	b.WriteString("| --- |" + strings.Repeat(" ---: |", len(f.deadHours)) + "\n")
	b.WriteString("| connect attempts | " + strings.Join(ints(f.deadHours), " | ") + " |\n\n")
	b.WriteString("| flapping half, hour | " + strings.Join(hourHeads(len(f.deadHours), len(f.flapHours)), " | ") + " |\n")
	b.WriteString("| --- |" + strings.Repeat(" ---: |", len(f.flapHours)) + "\n")
	b.WriteString("| connect attempts | " + strings.Join(ints(f.flapHours), " | ") + " |\n\n")
	b.WriteString("| figure | value |\n| --- | --- |\n")
	row := func(k, format string, args ...any) {
		fmt.Fprintf(&b, "| %s | "+format+" |\n", append([]any{k}, args...)...)
	}
	row("attempts against the dead server, first 10 minutes", "%d", f.deadWarmup)
	row("attempts against the dead server, most in any hour after the first 10 minutes", "**%d** (goal ≤ %d)", f.deadMaxHour, goalPerHour)
	row("attempts against the dead server, 12 hours", "%d (%.1f an hour)", f.deadTotal, float64(f.deadTotal)/12)
	row("attempts against the dead server, fewest in an hour", "%d (it never gives up)", slices.Min(f.deadHours))
	row("longest wait between two attempts against the dead server", "%v", f.maxCooldownGap.Round(time.Second))
	row("flapping half: attempts while the server was down", "%d in %v (%.1f an hour)", f.flapDownTries, f.flapDownTime, float64(f.flapDownTries)/f.flapDownTime.Hours())
	row("flapping half: server up periods", "%d; connection ready again in all but %d (the longest missed lasted %v)", len(f.ups), f.missed, f.longestMissed)
	row("flapping half: longest time from the server up to ready", "**%v** (bound %v); %d of %d recoveries took longer than breaker_cooldown_max (%v) plus a connect",
		f.maxRecovery.Round(time.Millisecond), recoveryBound(r.pol), f.beyondCap, len(f.ups)-f.missed, r.pol.BreakerCooldownMax)
	if r.mode == downSilent {
		row("flapping half: longest time to find the server gone", "%v (bound: keepalive + probe timeout = %v); %d outages over before anything noticed them, the longest %v",
			f.maxDetect.Round(time.Millisecond), r.pol.KeepaliveInterval+r.pol.ProbeTimeout, f.unnoticed, f.longestUnnoticed)
	}
	row("flapping half: share of the server's up time with a session", "%.1f%%", 100*f.readyShare)
	row("breaker opened (from connecting or a teardown)", "%d times", f.breakerOpens)
	row("sessions opened / connect attempts, 24 hours", "%d / %d", f.sessions, f.total)
	row("compared with 3,000 respawns in 63 hours", "%.0f attempts in 63 hours of a dead server at this rate", float64(f.deadTotal-f.deadWarmup)/(longRunDead-warmup).Hours()*63)
	return b.String()
}

// longRunReading compares the figures with the goal and with failures.md.
func longRunReading(p machine.Policies, crashed, silent figures) string {
	var b strings.Builder
	capped := p.BreakerCooldownMax
	fmt.Fprintf(&b, "\n### Reading\n\n")
	fmt.Fprintf(&b, "- Against a dead server the connection settles, after its first 10 minutes, at one trial per cooldown at its\n"+
		"  cap (%v, shortened by up to %g of it): %.1f and %.1f attempts an hour on average, at most %d in any hour (goal ≤ %d). failures.md\n"+
		"  reports about 48 an hour (3,000 in 63 hours) and a respawn every tick (every %v keepalive would be %d an hour).\n",
		p.BreakerCooldownMax, p.BreakerCooldownJitter, float64(crashed.deadTotal-crashed.deadWarmup)/(longRunDead-warmup).Hours(),
		float64(silent.deadTotal-silent.deadWarmup)/(longRunDead-warmup).Hours(), max(crashed.deadMaxHour, silent.deadMaxHour), goalPerHour,
		p.KeepaliveInterval, int(time.Hour/p.KeepaliveInterval))
	fmt.Fprintf(&b, "- It never gives up: at least %d attempts in every hour of the dead half, where one client stopped after 5.\n",
		min(slices.Min(crashed.deadHours), slices.Min(silent.deadHours)))
	fmt.Fprintf(&b, "- A server that returns is in use again within one cooldown and a connect: at most %v (crashed) and %v\n"+
		"  (silent). The jitter lengthens the cooldown at its cap to up to %v, beyond breaker_cooldown_max itself;\n"+
		"  recoveries that took longer than %[5]v plus a connect: %[4]d.\n",
		crashed.maxRecovery.Round(time.Second), silent.maxRecovery.Round(time.Second), capped, crashed.beyondCap+silent.beyondCap, p.BreakerCooldownMax)
	fmt.Fprintf(&b, "- While a flapping server is down the rate is higher (%.1f and %.1f attempts per hour of outage): each time the\n"+
		"  server comes back and passes a probe, the failure count and the cooldown start over, so each outage begins\n"+
		"  again with %d quick retries and short cooldowns. That is the design (a short outage is recovered from within\n"+
		"  seconds), and it is bounded by how often the server flaps, not by time.\n",
		float64(crashed.flapDownTries)/crashed.flapDownTime.Hours(), float64(silent.flapDownTries)/silent.flapDownTime.Hours(), p.BreakerThreshold-1)
	return b.String()
}

func hourHeads(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(from + i)
	}
	return out
}

func ints(xs []int) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprint(x)
	}
	return out
}
