package machine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// instantServer's effects succeed at once, so transitions come as fast as the owner
// can apply them.
type instantServer struct{ sessions atomic.Uint64 }

func (s *instantServer) Invoke(ctx context.Context, inv machine.Invocation) machine.Event {
	switch inv.Effect {
	case "connect":
		return machine.Event{Trigger: states.Connected, Session: s.sessions.Add(1)}
	case "probe":
		return machine.Event{Trigger: states.ProbeOK}
	}
	return machine.Event{Trigger: states.TornDown}
}

// TestWatchStopWhileTransitioning stops watches while the owner is publishing
// transitions to them. Stop used to close the channel the owner was sending on, which
// panicked with "send on closed channel" (found by a second reader; -race shows it in
// well under a second).
func TestWatchStopWhileTransitioning(t *testing.T) {
	m := machine.New(loadDefault(t), machine.Options{Name: t.Name(), Invoker: &instantServer{}, Logger: quiet})
	defer closeMachine(t, m)
	m.Start()

	done := make(chan struct{})
	go func() {
		defer close(done)
		for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
			m.Reconnect()
			time.Sleep(10 * time.Microsecond)
		}
	}()
	watches := 0
	for running := true; running; watches++ {
		select {
		case <-done:
			running = false
		default:
		}
		ch, stop, _ := m.Watch(1)
		stop()
		stop() // idempotent
		// A stopped watch's channel is closed: after any buffered transition, the
		// receive reports closed.
		for range ch {
		}
	}
	t.Logf("%d watches stopped while reconnecting", watches)
}
