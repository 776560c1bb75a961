package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The transports of the matrix.
const (
	kindStdio = "stdio"
	kindHTTP  = "http"
	kindSSE   = "sse"
)

// policies are the default policies scaled down to short real durations, so
// that a fault plays out in a second or two (as the root package's
// fastPolicies, with a shorter connect timeout).
func policies() *machine.Policies {
	p := mcpfsm.DefaultSpec().Defaults()
	p.ConnectTimeout = 2 * time.Second
	p.ProbeTimeout = 300 * time.Millisecond
	p.TeardownTimeout = 500 * time.Millisecond
	p.DrainTimeout = time.Second // a replaced session waits this long for its calls
	p.KeepaliveInterval = 300 * time.Millisecond
	p.BackoffBase = 50 * time.Millisecond
	p.BackoffMax = 500 * time.Millisecond
	p.BreakerThreshold = 3
	p.BreakerCooldown = 400 * time.Millisecond
	p.BreakerCooldownMax = 2 * time.Second
	return &p
}

// Bounds the rows assert. They are generous on purpose: the measured times go
// to the table; a row fails only when something is far off.
const (
	callTimeout   = 2 * time.Second        // each call of the load
	callLoadEvery = 100 * time.Millisecond // a new call this often
	lateSlack     = time.Second            // how far past its deadline a call may return, beyond the runtime's own lateness (see lateness)
	recoverWithin = 20 * time.Second       // after the fault ends
	settleLeaks   = 10 * time.Second       // for a row's goroutines, fds and children to go
	forceGrace    = 2 * time.Second        // transport's bound on a forced close
)

// A row is one fault on one transport.
type row struct {
	fault string // the fault's name in the table
	kind  string // stdio, http or sse
	// setup starts the row's server and returns the config to connect to it.
	setup func(r *run) transport.Config
	// atStart: the fault is on before the connection opens, and inject runs
	// at once (it is what keeps the first connect from succeeding).
	atStart bool
	// inject makes the fault happen. It sets r.start when the fault begins
	// (see run.mark) and r.end when the server is usable again, and may wait
	// for either.
	inject func(r *run)
	// detect lists the causes with which the fault may be detected (the first
	// transition after r.start with a cause that is a failure); nil means that
	// nothing may fail at all (the fault must be tolerated), unless planned.
	detect []states.Cause
	// sees, if set, is a cause some failure during the fault must have (the
	// fault itself was classified so, whatever noticed first).
	sees states.Cause
	// planned: the fault is a teardown we asked for: nothing counts, and a
	// new session comes up.
	planned bool
	// check makes the row's own assertions once the connection has recovered
	// and the load has stopped (the connection is still open).
	check func(r *run)
	// beforeClose, if set, strikes the fault again just before Close: Close
	// must keep its bound with the fault on. It may register checks to make
	// once Close has returned (see run.afterClose).
	beforeClose func(r *run)
	// policies, if set, adjusts the row's policies.
	policies func(p *machine.Policies)
}

func (w *row) id() string { return w.fault + "/" + w.kind }

// A run is one row being played.
type run struct {
	t      *testing.T
	row    *row
	id     string
	marker string // in the arguments of the row's server processes
	pol    *machine.Policies

	journal, controlFile string
	ports                []int // the row's listening ports
	kids                 *childWatch

	conn      *mcpfsm.Conn
	proc      *procServer // the row's HTTP subprocess, if any
	srv       *inproc     // the row's in-process HTTP server, if any
	opened    time.Time
	start     time.Time // the fault began
	end       time.Time // the server was usable again
	closeTook time.Duration
	notes     []string // row-specific measurements, for the table
	// afterClose are checks that beforeClose registered, made once Close has
	// returned.
	afterClose []func()

	mu       sync.Mutex
	trs      []machine.Transition
	toolSets []toolSet // what Handlers.ToolsChanged was given, and when
	calls    []*call
	after    []*call // the calls of serves
	failures []string

	loadStop chan struct{}
	loadWG   sync.WaitGroup
	pending  map[string]time.Time // the load's calls in flight, by id: when each began; under mu
	pauseMu  sync.Mutex
	paused   bool           // the load starts no call; under pauseMu
	callsWG  sync.WaitGroup // the load's calls in flight
}

// A toolSet is a tool list delivered to Handlers.ToolsChanged.
type toolSet struct {
	at    time.Time
	names []string
}

// A call is one call of the load.
type call struct {
	tool, id        string
	start, deadline time.Time
	end             time.Time
	text            string
	err             error
	want            string // the answer it must get, if not its id
	// woke is when its deadline reached a goroutine waiting on its context
	// (UnixNano; 0 if it has not, or the call returned before its context
	// ended): see lateness.
	woke atomic.Int64
}

// answer returns the text the call must be answered with.
func (c *call) answer() string {
	if c.want != "" {
		return c.want
	}
	return c.id
}

var markers struct {
	sync.Mutex
	n int
}

func newMarker() string {
	markers.Lock()
	defer markers.Unlock()
	markers.n++
	return fmt.Sprintf("faultrow-%d-%d", time.Now().UnixNano()%1e6, markers.n)
}

// play runs the row.
func (w *row) play(t *testing.T) {
	r := &run{t: t, row: w, id: w.id(), marker: newMarker(), pol: policies()}
	if w.policies != nil {
		w.policies(r.pol)
	}
	labelRow(r.id)
	dir := t.TempDir()
	r.journal = filepath.Join(dir, "journal")
	r.controlFile = filepath.Join(dir, "control")
	r.kids = watchChildren(r.marker)
	// Registered first, so it runs last: after the connection, the load and
	// the servers are stopped.
	t.Cleanup(r.finish)

	cfg := w.setup(r)
	r.open(cfg)
	r.startLoad()
	if w.atStart {
		w.inject(r)
	} else {
		r.await("ready", 20*time.Second, r.serving)
		r.await("a first probe", 20*time.Second, func() bool { return r.count(states.Probing, states.Ready) > 0 })
		time.Sleep(200 * time.Millisecond) // calls before the fault
		w.inject(r)
	}
	if r.start.IsZero() || r.end.IsZero() {
		r.fatalf("the fault did not mark its start and end")
	}

	// Detection and recovery.
	det := r.detection()
	switch {
	case w.planned || w.detect != nil:
		r.await("recovery", recoverWithin+time.Until(r.end), func() bool { _, ok := r.recovery(); return ok })
		det = r.detection()
		if det == nil {
			r.fatalf("the fault was not detected\n%s", r.timeline())
		}
	default:
		r.await("ready", recoverWithin, r.serving)
	}

	// The connection serves: a read-only and a non-idempotent call.
	r.serves("echo")
	r.serves("journal")
	time.Sleep(300 * time.Millisecond)
	r.stopLoad()

	// What the fault must have done.
	switch {
	case w.planned:
		// The reconnect asked for spends nothing, and calls always have a session:
		// the new one is opened before the old one is closed.
		replaced := false
		for _, tr := range r.transitions() {
			if tr.At.Before(r.start) {
				continue
			}
			if tr.Cause.Counts() || !r.hasSession(tr.To) {
				r.errorf("the planned reconnect counted as a failure or left calls without a session: %v\n%s", tr, r.timeline())
			}
			replaced = replaced || tr.From == states.Replacing && tr.To == states.Retiring
		}
		if !replaced {
			r.errorf("the session was not replaced\n%s", r.timeline())
		}
	case w.detect != nil:
		if !slices.Contains(w.detect, det.Cause) {
			r.errorf("detected as %v, want one of %v\n%s", det, w.detect, r.timeline())
		}
		// The bound: a probe comes within the keepalive interval of the server
		// last being heard from (a probe spared by an answer to the load counts
		// the next interval from that answer) and fails within the probe
		// timeout. A fault on from the start fails the first connect within the
		// connect timeout. A second of slack on top.
		bound := r.pol.KeepaliveInterval + r.pol.ProbeTimeout + time.Second
		if w.atStart {
			bound = r.pol.ConnectTimeout + time.Second
		}
		if took := det.At.Sub(r.start); took > bound {
			r.errorf("detected after %v, want at most %v\n%s", took, bound, r.timeline())
		}
		if w.sees != states.CauseNone && !r.saw(w.sees) {
			r.errorf("no failure during the fault was classified %s\n%s", w.sees, r.timeline())
		}
	default:
		for _, tr := range r.transitions() {
			if tr.Cause.Counts() || tr.To == states.TearingDown || tr.To == states.BackingOff {
				r.errorf("a tolerable fault broke the connection: %v\n%s", tr, r.timeline())
				break
			}
		}
	}
	if w.detect != nil {
		r.checkLost()
	} else {
		r.checkNoneLost()
	}
	r.checkCalls()
	if w.check != nil {
		w.check(r)
	}
	if w.beforeClose != nil {
		w.beforeClose(r)
	}

	closing := time.Now()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := r.conn.Close(cctx); err != nil {
		r.errorf("Close: %v", err)
	}
	r.closeTook = time.Since(closing)
	if bound := r.pol.TeardownTimeout + forceGrace + time.Second; r.closeTook > bound {
		r.errorf("Close took %v, want at most %v", r.closeTook, bound)
	}
	for _, f := range r.afterClose {
		f()
	}
}

// checkNoneLost checks the calls of a row whose fault must be tolerated, or
// is a reconnect we asked for: none failed, but for a call whose own deadline
// ended it (on a loaded machine), and then not before that deadline; and, for
// a reconnect, a non-idempotent call still in flight on the replaced session
// when its close came (retire lets calls finish for drain_timeout less the
// close's share, 500ms here: a loaded machine may take longer), which says it
// may have run.
func (r *run) checkNoneLost() {
	trs := r.transitions()
	retiredUnder := func(c *call) bool {
		return slices.ContainsFunc(trs, func(tr machine.Transition) bool {
			return tr.From == states.Retiring && tr.To != states.Retiring && !tr.At.Before(c.start) && !tr.At.After(c.end.Add(breakLag))
		})
	}
	r.mu.Lock()
	calls := slices.Clone(r.calls)
	r.mu.Unlock()
	for _, c := range calls {
		var ce *mcpfsm.CallError
		switch {
		case c.err == nil:
		case r.row.planned && c.tool == "journal" && errors.Is(c.err, mcpfsm.ErrMayHaveRun) && retiredUnder(c):
		case !errors.As(c.err, &ce) || ce.Cause != states.CauseCanceled:
			r.errorf("call %s failed under a fault that must not fail calls: %v", c.id, c.err)
		case c.end.Before(c.deadline):
			r.errorf("call %s was cancelled %v before its deadline: %v", c.id, c.deadline.Sub(c.end), c.err)
		}
	}
}

// Slack of checkLost's reading of the timeline.
const (
	// seenSlack: a call sees a state a little after the transition into it
	// is stamped, and a little before it is published.
	seenSlack = 50 * time.Millisecond
	// breakLag: how long after a call fails because its session broke the
	// connection may record that failure (its owner may be running a probe,
	// or a forced teardown, when the session ends).
	breakLag = 2 * time.Second
)

// checkLost checks that no call of the load of a fault row was lost: every
// failure is of a kind the connection's own record explains, and once the
// connection had recovered, every call was answered, unless the connection
// failed again while it ran (a probe a loaded machine answered late).
//
//   - ErrUnavailable: a state whose calls fail fast (breaker-open) was
//     entered, or current, while the call ran;
//   - ErrNotReady: a state with no session was entered, or current, while it ran;
//   - ErrMayHaveRun: only for a call that is not idempotent (a read-only one
//     is sent again on the next session), and only when the connection
//     recorded a failure while it ran (its session broke);
//   - the call's own deadline (cause canceled): not before that deadline;
//   - a failure after one retry: only for a read-only call, and only when the
//     connection recorded two failures while it ran (both its sessions broke);
//   - any other error: never (it would be a failure of the server handed to
//     the caller instead of being recovered from).
//
// Outside the fault (before it began, or once the connection had recovered)
// a call fails only if the connection failed while it ran (a probe a loaded
// machine answered late), or, for a call that found no session or one failing
// fast, if a failure took the session it would have had (see lostToFailure), or if the test's own proxy dropped data while it
// ran (a guard toxic that waited guardWait on a stalled stage: the table says
// so). Each call that may have run is accounted for by checkCalls (the
// journal: at most once) and in the table.
func (r *run) checkLost() {
	trs := r.transitions()
	rec, recovered := r.recovery()
	dropped := dropsOf(r.id)
	excused := 0
	defer func() {
		if excused > 0 {
			r.note("%d calls failed outside the fault as the test's proxy dropped data (%d chunks in the row)", excused, len(dropped))
		}
	}()
	r.mu.Lock()
	calls := slices.Clone(r.calls)
	r.mu.Unlock()
	failed := func(from, to time.Time) bool {
		for _, tr := range trs {
			if !tr.At.Before(from) && !tr.At.After(to) && failure(tr.Cause) {
				return true
			}
		}
		return false
	}
	during := func(from, to time.Time, ok func(states.State) bool) bool {
		return slices.ContainsFunc(statesDuring(trs, from, to), ok)
	}
	for _, c := range calls {
		if c.err == nil {
			continue
		}
		from, to := c.start.Add(-seenSlack), c.end.Add(seenSlack)
		var ce *mcpfsm.CallError
		var why string
		switch {
		case !errors.As(c.err, &ce):
			why = "not a *mcpfsm.CallError"
		case errors.Is(c.err, mcpfsm.ErrUnavailable):
			if !during(from, to, func(st states.State) bool { return r.conn.Spec().Calls(st) == machine.FailFast }) {
				why = "unavailable, but no state whose calls fail fast while it ran"
			}
		case errors.Is(c.err, mcpfsm.ErrNotReady):
			if !during(from, to, func(st states.State) bool { return !r.hasSession(st) }) {
				why = "not ready, but the connection had a session all the while"
			}
		case errors.Is(c.err, mcpfsm.ErrMayHaveRun):
			switch {
			case c.tool != "journal":
				why = "a read-only call said it may have run: it should have been sent again"
			case !failed(from, c.end.Add(breakLag)):
				why = "it may have run, but the connection recorded no failure while it ran"
			}
		case ce.Cause == states.CauseCanceled:
			if c.end.Before(c.deadline) {
				why = fmt.Sprintf("cancelled %v before its deadline", c.deadline.Sub(c.end))
			}
		case ce.Retried && c.tool != "journal" && failure(ce.Cause):
			why = brokenTwice(trs, from, c.end.Add(breakLag))
		default:
			why = "an error of no kind a fault may give a call (" + ce.Cause.String() + ")"
		}
		outside := c.end.Before(r.start) || recovered && c.start.After(rec.At)
		switch {
		case why != "":
		case !outside || failed(from, c.end.Add(breakLag)) || lostToFailure(trs, c, r.hasSession):
		case slices.ContainsFunc(dropped, func(at time.Time) bool { return !at.Before(from) && !at.After(to) }):
			excused++ // the test's proxy lost data: a network fault the row did not mean
		case c.end.Before(r.start):
			why = "it failed before the fault began, and the connection did not fail while it ran"
		default:
			why = fmt.Sprintf("it began %v after the recovery, and the connection did not fail again", c.start.Sub(rec.At))
		}
		if why != "" {
			r.errorf("call %s lost (%s, %v after the fault began, for %v): %s: %v\n%s",
				c.id, c.tool, c.start.Sub(r.start), c.end.Sub(c.start), why, c.err, r.timeline())
		}
	}
}

// lostToFailure reports whether a call that found no session, or one whose calls
// fail fast (ErrNotReady, ErrUnavailable), found it so because the connection
// lost its session to a failure: the last transition before the call ended that
// left a state with a session had a failure for its cause. Such a failure comes
// before the call (a breaker stays open for its cooldown), where the call's own
// span does not see it.
func lostToFailure(trs []machine.Transition, c *call, hasSession func(states.State) bool) bool {
	if !errors.Is(c.err, mcpfsm.ErrNotReady) && !errors.Is(c.err, mcpfsm.ErrUnavailable) {
		return false
	}
	lost := -1
	for i, tr := range trs {
		if tr.At.After(c.end.Add(seenSlack)) {
			break
		}
		if hasSession(tr.From) && !hasSession(tr.To) {
			lost = i
		}
	}
	return lost >= 0 && failure(trs[lost].Cause)
}

// brokenTwice says why a read-only call that failed after its one retry is not
// explained by the connection's record ("" if it is): it was sent on a session
// that broke under it, then on the next, which broke too, so the connection
// recorded at least two failures from one time to another. (The second may be a
// probe that a loaded machine answered past its timeout, on a session that came
// up after the fault.)
func brokenTwice(trs []machine.Transition, from, to time.Time) string {
	n := 0
	for _, tr := range trs {
		if !tr.At.Before(from) && !tr.At.After(to) && failure(tr.Cause) {
			n++
		}
	}
	if n < 2 {
		return fmt.Sprintf("it failed after one retry, but the connection recorded %d failures while it ran, not two", n)
	}
	return ""
}

// statesDuring returns the states the connection was in at some point from
// one time to another: the state it was in at from, and every state entered
// until to.
func statesDuring(trs []machine.Transition, from, to time.Time) []states.State {
	var out []states.State
	for i, tr := range trs {
		switch {
		case tr.At.After(to):
			if i == 0 {
				out = append(out, tr.From)
			}
			return out
		case !tr.At.After(from):
			out = append(out[:0], tr.To) // the state at from, so far
		default:
			if len(out) == 0 {
				out = append(out, tr.From)
			}
			out = append(out, tr.To)
		}
	}
	return out
}

// serves checks that the connection answers a call once it has recovered.
// The call is made again while it fails (the breaker may be open, or the
// session going down, from a probe a loaded machine answered late), with a
// new id each time, for up to 10s; each id is checked with the load's calls.
func (r *run) serves(tool string) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		c := &call{tool: tool, id: fmt.Sprintf("%s#after-%s-%d", r.id, tool, i), start: time.Now(), deadline: deadline}
		args := map[string]any{"id": c.id}
		if tool == "echo" {
			args = map[string]any{"text": c.id}
		}
		c.do(r.conn, args)
		err := c.err
		r.mu.Lock()
		r.after = append(r.after, c)
		r.mu.Unlock()
		if err == nil {
			if c.text != c.id {
				r.errorf("%s after recovery answered %q", tool, c.text)
			}
			return
		}
		if time.Now().After(deadline) {
			r.errorf("%s after recovery: %v\n%s", tool, err, r.timeline())
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// inflight starts a non-idempotent call that holds for ms and returns once the
// server has begun it (journaled its id); the channel gets the call's error.
func (r *run) inflight(ms int) <-chan error {
	r.t.Helper()
	id := r.id + "#inflight"
	done := make(chan error, 1)
	r.loadWG.Add(1) // stopLoad waits for it too
	go func() {
		defer r.loadWG.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := r.conn.CallTool(ctx, &mcp.CallToolParams{Name: "journal", Arguments: map[string]any{"id": id, "ms": ms}})
		done <- err
	}()
	r.await("the call in flight to reach the server", 10*time.Second, func() bool { return r.journalRuns()[id] > 0 })
	return done
}

// mayHaveRun checks the error of the call inflight started: the connection
// broke under it, so it may have run, and it did, once.
func (r *run) mayHaveRun(done <-chan error) {
	r.t.Helper()
	err := <-done
	var ce *mcpfsm.CallError
	if !errors.As(err, &ce) || !errors.Is(err, mcpfsm.ErrMayHaveRun) || ce.Retried {
		r.errorf("the call in flight when the fault struck got %v, want a *mcpfsm.CallError wrapping ErrMayHaveRun, not retried", err)
	}
	if n := r.journalRuns()[r.id+"#inflight"]; n != 1 {
		r.errorf("the call in flight ran %d times", n)
	}
}

// open opens the row's connection, recording its transitions.
func (r *run) open(cfg transport.Config) {
	var err error
	r.opened = time.Now()
	r.conn, err = mcpfsm.Open(cfg, mcpfsm.Options{
		Policies: r.pol,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Rand:     rand.New(rand.NewPCG(7, 7)),
		History:  1024,
		Observer: func(tr machine.Transition) {
			// The Observer runs on the machine's owner, which is whichever
			// goroutine holds the role: often one a timer started
			// (time.AfterFunc), which carries no pprof label. Labelling it
			// here, before the state's effect starts, makes it and every
			// goroutine the effect starts the row's, for finish's check.
			labelRow(r.id)
			r.mu.Lock()
			r.trs = append(r.trs, tr)
			r.mu.Unlock()
		},
		Handlers: mcpfsm.Handlers{ToolsChanged: func(tools []*mcp.Tool) {
			set := toolSet{at: time.Now()}
			for _, t := range tools {
				set.names = append(set.names, t.Name)
			}
			r.mu.Lock()
			r.toolSets = append(r.toolSets, set)
			r.mu.Unlock()
		}},
	})
	if err != nil {
		r.fatalf("Open: %v", err)
	}
	r.t.Cleanup(func() { // if the row stopped early
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.conn.Close(ctx)
	})
}

// hasSession reports whether st is a state whose calls use a session (ready,
// probing, replacing, retiring in the default lifecycle).
func (r *run) hasSession(st states.State) bool { return r.conn.Spec().Calls(st) == machine.Serve }

// serving reports whether the connection is in a state whose calls use a session.
func (r *run) serving() bool { return r.hasSession(r.conn.State()) }

// mark records that the fault begins now.
func (r *run) mark() { r.start = time.Now() }

// onStop registers a function that stops one of the row's servers.
func (r *run) onStop(f func()) { r.t.Cleanup(f) }

func (r *run) errorf(format string, args ...any) {
	r.t.Helper()
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.failures = append(r.failures, msg)
	r.mu.Unlock()
	r.t.Error(msg)
}

func (r *run) fatalf(format string, args ...any) {
	r.t.Helper()
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.failures = append(r.failures, msg)
	r.mu.Unlock()
	r.t.Fatal(msg)
}

// note adds a measurement to the row's result.
func (r *run) note(format string, args ...any) {
	r.mu.Lock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// await waits until ok holds, failing the row after within.
func (r *run) await(what string, within time.Duration, ok func() bool) {
	r.t.Helper()
	if !settle(within, ok) {
		r.fatalf("waiting for %s: not within %v (state %s)\n%s", what, within, r.conn.State(), r.timeline())
	}
}

func (r *run) transitions() []machine.Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.trs)
}

// count returns how many transitions went from one state to another.
func (r *run) count(from, to states.State) int {
	n := 0
	for _, tr := range r.transitions() {
		if tr.From == from && tr.To == to {
			n++
		}
	}
	return n
}

// saw reports whether a transition from the fault's start to a second after
// its end had the cause c.
func (r *run) saw(c states.Cause) bool {
	for _, tr := range r.transitions() {
		if !tr.At.Before(r.start) && tr.At.Before(r.end.Add(time.Second)) && tr.Cause == c {
			return true
		}
	}
	return false
}

// countSince counts the transitions from one state to another from t on.
func (r *run) countSince(t time.Time, from, to states.State) int {
	n := 0
	for _, tr := range r.transitions() {
		if !tr.At.Before(t) && tr.From == from && tr.To == to {
			n++
		}
	}
	return n
}

// countBetween counts the transitions from one state to another from t on and
// before end.
func (r *run) countBetween(t, end time.Time, from, to states.State) int {
	n := 0
	for _, tr := range r.transitions() {
		if !tr.At.Before(t) && tr.At.Before(end) && tr.From == from && tr.To == to {
			n++
		}
	}
	return n
}

// failure reports whether a transition's cause is a failure of the
// connection, counted or not (lost, timeout, expired, auth, protocol).
func failure(c states.Cause) bool {
	return c != states.CauseNone && c != states.CauseArtifact && c != states.CauseCanceled && c != states.CauseServer
}

// detection returns the transition that detected the fault: the first one
// from r.start on whose cause is a failure, or, for a planned fault, the first
// into replacing. Nil if there is none yet.
func (r *run) detection() *machine.Transition {
	if r.start.IsZero() {
		return nil
	}
	for _, tr := range r.transitions() {
		if tr.At.Before(r.start) {
			continue
		}
		if r.row.planned && tr.To == states.Replacing || !r.row.planned && failure(tr.Cause) {
			return &tr
		}
	}
	return nil
}

// recovery returns the transition that recovered from the fault: once the
// fault has ended and been detected, the first sign of a working new session
// (a session up after the detection, then up or probed healthy from the end of
// the fault on).
func (r *run) recovery() (machine.Transition, bool) {
	det := r.detection()
	if det == nil || r.end.IsZero() {
		return machine.Transition{}, false
	}
	from := det.At
	if r.end.After(from) {
		from = r.end
	}
	renewed := false
	for _, tr := range r.transitions() {
		if tr.At.Before(det.At) || !r.hasSession(tr.To) {
			continue
		}
		renewed = renewed || tr.Trigger == "connected"
		if renewed && !tr.At.Before(from) {
			return tr, true
		}
	}
	return machine.Transition{}, false
}

// timeline renders the transitions for failure messages, from the opening.
func (r *run) timeline() string {
	var b strings.Builder
	mark := func(name string, at time.Time) {
		if !at.IsZero() {
			fmt.Fprintf(&b, "  %8s ---- %s\n", at.Sub(r.opened).Round(time.Millisecond), name)
		}
	}
	trs := r.transitions()
	marks := []struct {
		name string
		at   time.Time
	}{{"fault begins", r.start}, {"fault ends", r.end}}
	for _, tr := range trs {
		for i := range marks {
			if !marks[i].at.IsZero() && marks[i].at.Before(tr.At) {
				mark(marks[i].name, marks[i].at)
				marks[i].at = time.Time{}
			}
		}
		fmt.Fprintf(&b, "  %8s %v failures=%d\n", tr.At.Sub(r.opened).Round(time.Millisecond), tr, tr.Failures)
	}
	for _, m := range marks {
		mark(m.name, m.at)
	}
	return b.String()
}

// startLoad starts calling the server every callLoadEvery, each call on its
// own goroutine with a deadline of callTimeout, in turn: echo (read-only),
// journal (not idempotent), journal holding 250ms (so that calls are in
// flight when the fault strikes).
func (r *run) startLoad() {
	r.loadStop = make(chan struct{})
	r.loadWG.Add(1)
	go func() {
		defer r.loadWG.Done()
		tick := time.NewTicker(callLoadEvery)
		defer tick.Stop()
		for i := 0; ; i++ {
			r.pauseMu.Lock()
			if !r.paused {
				r.loadWG.Add(1)
				r.callsWG.Add(1)
				go r.call(i)
			}
			r.pauseMu.Unlock()
			select {
			case <-r.loadStop:
				return
			case <-tick.C:
			}
		}
	}()
	r.t.Cleanup(r.stopLoad)
}

// loadRunning reports whether the load has not been stopped.
func (r *run) loadRunning() bool {
	select {
	case <-r.loadStop:
		return false
	default:
		return true
	}
}

// stopLoad stops the load and waits for every call, failing the row if one
// has not returned within loadWait: a call that never returns is lost, and
// waiting for it would wedge the test.
func (r *run) stopLoad() {
	select {
	case <-r.loadStop:
	default:
		close(r.loadStop)
	}
	done := make(chan struct{})
	go func() {
		r.loadWG.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(loadWait):
		r.mu.Lock()
		var stuck []string
		for id, began := range r.pending {
			stuck = append(stuck, fmt.Sprintf("%s (began %v ago)", id, time.Since(began).Round(time.Millisecond)))
		}
		r.mu.Unlock()
		slices.Sort(stuck)
		r.errorf("calls still in flight %v after the load stopped: %v", loadWait, stuck)
	}
}

// loadWait bounds how long stopLoad waits for the calls in flight: each has
// a deadline of callTimeout at most, but for inflight's (20s).
const loadWait = 20*time.Second + lateSlack + 5*time.Second

// pauseLoad stops the load from starting calls, and waits for its calls in
// flight: from then on no call of the load gets an answer, so the probes reach
// the server (a probe sends nothing while calls are answered: see quiet).
func (r *run) pauseLoad() {
	r.pauseMu.Lock()
	r.paused = true
	r.pauseMu.Unlock()
	r.callsWG.Wait()
}

// resumeLoad lets the load start calls again.
func (r *run) resumeLoad() {
	r.pauseMu.Lock()
	r.paused = false
	r.pauseMu.Unlock()
}

// quiet pauses the load and returns the row's server counts, then waits for the
// last answer the connection got to be a keepalive interval old: a probe sends
// nothing while a caller's request was answered within the keepalive interval
// (traffic proves the server alive), so from then on, until the load resumes or
// the row calls, every probe reaches the server.
func (r *run) quiet() (counts map[string]int) {
	r.pauseLoad()
	counts = r.serverCounts() // the last answer
	time.Sleep(r.pol.KeepaliveInterval + quietSlack)
	return counts
}

// quietSlack is added to the keepalive interval quiet waits: a probe that began
// just before found the last answer fresh and sent nothing, but its outcome may be
// stamped a little later.
const quietSlack = 50 * time.Millisecond

func (r *run) call(i int) {
	defer r.loadWG.Done()
	defer r.callsWG.Done()
	c := &call{id: r.id + "#" + strconv.Itoa(i), start: time.Now()}
	c.deadline = c.start.Add(callTimeout)
	r.begin(c)
	var args map[string]any
	switch i % 3 {
	case 0:
		c.tool, args = "echo", map[string]any{"text": c.id}
	case 1:
		c.tool, args = "journal", map[string]any{"id": c.id}
	case 2:
		c.tool, args = "journal", map[string]any{"id": c.id, "ms": 250}
	}
	c.do(r.conn, args)
	r.done(c)
}

// begin records that a call of the load is in flight.
func (r *run) begin(c *call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[string]time.Time{}
	}
	r.pending[c.id] = c.start
}

// done records a call of the load that returned.
func (r *run) done(c *call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, c.id)
	r.calls = append(r.calls, c)
}

// text returns the text of a tool's answer, or says what else it was.
func text(res *mcp.CallToolResult) string {
	if res == nil {
		return "(no result)"
	}
	var texts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	if res.IsError || len(texts) != 1 || len(res.Content) != 1 {
		return fmt.Sprintf("(tool error %v: %q)", res.IsError, texts)
	}
	return texts[0]
}

// checkCalls checks the contract on every call of the load: it returned by its
// deadline (lateSlack past it at most, once the runtime's own lateness is
// taken off: see lateness), with its answer or a *mcpfsm.CallError; a
// non-idempotent call ran at most once, exactly once if it was answered, and
// not at all if its error says it cannot have run.
func (r *run) checkCalls() {
	runs := r.journalRuns()
	r.mu.Lock()
	calls := slices.Clone(r.calls)
	after := slices.Clone(r.after)
	r.mu.Unlock()
	if len(calls) < 3 {
		r.errorf("only %d calls were made", len(calls))
	}
	for _, c := range append(calls, after...) {
		r.checkLate(c, lateSlack)
		var ce *mcpfsm.CallError
		if c.err != nil && !errors.As(c.err, &ce) {
			r.errorf("call %s: an error that is not a *mcpfsm.CallError: %T %v", c.id, c.err, c.err)
			continue
		}
		if c.err == nil && c.text != c.answer() {
			r.errorf("call %s answered %.100q", c.id, c.text)
		}
		if c.tool != "journal" {
			continue
		}
		n := runs[c.id]
		switch {
		case n > 1:
			r.errorf("non-idempotent call %s ran %d times (error: %v)", c.id, n, c.err)
		case c.err == nil && n != 1:
			r.errorf("call %s was answered but ran %d times", c.id, n)
		case c.err != nil && n != 0 && !errors.Is(c.err, mcpfsm.ErrMayHaveRun) && ce.Cause != states.CauseCanceled:
			r.errorf("call %s ran, yet its error does not say it may have: %v", c.id, c.err)
		}
	}
}

// tally counts the calls answered and lost.
func (r *run) tally() (answered, lost int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if c.err == nil {
			answered++
		} else {
			lost++
		}
	}
	return answered, lost
}

// callsCell renders the calls answered and lost, with why they were lost;
// the calls that may have run say how many of them did (the journal).
func (r *run) callsCell() string {
	answered, lost := r.tally()
	why := map[string]int{}
	runs := r.journalRuns()
	ran := 0
	r.mu.Lock()
	for _, c := range r.calls {
		var ce *mcpfsm.CallError
		switch {
		case c.err == nil:
		case errors.Is(c.err, mcpfsm.ErrUnavailable):
			why["unavailable"]++ // failed fast (breaker open), or not retried because the retry would have
		case errors.Is(c.err, mcpfsm.ErrNotReady):
			why["not ready by deadline"]++
		case errors.Is(c.err, mcpfsm.ErrMayHaveRun):
			why["may have run"]++
			ran += runs[c.id]
		case errors.As(c.err, &ce) && ce.Cause == states.CauseCanceled:
			why["deadline in flight"]++
		case errors.As(c.err, &ce):
			why[ce.Cause.String()]++
		default:
			why["untyped"]++
		}
	}
	r.mu.Unlock()
	s := fmt.Sprintf("%d / %d", answered, lost)
	if len(why) > 0 {
		var parts []string
		for k, n := range why {
			if k == "may have run" {
				parts = append(parts, fmt.Sprintf("%d may have run: %d ran", n, ran))
				continue
			}
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
		slices.Sort(parts)
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// finish stops what is left of the row, checks that nothing of it remains,
// and records its result. It runs last among the row's cleanups.
func (r *run) finish() {
	unlabel() // this goroutine is the row's too
	_, pipes := r.kids.end()
	var leaks []string
	ok := settle(settleLeaks, func() bool {
		leaks = leaks[:0]
		if n, stacks := labeled(r.id); n > 0 {
			leaks = append(leaks, fmt.Sprintf("%d goroutines (%s)", n, strings.Join(goroutineTop(stacks), ", ")))
		}
		if fds := leakedFDs(r.ports, pipes); len(fds) > 0 {
			leaks = append(leaks, fmt.Sprintf("%d fds (%s)", len(fds), strings.Join(fds, ", ")))
		}
		if kids := marked(r.marker); len(kids) > 0 {
			leaks = append(leaks, fmt.Sprintf("%d child processes %v", len(kids), kids))
		}
		return len(leaks) == 0
	})
	if !ok {
		_, stacks := labeled(r.id)
		r.errorf("leaks after the row: %s\n%s", strings.Join(leaks, "; "), stacks)
	}
	record(r, leaks)
}

// TestBrokenTwice checks the rule for a read-only call that failed after its one
// retry: the connection must have recorded two failures while it ran, counting
// only failures (not a teardown's artifact, nor a probe that passed).
func TestBrokenTwice(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	fail := func(ms int, c states.Cause) machine.Transition {
		return machine.Transition{At: at(ms), From: states.Probing, To: states.TearingDown, Cause: c}
	}
	artifact := machine.Transition{At: at(700), From: states.TearingDown, To: states.BackingOff, Cause: states.CauseArtifact}
	for _, tc := range []struct {
		name      string
		trs       []machine.Transition
		explained bool
	}{
		{"two failures", []machine.Transition{fail(100, states.CauseTimeout), artifact, fail(1900, states.CauseTimeout)}, true},
		{"one failure and a teardown's artifact", []machine.Transition{fail(100, states.CauseTimeout), artifact}, false},
		{"the second failure after the call", []machine.Transition{fail(100, states.CauseLost), fail(4500, states.CauseTimeout)}, false},
		{"the first failure before the call", []machine.Transition{fail(-100, states.CauseLost), fail(1900, states.CauseTimeout)}, false},
		{"none", nil, false},
	} {
		why := brokenTwice(tc.trs, at(0), at(2000))
		if (why == "") != tc.explained {
			t.Errorf("%s: brokenTwice = %q, want explained %v", tc.name, why, tc.explained)
		}
	}
}

// TestLostToFailure checks the rule for a call that failed outside the fault
// for want of a session: the session must have been lost to a failure, which
// may come before the call began.
func TestLostToFailure(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	hasSession := func(st states.State) bool { return st == states.Ready || st == states.Probing }
	tr := func(ms int, from, to states.State, c states.Cause) machine.Transition {
		return machine.Transition{At: at(ms), From: from, To: to, Cause: c}
	}
	probeFailed := []machine.Transition{
		tr(0, states.Ready, states.Probing, states.CauseNone),
		tr(300, states.Probing, states.TearingDown, states.CauseTimeout),
		tr(470, states.TearingDown, states.BreakerOpen, states.CauseNone),
	}
	reconnect := []machine.Transition{ // asked for: no failure
		tr(0, states.Ready, states.Replacing, states.CauseNone),
	}
	unavailable := &mcpfsm.CallError{Cause: states.CauseTimeout, Err: mcpfsm.ErrUnavailable}
	notReady := &mcpfsm.CallError{Cause: states.CauseCanceled, Err: mcpfsm.ErrNotReady}
	timedOut := &mcpfsm.CallError{Cause: states.CauseCanceled, Err: context.DeadlineExceeded}
	for _, tc := range []struct {
		name      string
		trs       []machine.Transition
		err       error
		start     int
		explained bool
	}{
		{"unavailable, the breaker opened by a probe's failure before the call", probeFailed, unavailable, 410, true},
		{"not ready, the session lost to a failure before the call", probeFailed, notReady, 350, true},
		{"a call of a session, failed after a failure before it", probeFailed, timedOut, 410, false},
		{"unavailable before the session was lost", probeFailed, unavailable, -500, false},
		{"not ready, the session left with no failure", reconnect, notReady, 100, false},
	} {
		c := &call{start: at(tc.start), end: at(tc.start + 60), err: tc.err}
		if got := lostToFailure(tc.trs, c, hasSession); got != tc.explained {
			t.Errorf("%s: lostToFailure = %v, want %v", tc.name, got, tc.explained)
		}
	}
}
