package simulate

import (
	"errors"
	"sync"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// The errors the simulated server gives, as the real transports would.
var (
	errRefused = errors.New("simulated: connection refused")
	errExited  = errors.New("simulated: the server process exited")
	errExpired = errors.New("simulated: session not found (the server restarted)")
)

// A World plays a Scenario: it is the server the connection talks to, and the caller
// that calls through it. It implements machine.World. Its methods are safe for use
// from a Machine's goroutines.
type World struct {
	sc Scenario

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

// NewWorld returns a world that plays sc.
func NewWorld(sc Scenario) *World {
	sc.defaults()
	return &World{sc: sc, cond: Up}
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

// Invoke carries out connect, probe, retire and teardown against the scripted server. It
// implements machine.World.
func (w *World) Invoke(inv machine.Invocation, now time.Time) (machine.Event, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	failFast := time.Millisecond
	switch inv.Effect {
	case "connect":
		switch w.cond {
		case Down:
			err := errRefused
			if w.sc.Transport == "stdio" {
				err = errExited
			}
			return machine.Event{Trigger: states.ConnectFailed, Cause: states.CauseLost, Err: err}, failFast
		case Frozen:
			return machine.Event{Trigger: states.ConnectFailed, Cause: states.CauseTimeout, Err: errTimeout(inv)}, inv.Timeout
		}
		w.nextID++
		w.session.id, w.session.epoch, w.session.start = w.nextID, w.epoch, now.Add(w.sc.ConnectTime)
		return machine.Event{Trigger: states.Connected, Session: w.nextID}, w.sc.ConnectTime
	case "probe":
		id := w.session.id
		switch {
		case w.cond == Frozen:
			return machine.Event{Trigger: states.ProbeFailed, Cause: states.CauseTimeout, Err: errTimeout(inv), Session: id}, inv.Timeout
		case w.cond == Down:
			return machine.Event{Trigger: states.ProbeFailed, Cause: states.CauseLost, Err: errRefused, Session: id}, failFast
		case w.session.epoch != w.epoch:
			return machine.Event{Trigger: states.ProbeFailed, Cause: states.CauseExpired, Err: errExpired, Session: id}, w.sc.ProbeTime
		}
		if age := inv.Policies.MaxSessionAge; age > 0 && now.Sub(w.session.start) >= age {
			return machine.Event{Trigger: states.Recycle, Session: id}, w.sc.ProbeTime
		}
		return machine.Event{Trigger: states.ProbeOK, Session: id}, w.sc.ProbeTime
	case "teardown":
		if w.cond == Frozen && w.session.epoch == w.epoch {
			// A frozen server never answers the close: it is forced at the deadline.
			return machine.Event{Trigger: states.TornDown, Cause: states.CauseArtifact, Err: errTimeout(inv)}, inv.Timeout
		}
		return machine.Event{Trigger: states.TornDown}, w.sc.CloseTime
	case "retire":
		// The replaced session: the server it was opened on is the one that is up.
		if w.cond == Frozen {
			return machine.Event{Trigger: states.Retired, Cause: states.CauseArtifact, Err: errTimeout(inv)}, inv.Timeout
		}
		return machine.Event{Trigger: states.Retired}, w.sc.CloseTime
	}
	return machine.Event{}, 0
}

func errTimeout(inv machine.Invocation) error {
	return errors.New("simulated: " + inv.Effect + ": no answer within " + inv.Timeout.String() + " (" + inv.TimeoutPolicy + ")")
}

// call makes one call through the connection, as a caller would.
func (w *World) call() {
	w.mu.Lock()
	env := w.env
	st := env.State()
	w.calls.Made++
	deadline := env.Now().Add(w.sc.Calls.Timeout)
	var report *machine.Event
	switch {
	case st == states.BreakerOpen:
		w.calls.FailedFast++
	case st.HasSession():
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
	case st.Final():
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
	switch {
	case tr.To.HasSession():
		w.calls.Answered += len(w.waiting)
	case tr.To == states.BreakerOpen:
		w.calls.FailedFast += len(w.waiting)
	case tr.To.Final():
		w.calls.Failed += len(w.waiting)
	default:
		return
	}
	w.waiting = nil
}
