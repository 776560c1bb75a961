package simulate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/simulate"
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
