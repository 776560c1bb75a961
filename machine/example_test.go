package machine_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
)

// Load a lifecycle spec, and see a mistake in one reported with its place and a near
// name (mcpfsm validate prints the same).
func ExampleLoadSpec() {
	data, err := os.ReadFile("../transitions.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	spec, err := machine.LoadSpec("transitions.yaml", data, effects.Registry())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("initial state:", spec.Initial())

	edited := bytes.Replace(data, []byte("not tripped]"), []byte("not trippd]"), 1)
	_, err = machine.LoadSpec("edited.yaml", edited, effects.Registry())
	var fe *machine.FileError
	if errors.As(err, &fe) {
		for _, p := range fe.Problems { // each with its File, Line and Column
			fmt.Println(p.File+":", p.Msg)
		}
	}
	// Output:
	// initial state: idle
	// edited.yaml: unknown guard "trippd" (did you mean "tripped"?)
}
