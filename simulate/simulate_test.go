package simulate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/simulate"
	"github.com/mcpfsm/mcpfsm/states"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// path renders transitions before end as "offset from → to (trigger, cause)".
func path(trs []machine.Transition, start, end time.Time) []string {
	var out []string
	for _, tr := range trs {
		if !tr.At.Before(end) {
			break
		}
		out = append(out, fmt.Sprintf("%v %s → %s (%s, %s)", tr.At.Sub(start), tr.From, tr.To, tr.Trigger, tr.Cause))
	}
	return out
}

// TestSimulationAgreesWithMachine plays each built-in scenario twice: in a Sim, and
// against a real Machine (owner goroutine, mailbox, timers, effect contexts) in
// virtual time under synctest, driven by the same World. Both must take the same
// path, transition for transition, at the same instants.
func TestSimulationAgreesWithMachine(t *testing.T) {
	spec := mcpfsm.DefaultSpec()
	for _, name := range simulate.BuiltinNames() {
		sc := simulate.Builtin()[name]
		t.Run(name, func(t *testing.T) {
			sim := simulate.Run(spec, nil, sc, 42)
			want := path(sim.Transitions, sim.Start, sim.Start.Add(sc.Duration))
			if len(want) < 10 {
				t.Fatalf("the simulation did little: %v", want)
			}
			synctest.Test(t, func(t *testing.T) {
				w := simulate.NewWorld(spec, sc)
				var mu sync.Mutex
				var trs []machine.Transition
				env := &machineEnv{}
				m := machine.New(spec, machine.Options{
					Effects: worldEffects{w}, Rand: rand.New(rand.NewPCG(42, 42)), Logger: quiet(),
					Observer: func(tr machine.Transition) {
						mu.Lock()
						trs = append(trs, tr)
						mu.Unlock()
						w.Observe(tr)
					},
				})
				env.m = m
				start := time.Now()
				w.Start(env)
				m.Start()
				time.Sleep(sc.Duration)
				mu.Lock()
				got := path(trs, start, start.Add(sc.Duration))
				mu.Unlock()
				if err := m.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				env.wg.Wait()
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("simulation and machine differ (-sim +machine):\n%s", diff)
				}
				if sim.Summary.Calls != w.Calls() {
					t.Errorf("calls: simulation %+v, machine %+v", sim.Summary.Calls, w.Calls())
				}
			})
		})
	}
}

// worldEffects runs a World's effects for a Machine, through the same bindings as the
// Sim: each waits out the time the world says it takes.
type worldEffects struct{ w *simulate.World }

var _ effects.Effects = worldEffects{}

func (we worldEffects) wait(ctx context.Context, ev machine.Event) machine.Event {
	t := time.NewTimer(ev.Took)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return ev
}

func (we worldEffects) Connect(ctx context.Context, inv machine.Invocation) machine.Event {
	return we.wait(ctx, we.w.Connect(ctx, inv))
}

func (we worldEffects) Replace(ctx context.Context, inv machine.Invocation) machine.Event {
	return we.wait(ctx, we.w.Replace(ctx, inv))
}

func (we worldEffects) Probe(ctx context.Context, inv machine.Invocation) machine.Event {
	return we.wait(ctx, we.w.Probe(ctx, inv))
}

func (we worldEffects) Teardown(ctx context.Context, inv machine.Invocation) machine.Event {
	return we.wait(ctx, we.w.Teardown(ctx, inv))
}

func (we worldEffects) Retire(ctx context.Context, inv machine.Invocation) machine.Event {
	return we.wait(ctx, we.w.Retire(ctx, inv))
}

// machineEnv is a World's Env over a Machine, with a goroutine per scheduled doing.
type machineEnv struct {
	m  *machine.Machine
	wg sync.WaitGroup
}

func (e *machineEnv) Now() time.Time          { return time.Now() }
func (e *machineEnv) State() states.State     { return e.m.State() }
func (e *machineEnv) Calls() machine.CallMode { return e.m.Calls() }
func (e *machineEnv) Post(ev machine.Event)   { e.m.Post(ev) }
func (e *machineEnv) At(at time.Time, fn func()) {
	if !at.After(time.Now()) {
		fn() // due already: now, before anything that follows
		return
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		time.Sleep(time.Until(at))
		fn()
	}()
}

func quiet() *slogLogger { return discardLogger }

// TestFrozenPastMaxAgeIsDetected: a server freezes while its session is older than
// max_session_age. A probe that recycled such a session without probing it once led,
// with make before break, to a replacement that timed out and a return to the frozen
// session, for ever: never detected, no backoff, no breaker, every call hanging to its
// timeout. The probe checks first, so the freeze is found and the breaker opens.
func TestFrozenPastMaxAgeIsDetected(t *testing.T) {
	sc := simulate.Scenario{
		Name: "frozen-past-age", Duration: time.Hour,
		Timeline: []simulate.Change{{At: 0, Condition: simulate.Up}, {At: 10 * time.Minute, Condition: simulate.Frozen}},
		Calls:    simulate.Calls{Every: 10 * time.Second},
	}
	spec := mcpfsm.DefaultSpec()
	pol := spec.Defaults()
	pol.MaxSessionAge = 5 * time.Minute
	s := simulate.Run(spec, &pol, sc, 1).Summary
	t.Logf("failures %d, calls %+v, detect %v, ready %v, replacing %v, breaker-open %v",
		s.Failures, s.Calls, s.Detect, s.TimeIn[states.Ready], s.TimeIn[states.Replacing], s.TimeIn[states.BreakerOpen])
	if len(s.Detect) == 0 || s.TimeIn[states.BreakerOpen] == 0 || s.Calls.FailedFast == 0 {
		t.Errorf("the frozen server was not detected, or the breaker never opened: %v in ready on a dead session", s.TimeIn[states.Ready])
	}
}
