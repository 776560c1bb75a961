package simulate_test

import (
	"fmt"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/simulate"
)

// Play a scenario of your own against the default lifecycle, with a policy changed,
// in virtual time: two hours take milliseconds, and the same seed gives the same
// timeline.
func ExampleRun() {
	sc, err := simulate.Load("flapping-fast", []byte(`
name: flapping-fast
duration: 2h
transport: http
timeline:
  - {at: 0s, server: up}
  - {at: 8m, server: down}
repeat: 10m
calls: {every: 30s, timeout: 10s}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	spec := mcpfsm.DefaultSpec()
	pol := spec.Defaults()
	if err := pol.Set("breaker_threshold", "3"); err != nil {
		fmt.Println(err)
		return
	}
	a := simulate.Run(spec, &pol, sc, 1)
	b := simulate.Run(spec, &pol, sc, 1)
	fmt.Println("same timeline for the same seed:", len(a.Transitions) == len(b.Transitions) && a.Summary.Calls == b.Summary.Calls)
	fmt.Println("calls made:", a.Summary.Calls.Made)
	// Output:
	// same timeline for the same seed: true
	// calls made: 240
}
