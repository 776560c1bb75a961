package effects

import "github.com/mcpfsm/mcpfsm/machine"

// guards route a transition. Each is pure. A spec negates one with "not", and two
// transitions on one trigger are mutually exclusive when one requires a guard that the
// other requires to be false.
var guards = map[string]machine.Guard{
	"closing": {
		Doc:  "Close was asked for.",
		Test: func(v *machine.Vars, _ *machine.Policies) bool { return v.Closing },
	},
	"planned": {
		Doc:  "The teardown under way was asked for (a reconnect, a recycle decided by a probe) and no failure has been counted since.",
		Test: func(v *machine.Vars, _ *machine.Policies) bool { return v.Planned },
	},
	"tripped": {
		Doc:  "Failures have reached breaker_threshold.",
		Test: func(v *machine.Vars, p *machine.Policies) bool { return v.Failures >= p.BreakerThreshold },
	},
}
