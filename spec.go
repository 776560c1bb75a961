package mcpfsm

import (
	_ "embed"
	"sync"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
)

//go:embed transitions.yaml
var defaultSpecYAML []byte

// DefaultSpecYAML returns the text of the default lifecycle, transitions.yaml.
func DefaultSpecYAML() []byte { return append([]byte(nil), defaultSpecYAML...) }

var defaultSpec = sync.OnceValues(func() (*machine.Spec, error) {
	return machine.LoadSpec("transitions.yaml", defaultSpecYAML, effects.Registry())
})

// DefaultSpec returns the default lifecycle. It is loaded once and shared.
func DefaultSpec() *machine.Spec {
	spec, err := defaultSpec()
	if err != nil {
		// The embedded file is checked by this package's tests; reaching here means the
		// binary was built from a broken tree.
		panic("mcpfsm: the embedded transitions.yaml is invalid:\n" + err.Error())
	}
	return spec
}

// LoadSpec parses and validates a lifecycle spec that uses the effects of package
// effects. name labels data in messages. The error lists every problem with its
// file:line:column (see machine.FileError).
func LoadSpec(name string, data []byte) (*machine.Spec, error) {
	return machine.LoadSpec(name, data, effects.Registry())
}

// LoadSpecFile reads and validates a lifecycle spec file. See LoadSpec.
func LoadSpecFile(path string) (*machine.Spec, error) {
	return machine.LoadSpecFile(path, effects.Registry())
}
