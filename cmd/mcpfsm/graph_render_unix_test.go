//go:build unix

package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
)

// mermaidVersion is the Mermaid that TestGraphsRender draws with: its npm package's
// dist/mermaid.min.js, fetched once (npm pack) into testdata/mermaid/.
const mermaidVersion = "11.17.2"

// renderedSpecs are the lifecycles TestGraphsRender draws: the built-in one, the
// variants in docs/lifecycles, and the built-in one with its states renamed to words
// that Mermaid's and DOT's grammars use (state, note, end, class...).
func renderedSpecs(t *testing.T) map[string]string {
	t.Helper()
	specs := map[string]string{"transitions.yaml": "../../transitions.yaml"}
	variants, err := filepath.Glob("../../docs/lifecycles/*.yaml")
	if err != nil || len(variants) == 0 {
		t.Fatalf("docs/lifecycles: %v (%d files)", err, len(variants))
	}
	for _, v := range variants {
		specs[filepath.Base(v)] = v
	}
	data, err := os.ReadFile("../../transitions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for old, word := range map[string]string{
		"idle": "state", "connecting": "note", "ready": "end", "probing": "class", "replacing": "style",
		"retiring": "direction", "tearing-down": "subgraph", "backing-off": "default", "breaker-open": "click",
		"half-open": "node", "parked": "edge", "unauthorized": "graph", "closed": "digraph",
	} {
		text = regexp.MustCompile(`(?m)^  `+old+`:$`).ReplaceAllString(text, "  "+word+":")
		text = regexp.MustCompile(`(to|initial): `+old+`\b`).ReplaceAllString(text, "${1}: "+word)
	}
	keywords := filepath.Join(t.TempDir(), "keywords.yaml")
	if err := os.WriteFile(keywords, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	specs["keywords.yaml"] = keywords
	return specs
}

// stateNames returns the names of the states of the spec at path.
func stateNames(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := mcpfsm.LoadSpec(path, data)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range spec.States() {
		names = append(names, string(s.Name))
	}
	return names
}

// TestGraphsRender draws mcpfsm graph's pictures with the renderers users have:
// Graphviz's dot (Debian's graphviz) for the DOT, and Mermaid (its npm package, in
// Debian's chromium, headless) for the Mermaid, for every lifecycle of renderedSpecs,
// plain and with a trace's path highlighted. Each must be drawn without an error, with
// every state's name on the picture. It is skipped only when dot, chromium or npm is
// missing and MCPFSM_REQUIRE_BROWSER is unset (.ci/run installs them and sets it).
func TestGraphsRender(t *testing.T) {
	specs := renderedSpecs(t)
	out, _, code := runCLI(t, "simulate", "--json", "dead-hour")
	if code != 0 {
		t.Fatal("simulate failed")
	}
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(trace, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	type picture struct{ spec, args string }
	render := func(format string) map[string]string {
		pics := map[string]string{}
		for name, path := range specs {
			for _, traced := range []bool{false, true} {
				args := []string{"graph", "--format", format, path}
				key := name
				if traced {
					if name != "transitions.yaml" {
						continue // the trace is of the built-in lifecycle
					}
					args = []string{"graph", "--format", format, "--trace", trace, path}
					key += " --trace"
				}
				text, errOut, code := runCLI(t, args...)
				if code != 0 {
					t.Fatalf("mcpfsm %s: exit %d: %s", strings.Join(args, " "), code, errOut)
				}
				pics[key] = text
			}
		}
		return pics
	}
	namesOf := func(key string) []string {
		path, ok := specs[strings.TrimSuffix(key, " --trace")]
		if !ok {
			return nil // a picture of the docs: drawn, its names not checked
		}
		return stateNames(t, path)
	}

	t.Run("dot", func(t *testing.T) {
		dot, err := exec.LookPath("dot")
		if err != nil {
			required(t, "graphviz's dot is not installed (apt-get install graphviz)")
		}
		for key, text := range render("dot") {
			cmd := exec.Command(dot, "-Tsvg")
			cmd.Stdin = strings.NewReader(text)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			svg, err := cmd.Output()
			if err != nil || stderr.Len() > 0 {
				t.Errorf("%s: dot: %v\n%s\n%s", key, err, stderr.String(), text)
				continue
			}
			drawn := html.UnescapeString(string(svg)) // dot writes - as &#45;
			for _, name := range namesOf(key) {
				if !strings.Contains(drawn, ">"+name+"</text>") {
					t.Errorf("%s: the state %s is not on dot's picture", key, name)
				}
			}
		}
	})

	t.Run("mermaid", func(t *testing.T) {
		chromium := chromiumPath()
		if chromium == "" {
			required(t, "chromium is not installed (apt-get install chromium)")
		}
		js := mermaidJS(t)
		pics := render("mermaid")
		// And every Mermaid picture of the docs, drawn by hand or not.
		docs, _ := filepath.Glob("../../docs/*.md")
		for _, doc := range append(docs, "../../README.md") {
			data, err := os.ReadFile(doc)
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range regexp.MustCompile("(?s)```mermaid\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
				pics[fmt.Sprintf("%s, picture %d", filepath.Base(doc), i+1)] = m[1]
			}
		}
		diagrams, err := json.Marshal(pics)
		if err != nil {
			t.Fatal(err)
		}
		page := `<!doctype html><html><body><div id="out"></div><script src="/mermaid.min.js"></script><script>
const diagrams = ` + string(diagrams) + `;
mermaid.initialize({startOnLoad: false, securityLevel: "strict"});
(async () => {
	const results = {};
	let i = 0;
	for (const [name, src] of Object.entries(diagrams)) {
		try {
			const {svg} = await mermaid.render("g" + i++, src);
			const div = document.createElement("div");
			div.innerHTML = svg;
			document.getElementById("out").appendChild(div);
			results[name] = {labels: [...div.querySelectorAll("g.node")].map(g => g.textContent.trim())};
		} catch (e) {
			results[name] = {error: String((e && e.message) || e)};
		}
	}
	window.results = results;
})();
</script></body></html>`
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/mermaid.min.js" {
				w.Header().Set("Content-Type", "text/javascript")
				_, _ = w.Write(js)
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = io.WriteString(w, page)
		}))
		defer srv.Close()
		b := startBrowser(t, chromium, srv.URL+"/")
		var results map[string]struct {
			Labels []string `json:"labels"`
			Error  string   `json:"error"`
		}
		for deadline := time.Now().Add(60 * time.Second); results == nil; time.Sleep(100 * time.Millisecond) {
			if err := b.eval(`window.results ?? null`, &results); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatal("Mermaid drew nothing within 60s")
			}
		}
		for key := range pics {
			r, ok := results[key]
			switch {
			case !ok:
				t.Errorf("%s: not drawn", key)
			case r.Error != "":
				t.Errorf("%s: Mermaid: %s\n%s", key, r.Error, pics[key])
			default:
				for _, name := range namesOf(key) {
					if !slices.ContainsFunc(r.Labels, func(l string) bool { return strings.HasPrefix(l, name) }) {
						t.Errorf("%s: the state %s is not on Mermaid's picture (its states: %q)", key, name, r.Labels)
					}
				}
			}
		}
	})
}

// required skips the test for want of a tool, or fails it if MCPFSM_REQUIRE_BROWSER
// says the tools are there.
func required(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("MCPFSM_REQUIRE_BROWSER") != "" {
		t.Fatalf("%s, and MCPFSM_REQUIRE_BROWSER is set", why)
	}
	t.Skip(why)
}

// mermaidJS returns Mermaid's browser bundle (dist/mermaid.min.js of its npm package,
// mermaidVersion), fetched with npm pack into testdata/mermaid the first time.
func mermaidJS(t *testing.T) []byte {
	t.Helper()
	file := filepath.Join("testdata", "mermaid", "mermaid-"+mermaidVersion+".min.js")
	if data, err := os.ReadFile(file); err == nil {
		return data
	}
	if _, err := exec.LookPath("npm"); err != nil {
		required(t, "npm is not installed")
	}
	tmp := t.TempDir()
	cmd := exec.Command("npm", "pack", "mermaid@"+mermaidVersion, "--pack-destination", tmp, "--silent")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm pack mermaid@%s: %v\n%s", mermaidVersion, err, out)
	}
	f, err := os.Open(filepath.Join(tmp, "mermaid-"+mermaidVersion+".tgz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("mermaid-%s.tgz: no package/dist/mermaid.min.js: %v", mermaidVersion, err)
		}
		if h.Name != "package/dist/mermaid.min.js" {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(tr, 64<<20))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		// Written whole, then renamed: a test run cut short leaves no half file.
		part := fmt.Sprintf("%s.%d", file, os.Getpid())
		if err := os.WriteFile(part, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(part, file); err != nil {
			t.Fatal(err)
		}
		return data
	}
}
