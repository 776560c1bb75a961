package machine_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

func cmpDiff(want, got string) string { return cmp.Diff(want, got) }

func TestDefaultSpecLoads(t *testing.T) {
	spec := loadDefault(t)
	if got := spec.Initial().String(); got != "idle" {
		t.Errorf("initial = %s, want idle", got)
	}
	var got []string
	for _, st := range spec.States() {
		mode := st.Calls.String()
		if st.Final {
			mode = "final"
		}
		got = append(got, string(st.Name)+":"+mode)
	}
	want := []string{
		"idle:wait", "connecting:wait", "ready:serve", "probing:serve", "replacing:serve", "retiring:serve",
		"tearing-down:wait", "backing-off:wait", "breaker-open:fail", "half-open:wait", "parked:fail",
		"unauthorized:fail", "closed:final",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("states and their calls (-want +got):\n%s", diff)
	}
	if spec.Calls(states.Ready) != machine.Serve || spec.Calls("nowhere") != 0 || !spec.Final(states.Closed) || spec.Final(states.Ready) {
		t.Error("Calls and Final disagree with States")
	}
}

// TestUnboundInvoke: a registry that declares an invoked effect but binds no code to it
// is a load error at the invoke's position, not a panic when the state is entered.
func TestUnboundInvoke(t *testing.T) {
	reg := effects.Registry()
	invokes := map[string]machine.Invoke{}
	for name, inv := range reg.Invokes {
		invokes[name] = inv
	}
	probe := invokes["probe"]
	probe.Run = nil
	invokes["probe"] = probe
	reg.Invokes = invokes
	_, err := machine.LoadSpec("transitions.yaml", defaultSpecYAML(t), reg)
	if err == nil || !strings.Contains(err.Error(), `invoked effect "probe" is not bound to code`) || !strings.Contains(err.Error(), "transitions.yaml:") {
		t.Fatalf("a spec invoking an unbound effect: %v", err)
	}
}

// TestInvalidSpecs loads every broken spec under testdata/invalid and compares the
// whole error, every problem with its position, with the golden .err file beside it.
func TestInvalidSpecs(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test specs: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := machine.LoadSpec(filepath.Base(file), data, effects.Registry())
			if err == nil {
				t.Fatalf("loaded without error: %d states", len(spec.States()))
			}
			var fe *machine.FileError
			if !errors.As(err, &fe) || !errors.Is(err, machine.ErrInvalid) {
				t.Fatalf("error %T is not a *machine.FileError matching ErrInvalid: %v", err, err)
			}
			for _, p := range fe.Problems {
				if p.File != filepath.Base(file) {
					t.Errorf("problem names file %q: %s", p.File, p)
				}
			}
			golden(t, strings.TrimSuffix(file, ".yaml")+".err", err.Error()+"\n")
		})
	}
}

func TestSpecTooLarge(t *testing.T) {
	data := append(defaultSpecYAML(t), strings.Repeat("#", machine.MaxSpecSize)...)
	_, err := machine.LoadSpec("big.yaml", data, effects.Registry())
	want := "big.yaml: file is larger than 1048576 bytes"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

func TestLoadSpecFile(t *testing.T) {
	spec, err := machine.LoadSpecFile("../transitions.yaml", effects.Registry())
	if err != nil {
		t.Fatal(err)
	}
	if spec.File() != "../transitions.yaml" {
		t.Errorf("File() = %q", spec.File())
	}
	_, err = machine.LoadSpecFile("testdata/no-such-file.yaml", effects.Registry())
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v, want one matching os.ErrNotExist", err)
	}
}

// TestManyAlternativesBounded: a list of n alternatives on one trigger that all clash
// makes n problems, not one for each pair (3,000 of them, 130 KB of YAML, made 4.5
// million problems and 3 GB; the 1 MiB a spec may be, hundreds of GB).
func TestManyAlternativesBounded(t *testing.T) {
	const n = 1000
	old := "      close:\n        to: closed\n        description: Closed before it was ever started."
	alts := "      close:" + strings.Repeat("\n        - {to: closed, description: d}", n)
	data := strings.Replace(string(defaultSpecYAML(t)), old, alts, 1)
	_, err := machine.LoadSpec("many.yaml", []byte(data), effects.Registry())
	var fe *machine.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v", err)
	}
	if len(fe.Problems) != n-1 {
		t.Errorf("%d problems, want %d (one for each duplicate)", len(fe.Problems), n-1)
	}
}
