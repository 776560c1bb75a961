package mcpfsm_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "rewrite docs/graphs and the README's picture from transitions.yaml")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGraphsAreFresh: docs/graphs/ holds the rendering of transitions.yaml, and the
// README embeds the Mermaid one. Run go test -update after editing transitions.yaml.
func TestGraphsAreFresh(t *testing.T) {
	spec := mcpfsm.DefaultSpec()
	dot, mmd := spec.DOT(machine.GraphOptions{}), spec.Mermaid(machine.GraphOptions{})
	fresh(t, "docs/graphs/lifecycle.dot", dot)
	fresh(t, "docs/graphs/lifecycle.mmd", mmd)

	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := between(t, string(readme), "lifecycle", "```mermaid\n"+mmd+"```\n")
	table := "| policy | default | meaning |\n| --- | --- | --- |\n"
	for _, p := range spec.Policies() {
		table += fmt.Sprintf("| `%s` | %s | %s |\n", p.Name, p.Default, p.Description)
	}
	text = between(t, text, "policies", table)
	fresh(t, "README.md", text)
}

// between replaces what lies between the markers <!-- name:begin --> and
// <!-- name:end --> of text with content.
func between(t *testing.T, text, name, content string) string {
	t.Helper()
	begin, end := "<!-- "+name+":begin -->\n", "<!-- "+name+":end -->"
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("README.md lacks the %q ... %q markers", begin, end)
	}
	return text[:i+len(begin)] + content + text[j:]
}

func fresh(t *testing.T, path, want string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("%s is stale: run go test -update . (-want +got):\n%s", path, diff)
	}
}

func TestLoadSpec(t *testing.T) {
	spec, err := mcpfsm.LoadSpec("transitions.yaml", mcpfsm.DefaultSpecYAML())
	if err != nil {
		t.Fatal(err)
	}
	if spec.DOT(machine.GraphOptions{}) != mcpfsm.DefaultSpec().DOT(machine.GraphOptions{}) {
		t.Error("LoadSpec of the embedded text differs from DefaultSpec")
	}
	if _, err := mcpfsm.LoadSpecFile("transitions.yaml"); err != nil {
		t.Error(err)
	}
	_, err = mcpfsm.LoadSpec("x.yaml", []byte("version: 1\n"))
	if err == nil || !strings.Contains(err.Error(), `x.yaml:1:1: the spec has no "initial"`) {
		t.Errorf("err = %v", err)
	}
}
