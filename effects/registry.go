// Package effects holds everything a lifecycle spec refers to by name: the guards that
// route transitions, the actions that keep the books, the delay functions of timed
// transitions, and the invoked effects that dial, probe and close sessions; and the one
// classifier of errors. Registry returns them for machine.LoadSpec.
package effects

import "github.com/mcpfsm/mcpfsm/machine"

// Registry returns the names the default lifecycle uses, bound to their code.
func Registry() machine.Registry {
	return machine.Registry{
		Guards:  guards,
		Actions: actions,
		Delays:  delays,
		Invokes: invokes,
	}
}
