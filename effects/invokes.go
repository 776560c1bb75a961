package effects

import (
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// invokes declares the blocking effects a state may invoke and the outcomes each can
// have; a state that invokes one must handle every outcome.
var invokes = map[string]machine.Invoke{
	"connect": {
		Doc:      "Dial the server, initialize a session and list its tools. If a session is live, the new one replaces it as calls' session, and the old one is left for retire.",
		Outcomes: []states.Trigger{states.Connected, states.ConnectFailed},
	},
	"probe": {
		Doc:      "Check the live session with a request that reaches the server (ping, or another request when ping is not implemented); if it answered, recycle a session older than max_session_age.",
		Outcomes: []states.Trigger{states.ProbeOK, states.ProbeFailed, states.Recycle},
	},
	"teardown": {
		Doc:      "Close the session, and the one it replaced if that is still open: gracefully until teardown_timeout, then by force (a stdio server is killed and reaped). A planned teardown first lets calls in flight finish.",
		Outcomes: []states.Trigger{states.TornDown},
	},
	"retire": {
		Doc:      "Close the session that connect replaced, once its calls in flight have finished: gracefully until teardown_timeout, then by force. The new session serves calls meanwhile.",
		Outcomes: []states.Trigger{states.Retired},
	},
}
