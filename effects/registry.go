package effects

import (
	"maps"

	"github.com/mcpfsm/mcpfsm/machine"
)

// Registry returns the names the default lifecycle uses, bound to their code. Each
// call returns maps of its own: a caller may add names or rebind them (a custom
// lifecycle, a test) without changing any other spec's bindings.
func Registry() machine.Registry {
	return machine.Registry{
		Guards:  maps.Clone(guards),
		Actions: maps.Clone(actions),
		Delays:  maps.Clone(delays),
		Invokes: maps.Clone(invokes),
	}
}
