package effects

import (
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
)

// actions keep the machine's books. They run on the owner as it takes a
// transition, and never block. Failures are not counted here: the machine counts an
// event whose cause counts as it applies it, whatever the spec says.
var actions = map[string]machine.Action{
	"plan_recycle": {
		Doc: "The teardown that follows was asked for: it spends no budget.",
		Do:  func(v *machine.Vars, _ *machine.Policies, _ time.Time) { v.Planned = true },
	},
	"end_teardown": {
		Doc: "The teardown is over: forget whether it was planned.",
		Do:  func(v *machine.Vars, _ *machine.Policies, _ time.Time) { v.Planned = false },
	},
	"count_attempt": {
		Doc: "One more pass through backing off: the next backoff is longer.",
		Do:  func(v *machine.Vars, _ *machine.Policies, _ time.Time) { v.Attempts++ },
	},
	"session_up": {
		Doc: "A session came up: backoff starts over, and the session's age and first probe are reckoned from now.",
		Do: func(v *machine.Vars, _ *machine.Policies, now time.Time) {
			v.Attempts = 0
			v.SessionStart = now
			v.Probed = false
		},
	},
	"healthy": {
		Doc: "The connection proved healthy: failures (and any streak of them) are forgotten and the breaker's cooldown starts over.",
		Do: func(v *machine.Vars, _ *machine.Policies, _ time.Time) {
			v.Failures = 0
			v.Streak = 0
			v.Cooldown = 0
		},
	},
	"probed": {
		Doc: "The session answered a probe: later probes keep the regular interval.",
		Do:  func(v *machine.Vars, _ *machine.Policies, _ time.Time) { v.Probed = true },
	},
	"open_breaker": {
		Doc: "The breaker opens: its cooldown is breaker_cooldown the first time, and grows by breaker_cooldown_multiplier each time a trial fails, up to breaker_cooldown_max.",
		Do: func(v *machine.Vars, p *machine.Policies, _ time.Time) {
			if v.Cooldown == 0 {
				v.Cooldown = p.BreakerCooldown
				return
			}
			v.Cooldown = min(scale(v.Cooldown, p.BreakerCooldownMultiplier), p.BreakerCooldownMax)
		},
	},
}

// scale multiplies d by f, saturating rather than overflowing; a factor over 1 adds at
// least a nanosecond (1ns × 1.5, truncated, was 1ns for ever).
func scale(d time.Duration, f float64) time.Duration {
	x := float64(d) * f
	if x >= float64(1<<62) {
		return 1 << 62
	}
	if f > 1 && time.Duration(x) <= d {
		return d + 1
	}
	return time.Duration(x)
}
