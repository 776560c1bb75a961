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

// An Invoker runs the blocking effects a spec invokes (connect, probe, retire, teardown) for
// one connection. The machine calls it only from its owner, one effect at a
// time, under a context that ends at the effect's timeout policy or when Close
// interrupts it (context.Cause tells which: ErrEffectTimeout or ErrClosed). It returns
// the effect's outcome: an Event whose Trigger is one of the effect's declared outcomes.
// It may return an Event with no Trigger when the outcome will be posted later (scripted
// tests do); the machine then waits in the state for whatever comes.
type Invoker interface {
	Invoke(ctx context.Context, inv Invocation) Event
}

// An Invocation is what an Invoker is asked to run.
type Invocation struct {
	Effect string       // the invoked effect's name, such as "connect"
	State  states.State // the state that invoked it
	// Timeout is when the effect's context ends, by the policy TimeoutPolicy.
	Timeout       time.Duration
	TimeoutPolicy string
	Vars          Vars      // the machine's extended state, a copy
	Policies      *Policies // the machine's policies; read only
}

// Options configure a Machine. Only Invoker is required.
type Options struct {
	// Name identifies the connection in logs.
	Name string
	// Invoker runs the spec's invoked effects.
	Invoker Invoker
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
	inv  Invoker
	log  *slog.Logger
	obs  func(Transition)

	// Owned by whichever goroutine holds the owner role (see mailbox).
	core         *core
	timer        *time.Timer // the current state's next timed edge; runs onTimer
	timerAt      time.Time   // what timer is set to; zero when stopped
	closeApplied bool
	entered      bool // the initial state has been entered

	mbox    mailbox
	eff     effectCtx
	hist    history
	polMu   sync.Mutex // guards pol against readers other than the owner
	pol     Policies
	state   atomic.Uint32 // states.State, published after each transition
	changed atomic.Pointer[chan struct{}]
	closing atomic.Bool
	done    chan struct{}

	watchMu  sync.Mutex                 // serializes changes to watchers
	watchers atomic.Pointer[[]*watcher] // copy on write; read without the lock
}

// New builds a machine and starts its owner, which enters the spec's initial state and
// then acts whenever an event is posted or a timer is due, until the machine reaches its
// final state (see Close).
func New(spec *Spec, opts Options) *Machine {
	m := &Machine{
		name: opts.Name, spec: spec, inv: opts.Invoker, log: opts.Logger, obs: opts.Observer,
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
	m.state.Store(uint32(spec.initial))
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
func (m *Machine) State() states.State { return states.State(m.state.Load()) }

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
// lifecycle opens the new session before it closes the old one.
func (m *Machine) Reconnect() { m.Post(Event{Trigger: states.Recycle}) }

// Close asks the machine to close for good: it interrupts the effect running now, if
// any, and close is applied ahead of anything else queued and before any further
// effect starts, so that the session is torn down (bounded by the teardown timeout)
// and the machine reaches its final state. It
// returns nil once the owner has exited for good, or ctx's error if ctx ends first (the
// machine still closes). It is idempotent and safe from any goroutine except the owner's
// (an Observer must not call it).
func (m *Machine) Close(ctx context.Context) error {
	if m.closing.CompareAndSwap(false, true) {
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
// and timeout from then on follows the new values. It returns false if the machine has
// closed.
func (m *Machine) SetPolicies(p Policies) bool { return m.Post(Event{policies: &p}) }

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
		st := m.State()
		if ok(st) {
			return st, nil
		}
		if st.Final() {
			return st, ErrClosed
		}
		select {
		case <-*ch:
		case <-ctx.Done():
			return m.State(), ctx.Err()
		}
	}
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
	for !m.core.state.Final() {
		m.settle()
		var due, release bool
		batch, due, release = m.mbox.take(batch)
		if release {
			released = true
			return // another goroutine may be the owner from here on
		}
		now := time.Now()
		if due {
			m.timerAt = time.Time{} // fired (or about to be re-armed by settle)
			if t, ok := m.core.due(now); ok {
				now = m.step(t, &Event{}, false, now)
			}
		}
		for i := range batch {
			if m.core.state.Final() {
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
		if m.closeApplied {
			return now
		}
		m.closeApplied = true
	}
	return m.step(ev.Trigger, ev, false, now)
}

// step applies an event, then runs the invoked effects that follow. It returns the
// time after the last of them.
func (m *Machine) step(t trig, ev *Event, fromInvoke bool, now time.Time) time.Time {
	tr, inv, ok := m.core.apply(t, ev, fromInvoke, now)
	if !ok {
		if m.log.Enabled(context.Background(), slog.LevelDebug) {
			m.log.LogAttrs(context.Background(), slog.LevelDebug, "mcpfsm: event ignored",
				slog.String("machine", m.name), slog.String("state", m.core.state.String()),
				slog.String("trigger", m.spec.trigName(t)))
		}
		return now
	}
	m.publish(&tr, t)
	return m.follow(inv, now)
}

// follow runs a state's invoked effect and applies its outcome, and so on, until the
// machine rests in a state that invokes nothing or an effect leaves its outcome for
// later.
func (m *Machine) follow(inv *invokeSpec, now time.Time) time.Time {
	for inv != nil {
		if m.closePending() {
			// Close jumps the queue: it is applied before another effect starts,
			// so an effect begun after Close was asked never keeps it waiting.
			m.closeApplied = true
			tr, next, ok := m.core.apply(states.Close, &Event{Trigger: states.Close}, false, now)
			if ok {
				m.publish(&tr, states.Close)
				if !m.core.took.internal {
					inv = next // the state close led to, and its effect
					continue
				}
			}
			// Close stayed in this state (tearing-down marks the teardown as a
			// close): the state's own effect still runs, now as part of closing.
		}
		var out Event
		out, now = m.invoke(inv, now)
		if out.Trigger == 0 {
			return now
		}
		if m.closePending() {
			// An outcome that arrives after Close was asked for is applied after
			// close, and so is ignored unless the new state wants it.
			now = m.applyClose(now)
		}
		tr, next, ok := m.core.apply(out.Trigger, &out, true, now)
		if !ok {
			return now
		}
		m.publish(&tr, out.Trigger)
		inv = next
	}
	return now
}

// closePending reports whether Close has been asked for and not yet applied.
func (m *Machine) closePending() bool { return !m.closeApplied && m.closing.Load() }

// applyClose applies close now, ahead of whatever is queued.
func (m *Machine) applyClose(now time.Time) time.Time {
	m.closeApplied = true
	return m.step(states.Close, &Event{Trigger: states.Close}, false, now)
}

// invoke runs an invoked effect under its timeout and returns its outcome and the time
// it finished.
func (m *Machine) invoke(inv *invokeSpec, now time.Time) (Event, time.Time) {
	if m.inv == nil {
		return Event{}, now
	}
	// Effects begun before close was applied are Close's to interrupt; the teardown
	// that close itself leads to is not.
	timeout := m.core.durs[inv.timeout.field]
	ctx := m.eff.begin(now, now.Add(timeout), !m.closeApplied)
	out := m.inv.Invoke(ctx, Invocation{
		Effect: inv.name, State: m.core.state, Timeout: timeout, TimeoutPolicy: inv.timeout.Name,
		Vars: m.core.vars, Policies: &m.pol,
	})
	m.eff.end()
	if out.Trigger != 0 {
		now = time.Now() // the effect took time; its outcome is stamped when it came
	}
	return out, now
}

// publish makes a transition visible: state, history, observer, watchers, waiters, log.
func (m *Machine) publish(tr *Transition, t trig) {
	m.state.Store(uint32(tr.To))
	m.hist.add(tr, t)
	if m.obs != nil {
		m.obs(*tr)
	}
	if ws := m.watchers.Load(); ws != nil {
		for _, w := range *ws {
			w.send(tr)
		}
	}
	if m.changed.Load() != nil {
		if ch := m.changed.Swap(nil); ch != nil {
			close(*ch)
		}
	}
	ctx := context.Background()
	switch {
	case tr.Cause.Counts():
		m.log.LogAttrs(ctx, slog.LevelWarn, "mcpfsm: connection failure",
			slog.String("machine", m.name), slog.String("from", tr.From.String()), slog.String("to", tr.To.String()),
			slog.String("trigger", tr.Trigger), slog.String("cause", tr.Cause.String()), slog.Any("err", tr.Err),
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
	next := m.core.deadline()
	if next.Equal(m.timerAt) {
		return
	}
	if next.IsZero() {
		m.timer.Stop()
	} else {
		m.timer.Reset(time.Until(next))
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
