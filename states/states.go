// Package states is the vocabulary of an MCP connection's lifecycle: the names of its
// states, of the triggers that move it between them, and of the causes a failure can
// have. A lifecycle spec (transitions.yaml) may use only these names; what it decides is
// how they connect.
//
// The values are small integers so that they travel through the machine without
// allocating; their String methods give the names used in YAML, logs and graphs.
package states

// A State is one of the states a connection can be in.
type State uint8

// The states of a connection. The zero State is not a state.
const (
	Idle        State = iota + 1 // not connected, and not trying to be
	Connecting                   // dialing, initializing and listing tools
	Ready                        // a live session serves calls
	Probing                      // a live session serves calls while it is checked
	Replacing                    // a live session serves calls while a new one connects to take its place
	Retiring                     // the new session serves calls while the one it replaced finishes and closes
	TearingDown                  // the session is being closed
	BackingOff                   // waiting before the next connect attempt
	BreakerOpen                  // too many failures: calls fail fast until a cooldown ends
	HalfOpen                     // one trial connect after a cooldown
	Closed                       // closed for good; final
)

var stateNames = [...]string{
	Idle:        "idle",
	Connecting:  "connecting",
	Ready:       "ready",
	Probing:     "probing",
	Replacing:   "replacing",
	Retiring:    "retiring",
	TearingDown: "tearing-down",
	BackingOff:  "backing-off",
	BreakerOpen: "breaker-open",
	HalfOpen:    "half-open",
	Closed:      "closed",
}

// String returns the state's name as written in a spec, such as "breaker-open".
func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return "state(" + itoa(int(s)) + ")"
}

// MarshalText encodes s as its name, for JSON and other text formats.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Final reports whether nothing can leave s.
func (s State) Final() bool { return s == Closed }

// HasSession reports whether a connection in s holds a live session that calls may use.
func (s State) HasSession() bool {
	return s == Ready || s == Probing || s == Replacing || s == Retiring
}

// AllStates returns every state in declaration order.
func AllStates() []State {
	out := make([]State, 0, len(stateNames)-1)
	for s := Idle; s <= Closed; s++ {
		out = append(out, s)
	}
	return out
}

// ParseState returns the state with the given name.
func ParseState(name string) (State, bool) {
	for s := Idle; s <= Closed; s++ {
		if stateNames[s] == name {
			return s, true
		}
	}
	return 0, false
}

// A Trigger is a named event that may move a connection from one state to another.
// Timed transitions have no Trigger of their own: a spec declares them with "after".
type Trigger uint8

// The triggers. The zero Trigger is not a trigger.
const (
	Start         Trigger = iota + 1 // begin connecting
	Connected                        // outcome of connect: the session is initialized and its tools listed
	ConnectFailed                    // outcome of connect: it did not succeed
	ProbeOK                          // outcome of probe: the server answered
	ProbeFailed                      // outcome of probe: the server did not answer in time, or answered wrongly
	Recycle                          // a planned reconnect: asked for, or decided by a probe; spends no budget
	Lost                             // the session ended or a call found it broken
	TornDown                         // outcome of teardown: the session is closed
	Retired                          // outcome of retire: the replaced session is closed
	Close                            // close the connection for good
)

var triggerNames = [...]string{
	Start:         "start",
	Connected:     "connected",
	ConnectFailed: "connect_failed",
	ProbeOK:       "probe_ok",
	ProbeFailed:   "probe_failed",
	Recycle:       "recycle",
	Lost:          "lost",
	TornDown:      "torn_down",
	Retired:       "retired",
	Close:         "close",
}

// String returns the trigger's name as written in a spec, such as "connect_failed".
func (t Trigger) String() string {
	if int(t) < len(triggerNames) && triggerNames[t] != "" {
		return triggerNames[t]
	}
	return "trigger(" + itoa(int(t)) + ")"
}

// AllTriggers returns every trigger in declaration order.
func AllTriggers() []Trigger {
	out := make([]Trigger, 0, len(triggerNames)-1)
	for t := Start; t <= Close; t++ {
		out = append(out, t)
	}
	return out
}

// ParseTrigger returns the trigger with the given name.
func ParseTrigger(name string) (Trigger, bool) {
	for t := Start; t <= Close; t++ {
		if triggerNames[t] == name {
			return t, true
		}
	}
	return 0, false
}

// A Cause is the class of an error, decided once by the classifier in package effects.
// Only CauseLost, CauseTimeout and CauseExpired are failures of the connection: they count toward the
// retry budget and the breaker. The others are reported but spend nothing.
type Cause uint8

// The causes. The zero Cause means there was no error.
const (
	CauseNone     Cause = iota
	CauseArtifact       // noise from a teardown the machine asked for
	CauseLost           // the transport broke: the process died, the socket closed or was refused
	CauseTimeout        // the server did not answer within a policy's time
	CauseExpired        // the server no longer knows the session (HTTP 404 after a restart)
	CauseServer         // the server or a tool answered with an error: the connection is fine
	CauseAuth           // the server refused our credentials
	CauseProtocol       // the server spoke something that is not MCP
	CauseCanceled       // the caller gave up: not the connection's fault
)

var causeNames = [...]string{
	CauseNone:     "none",
	CauseArtifact: "artifact",
	CauseLost:     "lost",
	CauseTimeout:  "timeout",
	CauseExpired:  "expired",
	CauseServer:   "server",
	CauseAuth:     "auth",
	CauseProtocol: "protocol",
	CauseCanceled: "canceled",
}

// String returns the cause's name, such as "expired".
func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return "cause(" + itoa(int(c)) + ")"
}

// Counts reports whether c is a failure of the connection, one that spends retry budget
// and counts toward the breaker.
func (c Cause) Counts() bool { return c == CauseLost || c == CauseTimeout || c == CauseExpired }

// AllCauses returns every cause, CauseNone first.
func AllCauses() []Cause {
	out := make([]Cause, 0, len(causeNames))
	for c := CauseNone; c <= CauseCanceled; c++ {
		out = append(out, c)
	}
	return out
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [4]byte
	n := len(b)
	for i > 0 && n > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	return string(b[n:])
}
