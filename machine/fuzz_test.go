package machine_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// FuzzLoadSpec: no input makes LoadSpec panic or hang, with the default registry or one
// whose invoked effects are not all bound to code (an unbound effect is a load error);
// and a spec it accepts can be fired with every trigger in every state, under every
// value of the extended state that guards read, without stateless panicking (as it does
// on ambiguous guards).
func FuzzLoadSpec(f *testing.F) {
	for _, seed := range []string{
		"{{},<<}", "<<: *a", "a: &a [*a]", "[{<<:}]", "&a a: *a", "!!binary x", "? [a]\n: b",
		"version: 1\nstates: {idle: {on: {start: [{}, {}, {}]}}}",
		"states:\n  idle:\n    after: [{delay: backoff}]\n", "\xff\xfe", "--- a\n--- b\n",
	} {
		f.Add([]byte(seed))
	}
	f.Add(defaultSpecYAML(f))
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	reg := effects.Registry()
	// A custom registry that leaves two invoked effects unbound (no code): a spec
	// that invokes them must not load, and none may panic.
	unbound := reg
	unbound.Invokes = map[string]machine.Invoke{}
	for name, inv := range reg.Invokes {
		if name == "probe" || name == "retire" {
			inv.Run = nil
		}
		unbound.Invokes[name] = inv
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if spec, err := machine.LoadSpec("fuzz.yaml", data, unbound); err == nil {
			for _, st := range spec.States() {
				if st.Invoke == "probe" || st.Invoke == "retire" {
					t.Fatalf("state %s invokes the unbound %s, and the spec loaded", st.Name, st.Invoke)
				}
			}
		}
		spec, err := machine.LoadSpec("fuzz.yaml", data, reg)
		if err != nil {
			if spec != nil {
				t.Fatal("a spec and an error")
			}
			return
		}
		exercise(t, spec)
	})
}

// exercise fires every trigger from every state of spec under each combination of the
// facts guards read.
func exercise(t *testing.T, spec *machine.Spec) {
	pol := spec.Defaults()
	causes := []states.Cause{states.CauseNone, states.CauseConfig, states.CauseAuth, states.CauseProtocol}
	for mask := range 8 * len(causes) {
		v := machine.Vars{Closing: mask&1 != 0, Planned: mask&2 != 0, LastCause: causes[mask>>3], Streak: pol.BreakerThreshold}
		if mask&4 != 0 {
			v.Failures = pol.BreakerThreshold
		}
		for _, from := range spec.States() {
			for _, tr := range states.AllTriggers() {
				sm, ctx := spec.Stateless(from.Name, &v, &pol)
				_ = sm.FireCtx(ctx, tr)
			}
		}
	}
}
