package effects

import (
	"context"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// Effects carries out the invoked effects of this package's registry. The live
// connection (package mcpfsm) and the simulated world (package simulate) implement it;
// each method runs on the machine's owner, one at a time, under a context that ends at
// the effect's timeout or when Close interrupts it, and returns one of the effect's
// outcomes.
type Effects interface {
	// Connect opens a session when there is none: dial, initialize, restore what the
	// user established on the last session, list what is listened for.
	Connect(ctx context.Context, inv machine.Invocation) machine.Event
	// Replace opens a session to take the place of the live one, which serves calls
	// meanwhile (make before break); on success calls move to the new one and the old
	// one is left for Retire.
	Replace(ctx context.Context, inv machine.Invocation) machine.Event
	// Probe checks the live session with a request that reaches the server.
	Probe(ctx context.Context, inv machine.Invocation) machine.Event
	// Teardown closes the live session (and a replaced one not yet retired).
	Teardown(ctx context.Context, inv machine.Invocation) machine.Event
	// Retire closes the session Replace replaced, once its calls have finished.
	Retire(ctx context.Context, inv machine.Invocation) machine.Event
}

// invokes is the one table from each invoked effect's name to its code, and the
// outcomes it can have; a state that invokes one must handle every outcome. Each Run
// calls its method of the machine's Effects, which must implement Effects (package
// mcpfsm and package simulate give ones that do, and the compiler checks them). The
// calls are written out rather than made by a helper over method expressions: that
// helper cost a call and a copy of the invocation on every effect the owner runs.
var invokes = map[string]machine.Invoke{
	"connect": {
		Doc:      "Dial the server, initialize a session, restore what the user established on the last one (log level, subscriptions) and list what is listened for; calls use it from then on.",
		Outcomes: []states.Trigger{states.Connected, states.ConnectFailed},
		Fails:    []states.Trigger{states.ConnectFailed},
		Run: func(ctx context.Context, fx machine.Effects, inv machine.Invocation) machine.Event {
			return fx.(Effects).Connect(ctx, inv)
		},
	},
	"replace": {
		Doc:      "Connect a new session while the live one serves calls (make before break); once it is up and restored, calls move to it and the old one is left for retire.",
		Outcomes: []states.Trigger{states.Connected, states.ConnectFailed},
		Fails:    []states.Trigger{states.ConnectFailed},
		Run: func(ctx context.Context, fx machine.Effects, inv machine.Invocation) machine.Event {
			return fx.(Effects).Replace(ctx, inv)
		},
	},
	"probe": {
		Doc:      "Check the live session with a request that reaches the server (ping, or another request when ping is not implemented), unless a call answered within the keepalive interval; if it answered, recycle a session older than max_session_age.",
		Outcomes: []states.Trigger{states.ProbeOK, states.ProbeFailed, states.Recycle},
		Fails:    []states.Trigger{states.ProbeFailed},
		Run: func(ctx context.Context, fx machine.Effects, inv machine.Invocation) machine.Event {
			return fx.(Effects).Probe(ctx, inv)
		},
	},
	"teardown": {
		Doc:      "Close the session, and the one it replaced if that is still open: gracefully until teardown_timeout, then by force (a stdio server is killed and reaped). A planned teardown first lets calls in flight finish.",
		Outcomes: []states.Trigger{states.TornDown},
		Run: func(ctx context.Context, fx machine.Effects, inv machine.Invocation) machine.Event {
			return fx.(Effects).Teardown(ctx, inv)
		},
	},
	"retire": {
		Doc:      "Close the session that replace replaced, once its calls in flight have finished: gracefully until teardown_timeout, then by force. The new session serves calls meanwhile.",
		Outcomes: []states.Trigger{states.Retired},
		Run: func(ctx context.Context, fx machine.Effects, inv machine.Invocation) machine.Event {
			return fx.(Effects).Retire(ctx, inv)
		},
	},
}
