package machine_test

import (
	"context"
	"testing"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// TestEventPathDoesNotAllocate keeps the owner's path for an event free of heap
// allocations: posting, applying a transition, running its effects, publishing it.
// BenchmarkEvent measures the path's cost against stateless; this fails at once when a
// change makes it allocate (an invocation passed by a pointer that escapes cost 2
// allocations a cycle and 25% of the benchmark's budget).
func TestEventPathDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	m := readySilent(t, loadDefault(t))
	const cycles = eventWindow
	allocs := testing.AllocsPerRun(20, func() {
		for range cycles {
			for _, tg := range eventCycle {
				m.Post(machine.Event{Trigger: tg})
			}
		}
		if err := m.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	})
	// Sync's barrier and a mailbox that grows once may allocate; a cycle may not.
	if perCycle := allocs / cycles; perCycle >= 0.1 {
		t.Errorf("%.0f allocations for %d cycles of %v (%.2f a cycle), want none on the event path", allocs, cycles, eventCycle, perCycle)
	}
	if m.State() != states.Ready {
		t.Errorf("state after the cycles = %s, want ready", m.State())
	}
}
