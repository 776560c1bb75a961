package simulate

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mcpfsm/mcpfsm/machine"
	yaml "go.yaml.in/yaml/v3"
)

// A Condition is what the simulated server is doing.
type Condition string

// The conditions of a simulated server.
const (
	Up      Condition = "up"      // answers everything
	Down    Condition = "down"    // refuses connections; a live stdio session dies
	Frozen  Condition = "frozen"  // accepts and never answers
	Restart Condition = "restart" // comes back at once knowing no session (an instant, not a lasting condition)
	Missing Condition = "missing" // cannot be started or reached as configured (a missing command): retrying cannot help
	Garbage Condition = "garbage" // answers with what is not MCP
)

// A Change is the server's condition from an instant on.
type Change struct {
	At        time.Duration // since the start
	Condition Condition     // up, down, frozen, restart, missing or garbage
}

// Calls describe the traffic a scenario sends through the connection.
type Calls struct {
	Every      time.Duration // 0: no calls
	Timeout    time.Duration // how long a call may wait for a ready connection
	Idempotent bool          // the tool is annotated read-only or idempotent
}

// A Scenario is a server's timeline and the calls made to it.
type Scenario struct {
	Name        string        // how it is called (dead-hour)
	Description string        // one line of what happens in it
	Duration    time.Duration // how much virtual time it covers
	// Transport says how a dying server shows: "stdio" (the client sees its process
	// exit at once) or "http" (it is found by a probe or a call).
	Transport string
	Timeline  []Change // sorted by At
	Calls     Calls    // the traffic sent through the connection (none when Every is 0)
	// Latencies of a healthy server.
	ConnectTime, ProbeTime, CallTime, CloseTime time.Duration
}

func (sc *Scenario) defaults() {
	if sc.Transport == "" {
		sc.Transport = "http"
	}
	if sc.ConnectTime == 0 {
		sc.ConnectTime = 20 * time.Millisecond
	}
	if sc.ProbeTime == 0 {
		sc.ProbeTime = 2 * time.Millisecond
	}
	if sc.CallTime == 0 {
		sc.CallTime = 5 * time.Millisecond
	}
	if sc.CloseTime == 0 {
		sc.CloseTime = 5 * time.Millisecond
	}
	if sc.Calls.Every > 0 && sc.Calls.Timeout == 0 {
		sc.Calls.Timeout = 30 * time.Second
	}
	sort.SliceStable(sc.Timeline, func(i, j int) bool { return sc.Timeline[i].At < sc.Timeline[j].At })
}

// Builtin returns the built-in scenarios, by name.
func Builtin() map[string]Scenario {
	var flapping []Change
	for at := 10 * time.Minute; at < 2*time.Hour; at += 10 * time.Minute {
		flapping = append(flapping, Change{at, Down}, Change{at + 2*time.Minute, Up})
	}
	var restarts []Change
	for at := 15 * time.Minute; at < time.Hour; at += 15 * time.Minute {
		restarts = append(restarts, Change{at, Restart})
	}
	list := []Scenario{
		{
			Name: "dead-hour", Description: "The server is dead for the first hour, then comes back; a call every minute.",
			Duration: 2 * time.Hour, Timeline: []Change{{0, Down}, {time.Hour, Up}},
			Calls: Calls{Every: time.Minute},
		},
		{
			Name: "flapping", Description: "The server goes down for two minutes every ten; a call every 30 seconds.",
			Duration: 2 * time.Hour, Timeline: append([]Change{{0, Up}}, flapping...),
			Calls: Calls{Every: 30 * time.Second},
		},
		{
			Name: "frozen-idle", Description: "The server freezes for five minutes while nobody calls, then thaws; one call after.",
			Duration: 30 * time.Minute, Timeline: []Change{{0, Up}, {10 * time.Minute, Frozen}, {15 * time.Minute, Up}},
			Calls: Calls{Every: 20 * time.Minute},
		},
		{
			Name: "restarts", Description: "The server restarts every 15 minutes and forgets its sessions; a call every 10 seconds.",
			Duration: time.Hour, Timeline: append([]Change{{0, Up}}, restarts...),
			Calls: Calls{Every: 10 * time.Second},
		},
		{
			Name: "missing-command", Description: "A stdio server's command is missing for two hours, then installed; a call every minute.",
			Duration: 3 * time.Hour, Transport: "stdio",
			Timeline: []Change{{0, Missing}, {2 * time.Hour, Up}},
			Calls:    Calls{Every: time.Minute},
		},
		{
			Name: "stdio-crashes", Description: "A stdio server crashes every 20 minutes and is respawned; a call every minute.",
			Duration: time.Hour, Transport: "stdio",
			Timeline: []Change{{0, Up}, {20 * time.Minute, Down}, {20*time.Minute + 5*time.Second, Up}, {40 * time.Minute, Down}, {40*time.Minute + 5*time.Second, Up}},
			Calls:    Calls{Every: time.Minute},
		},
	}
	out := map[string]Scenario{}
	for _, sc := range list {
		sc.defaults()
		out[sc.Name] = sc
	}
	return out
}

// BuiltinNames returns the names of the built-in scenarios, sorted.
func BuiltinNames() []string {
	var names []string
	for name := range Builtin() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// LoadFile reads a scenario file. Its format:
//
//	name: flapping-fast            # optional; the file name otherwise
//	description: ...               # optional
//	duration: 2h
//	transport: http                # or stdio; http by default
//	timeline:                      # the server's condition from each instant on
//	  - {at: 0s, server: up}
//	  - {at: 8m, server: down}     # up, down, frozen, restart (an instant), missing or garbage
//	repeat: 10m                    # optional: replay the changes before 10m every 10m
//	calls: {every: 30s, timeout: 10s, idempotent: false}   # optional
//	latency: {connect: 20ms, probe: 2ms, call: 5ms, close: 5ms}  # optional
//
// Every problem is reported with its file:line:column.
func LoadFile(path string) (Scenario, error) {
	data, err := machine.ReadFile(path)
	if err != nil {
		return Scenario{}, err
	}
	return Load(path, data)
}

// Load parses a scenario; name labels data in messages.
func Load(name string, data []byte) (Scenario, error) {
	r := &machine.YAMLReader{File: name}
	root := r.Parse(data)
	if root == nil {
		return Scenario{}, r.Err()
	}
	sc := Scenario{Name: strings.TrimSuffix(baseName(name), ".yaml")}
	top := r.Struct(root, "the scenario", "name", "description", "duration!", "transport", "timeline!", "repeat", "calls", "latency")
	str := func(key string) (string, *yaml.Node) {
		if f := top[key]; f.Value != nil {
			v, _ := r.String(f.Value, key)
			return v, f.Value
		}
		return "", nil
	}
	if v, _ := str("name"); v != "" {
		sc.Name = v
	}
	sc.Description, _ = str("description")
	sc.Duration = duration(r, top["duration"].Value, "duration", false)
	if v, n := str("transport"); n != nil {
		if v != "http" && v != "stdio" {
			r.Errorf(n, "transport %q is not http or stdio", v)
		}
		sc.Transport = v
	}
	if f := top["timeline"]; f.Value != nil {
		if f.Value.Kind != yaml.SequenceNode || len(f.Value.Content) == 0 {
			r.Errorf(f.Value, "timeline must be a list of changes, such as {at: 10m, server: down}")
		} else {
			for _, n := range f.Value.Content {
				ch := r.Struct(n, "a timeline change", "at!", "server!")
				c := Change{At: duration(r, ch["at"].Value, "at", true)}
				if v := ch["server"].Value; v != nil {
					s, _ := r.String(v, "server")
					switch Condition(s) {
					case Up, Down, Frozen, Restart, Missing, Garbage:
						c.Condition = Condition(s)
					default:
						r.Errorf(v, "server %q is not up, down, frozen, restart, missing or garbage", s)
					}
				}
				sc.Timeline = append(sc.Timeline, c)
			}
		}
	}
	if f := top["repeat"]; f.Value != nil {
		every := duration(r, f.Value, "repeat", false)
		switch {
		case every > 0 && sc.Duration/every > maxRepeats:
			r.Errorf(f.Value, "repeat %s replays the timeline more than %d times in %s: repeat less often", f.Value.Value, maxRepeats, sc.Duration)
		case every > 0 && sc.Duration > 0:
			sc.Timeline = repeat(sc.Timeline, every, sc.Duration)
		}
	}
	if f := top["calls"]; f.Value != nil {
		c := r.Struct(f.Value, "calls", "every!", "timeout", "idempotent")
		sc.Calls.Every = duration(r, c["every"].Value, "calls every", false)
		if every := sc.Calls.Every; every > 0 && sc.Duration/every > maxCalls {
			r.Errorf(c["every"].Value, "calls every %s makes more than %d calls in %s: call less often", c["every"].Value.Value, maxCalls, sc.Duration)
		}
		sc.Calls.Timeout = duration(r, c["timeout"].Value, "calls timeout", false)
		if v := c["idempotent"].Value; v != nil {
			sc.Calls.Idempotent, _ = r.Bool(v, "calls idempotent")
		}
	}
	if f := top["latency"]; f.Value != nil {
		l := r.Struct(f.Value, "latency", "connect", "probe", "call", "close")
		sc.ConnectTime = duration(r, l["connect"].Value, "latency connect", false)
		sc.ProbeTime = duration(r, l["probe"].Value, "latency probe", false)
		sc.CallTime = duration(r, l["call"].Value, "latency call", false)
		sc.CloseTime = duration(r, l["close"].Value, "latency close", false)
	}
	if err := r.Err(); err != nil {
		return Scenario{}, err
	}
	sc.defaults()
	return sc, nil
}

// maxRepeats and maxCalls bound the work a scenario file may ask for, so that a
// simulation of any file ends in seconds (a repeat or a call every nanosecond for 30
// days would run for days, the calls' answers filling memory).
const (
	maxRepeats = 100000
	maxCalls   = 1000000
)

// duration reads a duration; nil reads as 0. zero says whether 0 is allowed.
func duration(r *machine.YAMLReader, n *yaml.Node, what string, zero bool) time.Duration {
	if n == nil {
		return 0
	}
	s, ok := r.String(n, what)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	if s == "0" {
		d, err = 0, nil
	}
	switch {
	case err != nil:
		r.Errorf(n, "%s %q is not a duration (write it like 30s, 10m or 2h)", what, s)
	case d < 0 || d == 0 && !zero:
		r.Errorf(n, "%s %s must be positive", what, s)
	case d > 30*24*time.Hour:
		r.Errorf(n, "%s %s is more than 30 days", what, s)
	}
	return d
}

// repeat replays a timeline every period until the end.
func repeat(tl []Change, every, end time.Duration) []Change {
	var out []Change
	for base := time.Duration(0); base < end && len(out) < 100000; base += every {
		for _, c := range tl {
			if at := base + c.At; at < end && (base == 0 || c.At < every) {
				out = append(out, Change{at, c.Condition})
			}
		}
	}
	return out
}

func baseName(path string) string {
	if i := strings.LastIndexAny(path, `/\`); i >= 0 {
		return path[i+1:]
	}
	return path
}

// String describes the scenario on one line: a name or description from a file that
// holds a line break or another control character (a terminal's escape) is quoted.
// A scenario without a description (a file's is optional) ends at its transport.
func (sc Scenario) String() string {
	s := fmt.Sprintf("%s (%s, %s)", oneLine(sc.Name), sc.Duration, sc.Transport)
	if sc.Description == "" {
		return s
	}
	return s + ": " + oneLine(sc.Description)
}

// oneLine returns s, or s quoted Go-style if it holds a control character or is not
// UTF-8.
func oneLine(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return strconv.Quote(s)
	}
	return s
}
