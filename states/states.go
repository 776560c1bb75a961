package states

// A State is the name of a state, as a lifecycle spec declares it ("ready",
// "breaker-open"). Which states exist, and what each means for calls, is the spec's to
// say.
type State string

// The states of the default lifecycle, transitions.yaml.
const (
	Idle         State = "idle"         // not connected, and not trying to be
	Connecting   State = "connecting"   // dialing, initializing and restoring the session's state
	Ready        State = "ready"        // a live session serves calls
	Probing      State = "probing"      // a live session serves calls while it is checked
	Replacing    State = "replacing"    // a live session serves calls while a new one connects to take its place
	Retiring     State = "retiring"     // the new session serves calls while the one it replaced finishes and closes
	TearingDown  State = "tearing-down" // the session is being closed
	BackingOff   State = "backing-off"  // waiting before the next connect attempt
	BreakerOpen  State = "breaker-open" // too many failures: calls fail fast until a cooldown ends
	HalfOpen     State = "half-open"    // one trial connect after a cooldown
	Parked       State = "parked"       // a failure retrying cannot fix: calls fail fast, attempts are rare
	Unauthorized State = "unauthorized" // the server refused our credentials: calls fail fast until they change
	Closed       State = "closed"       // closed for good; final
)

// String returns the state's name.
func (s State) String() string { return string(s) }

// A Trigger is a named event that may move a connection from one state to another.
// Timed transitions have no Trigger of their own: a spec declares them with "after".
type Trigger uint8

// The triggers. The zero Trigger is not a trigger.
const (
	Start         Trigger = iota + 1 // begin connecting
	Connected                        // outcome of connect: the session is initialized and its state restored
	ConnectFailed                    // outcome of connect: it did not succeed
	ProbeOK                          // outcome of probe: the server answered
	ProbeFailed                      // outcome of probe: the server did not answer in time, or answered wrongly
	Recycle                          // a planned reconnect: asked for, or decided by a probe; spends no budget
	Lost                             // the session ended or a call found it broken
	TornDown                         // outcome of teardown: the session is closed
	Retired                          // outcome of retire: the replaced session is closed
	Close                            // close the connection for good
	Credentials                      // the credentials changed (a login, a new token): worth trying again
	Answered                         // a session that has lived a while answered a request: it is healthy
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
	Credentials:   "credentials",
	Answered:      "answered",
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
	for t := Start; int(t) < len(triggerNames); t++ {
		out = append(out, t)
	}
	return out
}

// ParseTrigger returns the trigger with the given name.
func ParseTrigger(name string) (Trigger, bool) {
	for t := Start; int(t) < len(triggerNames); t++ {
		if triggerNames[t] == name {
			return t, true
		}
	}
	return 0, false
}

// A Cause is the class of an error, decided once by the classifier in package effects.
// Only the causes whose Counts method says so are failures of the connection: they
// count toward the retry budget and the breaker. The others are reported but spend
// nothing.
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
	CauseProtocol       // the server's bytes are not MCP (garbage), or it failed the handshake
	CauseCanceled       // the caller gave up: not the connection's fault
	CauseConfig         // the server cannot be run or reached as configured: retrying cannot help
	CauseRequest        // the request cannot be sent as given (parameters JSON cannot encode, a log level that is not one, a subscription without a URI): the caller's mistake, nothing was sent
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
	CauseConfig:   "config",
	CauseRequest:  "request",
}

// String returns the cause's name, such as "expired".
func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return "cause(" + itoa(int(c)) + ")"
}

// MarshalText encodes c as its name, for JSON and other text formats.
func (c Cause) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText decodes a cause's name.
func (c *Cause) UnmarshalText(b []byte) error {
	v, ok := ParseCause(string(b))
	if !ok {
		return &unknownCauseError{string(b)}
	}
	*c = v
	return nil
}

type unknownCauseError struct{ name string }

func (e *unknownCauseError) Error() string { return "unknown cause " + e.name }

// ParseCause returns the cause with the given name.
func ParseCause(name string) (Cause, bool) {
	for c := CauseNone; int(c) < len(causeNames); c++ {
		if causeNames[c] == name {
			return c, true
		}
	}
	return 0, false
}

// Counts reports whether c is a failure of the connection, one that spends retry budget
// and counts toward the breaker: the transport was lost, the server timed out, it forgot
// the session, or what it sent was not MCP.
func (c Cause) Counts() bool {
	return c == CauseLost || c == CauseTimeout || c == CauseExpired || c == CauseProtocol
}

// Failure reports whether c is a failure at all, counting or not: anything but no
// error, an artifact of our own teardown, a caller that gave up, or a request the
// caller could not have sent.
func (c Cause) Failure() bool {
	return c != CauseNone && c != CauseArtifact && c != CauseCanceled && c != CauseRequest
}

// AllCauses returns every cause, CauseNone first.
func AllCauses() []Cause {
	out := make([]Cause, 0, len(causeNames))
	for c := CauseNone; int(c) < len(causeNames); c++ {
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
