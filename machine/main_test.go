package machine_test

import (
	"flag"
	"os"
	"testing"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "rewrite golden files with the current output")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// defaultSpecYAML is the project's transitions.yaml.
func defaultSpecYAML(tb testing.TB) []byte {
	tb.Helper()
	data, err := os.ReadFile("../transitions.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

func loadDefault(tb testing.TB) *machine.Spec {
	tb.Helper()
	spec, err := machine.LoadSpec("transitions.yaml", defaultSpecYAML(tb), effects.Registry())
	if err != nil {
		tb.Fatalf("the default spec does not load:\n%v", err)
	}
	return spec
}

// golden compares got with the file at path, or rewrites the file under -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmpDiff(string(want), got); diff != "" {
		t.Errorf("%s is stale (-want +got), run go test -update if the change is intended:\n%s", path, diff)
	}
}
