package machine_test

import (
	"context"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// silent carries out every effect at once and leaves its outcome to be posted, except
// teardown's, which it reports at once, as a live connection does: a teardown left
// hanging would keep Close waiting for an event no one posts. It implements
// effects.Effects itself, as a live connection does, so that the benchmark measures the
// machine rather than a test adapter in front of the effects.
type silent struct{}

var _ effects.Effects = silent{}

func (silent) Connect(context.Context, machine.Invocation) machine.Event { return machine.Event{} }
func (silent) Replace(context.Context, machine.Invocation) machine.Event { return machine.Event{} }
func (silent) Probe(context.Context, machine.Invocation) machine.Event   { return machine.Event{} }
func (silent) Teardown(context.Context, machine.Invocation) machine.Event {
	return machine.Event{Trigger: states.TornDown}
}
func (silent) Retire(context.Context, machine.Invocation) machine.Event { return machine.Event{} }

// eventCycle takes a ready connection through a planned reconnect and back: three
// transitions, through two states that invoke effects and one with a timer.
var eventCycle = []states.Trigger{states.Recycle, states.Connected, states.Retired}

// eventWindow is how many cycles BenchmarkEvent posts before it waits for them.
const eventWindow = 256

// BenchmarkEvent compares the cost of one cycle of events applied by a Machine with raw
// Fire calls of the same triggers on a stateless machine configured from the same spec.
// One op is one cycle (three events). The machine's events are posted through its
// mailbox without waiting for each (pipelined), in windows of eventWindow cycles; the
// wait for the last event of each window to be applied is part of the measurement. A
// window keeps the backlog as bounded as in use: a poster that outruns the owner for a
// whole run grows the mailbox without bound, and then measures the allocator.
func BenchmarkEvent(b *testing.B) {
	spec := loadDefault(b)
	b.Run("stateless", func(b *testing.B) {
		pol := spec.Defaults()
		sm, ctx := spec.Stateless("", &machine.Vars{}, &pol)
		for _, t := range []states.Trigger{states.Start, states.Connected} {
			if err := sm.FireCtx(ctx, t); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			for _, t := range eventCycle {
				if err := sm.FireCtx(ctx, t); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("machine", func(b *testing.B) {
		ctx := context.Background()
		m := readySilent(b, spec)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			for _, t := range eventCycle {
				m.Post(machine.Event{Trigger: t})
			}
			if i%eventWindow == eventWindow-1 {
				if err := m.Sync(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := m.Sync(ctx); err != nil || m.State() != states.Ready {
			b.Fatalf("not ready after the cycles: %v %s", err, m.State())
		}
		b.StopTimer()
	})
}

// readySilent returns a machine of spec with silent effects, started and ready; it is
// closed when tb's test ends.
func readySilent(tb testing.TB, spec *machine.Spec) *machine.Machine {
	tb.Helper()
	ctx := context.Background()
	m := machine.New(spec, machine.Options{Effects: silent{}, Logger: quiet})
	tb.Cleanup(func() {
		// Close alone, not a posted close then torn_down: applied before Close set the
		// guard "closing", such a torn_down led to backing-off, and the close that
		// followed waited in tearing-down for ever (seen once in CI).
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			tb.Errorf("close: %v (state %s)", err, m.State())
		}
	})
	m.Start()
	m.Post(machine.Event{Trigger: states.Connected})
	if err := m.Sync(ctx); err != nil || m.State() != states.Ready {
		tb.Fatalf("not ready: %v %s", err, m.State())
	}
	return m
}
