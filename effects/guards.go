package effects

import (
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// guards route a transition. Each is pure. A spec negates one with "not", and two
// transitions on one trigger are mutually exclusive when one requires a guard that the
// other requires to be false. The guard "closing" is the engine's own. Books declares,
// for the validator, what a guard reads of the engine's books of failures; planned
// declares nothing (a planned teardown is asked for from outside), so it bounds no loop.
var guards = map[string]machine.Guard{
	"planned": {
		Doc:  "The teardown under way was asked for (a reconnect, a recycle decided by a probe) and no failure has been counted since.",
		Test: func(v *machine.Vars, _ *machine.Policies) bool { return v.Planned },
	},
	"tripped": {
		Doc:   "Failures have reached breaker_threshold.",
		Test:  func(v *machine.Vars, p *machine.Policies) bool { return v.Failures >= p.BreakerThreshold },
		Books: machine.Books{Tripped: true},
	},
	"unfixable": {
		Doc:   "The last failure cannot be fixed by retrying (cause config): the command does not exist or cannot run, or the URL is not an MCP endpoint.",
		Test:  func(v *machine.Vars, _ *machine.Policies) bool { return v.LastCause == states.CauseConfig },
		Books: machine.Books{LastCause: []states.Cause{states.CauseConfig}},
	},
	"unauthorized": {
		Doc:   "The last failure was the server refusing our credentials (cause auth): retrying with the same ones cannot help.",
		Test:  func(v *machine.Vars, _ *machine.Policies) bool { return v.LastCause == states.CauseAuth },
		Books: machine.Books{LastCause: []states.Cause{states.CauseAuth}},
	},
	"garbled": {
		Doc: "The last breaker_threshold failures in a row were all protocol errors: the server keeps sending what is not MCP.",
		Test: func(v *machine.Vars, p *machine.Policies) bool {
			return v.LastCause == states.CauseProtocol && v.Streak >= p.BreakerThreshold
		},
		Books: machine.Books{Streak: states.CauseProtocol},
	},
}
