package effects

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func policies() *machine.Policies {
	return &machine.Policies{
		KeepaliveInterval: 30 * time.Second, KeepaliveJitter: 0.1,
		BackoffBase: time.Second, BackoffMultiplier: 1.6, BackoffJitter: 0.2, BackoffMax: 2 * time.Minute,
		BreakerThreshold: 5, BreakerCooldown: 15 * time.Second, BreakerCooldownMultiplier: 2,
		BreakerCooldownJitter: 0.1, BreakerCooldownMax: 6 * time.Minute,
	}
}

func TestBackoffGrowsToItsCap(t *testing.T) {
	p := policies()
	r := rand.New(rand.NewPCG(1, 1))
	want := float64(time.Second)
	for attempts := 1; attempts <= 20; attempts++ {
		for range 200 {
			d, ok := backoff(&machine.Vars{Attempts: attempts}, p, r)
			lo, hi := time.Duration(want*0.8), time.Duration(want*1.2)
			if !ok || d < lo || d > hi {
				t.Fatalf("attempt %d: backoff %v, want within [%v, %v]", attempts, d, lo, hi)
			}
		}
		want = min(want*1.6, float64(p.BackoffMax))
	}
}

func TestKeepalive(t *testing.T) {
	p := policies()
	r := rand.New(rand.NewPCG(1, 2))
	var first []time.Duration
	for range 10000 {
		d, ok := keepalive(&machine.Vars{}, p, r)
		if !ok || d <= 0 || d > p.KeepaliveInterval {
			t.Fatalf("first probe after %v, want within (0, %v]", d, p.KeepaliveInterval)
		}
		first = append(first, d)
		d, _ = keepalive(&machine.Vars{Probed: true}, p, r)
		if d < 27*time.Second || d > 30*time.Second {
			t.Fatalf("next probe after %v, want within [27s, 30s]", d)
		}
	}
	// The first probes follow the steady state of the schedule: evenly over the first
	// nine tenths (1/0.95 of a tenth each), half as dense over the last, which the later
	// probes, at most 10% early, reach only some of the time.
	var tenths [10]int
	for _, d := range first {
		tenths[min(9, int(d*10/p.KeepaliveInterval))]++
	}
	for i, n := range tenths {
		want := 10000 * 0.1 / 0.95
		if i == 9 {
			want /= 2
		}
		if float64(n) < want*0.85 || float64(n) > want*1.15 {
			t.Errorf("tenth %d of the interval holds %d of 10000 first probes, want about %.0f", i, n, want)
		}
	}
	p.KeepaliveInterval = 0
	if _, ok := keepalive(&machine.Vars{}, p, r); ok {
		t.Error("keepalive interval 0 does not disable probing")
	}
}

func TestBreakerCooldownGrowsAndResets(t *testing.T) {
	p := policies()
	v := &machine.Vars{}
	var got []time.Duration
	for range 8 {
		actions["open_breaker"].Do(v, p, time.Time{})
		got = append(got, v.Cooldown)
	}
	want := []time.Duration{15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 6 * time.Minute, 6 * time.Minute, 6 * time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("cooldowns = %v, want %v", got, want)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		if d, _ := cooldown(v, p, r); d < 324*time.Second || d > 360*time.Second {
			t.Fatalf("cooldown %v outside [6m - 10%%, 6m]: jitter only shortens it", d)
		}
	}
	v.Failures = 7
	actions["healthy"].Do(v, p, time.Time{})
	if v.Cooldown != 0 || v.Failures != 0 {
		t.Errorf("healthy left %+v", v)
	}
}

func TestGuards(t *testing.T) {
	p := policies()
	v := &machine.Vars{Failures: 4}
	if guards["tripped"].Test(v, p) {
		t.Error("tripped below the threshold")
	}
	v.Failures = 5
	if !guards["tripped"].Test(v, p) {
		t.Error("not tripped at the threshold")
	}
	actions["plan_recycle"].Do(v, p, time.Time{})
	if !guards["planned"].Test(v, p) {
		t.Errorf("guards after plan_recycle: %+v", v)
	}
	actions["end_teardown"].Do(v, p, time.Time{})
	if guards["planned"].Test(v, p) {
		t.Error("planned after end_teardown")
	}
	if _, ok := guards["closing"]; ok {
		t.Error("closing is the engine's guard, not the registry's")
	}
	for _, c := range []struct {
		guard string
		v     machine.Vars
		want  bool
	}{
		{"unfixable", machine.Vars{LastCause: states.CauseConfig}, true},
		{"unfixable", machine.Vars{LastCause: states.CauseLost}, false},
		{"unauthorized", machine.Vars{LastCause: states.CauseAuth}, true},
		{"unauthorized", machine.Vars{LastCause: states.CauseServer}, false},
		{"garbled", machine.Vars{LastCause: states.CauseProtocol, Streak: 5}, true},
		{"garbled", machine.Vars{LastCause: states.CauseProtocol, Streak: 4}, false},
		{"garbled", machine.Vars{LastCause: states.CauseLost, Streak: 9}, false},
	} {
		if got := guards[c.guard].Test(&c.v, p); got != c.want {
			t.Errorf("%s(%+v) = %v", c.guard, c.v, got)
		}
	}
}

// TestRegistryIsDocumented: every name a spec may use says what it does.
func TestRegistryIsDocumented(t *testing.T) {
	reg := Registry()
	for name, g := range reg.Guards {
		if g.Doc == "" || g.Test == nil {
			t.Errorf("guard %s", name)
		}
	}
	for name, a := range reg.Actions {
		if a.Doc == "" || a.Do == nil {
			t.Errorf("action %s", name)
		}
	}
	for name, d := range reg.Delays {
		if _, ok := machine.LookupPolicy(d.Policy); d.Doc == "" || d.Next == nil || !ok {
			t.Errorf("delay %s", name)
		}
	}
	for name, i := range reg.Invokes {
		if i.Doc == "" || len(i.Outcomes) == 0 || i.Run == nil {
			t.Errorf("invoke %s", name)
		}
	}
}

// TestBackoffFromANanosecond: a backoff_base or breaker_cooldown of 1ns grows as the
// policies say (each step was truncated back to 1ns: the machine retried a dead server
// every millisecond for ever); and the backoff of a connection that has failed for
// ever (2^40 attempts) is computed at once (one multiplication per attempt, when a
// backoff_multiplier of 1 never reached backoff_max).
func TestBackoffFromANanosecond(t *testing.T) {
	p := policies()
	p.BackoffBase, p.BackoffJitter = time.Nanosecond, 0
	r := rand.New(rand.NewPCG(1, 1))
	if d, _ := backoff(&machine.Vars{Attempts: 100}, p, r); d != p.BackoffMax {
		t.Errorf("backoff from 1ns, attempt 100 = %s, want backoff_max %s", d, p.BackoffMax)
	}
	v := machine.Vars{}
	p.BreakerCooldown = time.Nanosecond
	p.BreakerCooldownMultiplier = 1.5
	for range 100 {
		actions["open_breaker"].Do(&v, p, time.Time{})
	}
	if v.Cooldown != p.BreakerCooldownMax {
		t.Errorf("cooldown from 1ns after 100 trips = %s, want breaker_cooldown_max %s", v.Cooldown, p.BreakerCooldownMax)
	}
	p = policies()
	p.BackoffMultiplier, p.BackoffJitter = 1, 0
	start := time.Now()
	if d, _ := backoff(&machine.Vars{Attempts: 1 << 40}, p, r); d != p.BackoffBase {
		t.Errorf("backoff with multiplier 1 = %s, want backoff_base %s", d, p.BackoffBase)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("one backoff took %s", took)
	}
}

// TestGuardBooks: what each guard declares of the engine's books (Guard.Books, which
// the validator's check of loops without a pause relies on) is exactly what its Test
// computes, over every last cause, count and streak around the threshold; and the
// guards that bound loops declare it.
func TestGuardBooks(t *testing.T) {
	declared := map[string]bool{}
	for name, g := range guards {
		b := g.Books
		if len(b.LastCause) == 0 && !b.Tripped && b.Streak == states.CauseNone {
			continue
		}
		declared[name] = true
		for _, threshold := range []int{1, 2, 5} {
			p := policies()
			p.BreakerThreshold = threshold
			for _, last := range states.AllCauses() {
				for failures := range threshold + 2 {
					for streak := range threshold + 2 {
						v := &machine.Vars{LastCause: last, Failures: failures, Streak: streak}
						var want bool
						switch {
						case len(b.LastCause) > 0:
							want = slices.Contains(b.LastCause, last)
						case b.Tripped:
							want = failures >= threshold
						default:
							want = last == b.Streak && streak >= threshold
						}
						if got := g.Test(v, p); got != want {
							t.Errorf("%s with %+v, breaker_threshold %d: Test says %v, its Books %+v say %v", name, *v, threshold, got, b, want)
						}
					}
				}
			}
		}
	}
	for _, name := range []string{"tripped", "unfixable", "unauthorized", "garbled"} {
		if !declared[name] {
			t.Errorf("guard %s declares nothing of the books: it would bound no loop", name)
		}
	}
	if declared["planned"] {
		t.Error("planned declares books: a planned teardown is asked for from outside")
	}
}

// TestFailedOutcomes: the outcomes that report a failure are declared so (the
// validator takes the others to carry no cause), and only those.
func TestFailedOutcomes(t *testing.T) {
	want := map[string][]states.Trigger{
		"connect": {states.ConnectFailed}, "replace": {states.ConnectFailed}, "probe": {states.ProbeFailed},
	}
	for name, inv := range invokes {
		if !slices.Equal(inv.Fails, want[name]) {
			t.Errorf("%s: Fails = %v, want %v", name, inv.Fails, want[name])
		}
		for _, tr := range inv.Fails {
			if !slices.Contains(inv.Outcomes, tr) {
				t.Errorf("%s: %s in Fails is not an outcome", name, tr)
			}
		}
	}
}
