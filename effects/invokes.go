package effects

import (
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// invokes declares the blocking effects a state may invoke and the outcomes each can
// have; a state that invokes one must handle every outcome.
var invokes = map[string]machine.Invoke{
	"connect": {
		Doc:      "Dial the server, initialize a session and list its tools.",
		Outcomes: []states.Trigger{states.Connected, states.ConnectFailed},
	},
	"probe": {
		Doc:      "Check the live session with a request that reaches the server (ping, or another request when ping is not implemented); recycle a session older than max_session_age.",
		Outcomes: []states.Trigger{states.ProbeOK, states.ProbeFailed, states.Recycle},
	},
	"teardown": {
		Doc:      "Close the session: gracefully until teardown_timeout, then by force (a stdio server is killed and reaped).",
		Outcomes: []states.Trigger{states.TornDown},
	},
}
