package machine

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"time"

	"github.com/mcpfsm/mcpfsm/states"
)

// A World is what a simulated connection talks to: it carries out the spec's invoked
// effects (it is the Effects the spec's registry binds them to, with each outcome saying
// how long the effect took, Event.Took) and may act on its own (a server that dies, a
// caller that calls) through the Env it is started with. The same World can drive a
// Sim, in virtual time on one goroutine, or a Machine, whose Effects then wait out each
// effect's duration.
type World interface {
	// Start schedules the world's own doings. It is called once, before anything else.
	Start(env Env)
	// Observe sees every transition as it happens.
	Observe(tr Transition)
}

// An Env is how a World acts on the connection it serves.
type Env interface {
	// Now is the current instant.
	Now() time.Time
	// State is the connection's state now, and Calls what calls do in it.
	State() states.State
	Calls() CallMode
	// Post delivers an event to the connection, as a watcher or a caller would.
	Post(ev Event)
	// At runs fn at instant t (or at once if t has passed), in instant order.
	At(t time.Time, fn func())
}

// A Sim runs a spec's lifecycle in virtual time: the same core a Machine runs, with
// its timers on a virtual clock and its effects carried out by a World, through the
// same bindings. It runs on the caller's goroutine, so a simulated day takes
// milliseconds, and with the same seed it takes the same path every time.
type Sim struct {
	core  *core
	world World
	now   time.Time
	trs   []Transition
	queue simQueue // the world's scheduled doings, and posted events
	seq   uint64   // orders doings scheduled for the same instant
	max   int      // SimOptions.MaxTransitions
}

// SimOptions configure a Sim. World is required.
type SimOptions struct {
	World    World      // carries out the effects and says what the server does
	Policies *Policies  // the spec's defaults when nil
	Rand     *rand.Rand // draws jitter; a fixed seed when nil
	Start    time.Time  // the first instant; 2000-01-01 UTC when zero, as in testing/synctest
	// MaxTransitions, if positive, stops the simulation once it has taken that many
	// transitions (Stopped then says so), so that a spec whose timers fire every
	// millisecond, or whose effects chain at once, runs in bounded time and memory.
	MaxTransitions int
}

// NewSim returns a simulation of spec in its initial state, with the world started.
func NewSim(spec *Spec, opts SimOptions) *Sim {
	pol := spec.defaults
	if opts.Policies != nil {
		pol = *opts.Policies
	}
	rng := opts.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(1, 1))
	}
	s := &Sim{world: opts.World, now: opts.Start, max: opts.MaxTransitions}
	if s.now.IsZero() {
		s.now = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	s.core = newCore(spec, &pol, rng)
	s.world.Start(s)
	s.follow(s.core.enter(s.now))
	return s
}

// Now returns the current virtual instant.
func (s *Sim) Now() time.Time { return s.now }

// State returns the simulated connection's state.
func (s *Sim) State() states.State { return s.core.spec.name(s.core.state) }

// Calls returns what calls do in the simulated connection's state.
func (s *Sim) Calls() CallMode { return s.core.spec.states[s.core.state].calls }

// Vars returns the simulated connection's extended state.
func (s *Sim) Vars() Vars { return s.core.vars }

// Stopped reports whether the simulation stopped at SimOptions.MaxTransitions.
func (s *Sim) Stopped() bool { return s.max > 0 && len(s.trs) >= s.max }

// Transitions returns every transition so far, in order.
func (s *Sim) Transitions() []Transition { return s.trs }

// Post delivers an event now, or, while an effect runs, as soon as it ends (as a
// Machine's owner would apply it after the effect).
func (s *Sim) Post(ev Event) { s.At(s.now, func() { s.apply(ev.Trigger, &ev, false) }) }

// At schedules fn at instant t.
func (s *Sim) At(t time.Time, fn func()) {
	s.seq++
	heap.Push(&s.queue, simItem{at: t, seq: s.seq, fn: fn})
}

// RunUntil advances virtual time to t, applying the world's doings and the timed
// transitions that fall due on the way, in instant order (a doing before a timer due at
// the same instant). It stops early if the connection closes.
func (s *Sim) RunUntil(t time.Time) {
	for !s.core.final() && !s.Stopped() {
		next, isTimer := s.next()
		if next.IsZero() || next.After(t) {
			break
		}
		if next.After(s.now) {
			s.now = next
		}
		if isTimer {
			if tr, ok := s.core.due(s.now); ok {
				s.apply(tr, &Event{}, false)
			}
			continue
		}
		item := heap.Pop(&s.queue).(simItem)
		item.fn()
	}
	if t.After(s.now) && !s.Stopped() {
		s.now = t
	}
}

// next returns the instant of the next doing or timer, and whether it is a timer.
func (s *Sim) next() (time.Time, bool) {
	timer := s.core.deadline()
	if len(s.queue) > 0 && (timer.IsZero() || !s.queue[0].at.After(timer)) {
		return s.queue[0].at, false
	}
	return timer, !timer.IsZero()
}

// apply applies one event and follows the effects it sets off.
func (s *Sim) apply(t trig, ev *Event, fromInvoke bool) {
	if s.Stopped() {
		return
	}
	tr, inv, ok := s.core.apply(t, ev, fromInvoke, s.now)
	if !ok {
		return
	}
	s.trs = append(s.trs, tr)
	s.world.Observe(tr)
	s.follow(inv)
}

// follow runs invoked effects in virtual time, each taking the time its outcome says,
// and applies their outcomes.
func (s *Sim) follow(inv *invokeSpec) {
	for inv != nil && !s.Stopped() {
		timeout := s.core.durs[inv.timeout.field]
		out := inv.run(context.Background(), s.world, Invocation{
			Effect: inv.name, State: s.State(), Now: s.now, Timeout: timeout, TimeoutPolicy: inv.timeout.Name,
			Vars: &s.core.vars, Policies: s.core.pol,
		})
		s.now = s.now.Add(min(max(out.Took, 0), timeout))
		if out.Trigger == 0 {
			return
		}
		tr, next, ok := s.core.apply(out.Trigger, &out, true, s.now)
		if !ok {
			return
		}
		s.trs = append(s.trs, tr)
		s.world.Observe(tr)
		inv = next
	}
}

type simItem struct {
	at  time.Time
	seq uint64
	fn  func()
}

// simQueue is a heap of scheduled doings, earliest first, then in the order scheduled.
type simQueue []simItem

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simItem)) }
func (q *simQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}
