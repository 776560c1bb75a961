package mcpfsm

import (
	"encoding/json"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A Status is what a connection can say of itself at once: where it is, what last
// worked and what last failed, and what it will do next. Reading one takes a few atomic
// loads and holds no lock across I/O. It encodes to JSON with stable field names.
type Status struct {
	Server string `json:"server"` // the server's name
	// Transport is how the server is reached: stdio, http, sse or inmemory.
	Transport string       `json:"transport"`
	State     states.State `json:"state"` // the lifecycle state the connection is in
	// Calls is what a call does in State: serve, wait or fail ("" once closed).
	Calls machine.CallMode `json:"calls,omitempty"`
	Since time.Time        `json:"since"` // when the connection entered State
	// LastSuccess is the last time a request (a caller's, or a probe) was answered.
	LastSuccess *Success `json:"lastSuccess,omitempty"`
	// LastFailure is the last failure: its cause, its message (capped, without
	// secrets), and when.
	LastFailure *FailureStatus `json:"lastFailure,omitempty"`
	// Failures counts the failures toward the breaker since the connection was last
	// healthy; BreakerThreshold is where it opens.
	Failures         int `json:"failures"`
	BreakerThreshold int `json:"breakerThreshold"`
	// Next is the next move the connection has scheduled (a probe, a retry, the end of
	// a cooldown), if any.
	Next *NextMove `json:"next,omitempty"`
	// Session is the session calls use, if one is up.
	Session *SessionStatus `json:"session,omitempty"`
	// ActionNeeded says that the connection will not recover by itself: its calls
	// fail fast because of a failure that retrying cannot fix, a config that cannot
	// work (cause config: a missing command, a URL that is not MCP) or credentials
	// the server refused (cause auth). It still re-checks now and then
	// (park_interval, auth_recheck_interval), but what brings it back is a fixed
	// config or new credentials, then a reload or Reconnect. Action says which.
	ActionNeeded bool   `json:"actionNeeded"`
	Action       string `json:"action,omitempty"`
}

// actionFor returns what a person must do for a connection whose calls are in mode
// with last as its last failure, or "" when it recovers by itself.
func actionFor(mode machine.CallMode, last *machine.Failure) string {
	if mode != machine.FailFast || last == nil {
		return ""
	}
	switch last.Cause {
	case states.CauseConfig:
		return "fix the server's config (command, URL), then reload"
	case states.CauseAuth:
		return "renew the server's credentials, then reload"
	}
	return ""
}

// A Success is a request that was answered.
type Success struct {
	At   time.Time `json:"at"`
	What string    `json:"what"` // "call" (a caller's request) or "probe"
}

// A FailureStatus is a failure, as a status shows it.
type FailureStatus struct {
	Cause   states.Cause `json:"cause"`
	Message string       `json:"message"`
	At      time.Time    `json:"at"`
}

// A NextMove is a timed transition the connection has armed.
type NextMove struct {
	What string    `json:"what"` // the transition, such as "after backoff"
	At   time.Time `json:"at"`
}

// A SessionStatus describes the session calls use.
type SessionStatus struct {
	ID       string        `json:"id,omitempty"` // the MCP session ID's first characters (see sessionTag); "" for stdio and some others
	Started  time.Time     `json:"started"`
	Age      time.Duration `json:"age"`
	InFlight int64         `json:"inFlight"` // requests in flight on it
	Server   ServerInfo    `json:"server"`   // what the server said of itself, bounded (see statusInfo)
}

// MarshalJSON writes Age as a string ("1m30s").
func (s SessionStatus) MarshalJSON() ([]byte, error) {
	type plain SessionStatus
	return json.Marshal(struct {
		plain
		Age string `json:"age"`
	}{plain(s), s.Age.Round(time.Millisecond).String()})
}

// success is the last success a Conn saw: UnixNano and whether it was a probe.
type success struct {
	at    atomic.Int64
	probe atomic.Bool
}

func (s *success) note(at time.Time, probe bool) {
	s.probe.Store(probe)
	s.at.Store(at.UnixNano())
}

// Status says at once, from a few atomic loads, what the connection is doing: its
// state and since when, its last success and last failure, the failures counted toward
// the breaker, its next scheduled move, its session, and whether a person must act.
func (c *Conn) Status() Status {
	ms := c.m.Status()
	st := Status{
		Server: c.name, Transport: transportKind(c.cfg.Load().cfg), State: ms.State, Calls: ms.Calls, Since: ms.Since,
		Failures: ms.Failures, BreakerThreshold: c.m.Policies().BreakerThreshold,
	}
	st.Action = actionFor(ms.Calls, ms.LastFailure)
	st.ActionNeeded = st.Action != ""
	if at := c.ok.at.Load(); at != 0 {
		what := "call"
		if c.ok.probe.Load() {
			what = "probe"
		}
		st.LastSuccess = &Success{At: time.Unix(0, at), What: what}
	}
	if f := ms.LastFailure; f != nil {
		st.LastFailure = &FailureStatus{Cause: f.Cause, Message: machine.ErrorText(f.Err), At: f.At}
	}
	if !ms.Next.IsZero() {
		st.Next = &NextMove{What: ms.NextEdge, At: ms.Next}
	}
	if s := c.current.Load(); s != nil {
		info, _ := c.Server()
		info = statusInfo(info)
		st.Session = &SessionStatus{ID: info.SessionID, Started: s.start, Age: time.Since(s.start), InFlight: s.inflight.Load(), Server: info}
	}
	return st
}

// sessionTag is what a status shows of an MCP session ID: its first characters (at
// most 8, and half of it), enough to find it in a server's log. The whole ID lets
// whoever reaches the server send requests in the session, and a status is shown
// to others (the live page, mcpfsm status, the gateway's status resource).
func sessionTag(id string) string {
	if id == "" {
		return ""
	}
	return id[:min(8, len(id)/2)] + "…"
}

// What a status shows of a server's own words, at most: a status is read again and
// again (the live page every second, /status, the gateway's status resource, which
// a host's model may read), and a server may say megabytes of itself.
const (
	maxStatusInstructions = 8 << 10 // bytes of the instructions
	maxStatusName         = 200     // bytes of each of the implementation's texts
	maxStatusExtra        = 8 << 10 // bytes of JSON of experimental or extensions
)

// statusInfo is what a status shows of info: the session ID's tag (see sessionTag),
// the instructions and the implementation's texts cut (marked with "…"), its icons
// left out, and the capabilities' experimental and extensions left out when either
// is larger than maxStatusExtra.
func statusInfo(info ServerInfo) ServerInfo {
	info.SessionID = sessionTag(info.SessionID)
	info.Instructions = cutText(info.Instructions, maxStatusInstructions)
	if impl := info.Implementation; impl != nil {
		info.Implementation = &mcp.Implementation{
			Name: cutText(impl.Name, maxStatusName), Title: cutText(impl.Title, maxStatusName),
			Description: cutText(impl.Description, maxStatusName), Version: cutText(impl.Version, maxStatusName),
			WebsiteURL: cutText(impl.WebsiteURL, maxStatusName),
		}
	}
	if caps := info.Capabilities; caps != nil && (jsonOver(caps.Experimental, maxStatusExtra) < 0 || jsonOver(caps.Extensions, maxStatusExtra) < 0) {
		c := *caps
		if jsonOver(c.Experimental, maxStatusExtra) < 0 {
			c.Experimental = nil
		}
		if jsonOver(c.Extensions, maxStatusExtra) < 0 {
			c.Extensions = nil
		}
		info.Capabilities = &c
	}
	return info
}

// cutText shortens s to at most n bytes, at a rune's start, marking the cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// jsonOver returns budget less about the size of v's JSON (as decoded: maps, slices,
// strings, numbers), stopping once it is negative: walking a value costs at most
// budget steps.
func jsonOver[M ~map[string]any](v M, budget int) int {
	var walk func(v any, budget int) int
	walk = func(v any, budget int) int {
		switch x := v.(type) {
		case string:
			return budget - len(x) - 2
		case map[string]any:
			budget -= 2
			for k, e := range x {
				if budget = walk(e, budget-len(k)-4); budget < 0 {
					return budget
				}
			}
			return budget
		case []any:
			budget -= 2
			for _, e := range x {
				if budget = walk(e, budget-1); budget < 0 {
					return budget
				}
			}
			return budget
		}
		return budget - 8
	}
	return walk(map[string]any(v), budget)
}

// transportKind names the transport of cfg.
func transportKind(cfg transport.Config) string {
	switch {
	case cfg.Stdio != nil:
		return "stdio"
	case cfg.HTTP != nil:
		return "http"
	case cfg.SSE != nil:
		return "sse"
	case cfg.InMemory != nil:
		return "inmemory"
	}
	return ""
}
