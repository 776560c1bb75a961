package simulate_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/simulate"
	"github.com/mcpfsm/mcpfsm/states"
)

// TestScenarioWorkBounded: a scenario file that asks for unbounded work (a repeat or
// a call every nanosecond for days) is refused at its file:line:col, at once; it ran
// for hours, ignoring SIGTERM, and filled memory.
func TestScenarioWorkBounded(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"calls every 1ns", "duration: 1h\ntimeline: [{at: 0s, server: up}]\ncalls: {every: 1ns, timeout: 1ns}\n",
			"s.yaml:3:16: calls every 1ns makes more than 1000000 calls in 1h0m0s: call less often"},
		{"repeat 1ns, nothing to repeat", "duration: 720h\ntimeline: [{at: 1h, server: down}]\nrepeat: 1ns\n",
			"s.yaml:3:9: repeat 1ns replays the timeline more than 100000 times in 720h0m0s: repeat less often"},
		{"repeat 2ns", "duration: 720h\ntimeline: [{at: 0s, server: down}, {at: 1ns, server: up}]\nrepeat: 2ns\n",
			"s.yaml:3:9: repeat 2ns replays the timeline more than 100000 times in 720h0m0s: repeat less often"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := simulate.Load("s.yaml", []byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
	// Within the bounds: a month, a call every 3 seconds, a change every 5 minutes
	// (7.5 s to simulate, at most).
	if _, err := simulate.Load("s.yaml", []byte("duration: 720h\ntimeline: [{at: 0s, server: up}, {at: 1m, server: down}]\nrepeat: 10m\ncalls: {every: 3s}\n")); err != nil {
		t.Fatal(err)
	}
}

// TestSimulationBounded: a spec whose timers fire every millisecond (probes of 1ms)
// stops at MaxTransitions and says so; a month of it filled memory (1.4 GB an hour).
func TestSimulationBounded(t *testing.T) {
	data, err := os.ReadFile("../transitions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fast := strings.Replace(string(data), "keepalive_interval:\n    default: 30s", "keepalive_interval:\n    default: 1ms", 1)
	fast = strings.Replace(fast, "probe_timeout:\n    default: 5s", "probe_timeout:\n    default: 1ms", 1)
	spec, err := machine.LoadSpec("fast.yaml", []byte(fast), effects.Registry())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := simulate.Load("s.yaml", []byte("duration: 720h\ntimeline: [{at: 0s, server: up}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	res := simulate.Run(spec, nil, sc, 1)
	if n := len(res.Transitions); n > simulate.MaxTransitions {
		t.Fatalf("%d transitions, more than %d", n, simulate.MaxTransitions)
	}
	if s := res.Summary.Stopped; s <= 0 || s >= sc.Duration {
		t.Errorf("Stopped = %s, want the instant it stopped, within the 720h", s)
	}
	var b strings.Builder
	res.WriteSummary(&b)
	if !strings.Contains(b.String(), "stopped:            at ") {
		t.Errorf("the summary does not say it stopped:\n%s", b.String())
	}
}

// TestScenarioTextEscaped: a scenario's name (its file's, by default) and description
// are written on the summary's one line, control characters quoted: a terminal's
// escapes, or a line break forging a line of the summary, went out as they were.
func TestScenarioTextEscaped(t *testing.T) {
	sc, err := simulate.Load("dir/s\x1b]0;x\x07.yaml", []byte("description: \"calm\\ncalls:              0 made \\e[2J\"\nduration: 1m\ntimeline: [{at: 0s, server: up}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	simulate.Run(loadSpec(t), nil, sc, 1).WriteSummary(&b)
	first, _, _ := strings.Cut(b.String(), "\n")
	want := `scenario:           "s\x1b]0;x\a" (1m0s, http): "calm\ncalls:              0 made \x1b[2J"`
	if first != want || strings.ContainsRune(b.String(), 0x1b) {
		t.Errorf("summary:\n%s\nwant its first line %s", b.String(), want)
	}
}

// TestScenarioWithoutDescription: a scenario file without a description (it is
// optional, and mcpfsm simulate --help's example had none) is said by its name,
// duration and transport alone: the summary's line ended in a dangling ": ".
func TestScenarioWithoutDescription(t *testing.T) {
	sc, err := simulate.Load("dir/quick.yaml", []byte("duration: 1m\ntimeline: [{at: 0s, server: up}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	simulate.Run(loadSpec(t), nil, sc, 1).WriteSummary(&b)
	first, _, _ := strings.Cut(b.String(), "\n")
	if want := "scenario:           quick (1m0s, http)"; first != want {
		t.Errorf("summary's first line %q, want %q", first, want)
	}
}

func loadSpec(t *testing.T) *machine.Spec {
	data, err := os.ReadFile("../transitions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := machine.LoadSpec("transitions.yaml", data, effects.Registry())
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestSummarizeLinear: the summary of the largest timeline a scenario may have (100,000
// changes) over a million transitions takes a moment; it scanned the transitions for
// every change (minutes: a month of flapping every 26 s never printed).
func TestSummarizeLinear(t *testing.T) {
	spec := loadSpec(t)
	start := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	cycle := []states.State{states.Connecting, states.Ready, states.TearingDown, states.BackingOff}
	var trs []machine.Transition
	for i := range 1000000 {
		trs = append(trs, machine.Transition{At: start.Add(time.Duration(i) * time.Second), From: cycle[i%4], To: cycle[(i+1)%4]})
	}
	sc := simulate.Scenario{Duration: 1000000 * time.Second}
	for i := range 100000 {
		c := simulate.Down
		if i%2 == 1 {
			c = simulate.Up
		}
		sc.Timeline = append(sc.Timeline, simulate.Change{At: time.Duration(i)*10*time.Second + 500*time.Millisecond, Condition: c})
	}
	began := time.Now()
	s := simulate.Summarize(spec, sc, start, trs, simulate.CallStats{})
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("Summarize took %s", took)
	}
	// Each fault (at i×20 s + 0.5 s, for 10 s) finds the cycle of 4 s; the session is
	// lost within 4 s, and is back within 4 s of the fault's end.
	if len(s.Recover) != 50000 || len(s.Detect) == 0 {
		t.Errorf("%d recoveries, %d detections", len(s.Recover), len(s.Detect))
	}
}
