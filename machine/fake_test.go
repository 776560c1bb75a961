package machine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

var errRefused = errors.New("connect: connection refused")

// fakeServer is a scripted server behind the invoked effects: what connect, probe,
// retire and teardown do is set by its fields, which tests change as they go. Its effects take a
// little virtual time, as real ones take real time.
type fakeServer struct {
	mu            sync.Mutex
	up            bool           // connect succeeds
	hang          string         // the effect that blocks until its context ends
	unwind        time.Duration  // how long a hung effect takes to return once its context ends
	probe         states.Trigger // the probe's outcome; probe_ok when zero
	teardownCause states.Cause   // what closing a session returns (teardown and retire)
	teardownErr   error
	session       uint64 // the last session handed out
	effects       []string
	lastCtxCause  error // context.Cause of the last effect that hung
}

func (f *fakeServer) set(fn func(f *fakeServer)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeServer) current() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.session
}

func (f *fakeServer) Invoke(ctx context.Context, inv machine.Invocation) machine.Event {
	f.mu.Lock()
	f.effects = append(f.effects, inv.Effect)
	hang, unwind := f.hang == inv.Effect, f.unwind
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		time.Sleep(unwind)
		cause := context.Cause(ctx)
		f.set(func(f *fakeServer) { f.lastCtxCause = cause })
		class := states.CauseTimeout
		if errors.Is(cause, machine.ErrClosed) {
			class = states.CauseArtifact
		}
		switch inv.Effect {
		case "connect":
			return machine.Event{Trigger: states.ConnectFailed, Cause: class, Err: cause}
		case "probe":
			return machine.Event{Trigger: states.ProbeFailed, Cause: class, Err: cause}
		case "retire":
			return machine.Event{Trigger: states.Retired}
		default:
			return machine.Event{Trigger: states.TornDown}
		}
	}
	time.Sleep(10 * time.Millisecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch inv.Effect {
	case "connect":
		if !f.up {
			return machine.Event{Trigger: states.ConnectFailed, Cause: states.CauseLost, Err: errRefused}
		}
		f.session++
		return machine.Event{Trigger: states.Connected, Session: f.session}
	case "probe":
		switch {
		case !f.up:
			return machine.Event{Trigger: states.ProbeFailed, Cause: states.CauseLost, Err: errRefused}
		case f.probe != 0:
			return machine.Event{Trigger: f.probe}
		}
		return machine.Event{Trigger: states.ProbeOK}
	case "teardown":
		return machine.Event{Trigger: states.TornDown, Cause: f.teardownCause, Err: f.teardownErr}
	case "retire":
		return machine.Event{Trigger: states.Retired, Cause: f.teardownCause, Err: f.teardownErr}
	}
	panic("fake server: unknown effect " + inv.Effect)
}

// recorder keeps every transition a machine publishes, for assertions.
type recorder struct {
	mu    sync.Mutex
	start time.Time
	trs   []machine.Transition
}

func (r *recorder) observe(tr machine.Transition) {
	r.mu.Lock()
	r.trs = append(r.trs, tr)
	r.mu.Unlock()
}

func (r *recorder) all() []machine.Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]machine.Transition(nil), r.trs...)
}

// path returns "from>to" for each transition.
func (r *recorder) path() []string {
	var out []string
	for _, tr := range r.all() {
		out = append(out, tr.From.String()+">"+tr.To.String())
	}
	return out
}

// timeline renders transitions one a line with their virtual time since start.
func (r *recorder) timeline() string {
	var b strings.Builder
	for _, tr := range r.all() {
		fmt.Fprintf(&b, "%10s  %-12s → %-12s  %-28s failures=%d attempts=%d", tr.At.Sub(r.start).Round(time.Millisecond), tr.From, tr.To, tr.Trigger, tr.Failures, tr.Attempts)
		if tr.Cause != states.CauseNone {
			fmt.Fprintf(&b, " cause=%s", tr.Cause)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// count returns how many transitions went from one state to another.
func (r *recorder) count(from, to states.State) int {
	n := 0
	for _, tr := range r.all() {
		if tr.From == from && tr.To == to {
			n++
		}
	}
	return n
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newMachine starts a machine on the default spec against srv, with a fixed seed.
func newMachine(t *testing.T, srv *fakeServer, pol *machine.Policies) (*machine.Machine, *recorder) {
	t.Helper()
	rec := &recorder{start: time.Now()}
	m := machine.New(loadDefault(t), machine.Options{
		Name: t.Name(), Effects: asEffects{srv}, Policies: pol, Logger: quiet,
		Rand: rand.New(rand.NewPCG(1, 2)), Observer: rec.observe,
	})
	return m, rec
}

func closeMachine(t *testing.T, m *machine.Machine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatalf("Close: %v (state %s)", err, m.State())
	}
}

// applied waits until the machine has applied everything posted so far, including the
// effects each event set off.
func applied(t *testing.T, m *machine.Machine) {
	t.Helper()
	if err := m.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

func waitState(t *testing.T, m *machine.Machine, want states.State, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if st, err := m.Wait(ctx, func(s states.State) bool { return s == want }); err != nil {
		t.Fatalf("waiting for %s: %v (state %s)", want, err, st)
	}
}
