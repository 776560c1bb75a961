package machine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
	"unicode/utf8"

	"github.com/mcpfsm/mcpfsm/states"
)

// An Event is something that happened to a connection, delivered to its machine's owner
// goroutine: an outcome of an invoked effect, or a report from elsewhere (a session that
// ended, a call that failed, a Close).
type Event struct {
	Trigger states.Trigger // what happened: the trigger the owner fires
	// Cause is the class of Err. When it counts (lost, timeout, expired, protocol) the
	// machine records a failure as it applies the event, before guards are evaluated,
	// and the teardown under way, if any, is no longer a planned one.
	Cause states.Cause
	Err   error
	// Session is the session the event is about, or 0. An invoked effect's outcome
	// with a Session makes it the current one; any other event about a session other
	// than the current one is stale and dropped.
	Session uint64
	// Took is how long an invoked effect took, as its outcome says; only a simulated
	// world says so (a Machine measures real time itself).
	Took time.Duration
	// Heard is, for an outcome that proves the server alive without asking it (a
	// probe spared by a recent answer), how long ago it was last heard from. The
	// engine sets Vars.Heard from it, so that timed delays can count from then.
	Heard time.Duration

	barrier   chan<- struct{} // closed when the owner reaches the event; no trigger
	policies  *Policies       // new policies to adopt; no trigger
	reconnect uint64          // the number of the Reconnect that posted it, if one did
}

// A Transition is one step a machine took: a change of state, or an internal
// transition that ran effects without leaving its state.
type Transition struct {
	Seq      uint64    // 1 for a machine's first transition
	At       time.Time // when it was taken
	From, To states.State
	Trigger  string // the trigger, or "after <delay>" for a timed transition
	Cause    states.Cause
	Err      error // the error behind Cause, if any
	Failures int   // Vars.Failures after the transition
	Attempts int   // Vars.Attempts after the transition
}

// String renders t on one line, such as "ready → probing (after keepalive)". The
// error's text is capped (see ErrorText).
func (t Transition) String() string {
	s := fmt.Sprintf("%s → %s (%s", t.From, t.To, t.Trigger)
	if t.Cause != states.CauseNone {
		s += ", cause " + t.Cause.String()
	}
	if t.Err != nil {
		s += ": " + ErrorText(t.Err)
	}
	return s + ")"
}

// MaxErrorText is the most of an error's text that the machine's logs, history
// renderings and statuses show; the error itself is kept whole for errors.Is and As.
const MaxErrorText = 1024

// ErrorText returns err's text, cut to MaxErrorText bytes (at a rune boundary) with a
// note of how much was left out, so that a server's 15 MB error message is never
// printed or kept as text whole.
func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	return capString(err.Error(), MaxErrorText)
}

func capString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d bytes more)", len(s)-cut)
}

// core is the lifecycle of one connection with no goroutines and no clock: it applies
// one event at a time at a given instant and reports what follows (a transition, an
// invoked effect to run, the deadline of the next timed transition). A Machine drives it
// from its owner with real time; a simulation drives it with virtual time.
type core struct {
	spec    *Spec
	ctx     context.Context // carries the core to stateless's callbacks
	state   sid
	vars    Vars
	pol     *Policies
	durs    []time.Duration // pol's durations by policy index, for names in the spec
	rng     *rand.Rand
	session uint64
	seq     uint64
	took    took                // what stateless did, set by its callbacks during Fire
	afters  [maxAfter]time.Time // deadlines of the current state's timed edges; zero if not armed
}

type took struct {
	from, to sid
	trig     trig
	internal bool
	ok       bool
}

func newCore(spec *Spec, pol *Policies, rng *rand.Rand) *core {
	c := &core{spec: spec, state: spec.initial, pol: pol, durs: pol.durationTable(), rng: rng}
	c.ctx = context.WithValue(context.Background(), coreKey, c)
	return c
}

// enter runs the initial state's entry actions and arms its timers, as if the machine
// had just arrived there, and returns its invoked effect.
func (c *core) enter(now time.Time) *invokeSpec {
	ss := c.spec.states[c.state]
	c.run(ss.entry, now)
	c.arm(ss, now)
	return ss.invoke
}

// apply fires the event's trigger (or t, for a timed edge) into stateless and, if a
// transition was taken, runs its effects in order: the exit actions of the state left,
// the edge's effects, the entry actions of the state entered, whose timers it then arms.
// It returns the transition and the invoked effect of the state entered, if any. An event
// that no transition handles changes nothing and returns ok false.
func (c *core) apply(t trig, ev *Event, fromInvoke bool, now time.Time) (tr Transition, inv *invokeSpec, ok bool) {
	if ev.Session != 0 && !fromInvoke && ev.Session != c.session {
		return tr, nil, false
	}
	saved := c.vars
	c.book(ev)
	c.vars.Heard = ev.Heard
	c.took = took{}
	if err := c.spec.sm.FireCtx(c.ctx, t); err != nil || !c.took.ok {
		c.vars = saved
		return tr, nil, false
	}
	if fromInvoke && ev.Session != 0 {
		c.session = ev.Session
	}
	e := c.edge()
	from, to := c.spec.states[c.took.from], c.spec.states[c.took.to]
	if !e.internal {
		c.run(from.exit, now)
		c.afters = [maxAfter]time.Time{}
	}
	c.run(e.effects, now)
	if !e.internal {
		c.run(to.entry, now)
		c.arm(to, now)
		inv = to.invoke
	}
	c.seq++
	tr = Transition{
		Seq: c.seq, At: now, From: from.name, To: to.name, Trigger: e.name,
		Cause: ev.Cause, Err: ev.Err, Failures: c.vars.Failures, Attempts: c.vars.Attempts,
	}
	return tr, inv, true
}

// edge returns the edge stateless took. Two edges from a state on one trigger may lead
// to the same state under different guards; the one whose guards hold is the one taken
// (the loader has proved that at most one can hold).
func (c *core) edge() *edge {
	if c.took.trig >= afterBase {
		return c.spec.timed[c.took.trig-afterBase]
	}
	var found *edge
	for _, e := range c.spec.states[c.took.from].on[c.took.trig] {
		if e.to != c.took.to || e.internal != c.took.internal {
			continue
		}
		if found == nil {
			found = e
		}
		if c.holds(e) {
			return e
		}
	}
	return found
}

// book applies the engine's own rules for an event, before guards see it: a failure
// that counts is counted and ends a planned teardown's grace; the cause and error
// become the last ones, and the streak of failures of one cause grows or starts over.
func (c *core) book(ev *Event) {
	if ev.Cause.Counts() {
		c.vars.Failures++
		c.vars.Planned = false
	}
	if ev.Cause == states.CauseNone {
		return
	}
	if ev.Cause.Failure() {
		if ev.Cause == c.vars.LastCause && c.vars.Streak > 0 {
			c.vars.Streak++
		} else {
			c.vars.Streak = 1
		}
	}
	c.vars.LastCause, c.vars.LastErr = ev.Cause, ev.Err
}

// final reports whether the core rests in a final state.
func (c *core) final() bool { return c.spec.states[c.state].final }

func (c *core) holds(e *edge) bool {
	for _, g := range e.guards {
		if g.test(&c.vars, c.pol) == g.negate {
			return false
		}
	}
	return true
}

func (c *core) run(actions []actionRef, now time.Time) {
	for _, a := range actions {
		a.do(&c.vars, c.pol, now)
	}
}

// arm sets the deadlines of a state's timed edges, as the state is entered.
func (c *core) arm(ss *stateSpec, now time.Time) {
	for i, e := range ss.after {
		d, on := c.delay(e.delay)
		if on {
			c.afters[i] = now.Add(d)
		}
	}
}

// MinDelay is the shortest wait a timed transition takes: a floor under every delay a
// delay function computes or a policy gives, so that no policy value, however small,
// can make the machine spin.
const MinDelay = time.Millisecond

func (c *core) delay(d *delayRef) (time.Duration, bool) {
	if d.fn != nil {
		v, on := d.fn(&c.vars, c.pol, c.rng)
		return max(v, MinDelay), on
	}
	v := c.durs[d.policy.field]
	return max(v, MinDelay), v > 0
}

// force moves the core to the spec's first final state, running nothing: the close
// rule's last resort (see Machine.Close).
func (c *core) force(now time.Time) Transition {
	from := c.state
	for _, ss := range c.spec.states[1:] {
		if ss.final {
			c.state = ss.id
			break
		}
	}
	c.afters = [maxAfter]time.Time{}
	c.took = took{from: from, to: c.state, trig: states.Close, ok: true}
	c.seq++
	return Transition{
		Seq: c.seq, At: now, From: c.spec.name(from), To: c.spec.name(c.state), Trigger: "close (forced)",
		Cause: states.CauseArtifact, Err: errForcedFinal, Failures: c.vars.Failures, Attempts: c.vars.Attempts,
	}
}

var errForcedFinal = fmt.Errorf("the spec did not reach a final state after close: moved there by force")

// deadline returns when the next timed edge is due, or the zero time if none is armed.
func (c *core) deadline() time.Time {
	at, _ := c.next()
	return at
}

// next returns when the earliest armed timed edge is due and its trigger, or the zero
// time if none is armed: one pass, as the owner publishes both with every state.
func (c *core) next() (time.Time, trig) {
	best := -1
	for i := range c.afters {
		if !c.afters[i].IsZero() && (best < 0 || c.afters[i].Before(c.afters[best])) {
			best = i
		}
	}
	if best < 0 {
		return time.Time{}, 0
	}
	return c.afters[best], c.spec.states[c.state].after[best].trig
}

// due disarms and returns the trigger of the earliest timed edge due at now.
func (c *core) due(now time.Time) (trig, bool) {
	best := -1
	for i, at := range c.afters {
		if !at.IsZero() && !at.After(now) && (best < 0 || at.Before(c.afters[best])) {
			best = i
		}
	}
	if best < 0 {
		return 0, false
	}
	c.afters[best] = time.Time{}
	return c.spec.states[c.state].after[best].trig, true
}
