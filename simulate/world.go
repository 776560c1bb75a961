package simulate

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// The errors the simulated server gives, as the real transports would.
var (
	errRefused = errors.New("simulated: connection refused")
	errExited  = errors.New("simulated: the server process exited")
	errExpired = errors.New("simulated: session not found (the server restarted)")
	errMissing = errors.New("simulated: exec: no such file or directory")
	errGarbage = errors.New("simulated: invalid character 'x' looking for beginning of value")
)

// A World plays a Scenario: it is the server the connection talks to, and the caller
// that calls through it. It implements machine.World. Its methods are safe for use
// from a Machine's goroutines.
type World struct {
	sc   Scenario
	spec *machine.Spec

	mu      sync.Mutex
	env     machine.Env
	start   time.Time
	cond    Condition
	epoch   int // bumped when the server dies or restarts: older sessions are gone
	nextID  uint64
	session struct { // the client's current session, as the server knows it
		id    uint64
		epoch int
		start time.Time
	}
	waiting []time.Time // deadlines of calls waiting for a session
	calls   CallStats
}

// CallStats count what became of a scenario's calls.
type CallStats struct {
	Made       int // calls made
	Answered   int // got a result
	FailedFast int // failed at once: the breaker was open
	Failed     int // waited out their timeout, or the connection closed
}

// NewWorld returns a world that plays sc against a connection running spec.
func NewWorld(spec *machine.Spec, sc Scenario) *World {
	sc.defaults()
	return &World{sc: sc, spec: spec, cond: Up}
}

// Scenario returns the scenario the world plays.
func (w *World) Scenario() Scenario { return w.sc }

// Calls returns what became of the calls so far.
func (w *World) Calls() CallStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls
}

// Start schedules the scenario's timeline and calls. It implements machine.World.
func (w *World) Start(env machine.Env) {
	w.mu.Lock()
	w.env, w.start = env, env.Now()
	w.mu.Unlock()
	for _, c := range w.sc.Timeline {
		env.At(w.start.Add(c.At), func() { w.change(c.Condition) })
	}
	if every := w.sc.Calls.Every; every > 0 {
		// A third of a period off the grid, so that calls do not fall on the instants
		// the timeline changes.
		for at := every / 3; at < w.sc.Duration; at += every {
			env.At(w.start.Add(at), w.call)
		}
	}
}

// change sets the server's condition.
func (w *World) change(c Condition) {
	w.mu.Lock()
	var lost uint64
	switch c {
	case Down, Restart:
		w.epoch++
		if w.sc.Transport == "stdio" {
			lost = w.session.id // the client sees its server process exit
		}
	}
	w.cond = c
	if c == Restart {
		w.cond = Up
	}
	env := w.env
	w.mu.Unlock()
	if lost != 0 {
		env.Post(machine.Event{Trigger: states.Lost, Cause: states.CauseLost, Err: errExited, Session: lost})
	}
}

var _ effects.Effects = (*World)(nil)

// Connect carries out a connect against the scripted server. The World implements
// effects.Effects: the same bindings as a live connection's.
func (w *World) Connect(_ context.Context, inv machine.Invocation) machine.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.cond {
	case Down:
		err := errRefused
		if w.sc.Transport == "stdio" {
			err = errExited
		}
		return machine.Event{Trigger: states.ConnectFailed, Cause: states.CauseLost, Err: err, Took: failFast}
	case Frozen:
		return machine.Event{Trigger: states.ConnectFailed, Cause: states.CauseTimeout, Err: errTimeout(inv), Took: inv.Timeout}
	case Missing:
		return machine.Event{Trigger: states.ConnectFailed, Cause: states.CauseConfig, Err: errMissing, Took: failFast}
	case Garbage:
		return machine.Event{Trigger: states.ConnectFailed, Cause: states.CauseProtocol, Err: errGarbage, Took: failFast}
	}
	w.nextID++
	w.session.id, w.session.epoch, w.session.start = w.nextID, w.epoch, inv.Now.Add(w.sc.ConnectTime)
	return machine.Event{Trigger: states.Connected, Session: w.nextID, Took: w.sc.ConnectTime}
}

// Replace is a connect while a session serves.
func (w *World) Replace(ctx context.Context, inv machine.Invocation) machine.Event {
	return w.Connect(ctx, inv)
}

// Probe carries out a probe against the scripted server.
func (w *World) Probe(_ context.Context, inv machine.Invocation) machine.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	id := w.session.id
	switch {
	case w.cond == Frozen:
		return machine.Event{Trigger: states.ProbeFailed, Cause: states.CauseTimeout, Err: errTimeout(inv), Session: id, Took: inv.Timeout}
	case w.cond == Down || w.cond == Missing:
		return machine.Event{Trigger: states.ProbeFailed, Cause: states.CauseLost, Err: errRefused, Session: id, Took: failFast}
	case w.cond == Garbage:
		return machine.Event{Trigger: states.ProbeFailed, Cause: states.CauseProtocol, Err: errGarbage, Session: id, Took: failFast}
	case w.session.epoch != w.epoch:
		return machine.Event{Trigger: states.ProbeFailed, Cause: states.CauseExpired, Err: errExpired, Session: id, Took: w.sc.ProbeTime}
	}
	if age := inv.Policies.MaxSessionAge; age > 0 && inv.Now.Sub(w.session.start) >= age {
		return machine.Event{Trigger: states.Recycle, Session: id, Took: w.sc.ProbeTime}
	}
	return machine.Event{Trigger: states.ProbeOK, Session: id, Took: w.sc.ProbeTime}
}

// Teardown closes the session on the scripted server.
func (w *World) Teardown(_ context.Context, inv machine.Invocation) machine.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cond == Frozen && w.session.epoch == w.epoch {
		// A frozen server never answers the close: it is forced at the deadline.
		return machine.Event{Trigger: states.TornDown, Cause: states.CauseArtifact, Err: errTimeout(inv), Took: inv.Timeout}
	}
	return machine.Event{Trigger: states.TornDown, Took: w.sc.CloseTime}
}

// Retire closes the replaced session: the server it was opened on is the one that is
// up.
func (w *World) Retire(_ context.Context, inv machine.Invocation) machine.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cond == Frozen {
		return machine.Event{Trigger: states.Retired, Cause: states.CauseArtifact, Err: errTimeout(inv), Took: inv.Timeout}
	}
	return machine.Event{Trigger: states.Retired, Took: w.sc.CloseTime}
}

// failFast is how long a failure that needs no waiting takes.
const failFast = time.Millisecond

func errTimeout(inv machine.Invocation) error {
	return errors.New("simulated: " + inv.Effect + ": no answer within " + inv.Timeout.String() + " (" + inv.TimeoutPolicy + ")")
}

// call makes one call through the connection, as a caller would.
func (w *World) call() {
	w.mu.Lock()
	env := w.env
	w.calls.Made++
	deadline := env.Now().Add(w.sc.Calls.Timeout)
	var report *machine.Event
	switch calls := env.Calls(); {
	case calls == machine.FailFast:
		w.calls.FailedFast++
	case calls == machine.Serve:
		switch {
		case w.cond == Frozen:
			// The call hangs until its caller gives up; that says nothing about
			// the connection, which a probe will judge.
			w.calls.Failed++
		case w.cond == Down || w.session.epoch != w.epoch:
			// Refused (HTTP) or expired: the server did not run it. It is reported,
			// and waits for the next session.
			cause, err := states.CauseLost, errRefused
			if w.cond != Down {
				cause, err = states.CauseExpired, errExpired
			}
			report = &machine.Event{Trigger: states.Lost, Cause: cause, Err: err, Session: w.session.id}
			w.wait(deadline)
		default:
			w.calls.Answered++
		}
	case calls == 0: // final
		w.calls.Failed++
	default:
		w.wait(deadline)
	}
	w.mu.Unlock()
	if report != nil {
		env.Post(*report)
	}
}

// wait adds a call that waits for a session until deadline. Called with mu held.
func (w *World) wait(deadline time.Time) {
	w.waiting = append(w.waiting, deadline)
	w.env.At(deadline, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for i, d := range w.waiting {
			if d.Equal(deadline) {
				w.waiting = append(w.waiting[:i], w.waiting[i+1:]...)
				w.calls.Failed++
				return
			}
		}
	})
}

// Observe settles the calls that wait for a session as the connection moves. It
// implements machine.World.
func (w *World) Observe(tr machine.Transition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.spec.Calls(tr.To) {
	case machine.Serve:
		w.calls.Answered += len(w.waiting)
	case machine.FailFast:
		w.calls.FailedFast += len(w.waiting)
	case 0: // final
		w.calls.Failed += len(w.waiting)
	default:
		return
	}
	w.waiting = nil
}
