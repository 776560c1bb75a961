package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/simulate"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// layout copies the example config into a temp dir shaped like the repository, with
// mcpfsm (this test binary, see TestMain) at bin/mcpfsm, and returns the dir: the
// README's commands then run there exactly as written.
func layout(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, filepath.Join(dir, "bin", "mcpfsm")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../../examples/servers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "examples", "servers.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// inDir runs bin/mcpfsm with args in dir.
func inDir(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "bin", "mcpfsm"), args...)
	cmd.Dir = dir
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestCallExampleConfig(t *testing.T) {
	dir := layout(t)
	out, errOut, code := inDir(t, dir, "call", "examples/servers.yaml", "example", "echo", `{"text": "hello"}`)
	if code != 0 || out != "hello\n" {
		t.Errorf("call: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = inDir(t, dir, "call", "examples/servers.yaml", "example", "counter")
	if code != 0 || out != "1\n" {
		t.Errorf("call counter: exit %d, stdout %q", code, out)
	}
	_, errOut, code = inDir(t, dir, "call", "examples/servers.yaml", "nowhere", "echo")
	if code != 1 || !strings.Contains(errOut, `has no server "nowhere" (it has example, flaky)`) {
		t.Errorf("call to an unknown server: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = inDir(t, dir, "call", "examples/servers.yaml", "example", "echo", "{not json")
	if code != 2 || !strings.Contains(errOut, "not a JSON object") {
		t.Errorf("call with bad arguments: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = inDir(t, dir, "call", "--timeout", "5s", "examples/servers.yaml", "example", "no_such_tool")
	if code != 1 || !strings.Contains(errOut, "no_such_tool") {
		t.Errorf("call of an unknown tool: exit %d, stderr %q", code, errOut)
	}
}

// TestRunExampleConfig runs mcpfsm run as a user would: it connects to the example's
// servers, prints their transitions, reloads the config on SIGHUP, and prints a
// summary on Ctrl-C.
func TestRunExampleConfig(t *testing.T) {
	dir := layout(t)
	cfgPath := filepath.Join(dir, "examples", "servers.yaml")
	cmd := exec.Command(filepath.Join(dir, "bin", "mcpfsm"), "run", "--json", "--history", "examples/servers.yaml")
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan map[string]any, 1000)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var obj map[string]any
			if err := json.Unmarshal(sc.Bytes(), &obj); err != nil {
				t.Errorf("not a JSON line: %q", sc.Text())
				continue
			}
			lines <- obj
		}
	}()
	var seen []map[string]any
	waitFor := func(what string, ok func(map[string]any) bool) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case obj, open := <-lines:
				if !open {
					t.Fatalf("mcpfsm run ended before %s; stderr:\n%s", what, stderr.String())
				}
				seen = append(seen, obj)
				if ok(obj) {
					return
				}
			case <-timeout:
				cmd.Process.Kill()
				t.Fatalf("no %s within 30s; saw %v", what, seen)
			}
		}
	}
	ready := map[string]bool{}
	waitFor("both servers ready", func(o map[string]any) bool {
		if o["to"] == "ready" {
			ready[o["server"].(string)] = true
		}
		return ready["example"] && ready["flaky"]
	})

	// Retune one server, remove the other: SIGHUP adopts it.
	data, _ := os.ReadFile(cfgPath)
	text := strings.Replace(string(data), "  keepalive_interval: 15s", "  keepalive_interval: 5s", 1)
	text = text[:strings.Index(text, "  flaky:")]
	if err := os.WriteFile(cfgPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("the reload note", func(o map[string]any) bool {
		note, _ := o["note"].(string)
		return strings.HasPrefix(note, "reloaded: ")
	})
	if note := seen[len(seen)-1]["note"]; note != "reloaded: removed flaky; retuned example" {
		t.Errorf("reload note = %q", note)
	}
	flakyClosed := false // during the reload, before its note
	for _, o := range seen {
		flakyClosed = flakyClosed || o["server"] == "flaky" && o["to"] == "closed"
	}
	if !flakyClosed {
		t.Errorf("the removed server was not closed by the reload: %v", seen)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	waitFor("the summary of example", func(o map[string]any) bool { return o["summary"] == "example" })
	if s := seen[len(seen)-1]; s["state"] != "closed" {
		t.Errorf("example's summary = %v", s)
	}
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("mcpfsm run: %v; stderr:\n%s", err, stderr.String())
	}
	if s := stderr.String(); s != "" {
		t.Errorf("stderr: %s", s)
	}
}

func TestSimulate(t *testing.T) {
	out, errOut, code := runCLI(t, "simulate", "--summary", "frozen-idle")
	if code != 0 || !strings.Contains(out, "time to detect:     25.241s") || !strings.Contains(out, "connect attempts:") {
		t.Errorf("simulate frozen-idle: exit %d, stderr %q\n%s", code, errOut, out)
	}
	again, _, _ := runCLI(t, "simulate", "--summary", "frozen-idle")
	if again != out {
		t.Error("the same seed gave another summary")
	}
	// A policy edit, seen before it ships: a shorter keepalive finds the freeze sooner.
	dir := t.TempDir()
	spec := filepath.Join(dir, "lifecycle.yaml")
	data, err := os.ReadFile("../../transitions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), "  keepalive_interval:\n    default: 30s", "  keepalive_interval:\n    default: 5s", 1)
	if err := os.WriteFile(spec, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = runCLI(t, "simulate", "--summary", "--spec", spec, "frozen-idle")
	if code != 0 || !strings.Contains(out, "time to detect:     9.") && !strings.Contains(out, "time to detect:     8.") && !strings.Contains(out, "time to detect:     7.") && !strings.Contains(out, "time to detect:     6.") && !strings.Contains(out, "time to detect:     5.") {
		t.Errorf("with keepalive 5s the freeze should be found within 5s + probe timeout:\n%s", out)
	}
	// A scenario file, and its errors.
	scenario := filepath.Join(dir, "mine.yaml")
	os.WriteFile(scenario, []byte("duration: 1h\ntimeline:\n  - {at: 0s, server: up}\n  - {at: 10m, server: sideways}\n"), 0o644)
	_, errOut, code = runCLI(t, "simulate", scenario)
	if want := scenario + `:4:23: server "sideways" is not up, down, frozen, restart, missing or garbage`; code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("a bad scenario: exit %d, stderr %q, want %q", code, errOut, want)
	}
	os.WriteFile(scenario, []byte("duration: 1h\ntimeline:\n  - {at: 0s, server: down}\n  - {at: 30m, server: up}\n"), 0o644)
	out, _, code = runCLI(t, "simulate", "--summary", scenario)
	if code != 0 || !strings.Contains(out, "scenario:           mine (1h0m0s, http)") {
		t.Errorf("a scenario file: exit %d\n%s", code, out)
	}
	if _, errOut, code := runCLI(t, "simulate", "nope"); code != 2 || !strings.Contains(errOut, "dead-hour") {
		t.Errorf("an unknown scenario: exit %d, stderr %q", code, errOut)
	}
}

// TestGraphTrace highlights a simulated path: the state it ended in, and the edges it
// took with their counts.
func TestGraphTrace(t *testing.T) {
	out, _, code := runCLI(t, "simulate", "--json", "dead-hour")
	if code != 0 {
		t.Fatal("simulate failed")
	}
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(trace, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	mmd, errOut, code := runCLI(t, "graph", "--format", "mermaid", "--trace", trace)
	if code != 0 {
		t.Fatalf("graph --trace: exit %d, %s", code, errOut)
	}
	var last map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var obj map[string]any
		json.Unmarshal([]byte(line), &obj)
		if obj["to"] != nil {
			last = obj
		}
	}
	current := strings.ReplaceAll(last["to"].(string), "-", "_")
	for _, want := range []string{"class " + current + " current", "classDef visited", "connect_failed [not unfixable, not unauthorized, tripped] ×1", "after cooldown (breaker_cooldown 15s) ×"} {
		if !strings.Contains(mmd, want) {
			t.Errorf("the highlighted graph lacks %q:\n%s", want, mmd)
		}
	}
	dot, _, _ := runCLI(t, "graph", "--trace", trace)
	if !strings.Contains(dot, `penwidth=2`) || !strings.Contains(dot, fmt.Sprintf("%q [label=", last["to"])) {
		t.Errorf("the DOT lacks the highlighted path")
	}
	_, errOut, code = runCLI(t, "graph", "--trace", filepath.Join(t.TempDir(), "none.jsonl"))
	if code != 1 || !strings.Contains(errOut, "none.jsonl") {
		t.Errorf("graph --trace of a missing file: exit %d, %q", code, errOut)
	}
	_ = io.Discard
}

// TestGraphTraceBounded: graph --trace reads its trace whole before it draws, and an
// endless one (on stdin) grew without bound: it reads at most maxTraceTransitions of
// the server's transitions, and lines of at most 1 MiB, and says where it stopped.
func TestGraphTraceBounded(t *testing.T) {
	defer func(old int) { maxTraceTransitions = old }(maxTraceTransitions)
	maxTraceTransitions = 3
	dir := t.TempDir()
	line := `{"server":"s","from":"idle","to":"connecting","trigger":"start"}` + "\n"
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ name, data, want string }{
		{"three.jsonl", strings.Repeat(line, 3), ""},
		{"four.jsonl", strings.Repeat(line, 4), `four.jsonl:4: more than 3 transitions of server "s"`},
		{"long.jsonl", line + `{"server":"` + strings.Repeat("x", maxTraceLine) + `"}` + "\n", "long.jsonl:2: a line longer than"},
		{"broken.jsonl", line + "\n" + `{"server":` + "\n", "broken.jsonl:3: "},
	} {
		_, errOut, code := runCLI(t, "graph", "--trace", write(tc.name, tc.data))
		if tc.want == "" {
			if code != 0 {
				t.Errorf("%s: exit %d, %s", tc.name, code, errOut)
			}
			continue
		}
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, %q; want 1 and %q", tc.name, code, errOut, tc.want)
		}
	}
}

// TestRunAndCallNeverPrintSecrets plants a marker secret in a server's URL (query and
// userinfo) and headers, through ${VAR}, lets the server refuse it (401) and then
// vanish, and searches everything mcpfsm run and call print for it.
func TestRunAndCallNeverPrintSecrets(t *testing.T) {
	const secret = "MARKERSECRET8c41d"
	h := testserver.StartHTTP(t, testserver.Options{})
	h.SetStatus(401)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "servers.yaml")
	url := strings.Replace(h.URL(), "http://", "http://user:${TOK}@", 1) + "?key=${TOK}"
	cfg := fmt.Sprintf("version: 1\npolicies: {backoff_base: 50ms, backoff_max: 100ms, breaker_cooldown: 100ms, connect_timeout: 2s, auth_recheck_interval: 50ms}\nservers:\n  s:\n    url: %q\n    headers: {Authorization: \"Bearer ${TOK}\", X-Api-Key: \"${TOK}\"}\n", url)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TOK", secret)
	for _, args := range [][]string{{"run", "--history", cfgPath}, {"run", "--json", "--history", cfgPath}} {
		cause := func(c string) string { return "(" + c + ":" }
		if args[1] == "--json" {
			cause = func(c string) string { return `"cause":"` + c + `"` }
		}
		b := startCLI(t, args...)
		// Refused twice: a refusal, a backoff, another refusal.
		b.waitFor(t, "two refusals", func(out string) bool { return strings.Count(out, cause("auth")) >= 2 })
		h.Stop()
		mark := len(b.stdout.String())
		b.waitFor(t, "a connection refused after the server stopped", func(out string) bool {
			return strings.Contains(out[mark:], cause("lost"))
		})
		if code := b.stop(t); code != 0 {
			t.Errorf("%v: exit %d; stderr:\n%s", args, code, b.stderr.String())
		}
		all := b.stdout.String() + b.stderr.String()
		if strings.Contains(all, secret) {
			t.Errorf("%v printed the secret:\n%s", args, all)
		}
		h.Restart(false)
		h.SetStatus(401)
	}
	out, errOut, code := runCLI(t, "call", "--timeout", "2s", cfgPath, "s", "echo", `{"text":"x"}`)
	if code != 1 || strings.Contains(out+errOut, secret) || !strings.Contains(errOut, "auth") {
		t.Errorf("call: exit %d, printed the secret or not the refusal:\n%s%s", code, out, errOut)
	}
}

// TestReadmeSimulateSample: the README's sample output of simulate is what it prints.
func TestReadmeSimulateSample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const cmd = "$ bin/mcpfsm simulate --summary dead-hour\n"
	text := string(readme)
	i := strings.Index(text, cmd)
	if i < 0 {
		t.Fatalf("the README lacks %q", cmd)
	}
	sample := text[i+len(cmd):]
	sample = sample[:strings.Index(sample, "...\n")]
	out, _, code := runCLI(t, "simulate", "--summary", "dead-hour")
	if code != 0 || !strings.HasPrefix(out, sample) {
		t.Errorf("the README's sample is stale; simulate prints:\n%s\nthe README has:\n%s", out, sample)
	}
}

// TestSimulateHelpSample: the scenario file that simulate --help shows loads as it is
// and does what its name says: the server goes down again and again. (Its timeline
// once went down at 10m with repeat: 10m, which replays only the changes before 10m:
// the server went down once in two hours.)
func TestSimulateHelpSample(t *testing.T) {
	help, _, code := runCLI(t, "simulate", "--help")
	i, j := strings.Index(help, "A scenario file:\n\n"), strings.Index(help, "\nThe same seed")
	if code != 0 || i < 0 || j < i {
		t.Fatalf("simulate --help: exit %d, no sample scenario:\n%s", code, help)
	}
	var sample strings.Builder
	for _, line := range strings.Split(help[i+len("A scenario file:\n\n"):j], "\n") {
		if strings.HasPrefix(line, "(") {
			break
		}
		sample.WriteString(strings.TrimPrefix(line, "  ") + "\n")
	}
	sc, err := simulate.Load("sample.yaml", []byte(sample.String()))
	if err != nil {
		t.Fatalf("the sample does not load: %v\n%s", err, sample.String())
	}
	downs := 0
	for _, c := range sc.Timeline {
		if c.Condition == simulate.Down {
			downs++
		}
	}
	if want := int(sc.Duration/(10*time.Minute)) - 1; downs < want {
		t.Errorf("the sample's server goes down %d times in %s, want at least %d:\n%s", downs, sc.Duration, want, sample.String())
	}
}

// TestServeExampleConfig serves the README's example config as a host would, over
// stdio: both servers' tools are shown under their prefixes, the resources they both
// list once, and the gateway logs no collision (it logged three, the first thing a
// user of the README's `mcpfsm serve examples/servers.yaml` saw).
func TestServeExampleConfig(t *testing.T) {
	dir := layout(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr bytes.Buffer // read once Close has waited for the process
	cmd := exec.Command(filepath.Join(dir, "bin", "mcpfsm"), "serve", "examples/servers.yaml")
	cmd.Dir = dir
	cmd.Stderr = &stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitTool(t, cs, "example__echo")
	waitTool(t, cs, "flaky__echo")
	res, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range res.Resources {
		uris = append(uris, r.URI)
	}
	slices.Sort(uris)
	if want := []string{"test://static/a", "test://static/b"}; !slices.Equal(uris, want) {
		t.Errorf("resources %v, want %v (each once)", uris, want)
	}
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	if strings.Contains(stderr.String(), "collides") {
		t.Errorf("the example config makes the gateway log a collision:\n%s", stderr.String())
	}
}
