package machine_test

import (
	"context"
	"errors"
	yaml "go.yaml.in/yaml/v3"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// TestLifecycleTour runs the default lifecycle end to end against a scripted server in
// virtual time: connect, ready, probes, planned recycles, a failure into backoff and
// then the breaker, failed and successful half-open trials, recovery, close. The whole
// timeline is compared with testdata/tour.golden, and the properties that matter are
// asserted on their own.
func TestLifecycleTour(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{up: true}
		m, rec := newMachine(t, srv, nil)

		m.Start()
		waitState(t, m, states.Ready, time.Second)

		time.Sleep(65 * time.Second) // probes
		if rec.count(states.Ready, states.Probing) < 2 || rec.count(states.Probing, states.Ready) < 2 {
			t.Errorf("no probes in 65s of ready:\n%s", rec.timeline())
		}

		// Planned recycles whose teardown reports an artifact spend nothing.
		srv.set(func(f *fakeServer) {
			f.teardownCause, f.teardownErr = states.CauseArtifact, errors.New("close: not holding this lock")
		})
		for range 2 {
			m.Reconnect()
			applied(t, m)
			waitState(t, m, states.Ready, time.Second)
		}
		if tr := last(rec); tr.Failures != 0 {
			t.Errorf("failures after planned recycles = %d, want 0", tr.Failures)
		}
		srv.set(func(f *fakeServer) { f.teardownCause, f.teardownErr = states.CauseNone, nil })

		// The server dies: the session is reported lost, reconnects fail until the
		// breaker opens, and trials fail with a growing cooldown.
		srv.set(func(f *fakeServer) { f.up = false })
		m.Post(machine.Event{Trigger: states.Lost, Cause: states.CauseLost, Err: errRefused, Session: srv.current()})
		time.Sleep(3 * time.Minute)
		if got := rec.count(states.HalfOpen, states.BreakerOpen); got < 2 {
			t.Errorf("%d failed trials in 3m, want at least 2:\n%s", got, rec.timeline())
		}
		if m.State() == states.Ready {
			t.Fatalf("ready while the server is down")
		}

		// The server returns: the next trial succeeds and the counters reset.
		srv.set(func(f *fakeServer) { f.up = true })
		waitState(t, m, states.Ready, 6*time.Minute+time.Second)
		if tr := last(rec); tr.Failures != 0 || tr.Attempts != 0 || tr.From != states.HalfOpen {
			t.Errorf("recovery: %+v, want half-open → ready with counters reset", tr)
		}

		closeMachine(t, m)
		if m.State() != states.Closed {
			t.Errorf("state after Close = %s", m.State())
		}
		golden(t, "testdata/tour.golden", rec.timeline())
	})
}

func last(r *recorder) machine.Transition {
	all := r.all()
	if len(all) == 0 {
		return machine.Transition{}
	}
	return all[len(all)-1]
}

// TestBackoffAndBreakerDelays checks the delays a dead server sees: backoff grows by
// backoff_multiplier within its jitter until the breaker opens at breaker_threshold,
// then each cooldown doubles within its jitter up to breaker_cooldown_max.
func TestBackoffAndBreakerDelays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{}
		m, rec := newMachine(t, srv, nil)
		m.Start()
		time.Sleep(40 * time.Minute)
		closeMachine(t, m)

		p := loadDefault(t).Defaults()
		var waits []time.Duration // time spent in each backing-off or breaker-open
		var kinds []states.State
		trs := rec.all()
		for i, tr := range trs {
			if (tr.To == states.BackingOff || tr.To == states.BreakerOpen) && i+1 < len(trs) {
				waits = append(waits, trs[i+1].At.Sub(tr.At))
				kinds = append(kinds, tr.To)
			}
		}
		backoff, cooldown := p.BackoffBase, p.BreakerCooldown
		for i, w := range waits {
			if kinds[i] == states.Closed {
				break
			}
			var want time.Duration
			var jitter float64
			if kinds[i] == states.BackingOff {
				want, jitter = backoff, p.BackoffJitter
				backoff = min(time.Duration(float64(backoff)*p.BackoffMultiplier), p.BackoffMax)
			} else {
				want, jitter = cooldown, p.BreakerCooldownJitter
				cooldown = min(cooldown*2, p.BreakerCooldownMax)
			}
			lo, hi := time.Duration(float64(want)*(1-jitter)), time.Duration(float64(want)*(1+jitter))+20*time.Millisecond
			if i == len(waits)-1 {
				break // cut short by Close
			}
			if w < lo || w > hi {
				t.Errorf("wait %d in %s = %v, want within [%v, %v]", i, kinds[i], w, lo, hi)
			}
		}
		if n := rec.count(states.Connecting, states.BackingOff); n != p.BreakerThreshold-1 {
			t.Errorf("%d backoffs before the breaker opened, want %d", n, p.BreakerThreshold-1)
		}
		if n := rec.count(states.Connecting, states.BreakerOpen); n != 1 {
			t.Errorf("breaker opened from connecting %d times, want 1", n)
		}
	})
}

// TestPlannedRecyclesSpendNoBudget: many planned recycles in a row, each retiring
// the replaced session with an error that is an artifact; the machine never backs off,
// and calls always have a session.
func TestPlannedRecyclesSpendNoBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{up: true, teardownCause: states.CauseArtifact, teardownErr: errors.New("cleanup noise")}
		m, rec := newMachine(t, srv, nil)
		m.Start()
		waitState(t, m, states.Ready, time.Second)
		for range 20 {
			m.Reconnect()
			applied(t, m) // the recycle and the effects that follow it have run
		}
		waitState(t, m, states.Ready, time.Second)
		closeMachine(t, m)
		trs := rec.all()
		for _, tr := range trs {
			if tr.Failures != 0 || tr.To == states.BackingOff || tr.To == states.BreakerOpen {
				t.Fatalf("a planned recycle spent budget: %v\n%s", tr, rec.timeline())
			}
		}
		for _, tr := range trs[2 : len(trs)-2] { // from the first ready to Close
			if m.Spec().Calls(tr.To) != machine.Serve {
				t.Fatalf("calls had no session during a recycle: %v\n%s", tr, rec.timeline())
			}
		}
		if n := rec.count(states.Retiring, states.Ready); n != 20 {
			t.Errorf("%d planned reconnects, want 20", n)
		}
	})
}

// TestFailedReplacementKeepsSession: a planned reconnect whose new session cannot be
// opened keeps the old one serving, and counts the failure; a later one that works
// replaces it.
func TestFailedReplacementKeepsSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{up: true}
		m, rec := newMachine(t, srv, nil)
		m.Start()
		waitState(t, m, states.Ready, time.Second)
		old := srv.current()
		srv.set(func(f *fakeServer) { f.up = false })
		m.Reconnect()
		applied(t, m)
		srv.set(func(f *fakeServer) { f.up = true })
		m.Reconnect()
		applied(t, m)
		closeMachine(t, m)
		want := []string{"idle>connecting", "connecting>ready",
			"ready>replacing", "replacing>ready",
			"ready>replacing", "replacing>retiring", "retiring>ready",
			"ready>tearing-down", "tearing-down>closed"}
		if diff := cmp.Diff(want, rec.path()); diff != "" {
			t.Errorf("path (-want +got):\n%s", diff)
		}
		if tr := rec.all()[3]; tr.Failures != 1 || tr.Cause != states.CauseLost {
			t.Errorf("failed replacement = %+v, want failures 1, cause lost", tr)
		}
		if srv.current() != old+1 {
			t.Errorf("session %d after one successful replacement of %d", srv.current(), old)
		}
	})
}

// TestStaleSessionEventsAreDropped: a report about a session that has been replaced
// changes nothing.
func TestStaleSessionEventsAreDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{up: true}
		m, rec := newMachine(t, srv, nil)
		m.Start()
		waitState(t, m, states.Ready, time.Second)
		old := srv.current()
		m.Reconnect()
		applied(t, m)
		waitState(t, m, states.Ready, time.Second)
		n := len(rec.all())
		m.Post(machine.Event{Trigger: states.Lost, Cause: states.CauseLost, Session: old})
		if err := m.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := len(rec.all()); got != n || m.State() != states.Ready {
			t.Errorf("stale lost event moved the machine: %s", rec.timeline())
		}
		m.Post(machine.Event{Trigger: states.Lost, Cause: states.CauseLost, Session: srv.current()})
		waitState(t, m, states.BackingOff, time.Second)
		closeMachine(t, m)
	})
}

// TestKeepalive: probes come at most keepalive_interval apart and at least
// (1-keepalive_jitter) of it apart after the first; interval 0 disables them.
func TestKeepalive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{up: true}
		m, rec := newMachine(t, srv, nil)
		m.Start()
		time.Sleep(time.Hour)
		closeMachine(t, m)
		p := loadDefault(t).Defaults()
		var probes []time.Time
		for _, tr := range rec.all() {
			if tr.To == states.Probing {
				probes = append(probes, tr.At)
			}
		}
		if len(probes) < int(time.Hour/p.KeepaliveInterval) {
			t.Fatalf("%d probes in an hour, want at least %d", len(probes), time.Hour/p.KeepaliveInterval)
		}
		lo := time.Duration(float64(p.KeepaliveInterval)*(1-p.KeepaliveJitter)) - time.Second
		for i := 1; i < len(probes); i++ {
			// A probe takes 10ms of virtual time; the interval runs from its end.
			if gap := probes[i].Sub(probes[i-1]); gap < lo || gap > p.KeepaliveInterval+time.Second {
				t.Errorf("gap %d between probes = %v, want within [%v, %v]", i, gap, lo, p.KeepaliveInterval)
			}
		}
	})
	synctest.Test(t, func(t *testing.T) {
		pol := loadDefault(t).Defaults()
		pol.KeepaliveInterval = 0
		m, rec := newMachine(t, &fakeServer{up: true}, &pol)
		m.Start()
		time.Sleep(24 * time.Hour)
		closeMachine(t, m)
		if n := rec.count(states.Ready, states.Probing); n != 0 {
			t.Errorf("%d probes with keepalive disabled", n)
		}
	})
}

// TestProbeRecycleIsPlanned: a probe that decides to recycle the session replaces it at
// once without spending budget.
func TestProbeRecycleIsPlanned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{up: true, probe: states.Recycle}
		m, rec := newMachine(t, srv, nil)
		m.Start()
		time.Sleep(45 * time.Second)
		closeMachine(t, m)
		if n := rec.count(states.Probing, states.Replacing); n == 0 {
			t.Fatalf("no recycle in 45s:\n%s", rec.timeline())
		}
		for _, tr := range rec.all() {
			if tr.Failures != 0 || tr.To == states.BackingOff {
				t.Fatalf("a probe recycle spent budget:\n%s", rec.timeline())
			}
		}
	})
}

// TestEffectTimeout: an effect that never returns is cut off at its timeout policy,
// with ErrEffectTimeout as its context's cause.
func TestEffectTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{up: true, hang: "connect"}
		m, rec := newMachine(t, srv, nil)
		start := time.Now()
		m.Start()
		waitState(t, m, states.BackingOff, time.Minute)
		if took := time.Since(start); took != loadDefault(t).Defaults().ConnectTimeout {
			t.Errorf("connect cut off after %v, want exactly connect_timeout", took)
		}
		srv.mu.Lock()
		cause := srv.lastCtxCause
		srv.mu.Unlock()
		if !errors.Is(cause, machine.ErrEffectTimeout) || !errors.Is(cause, context.DeadlineExceeded) {
			t.Errorf("context cause = %v, want ErrEffectTimeout", cause)
		}
		if tr := last(rec); tr.Cause != states.CauseTimeout || tr.Failures != 1 {
			t.Errorf("after the timeout: %+v", tr)
		}
		closeMachine(t, m)
	})
}

// TestCloseFromEveryState drives the machine into each non-final state and closes it
// there: Close returns, the owner goroutine exits (synctest fails on any goroutine left
// in the bubble), and a hung effect is interrupted rather than waited out.
func TestCloseFromEveryState(t *testing.T) {
	threshold1 := func(p *machine.Policies) { p.BreakerThreshold = 1 }
	cases := []struct {
		state states.State
		srv   *fakeServer
		pol   func(*machine.Policies)
		start bool
		then  func(*fakeServer)
		// hang, if set, is the effect that hangs from the first ready on, which a
		// reconnect (a lost session, for teardown) then starts.
		hang string
	}{
		{state: states.Idle},
		{state: states.Connecting, srv: &fakeServer{hang: "connect"}, start: true},
		{state: states.Ready, srv: &fakeServer{up: true}, start: true},
		{state: states.Probing, srv: &fakeServer{up: true, hang: "probe"}, start: true},
		{state: states.Replacing, srv: &fakeServer{up: true}, start: true, hang: "connect"},
		{state: states.Retiring, srv: &fakeServer{up: true}, start: true, hang: "retire"},
		{state: states.TearingDown, srv: &fakeServer{up: true}, start: true, hang: "teardown"},
		{state: states.BackingOff, start: true},
		{state: states.BreakerOpen, pol: threshold1, start: true},
		{state: states.HalfOpen, pol: threshold1, start: true, then: func(f *fakeServer) { f.hang = "connect" }},
	}
	for _, c := range cases {
		t.Run(c.state.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pol := loadDefault(t).Defaults()
				if c.pol != nil {
					c.pol(&pol)
				}
				srv := c.srv
				if srv == nil {
					srv = &fakeServer{}
				}
				m, rec := newMachine(t, srv, &pol)
				if c.start {
					m.Start()
				}
				if c.then != nil {
					waitState(t, m, states.BreakerOpen, time.Minute)
					srv.set(c.then)
				}
				if c.hang != "" {
					waitState(t, m, states.Ready, time.Minute)
					srv.set(func(f *fakeServer) { f.hang = c.hang })
					if c.hang == "teardown" {
						m.Post(machine.Event{Trigger: states.Lost, Cause: states.CauseLost, Session: srv.current()})
					} else {
						m.Reconnect()
					}
				}
				waitState(t, m, c.state, time.Hour)
				synctest.Wait()
				if m.State() != c.state {
					t.Fatalf("state = %s, want %s", m.State(), c.state)
				}
				start := time.Now()
				closeMachine(t, m)
				took := time.Since(start)
				if m.State() != states.Closed {
					t.Fatalf("state after Close = %s", m.State())
				}
				// Only a teardown that hangs may take time: it is bounded by its policy.
				if bound := time.Duration(0); c.state != states.TearingDown && took > bound+100*time.Millisecond {
					t.Errorf("Close from %s took %v of virtual time:\n%s", c.state, took, rec.timeline())
				} else if c.state == states.TearingDown && took > pol.TeardownTimeout {
					t.Errorf("Close during a hung teardown took %v, more than teardown_timeout", took)
				}
				select {
				case <-m.Done():
				default:
					t.Error("Done not closed after Close returned")
				}
			})
		})
	}
}

// TestCloseDeadlineRunsFromClose: the deadline closing shares runs from the moment
// Close is asked for, not from when the owner gets to apply close: a probe that takes
// 300 ms to return once Close interrupts it leaves the teardown after it (which hangs)
// the rest of teardown_timeout, and Close returns teardown_timeout after it was called.
func TestCloseDeadlineRunsFromClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const unwind = 300 * time.Millisecond
		srv := &fakeServer{up: true, hang: "probe", unwind: unwind}
		pol := loadDefault(t).Defaults()
		m, rec := newMachine(t, srv, &pol)
		m.Start()
		waitState(t, m, states.Probing, time.Hour)
		synctest.Wait()
		srv.set(func(f *fakeServer) { f.hang, f.unwind = "teardown", 0 })
		start := time.Now()
		closeMachine(t, m)
		if took := time.Since(start); took != pol.TeardownTimeout {
			t.Errorf("Close took %v after an effect that took %v to return; want teardown_timeout, %v\n%s",
				took, unwind, pol.TeardownTimeout, rec.timeline())
		}
	})
}

// TestCloseIsIdempotentAndBounded: Close may be called many times, from many
// goroutines; a Close whose context ends first returns its error, and the machine
// still closes.
func TestCloseIsIdempotentAndBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{up: true, hang: "teardown"}
		m, _ := newMachine(t, srv, nil)
		m.Start()
		waitState(t, m, states.Ready, time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		// The hung teardown is interrupted by Close only if it was running when Close
		// was asked; here close starts it, so it runs to teardown_timeout.
		if err := m.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close with a short context = %v, want DeadlineExceeded", err)
		}
		done := make(chan error, 8)
		for range 8 {
			go func() { done <- m.Close(context.Background()) }()
		}
		for range 8 {
			if err := <-done; err != nil {
				t.Errorf("Close = %v", err)
			}
		}
		if m.State() != states.Closed {
			t.Errorf("state = %s", m.State())
		}
		if m.Post(machine.Event{Trigger: states.Start}) {
			t.Error("Post after close reported delivery")
		}
		if err := m.Sync(context.Background()); !errors.Is(err, machine.ErrClosed) {
			t.Errorf("Sync after close = %v, want ErrClosed", err)
		}
		if _, err := m.Wait(context.Background(), func(s states.State) bool { return s == states.Ready }); !errors.Is(err, machine.ErrClosed) {
			t.Errorf("Wait for ready after close = %v, want ErrClosed", err)
		}
	})
}

// TestCloseAsTeardownStarts: Close asked just as a failure's teardown is about to start
// (lost and close in one batch). Close jumps the queue (the close rule), so it is close
// that leads to tearing-down; the teardown must run once, and the machine must reach
// closed.
func TestCloseAsTeardownStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{up: true}
		m, rec := newMachine(t, srv, nil)
		m.Start()
		waitState(t, m, states.Ready, time.Second)
		m.Post(machine.Event{Trigger: states.Lost, Cause: states.CauseLost, Session: srv.current()})
		closeMachine(t, m) // posts close into the same batch: the owner has not run yet
		// Posting lost may start the owner before Close is asked for: then lost leads
		// to tearing-down and close is applied there (internal). Either way, one
		// teardown and closed.
		want := []string{"idle>connecting", "connecting>ready", "ready>tearing-down", "tearing-down>closed"}
		alt := []string{"idle>connecting", "connecting>ready", "ready>tearing-down", "tearing-down>tearing-down", "tearing-down>closed"}
		if got := rec.path(); !cmp.Equal(want, got) && !cmp.Equal(alt, got) {
			t.Errorf("path (-want +got):\n%s", cmp.Diff(want, got))
		}
		srv.mu.Lock()
		defer srv.mu.Unlock()
		if diff := cmp.Diff([]string{"connect", "teardown"}, srv.effects); diff != "" {
			t.Errorf("effects run (-want +got):\n%s", diff)
		}
	})
}

// TestCloseNeverWedges drives machines through random events and server behaviour in
// virtual time and closes each at a random moment: Close always returns, within the
// teardown timeout of being asked plus the effect it interrupts, and the owner exits
// (synctest fails on a goroutine left in the bubble).
func TestCloseNeverWedges(t *testing.T) {
	for seed := range uint64(300) {
		synctest.Test(t, func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, seed*7+1))
			srv := &fakeServer{up: r.IntN(3) > 0}
			if r.IntN(3) == 0 {
				srv.hang = []string{"connect", "probe", "teardown"}[r.IntN(3)]
			}
			m, rec := newMachine(t, srv, nil)
			if r.IntN(5) > 0 {
				m.Start()
			}
			for range r.IntN(12) {
				switch r.IntN(5) {
				case 0:
					m.Post(machine.Event{Trigger: states.Lost, Cause: states.CauseLost, Session: srv.current()})
				case 1:
					m.Reconnect()
				case 2:
					srv.set(func(f *fakeServer) { f.up = !f.up })
				case 3:
					srv.set(func(f *fakeServer) { f.teardownCause = states.Cause(r.IntN(4)) })
				}
				switch r.IntN(3) {
				case 0:
					time.Sleep(time.Duration(r.IntN(40000)) * time.Millisecond)
				case 1:
					synctest.Wait()
				} // or go on at once: the next event joins the same batch
			}
			if r.IntN(2) == 0 { // Close in the same batch as a last event
				m.Post(machine.Event{Trigger: []states.Trigger{states.Lost, states.Recycle, states.Start}[r.IntN(3)], Cause: states.CauseLost, Session: srv.current()})
			}
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			if err := m.Close(ctx); err != nil || m.State() != states.Closed {
				t.Fatalf("seed %d: Close = %v in %s\n%s", seed, err, m.State(), rec.timeline())
			}
			if took := time.Since(start); took > 6*time.Second {
				t.Errorf("seed %d: Close took %v\n%s", seed, took, rec.timeline())
			}
		})
	}
}

// TestBreakBeforeMakeAsDocumented: the break-before-make lifecycle of
// docs/lifecycles/break-before-make.yaml loads, and a reconnect under it tears the
// session down first and connects again at once, spending nothing.
func TestBreakBeforeMakeAsDocumented(t *testing.T) {
	spec, err := machine.LoadSpecFile("../docs/lifecycles/break-before-make.yaml", effects.Registry())
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{start: time.Now()}
		m := machine.New(spec, machine.Options{Name: t.Name(), Effects: asEffects{&fakeServer{up: true}}, Logger: quiet, Observer: rec.observe})
		m.Start()
		waitState(t, m, states.Ready, time.Second)
		m.Reconnect()
		applied(t, m)
		closeMachine(t, m)
		want := []string{"idle>connecting", "connecting>ready", "ready>tearing-down", "tearing-down>connecting", "connecting>ready", "ready>tearing-down", "tearing-down>closed"}
		if diff := cmp.Diff(want, rec.path()); diff != "" || last(rec).Failures != 0 {
			t.Errorf("path (-want +got):\n%s\n%s", diff, rec.timeline())
		}
	})
}

// TestCloseNeverWedgesRandomSpecs: for specs that the validator accepts, made by random
// edits of the default one (an edge sent elsewhere, made internal, or deleted), Close
// returns within the teardown timeout plus a margin, in virtual time, whatever the
// server does; the validator's proof is what makes that hold for specs nobody wrote by
// hand.
func TestCloseNeverWedgesRandomSpecs(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 13))
	base := defaultSpecYAML(t)
	var specs []*machine.Spec
	rejected := 0
	for tries := 0; len(specs) < 60 && tries < 5000; tries++ {
		data, ok := mutateSpec(t, base, r, 1+r.IntN(3))
		if !ok {
			continue
		}
		spec, err := machine.LoadSpec("random.yaml", data, effects.Registry())
		if err != nil {
			rejected++
			continue
		}
		specs = append(specs, spec)
	}
	if len(specs) < 60 || rejected == 0 {
		t.Fatalf("%d random specs accepted, %d rejected: the generator is not exploring", len(specs), rejected)
	}
	for i, spec := range specs {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{up: r.IntN(3) > 0}
			if r.IntN(3) == 0 {
				srv.hang = []string{"connect", "probe", "teardown", "retire"}[r.IntN(4)]
			}
			rec := &recorder{start: time.Now()}
			m := machine.New(spec, machine.Options{Name: t.Name(), Effects: asEffects{srv}, Logger: quiet, Observer: rec.observe})
			m.Start()
			for range r.IntN(8) {
				switch r.IntN(4) {
				case 0:
					m.Post(machine.Event{Trigger: states.Lost, Cause: states.CauseLost, Session: srv.current()})
				case 1:
					m.Reconnect()
				case 2:
					srv.set(func(f *fakeServer) { f.up = !f.up })
				}
				time.Sleep(time.Duration(r.IntN(20000)) * time.Millisecond)
			}
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			if err := m.Close(ctx); err != nil || !spec.Final(m.State()) {
				t.Fatalf("spec %d: Close = %v in %s\n%s", i, err, m.State(), rec.timeline())
			}
			if took, bound := time.Since(start), spec.Defaults().TeardownTimeout+time.Second; took > bound {
				t.Errorf("spec %d: Close took %v, more than %v\n%s", i, took, bound, rec.timeline())
			}
		})
	}
	t.Logf("%d random specs accepted and closed in bound, %d rejected by the validator", len(specs), rejected)
}

// mutateSpec makes n random edits to the transitions of a spec: an edge sent to
// another state, made internal, or deleted.
func mutateSpec(t *testing.T, data []byte, r *rand.Rand, n int) ([]byte, bool) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	doc := root.Content[0]
	var statesNode *yaml.Node
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value == "states" {
			statesNode = doc.Content[i+1]
		}
	}
	var names []string
	var edges [][2]*yaml.Node // the edge's mapping, and the list holding it (nil if alone)
	for i := 0; i+1 < len(statesNode.Content); i += 2 {
		names = append(names, statesNode.Content[i].Value)
		body := statesNode.Content[i+1]
		for j := 0; j+1 < len(body.Content); j += 2 {
			if body.Content[j].Value != "on" {
				continue
			}
			on := body.Content[j+1]
			for k := 0; k+1 < len(on.Content); k += 2 {
				switch v := on.Content[k+1]; v.Kind {
				case yaml.MappingNode:
					edges = append(edges, [2]*yaml.Node{v, nil})
				case yaml.SequenceNode:
					for _, e := range v.Content {
						edges = append(edges, [2]*yaml.Node{e, v})
					}
				}
			}
		}
	}
	for range n {
		e := edges[r.IntN(len(edges))]
		edge, list := e[0], e[1]
		switch r.IntN(3) {
		case 0: // send it elsewhere
			setKey(edge, "to", names[r.IntN(len(names))])
		case 1: // make it internal
			for i := 0; i+1 < len(edge.Content); i += 2 {
				if edge.Content[i].Value == "to" {
					edge.Content = append(edge.Content[:i], edge.Content[i+2:]...)
					break
				}
			}
		case 2: // delete it, if it has siblings
			if list == nil || len(list.Content) < 2 {
				return nil, false
			}
			for i, x := range list.Content {
				if x == edge {
					list.Content = append(list.Content[:i], list.Content[i+1:]...)
					break
				}
			}
		}
	}
	out, err := yaml.Marshal(&root)
	if err != nil {
		t.Fatal(err)
	}
	return out, true
}

func setKey(m *yaml.Node, key, value string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1].Value = value
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, &yaml.Node{Kind: yaml.ScalarNode, Value: value})
}
