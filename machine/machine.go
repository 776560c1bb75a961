package machine

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpfsm/mcpfsm/states"
)

// An Invocation is what an invoked effect is asked to run. The machine runs one effect
// at a time, on its owner, under a context that ends at the effect's timeout policy or
// when Close interrupts it (context.Cause tells which: ErrEffectTimeout or ErrClosed).
// Its Run returns the effect's outcome: an Event whose Trigger is one of the effect's
// declared outcomes. It may return an Event with no Trigger when the outcome will be
// posted later (scripted tests do); the machine then waits in the state for whatever
// comes.
type Invocation struct {
	Effect string       // the invoked effect's name, such as "connect"
	State  states.State // the state that invoked it
	// Now is when the effect begins: real time on a Machine, virtual time in a Sim.
	Now time.Time
	// Timeout is when the effect's context ends, by the policy TimeoutPolicy (or
	// sooner, once Close has been asked for: see Machine.Close).
	Timeout       time.Duration
	TimeoutPolicy string // the name of that policy, such as "connect_timeout"
	// Vars is the machine's extended state: read only, and only until the effect
	// returns (the owner changes it afterwards).
	Vars     *Vars
	Policies *Policies // the machine's policies; read only
}

// Options configure a Machine. Only Effects is required.
type Options struct {
	// Name identifies the connection in logs.
	Name string
	// Effects carries out the spec's invoked effects: the registry the spec was
	// loaded with binds each to code that runs on it (see Invoke.Run).
	Effects Effects
	// Policies override the spec's defaults; nil means the defaults.
	Policies *Policies
	// Logger receives a debug record per transition and a warning per failure;
	// slog.Default() when nil.
	Logger *slog.Logger
	// Rand draws jitter; a randomly seeded source when nil. Give one with a fixed
	// seed for a repeatable run.
	Rand *rand.Rand
	// History is how many transitions History keeps; DefaultHistory when 0, none when
	// negative.
	History int
	// Observer, if set, is called on the owner with every transition, in
	// order, before anything else sees it. It must return quickly and must not call
	// the machine's blocking methods (Close, Sync, Wait).
	Observer func(Transition)
}

// A Machine is the lifecycle of one connection. Its owner alone fires triggers into
// the spec's stateless machine, runs effects and arms timers; other goroutines only post
// events to it. The owner is a role that one goroutine at a time holds: a post or a due
// timer that finds no owner active becomes or starts one, and the owner gives the role
// up when it has nothing left to do, so that an idle machine (ready and waiting for its
// keepalive, or backing off) holds no goroutine. Every activation sees all that the one
// before it did. Its methods are safe for concurrent use.
//
// Because a post may start the owner on the poster's side, a machine made inside a
// testing/synctest bubble must be used only from inside that bubble, and one made
// outside only from outside it: an owner started in a bubble would arm the machine's
// timers on the bubble's clock.
type Machine struct {
	name string
	spec *Spec
	fx   Effects
	log  *slog.Logger
	obs  func(Transition)

	// Owned by whichever goroutine holds the owner role (see mailbox).
	core     *core
	timer    *time.Timer // the current state's next timed edge; runs onTimer
	timerAt  time.Time   // what timer is set to; zero when stopped
	entered  bool        // the initial state has been entered
	closeSeq uint64      // core.seq when close was last applied; see closeDue
	closeBy  time.Time   // when closing must be over: set as close is first applied, from closeAt
	closeRun int         // close applications since Close; bounds a spec that loops

	mbox    mailbox
	eff     effectCtx
	hist    history
	polMu   sync.Mutex // guards pol against readers other than the owner
	pol     Policies
	state   atomic.Uint32 // the state's sid, published after each transition
	since   atomic.Int64  // UnixNano of the last transition that changed the state
	fails   atomic.Int32  // Vars.Failures after the last transition
	lastBad atomic.Pointer[Failure]
	nextAt  atomic.Int64 // UnixNano of the next timed edge's deadline; 0 if none
	nextTr  atomic.Uint32
	// Reconnects asked for, and applied: see Reconnecting.
	asked, applied atomic.Uint64
	changed        atomic.Pointer[chan struct{}]
	closing        atomic.Bool
	closeAt        atomic.Pointer[time.Time] // when Close was first asked for
	done           chan struct{}

	watchMu  sync.Mutex                 // serializes changes to watchers
	watchers atomic.Pointer[[]*watcher] // copy on write; read without the lock
}

// New builds a machine and starts its owner, which enters the spec's initial state and
// then acts whenever an event is posted or a timer is due, until the machine reaches its
// final state (see Close).
func New(spec *Spec, opts Options) *Machine {
	m := &Machine{
		name: opts.Name, spec: spec, fx: opts.Effects, log: opts.Logger, obs: opts.Observer,
		mbox: mailbox{running: true}, done: make(chan struct{}),
		hist: history{limit: opts.History, spec: spec},
		pol:  spec.defaults,
	}
	if opts.Policies != nil {
		m.pol = *opts.Policies
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.hist.limit == 0 {
		m.hist.limit = DefaultHistory
	}
	rng := opts.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	m.core = newCore(spec, &m.pol, rng)
	m.closeSeq = ^uint64(0)
	m.state.Store(uint32(spec.initial))
	m.since.Store(time.Now().UnixNano())
	m.eff.init(time.Now(), &m.closing)
	m.timer = time.AfterFunc(time.Hour, m.onTimer)
	m.timer.Stop()
	go m.run() // enters the initial state; the mailbox was made with the role taken
	return m
}

// Name returns the name the machine was given.
func (m *Machine) Name() string { return m.name }

// Spec returns the spec the machine runs.
func (m *Machine) Spec() *Spec { return m.spec }

// State returns the machine's current state.
func (m *Machine) State() states.State { return m.spec.name(sid(m.state.Load())) }

// Calls returns what calls do in the machine's current state (0 once it is final).
func (m *Machine) Calls() CallMode { return m.spec.states[m.state.Load()].calls }

// Done is closed when the machine has reached its final state and its owner has
// exited for good.
func (m *Machine) Done() <-chan struct{} { return m.done }

// Post hands an event to the owner and returns at once, starting an owner goroutine if
// none is active. It reports false if the machine has already closed.
func (m *Machine) Post(ev Event) bool {
	ok, start := m.mbox.post(ev)
	if start {
		go m.run()
	}
	return ok
}

// onTimer runs on the timer's own goroutine when the current state's timed edge is
// due; if no owner is active, that goroutine becomes the owner.
func (m *Machine) onTimer() {
	if m.mbox.fire() {
		m.run()
	}
}

// Start asks an idle machine to connect.
func (m *Machine) Start() { m.Post(Event{Trigger: states.Start}) }

// Reconnect asks for a planned reconnect, which spends no retry budget. The default
// lifecycle opens the new session before it closes the old one. Until the owner has
// applied it, Reconnecting reports true.
func (m *Machine) Reconnect() {
	n := m.asked.Add(1)
	if !m.Post(Event{Trigger: states.Recycle, reconnect: n}) {
		m.markApplied(n)
	}
}

// markApplied records that reconnect n has been applied. Reconnects are numbered
// before they are posted, so two posted at once may reach the owner in the other
// order: applied only grows, or a smaller number stored last would leave
// Reconnecting true with nothing left to apply.
func (m *Machine) markApplied(n uint64) {
	for {
		cur := m.applied.Load()
		if cur >= n || m.applied.CompareAndSwap(cur, n) {
			return
		}
	}
}

// Reconnecting reports whether a reconnect asked for has not been applied yet: a wait
// that would give up in the state the machine is leaving (an open breaker) should
// wait to see where it leads. Waiters are woken when it is applied.
func (m *Machine) Reconnecting() bool { return m.applied.Load() < m.asked.Load() }

// Close asks the machine to close for good. These are the engine's rules, whatever the
// spec's actions say: the effect running now, if any, is interrupted; the guard
// "closing" holds from then on; close is applied ahead of anything else queued, and
// again in every state the machine enters, before that state's effect starts, until it
// is final; and the effects that run meanwhile share one deadline, teardown_timeout
// from the moment Close is first asked for (the return of the effect it interrupts
// counts against it). LoadSpec proves that this reaches a final state from every
// state; should a spec loop regardless, the machine is moved to its final state by
// force. Close returns nil once the owner has exited for good, or ctx's error if
// ctx ends first (the machine still closes). It is idempotent and safe from any
// goroutine except the owner's (an Observer must not call it).
func (m *Machine) Close(ctx context.Context) error {
	if m.closing.CompareAndSwap(false, true) {
		at := time.Now()
		m.closeAt.Store(&at)
		m.Post(Event{Trigger: states.Close})
		m.eff.interrupt(ErrClosed)
	}
	select {
	case <-m.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetPolicies makes the machine adopt new policies, without leaving its state: the
// session, if any, is kept, timers already armed keep their deadlines, and every delay
// and timeout from then on follows the new values. Policies that Validate refuses are
// refused; ErrClosed if the machine has closed.
func (m *Machine) SetPolicies(p Policies) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if !m.Post(Event{policies: &p}) {
		return ErrClosed
	}
	return nil
}

// Policies returns the policies the machine was last given. It is safe from any
// goroutine.
func (m *Machine) Policies() Policies {
	m.polMu.Lock()
	defer m.polMu.Unlock()
	return m.pol
}

// Sync returns once the owner has applied every event posted before the call, or with
// ctx's error, or ErrClosed if the machine closes first.
func (m *Machine) Sync(ctx context.Context) error {
	ch := make(chan struct{})
	if !m.Post(Event{barrier: ch}) {
		return ErrClosed
	}
	select {
	case <-ch:
		return nil
	case <-m.done:
		select {
		case <-ch:
			return nil
		default:
			return ErrClosed
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait blocks until ok accepts the current state, and returns that state. It returns
// early with ctx's error, or with ErrClosed once the machine has closed and its final
// state does not satisfy ok.
func (m *Machine) Wait(ctx context.Context, ok func(states.State) bool) (states.State, error) {
	for {
		// Install the channel before reading the state: a transition after the read
		// closes it, so no change is missed.
		ch := m.changed.Load()
		if ch == nil {
			fresh := make(chan struct{})
			if m.changed.CompareAndSwap(nil, &fresh) {
				ch = &fresh
			} else {
				ch = m.changed.Load()
				if ch == nil {
					continue
				}
			}
		}
		id := sid(m.state.Load())
		st := m.spec.name(id)
		if ok(st) {
			return st, nil
		}
		if m.spec.states[id].final {
			return st, ErrClosed
		}
		select {
		case <-*ch:
		case <-ctx.Done():
			return m.State(), ctx.Err()
		}
	}
}

// A Failure is the last failure a machine saw: the cause of a transition, its error,
// and when.
type Failure struct {
	Cause states.Cause // its classified cause
	Err   error        // its error
	At    time.Time    // when the transition that carried it was taken
}

// A Status is what a machine can say of itself at once, without waiting for its owner.
type Status struct {
	State states.State // the state the machine is in
	Calls CallMode     // what calls do in State
	Since time.Time    // when it entered State
	// Failures counts the failures that count since the connection was last healthy
	// (toward the breaker).
	Failures int
	// LastFailure is the last transition whose cause was a failure, if any.
	LastFailure *Failure
	// Next is when the next timed transition is due (a probe, a retry, the end of a
	// cooldown), and NextEdge what it is ("after backoff"); zero when none is armed.
	Next     time.Time
	NextEdge string
}

// Status returns the machine's status. It is cheap: a few atomic loads.
func (m *Machine) Status() Status {
	id := sid(m.state.Load())
	st := Status{
		State: m.spec.name(id), Calls: m.spec.states[id].calls,
		Since: time.Unix(0, m.since.Load()), Failures: int(m.fails.Load()),
		LastFailure: m.lastBad.Load(),
	}
	if at := m.nextAt.Load(); at != 0 && !m.spec.states[id].final {
		st.Next = time.Unix(0, at)
		st.NextEdge = m.spec.trigName(trig(m.nextTr.Load()))
	}
	return st
}

// History returns the latest transitions, oldest first.
func (m *Machine) History() []Transition { return m.hist.snapshot() }

// Watch returns a channel that receives every later transition, and a function that
// stops the watch and closes the channel. A watcher that falls more than buf
// transitions behind misses the ones that do not fit (the owner never waits for it);
// dropped counts them.
func (m *Machine) Watch(buf int) (ch <-chan Transition, stop func(), dropped func() int) {
	w := &watcher{ch: make(chan Transition, buf)}
	m.watchMu.Lock()
	select {
	case <-m.done:
		w.close()
	default:
		m.setWatchers(append(m.loadWatchers(), w))
	}
	m.watchMu.Unlock()
	stop = func() {
		m.watchMu.Lock()
		defer m.watchMu.Unlock()
		old := m.loadWatchers()
		for i, x := range old {
			if x == w {
				m.setWatchers(append(old[:i:i], old[i+1:]...))
				w.close()
			}
		}
	}
	return w.ch, stop, func() int { return int(w.dropped.Load()) }
}

func (m *Machine) loadWatchers() []*watcher {
	if p := m.watchers.Load(); p != nil {
		return *p
	}
	return nil
}

func (m *Machine) setWatchers(ws []*watcher) { m.watchers.Store(&ws) }

// watcher is one Watch subscription. The owner sends while the watcher's stop may run
// on another goroutine, so sending and closing share a per-watcher lock: uncontended,
// and taken only when someone watches.
type watcher struct {
	mu      sync.Mutex
	closed  bool
	ch      chan Transition
	dropped atomic.Int64
}

// send offers tr without waiting; a full watcher counts it as dropped, a stopped one
// ignores it.
func (w *watcher) send(tr *Transition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	select {
	case w.ch <- *tr:
	default:
		w.dropped.Add(1)
	}
}

func (w *watcher) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		close(w.ch)
	}
}

// run acts as the owner: it applies what the mailbox holds, runs the effects that
// follow, arms the timer, and gives the role up when nothing is left, so that an idle
// machine holds no goroutine. Each pass takes everything posted and the timer's firing
// together, as etcd/raft's node.run takes whatever its one select offers.
func (m *Machine) run() {
	released := false
	defer func() {
		// Reaching the final state, or an effect or Observer that ended the
		// goroutine (runtime.Goexit: a test's t.Fatal in a fake) rather than
		// returning: either way nobody will act as the owner again, so the
		// machine closes rather than leave Close and Sync waiting.
		if !released {
			m.exit()
		}
	}()
	if !m.entered {
		m.entered = true
		m.follow(m.core.enter(time.Now()), time.Now())
	}
	var batch []Event
	for !m.core.final() {
		m.settle()
		var due, release bool
		batch, due, release = m.mbox.take(batch)
		if release {
			released = true
			return // another goroutine may be the owner from here on
		}
		now := time.Now()
		if m.closeDue() {
			now = m.follow(nil, now) // close jumps the queue
		}
		if due && !m.core.final() {
			m.timerAt = time.Time{} // fired (or about to be re-armed by settle)
			if t, ok := m.core.due(now); ok {
				now = m.step(t, &Event{}, false, now)
			}
		}
		for i := range batch {
			if m.core.final() {
				m.release(batch[i:])
				break
			}
			now = m.handle(&batch[i], now)
		}
	}
}

// handle applies one posted event.
func (m *Machine) handle(ev *Event, now time.Time) time.Time {
	if ev.barrier != nil {
		close(ev.barrier)
		return now
	}
	if ev.policies != nil {
		m.polMu.Lock()
		m.pol = *ev.policies
		m.polMu.Unlock()
		m.core.durs = m.pol.durationTable()
		return now
	}
	if ev.Trigger == states.Close {
		return m.follow(nil, now) // applied by the close rule, if still due
	}
	if ev.reconnect != 0 {
		// Marked applied once the reconnect has moved the machine (and before the
		// effect that follows runs), and waiters woken even if it was ignored.
		tr, inv, ok := m.core.apply(ev.Trigger, ev, false, now)
		if ok {
			m.publish(&tr, ev.Trigger)
		}
		m.markApplied(ev.reconnect)
		m.wake()
		return m.follow(inv, now)
	}
	return m.step(ev.Trigger, ev, false, now)
}

// wake wakes the waiters of Wait to look at the machine again.
func (m *Machine) wake() {
	if m.changed.Load() != nil {
		if ch := m.changed.Swap(nil); ch != nil {
			close(*ch)
		}
	}
}

// step applies an event, then runs the invoked effects that follow. It returns the
// time after the last of them.
func (m *Machine) step(t trig, ev *Event, fromInvoke bool, now time.Time) time.Time {
	tr, inv, ok := m.core.apply(t, ev, fromInvoke, now)
	if !ok {
		if m.log.Enabled(context.Background(), slog.LevelDebug) {
			m.log.LogAttrs(context.Background(), slog.LevelDebug, "mcpfsm: event ignored",
				slog.String("machine", m.name), slog.String("state", string(m.spec.name(m.core.state))),
				slog.String("trigger", m.spec.trigName(t)))
		}
		return now
	}
	m.publish(&tr, t)
	return m.follow(inv, now)
}

// follow runs a state's invoked effect and applies its outcome, and so on, until the
// machine rests in a state that invokes nothing or an effect leaves its outcome for
// later. Once Close has been asked for, it applies close in every state entered before
// that state's effect starts (the close rule; see Close).
func (m *Machine) follow(inv *invokeSpec, now time.Time) time.Time {
	for {
		if m.closeDue() {
			var next *invokeSpec
			var moved bool
			if next, moved, now = m.applyClose(now); moved {
				inv = next // the state close led to, and its effect
				continue
			}
			// Close kept the machine where it is (tearing-down marks the teardown
			// as a close): the state's own effect runs, now as part of closing.
		}
		if inv == nil {
			return now
		}
		var out Event
		out, now = m.invoke(inv, now)
		if out.Trigger == 0 {
			return now
		}
		var afterClose *invokeSpec
		if m.closeDue() {
			// An outcome that arrives after Close was asked for is applied after
			// close, and so is ignored unless the state close led to wants it.
			var moved bool
			if afterClose, moved, now = m.applyClose(now); !moved {
				afterClose = nil
			} else if afterClose == nil && m.core.final() {
				return now
			}
		}
		tr, next, ok := m.core.apply(out.Trigger, &out, true, now)
		if !ok {
			inv = afterClose
			continue
		}
		m.publish(&tr, out.Trigger)
		inv = next
	}
}

// closeDue reports whether the close rule has close to apply now: Close has been asked
// for, the machine is not final, and it has moved since close was last applied.
func (m *Machine) closeDue() bool {
	return m.closing.Load() && !m.core.final() && m.closeSeq != m.core.seq
}

// applyClose applies close in the current state, as the close rule has it, and
// reports the invoked effect of the state it led to and whether it left the state.
func (m *Machine) applyClose(now time.Time) (*invokeSpec, bool, time.Time) {
	if m.closeBy.IsZero() {
		from := now // Close has set closing but not yet closeAt: the same moment
		if at := m.closeAt.Load(); at != nil {
			from = *at // the deadline runs from Close, not from the owner's getting to it
		}
		m.closeBy = from.Add(m.pol.TeardownTimeout)
	}
	m.core.vars.Closing = true // the engine sets what the guard "closing" reads
	m.closeRun++
	if m.closeRun > 2*len(m.spec.states) {
		// LoadSpec proves this cannot happen; should a spec loop regardless, the
		// machine does not: it is moved to its final state by force.
		tr := m.core.force(now)
		m.closeSeq = m.core.seq
		m.publish(&tr, states.Close)
		return nil, true, now
	}
	tr, next, ok := m.core.apply(states.Close, &Event{Trigger: states.Close}, false, now)
	if !ok || m.core.took.internal || !m.closeLeaves(m.core.state) {
		m.closeSeq = m.core.seq
	}
	// Otherwise closeSeq stays behind: the state close led to is a state the machine
	// enters, and close is applied there too, as the validator's proof assumes (a
	// close there that would keep the machine in place is not applied again: the
	// state's effect, or its outcome, moves it on).
	if !ok {
		return nil, false, now
	}
	m.publish(&tr, states.Close)
	return next, !m.core.took.internal, now
}

// closeLeaves reports whether a close transition of state id leaves it.
func (m *Machine) closeLeaves(id sid) bool {
	for _, e := range m.spec.states[id].on[states.Close] {
		if !e.internal {
			return true
		}
	}
	return false
}

// invoke runs an invoked effect under its timeout and returns its outcome and the time
// it finished.
func (m *Machine) invoke(inv *invokeSpec, now time.Time) (Event, time.Time) {
	if m.fx == nil {
		return Event{}, now
	}
	// Effects begun before close was applied are Close's to interrupt; those that
	// closing runs are not, and share closing's deadline.
	timeout := m.core.durs[inv.timeout.field]
	due := now.Add(timeout)
	closing := !m.closeBy.IsZero()
	if closing && m.closeBy.Before(due) {
		due = m.closeBy
		timeout = max(0, due.Sub(now))
	}
	ctx := m.eff.begin(now, due, !closing)
	out := inv.run(ctx, m.fx, Invocation{
		Effect: inv.name, State: m.spec.name(m.core.state), Now: now, Timeout: timeout, TimeoutPolicy: inv.timeout.Name,
		Vars: &m.core.vars, Policies: &m.pol,
	})
	m.eff.end()
	if out.Trigger != 0 {
		now = time.Now() // the effect took time; its outcome is stamped when it came
	}
	return out, now
}

// publish makes a transition visible: state, history, observer, watchers, waiters, log.
func (m *Machine) publish(tr *Transition, t trig) {
	m.state.Store(uint32(m.core.state))
	if tr.From != tr.To {
		m.since.Store(tr.At.UnixNano())
		// The new state's next timed edge, as it was just armed: published with
		// the state, not once the owner gets round to the timer (after the new
		// state's effect, which may take a while).
		if next, tg := m.core.next(); next.IsZero() {
			m.nextAt.Store(0)
		} else {
			m.nextTr.Store(uint32(tg))
			m.nextAt.Store(next.UnixNano())
		}
	}
	m.fails.Store(int32(min(tr.Failures, 1<<30)))
	if tr.Cause.Failure() {
		m.lastBad.Store(&Failure{Cause: tr.Cause, Err: tr.Err, At: tr.At})
	}
	m.hist.add(tr, m.core.took.from, m.core.state, t)
	if m.obs != nil {
		m.obs(*tr)
	}
	if ws := m.watchers.Load(); ws != nil {
		for _, w := range *ws {
			w.send(tr)
		}
	}
	m.wake()
	ctx := context.Background()
	switch {
	case tr.Cause.Failure() && tr.Cause != states.CauseServer:
		m.log.LogAttrs(ctx, slog.LevelWarn, "mcpfsm: connection failure",
			slog.String("machine", m.name), slog.String("from", tr.From.String()), slog.String("to", tr.To.String()),
			slog.String("trigger", tr.Trigger), slog.String("cause", tr.Cause.String()), slog.String("err", ErrorText(tr.Err)),
			slog.Int("failures", tr.Failures))
	case m.log.Enabled(ctx, slog.LevelDebug):
		m.log.LogAttrs(ctx, slog.LevelDebug, "mcpfsm: transition",
			slog.String("machine", m.name), slog.String("from", tr.From.String()), slog.String("to", tr.To.String()),
			slog.String("trigger", tr.Trigger), slog.String("cause", tr.Cause.String()))
	}
}

// settle brings the timers in line with the core before the owner waits: the timed
// edge's timer is set to the core's next deadline, and the effect timer is stopped.
// Doing it once per batch rather than once per transition keeps timers off the event
// path.
func (m *Machine) settle() {
	m.eff.idle()
	next, tg := m.core.next()
	if next.Equal(m.timerAt) {
		return
	}
	if next.IsZero() {
		m.timer.Stop()
		m.nextAt.Store(0)
	} else {
		m.timer.Reset(time.Until(next))
		m.nextTr.Store(uint32(tg))
		m.nextAt.Store(next.UnixNano())
	}
	m.timerAt = next
}

// release drops events that arrive after the final state, closing their barriers.
func (m *Machine) release(evs []Event) {
	for i := range evs {
		if evs[i].barrier != nil {
			close(evs[i].barrier)
		}
	}
}

func (m *Machine) exit() {
	m.release(m.mbox.close())
	m.applied.Store(m.asked.Load())
	m.timer.Stop()
	m.eff.stop()
	if ch := m.changed.Swap(nil); ch != nil {
		close(*ch)
	}
	// done is closed under watchMu, so that a Watch either comes before (and is
	// closed here) or sees done (and closes its own).
	m.watchMu.Lock()
	defer m.watchMu.Unlock()
	for _, w := range m.loadWatchers() {
		w.close()
	}
	m.setWatchers(nil)
	close(m.done)
}
