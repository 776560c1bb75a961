package machine_test

import (
	"context"
	"sync"
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
	m := machine.New(loadDefault(t), machine.Options{Name: t.Name(), Effects: asEffects{&instantServer{}}, Logger: quiet})
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

// TestWatchAsMachineExits: a Watch made as the machine exits is closed too. Exit once
// closed the watchers and then, outside watchMu, done: a Watch in between was added
// after the others were closed, and its channel was never closed (found by a second
// reader).
func TestWatchAsMachineExits(t *testing.T) {
	spec := loadDefault(t)
	for i := 0; i < 500; i++ {
		m := machine.New(spec, machine.Options{Name: t.Name(), Effects: asEffects{&instantServer{}}, Logger: quiet})
		var wg sync.WaitGroup
		var chs []<-chan machine.Transition
		var mu sync.Mutex
		for range 4 {
			wg.Go(func() {
				for {
					ch, _, _ := m.Watch(0)
					mu.Lock()
					chs = append(chs, ch)
					mu.Unlock()
					select {
					case <-m.Done():
						return
					default:
					}
				}
			})
		}
		_ = m.Close(context.Background())
		wg.Wait()
		for _, ch := range chs {
			select {
			case _, ok := <-ch:
				if ok {
					continue
				}
			case <-time.After(time.Second):
				t.Fatalf("iteration %d: a watch made as the machine exited is never closed", i)
			}
		}
	}
}
