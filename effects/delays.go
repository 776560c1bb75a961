package effects

import (
	"math/rand/v2"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
)

// delays are the named delay functions of timed transitions. Each draws its jitter
// from the machine's own random source.
var delays = map[string]machine.Delay{
	"keepalive": {
		Doc: "Time until the next probe: keepalive_interval shortened by up to keepalive_jitter of it, so a frozen server is found within interval + probe_timeout. " +
			"A session's first probe comes at a uniformly random point within one interval, so that connections opened together do not probe in lockstep. 0 disables probing.",
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
		return time.Duration(1 + r.Int64N(int64(every))), true
	}
	return every - time.Duration(p.KeepaliveJitter*r.Float64()*float64(every)), true
}

func backoff(v *machine.Vars, p *machine.Policies, r *rand.Rand) (time.Duration, bool) {
	d := p.BackoffBase
	for i := 1; i < v.Attempts && d < p.BackoffMax; i++ {
		d = scale(d, p.BackoffMultiplier)
	}
	d = min(d, p.BackoffMax)
	return jitter(d, p.BackoffJitter, r), true
}

func cooldown(v *machine.Vars, p *machine.Policies, r *rand.Rand) (time.Duration, bool) {
	d := v.Cooldown
	if d <= 0 {
		d = p.BreakerCooldown
	}
	return d - time.Duration(p.BreakerCooldownJitter*r.Float64()*float64(d)), true
}

// jitter spreads d uniformly over d ± j·d.
func jitter(d time.Duration, j float64, r *rand.Rand) time.Duration {
	return max(0, time.Duration(float64(d)*(1+j*(2*r.Float64()-1))))
}
