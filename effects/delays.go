package effects

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
)

// delays are the named delay functions of timed transitions. Each draws its jitter
// from the machine's own random source.
var delays = map[string]machine.Delay{
	"keepalive": {
		Doc: "Time until the next probe: keepalive_interval shortened by up to keepalive_jitter of it, and counted from when the server was last heard from (a probe spared by a recent answer), so a frozen server is found within interval + probe_timeout. " +
			"A session's first probe comes after a delay drawn from the steady state of that schedule, so that connections opened together probe at the steady rate from the start rather than in lockstep. 0 disables probing.",
		Policy: "keepalive_interval",
		Next:   keepalive,
	},
	"backoff": {
		Doc:    "Time before the next connect attempt: backoff_base × backoff_multiplier^(attempts-1), at most backoff_max, then ± backoff_jitter of it (gRPC's connection backoff).",
		Policy: "backoff_base",
		Next:   backoff,
	},
	"cooldown": {
		Doc: "Time the breaker stays open: its current cooldown, shortened by up to breaker_cooldown_jitter of it " +
			"(never lengthened, so a server that returns is in use again within breaker_cooldown_max).",
		Policy: "breaker_cooldown",
		Next:   cooldown,
	},
}

func keepalive(v *machine.Vars, p *machine.Policies, r *rand.Rand) (time.Duration, bool) {
	every := p.KeepaliveInterval
	if every <= 0 {
		return 0, false
	}
	if !v.Probed {
		return firstProbe(every, p.KeepaliveJitter, r), true
	}
	return max(0, every-time.Duration(p.KeepaliveJitter*r.Float64()*float64(every))-v.Heard), true
}

// firstProbe draws the time to a session's first probe from the steady state of the
// later ones: the residual life of intervals drawn uniformly over [I(1-j), I], whose
// density is 1/μ up to I(1-j) and then falls linearly to 0 at I, where μ = I(1-j/2) is
// the mean interval. Sessions opened together then probe at the steady rate from the
// start. (Drawn uniformly within one interval, the first probes of its last tenth would
// meet the second probes of the sessions that probed first: twice the steady rate.)
func firstProbe(every time.Duration, j float64, r *rand.Rand) time.Duration {
	i := float64(every)
	flat := i * (1 - j)
	if r.Float64()*i*(1-j/2) < flat {
		return time.Duration(1 + r.Float64()*flat)
	}
	return max(1, time.Duration(i-j*i*math.Sqrt(r.Float64())))
}

func backoff(v *machine.Vars, p *machine.Policies, r *rand.Rand) (time.Duration, bool) {
	// At once rather than a multiplication per attempt: a connection may fail for
	// ever, and a multiplier of 1 never reaches the cap.
	d := p.BackoffMax
	if x := float64(p.BackoffBase) * math.Pow(p.BackoffMultiplier, float64(max(v.Attempts-1, 0))); x < float64(p.BackoffMax) {
		d = time.Duration(x)
	}
	return jitter(d, p.BackoffJitter, r), true
}

func cooldown(v *machine.Vars, p *machine.Policies, r *rand.Rand) (time.Duration, bool) {
	d := v.Cooldown
	if d <= 0 {
		d = p.BreakerCooldown
	}
	return max(0, d-time.Duration(p.BreakerCooldownJitter*r.Float64()*float64(d))), true
}

// jitter spreads d uniformly over d ± j·d, saturating at the longest duration rather
// than overflowing (a backoff_max near its maximum would otherwise wrap to a negative
// wait, taken as none).
func jitter(d time.Duration, j float64, r *rand.Rand) time.Duration {
	x := float64(d) * (1 + j*(2*r.Float64()-1))
	switch {
	case x >= float64(math.MaxInt64):
		return math.MaxInt64
	case x <= 0:
		return 0
	}
	return time.Duration(x)
}
