package machine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// TestConcurrentPostsAreNeverLost: many goroutines post at once; every event reaches
// the owner, in each poster's order.
func TestConcurrentPostsAreNeverLost(t *testing.T) {
	m := machine.New(loadDefault(t), machine.Options{Logger: quiet})
	defer m.Close(context.Background())
	const posters, each = 64, 200
	var wg sync.WaitGroup
	for range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := m.Sync(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// Triggers the idle state does not handle are dropped, not queued forever.
	for range 1000 {
		m.Post(machine.Event{Trigger: states.ProbeOK})
	}
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if m.State() != states.Idle || len(m.History()) != 0 {
		t.Errorf("unhandled events moved the machine: %s, %v", m.State(), m.History())
	}
}

// TestWatchWaitAndHistory: a watcher sees transitions in order; Wait returns on the
// state asked for; History keeps the latest transitions, oldest first, up to its limit.
func TestWatchWaitAndHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{up: true}
		m := machine.New(loadDefault(t), machine.Options{Effects: asEffects{srv}, Logger: quiet, History: 4})
		ch, stop, dropped := m.Watch(64)
		slow, stopSlow, droppedSlow := m.Watch(1)
		defer stopSlow()
		m.Start()
		st, err := m.Wait(context.Background(), func(s states.State) bool { return s == states.Ready })
		if err != nil || st != states.Ready {
			t.Fatalf("Wait = %s, %v", st, err)
		}
		for range 3 {
			m.Reconnect()
			applied(t, m)
		}
		stop()
		var seen []string
		for tr := range ch { // closed by stop
			seen = append(seen, tr.From.String()+">"+tr.To.String())
		}
		want := []string{"idle>connecting", "connecting>ready"}
		for range 3 {
			want = append(want, "ready>replacing", "replacing>retiring", "retiring>ready")
		}
		if diff := cmp.Diff(want, seen); diff != "" || dropped() != 0 {
			t.Errorf("watched (-want +got), %d dropped:\n%s", dropped(), diff)
		}
		if droppedSlow() != len(want)-1 || len(slow) != 1 {
			t.Errorf("a watcher with room for 1 dropped %d of %d", droppedSlow(), len(want))
		}
		h := m.History()
		if len(h) != 4 || h[3].Seq != uint64(len(want)) || h[0].Seq != uint64(len(want)-3) {
			t.Errorf("history = %v, want the last 4 transitions", h)
		}
		for i := 1; i < len(h); i++ {
			if h[i].Seq != h[i-1].Seq+1 || h[i].At.Before(h[i-1].At) {
				t.Errorf("history out of order: %v", h)
			}
		}
		if got := h[3].String(); got != "retiring → ready (retired)" {
			t.Errorf("String() = %q", got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := m.Wait(ctx, func(s states.State) bool { return s == states.BreakerOpen }); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait for a state that never comes = %v", err)
		}
		closeMachine(t, m)
		if _, ok := <-slow; ok { // drain the one buffered transition
			if _, ok := <-slow; ok {
				t.Error("a watcher's channel is not closed when the machine closes")
			}
		}
		late, stopLate, _ := m.Watch(1)
		defer stopLate()
		if _, ok := <-late; ok {
			t.Error("a watch of a closed machine is open")
		}
	})
}

// TestTransitionString renders the cause and error of a failure.
func TestTransitionString(t *testing.T) {
	tr := machine.Transition{From: states.Ready, To: states.TearingDown, Trigger: "lost", Cause: states.CauseLost, Err: errors.New("EOF")}
	if got, want := tr.String(), "ready → tearing-down (lost, cause lost: EOF)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// TestPolicies covers parsing each kind of policy value.
func TestPolicies(t *testing.T) {
	var p machine.Policies
	for _, c := range []struct{ name, value, err string }{
		{"connect_timeout", "1500ms", ""},
		{"keepalive_interval", "0", ""},
		{"keepalive_interval", "0s", ""},
		{"connect_timeout", "0s", "policy connect_timeout: duration 0s is not positive"},
		{"connect_timeout", "3", `policy connect_timeout: duration "3" has no unit (write it like 30s, 500ms or 2m)`},
		{"breaker_threshold", "3", ""},
		{"breaker_threshold", "2.5", `policy breaker_threshold: "2.5" is not a whole number`},
		{"backoff_jitter", "NaN", `policy backoff_jitter: "NaN" is not a number`},
		{"backoff_multiplier", "1", ""},
		{"keepalive_interva", "1s", `unknown policy "keepalive_interva" (did you mean "keepalive_interval"?)`},
	} {
		err := p.Set(c.name, c.value)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.err {
			t.Errorf("Set(%s, %s) = %q, want %q", c.name, c.value, got, c.err)
		}
	}
	if p.ConnectTimeout != 1500*time.Millisecond || p.BreakerThreshold != 3 || p.KeepaliveInterval != 0 {
		t.Errorf("policies = %+v", p)
	}
	spec := loadDefault(t)
	var names []string
	for _, doc := range spec.Policies() {
		if doc.Description == "" || doc.Default == "" {
			t.Errorf("policy %s lacks a default or description", doc.Name)
		}
		names = append(names, doc.Name+"="+doc.Default)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "backoff_max=2m ") || !strings.Contains(got, "backoff_multiplier=1.6") {
		t.Errorf("formatted defaults: %s", got)
	}
	if len(names) != len(machine.AllPolicies()) {
		t.Errorf("%d policies declared, %d known", len(names), len(machine.AllPolicies()))
	}
}

// TestSetPolicies: new policies take effect for the next delay, without a transition.
func TestSetPolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{up: true}
		m, rec := newMachine(t, srv, nil)
		m.Start()
		waitState(t, m, states.Ready, time.Second)
		time.Sleep(2 * time.Minute)
		before := rec.count(states.Ready, states.Probing)
		p := m.Policies()
		p.KeepaliveInterval = 0 // stop probing
		if err := m.SetPolicies(p); err != nil {
			t.Fatalf("SetPolicies on an open machine: %v", err)
		}
		n := len(rec.all())
		applied(t, m)
		if len(rec.all()) != n || m.State() != states.Ready || m.Policies().KeepaliveInterval != 0 {
			t.Fatalf("SetPolicies moved the machine or was not kept: %s", rec.timeline())
		}
		time.Sleep(time.Hour)
		if after := rec.count(states.Ready, states.Probing); after > before+1 { // the probe already armed may run
			t.Errorf("%d probes after keepalive was disabled", after-before)
		}
		bad := p
		bad.BreakerThreshold, bad.BreakerCooldown = 0, 0
		if err := m.SetPolicies(bad); err == nil || !strings.Contains(err.Error(), "breaker_threshold 0 is less than 1") || !strings.Contains(err.Error(), "breaker_cooldown is 0") {
			t.Errorf("SetPolicies with a zero threshold and cooldown: %v", err)
		}
		closeMachine(t, m)
		if err := m.SetPolicies(p); !errors.Is(err, machine.ErrClosed) {
			t.Errorf("SetPolicies on a closed machine: %v", err)
		}
	})
}

// TestPoliciesValidate (issue 17 item 15): policies built in Go are checked whole; the
// zero Policies, or one with a single field set, is refused, naming every problem.
func TestPoliciesValidate(t *testing.T) {
	if err := loadDefault(t).Defaults().Validate(); err != nil {
		t.Fatalf("the default policies: %v", err)
	}
	var p machine.Policies
	p.KeepaliveInterval = time.Second
	err := p.Validate()
	var pe *machine.PolicyError
	if !errors.As(err, &pe) {
		t.Fatalf("Validate of a mostly unset Policies = %v", err)
	}
	for _, want := range []string{"connect_timeout is 0", "breaker_threshold 0 is less than 1", "backoff_multiplier 0 is not between 1", "park_interval is 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v\nmissing %q", err, want)
		}
	}
	d := loadDefault(t).Defaults()
	d.BackoffMax = d.BackoffBase / 2
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "backoff_max") {
		t.Errorf("a backoff_max below its base: %v", err)
	}
	// Past 100 years, as Set refuses it (a time that far ahead does not fit UnixNano:
	// a status page showed 1719); Validate took up to 292 years.
	d = loadDefault(t).Defaults()
	d.KeepaliveInterval = 200 * 365 * 24 * time.Hour
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "keepalive_interval 1752000h0m0s is longer than 876000h0m0s (100 years)") {
		t.Errorf("a keepalive_interval of 200 years: %v", err)
	}
	if err := d.Set("keepalive_interval", "1752000h"); err == nil {
		t.Error("Set took 200 years")
	}
}
