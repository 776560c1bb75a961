package machine_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// exclusiveServer checks that no two goroutines act as the owner at once: effects and
// the Observer both run only as the owner, so entering either while another is inside
// is a second owner. Its effects fail now and then, so backoff, breaker and keepalive
// timers fire too.
type exclusiveServer struct {
	t        *testing.T
	inside   atomic.Int32
	sessions atomic.Uint64
	effects  atomic.Int64
	mu       sync.Mutex
	rng      *rand.Rand
}

func (s *exclusiveServer) enter() {
	if n := s.inside.Add(1); n != 1 {
		s.t.Errorf("%d goroutines act as the owner at once", n)
	}
}

func (s *exclusiveServer) leave() { s.inside.Add(-1) }

func (s *exclusiveServer) fail() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.IntN(4) == 0
}

func (s *exclusiveServer) observe(machine.Transition) { s.enter(); s.leave() }

func (s *exclusiveServer) Invoke(ctx context.Context, inv machine.Invocation) machine.Event {
	s.enter()
	defer s.leave()
	s.effects.Add(1)
	runtime.Gosched() // widen the window a second owner would need
	switch inv.Effect {
	case "connect":
		if s.fail() {
			return machine.Event{Trigger: states.ConnectFailed, Cause: states.CauseLost, Err: errRefused}
		}
		return machine.Event{Trigger: states.Connected, Session: s.sessions.Add(1)}
	case "probe":
		if s.fail() {
			return machine.Event{Trigger: states.ProbeFailed, Cause: states.CauseTimeout, Err: context.DeadlineExceeded}
		}
		return machine.Event{Trigger: states.ProbeOK}
	case "retire":
		return machine.Event{Trigger: states.Retired}
	}
	return machine.Event{Trigger: states.TornDown}
}

// TestOneOwnerAtATime drives a machine from posts, timers and SetPolicies on several
// goroutines at once, with millisecond policies so that the owner role is given up and
// taken again thousands of times, and checks that never two goroutines hold it.
func TestOneOwnerAtATime(t *testing.T) {
	srv := &exclusiveServer{t: t, rng: rand.New(rand.NewPCG(3, 4))}
	pol := loadDefault(t).Defaults()
	pol.KeepaliveInterval = time.Millisecond
	pol.BackoffBase, pol.BackoffMax = time.Millisecond, 3*time.Millisecond
	pol.BreakerCooldown, pol.BreakerCooldownMax = 2*time.Millisecond, 5*time.Millisecond
	m := machine.New(loadDefault(t), machine.Options{
		Name: t.Name(), Effects: asEffects{srv}, Policies: &pol, Logger: quiet, Observer: srv.observe,
	})
	defer closeMachine(t, m)
	m.Start()

	var wg sync.WaitGroup
	deadline := time.Now().Add(300 * time.Millisecond)
	for g := range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				switch (g + i) % 3 {
				case 0:
					m.Reconnect()
				case 1:
					m.SetPolicies(pol)
				case 2:
					_ = m.Sync(context.Background())
				}
				time.Sleep(50 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	if n := srv.effects.Load(); n < 100 {
		t.Errorf("only %d effects ran: the test did not exercise the owner", n)
	}
}

// TestIdleMachineHoldsNoGoroutine: a ready machine with nothing to do but wait for its
// keepalive holds no goroutine; the keepalive's timer takes the owner role when due.
func TestIdleMachineHoldsNoGoroutine(t *testing.T) {
	srv := &fakeServer{up: true}
	pol := loadDefault(t).Defaults()
	pol.KeepaliveInterval = time.Hour
	m, rec := newMachine(t, srv, &pol)
	defer closeMachine(t, m)
	m.Start()
	waitState(t, m, states.Ready, 10*time.Second)
	for deadline := time.Now().Add(10 * time.Second); ownerRunning(); {
		if time.Now().After(deadline) {
			t.Fatalf("an owner goroutine is still running while the machine idles in %s", m.State())
		}
		time.Sleep(time.Millisecond)
	}
	// The role is taken again on demand: a post finds it free.
	m.Reconnect()
	waitFor(t, func() bool { return rec.count(states.Retiring, states.Ready) == 1 }, 10*time.Second)
}

// ownerRunning reports whether any goroutine is running a machine's owner loop.
func ownerRunning() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "machine.(*Machine).run(")
}

func waitFor(t *testing.T, ok func() bool, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); !ok(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(time.Millisecond)
	}
}

// goexitServer's first connect ends its goroutine with runtime.Goexit, as t.FailNow
// (t.Fatal, require.*) does when a fake Invoker calls it.
type goexitServer struct{ n atomic.Int32 }

func (s *goexitServer) Invoke(ctx context.Context, inv machine.Invocation) machine.Event {
	if inv.Effect == "connect" && s.n.Add(1) == 1 {
		runtime.Goexit()
	}
	if inv.Effect == "connect" {
		return machine.Event{Trigger: states.Connected, Session: 1}
	}
	return machine.Event{Trigger: states.TornDown}
}

// TestOwnerGoexitStillCloses: an owner whose goroutine ends in an effect (t.Fatal in a
// fake) closes the machine rather than keep the role forever, so Close returns (found
// by a second reader: the owner-as-a-role change had lost the deferred exit).
func TestOwnerGoexitStillCloses(t *testing.T) {
	m := machine.New(loadDefault(t), machine.Options{Name: t.Name(), Effects: asEffects{&goexitServer{}}, Logger: quiet})
	m.Start()
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatalf("Close after the owner's goroutine ended: %v (state %s)", err, m.State())
	}
}
