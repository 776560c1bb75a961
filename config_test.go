package mcpfsm_test

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/transport"
)

// updateConfig rewrites the config error goldens; it is apart from -update (the graphs
// and the README) so that a spec edit cannot re-bless config messages by the way.
var updateConfig = flag.Bool("update-config", false, "rewrite the .err goldens of testdata/config/invalid")

// configGolden compares got with the golden file at path, or rewrites it under
// -update-config.
func configGolden(t *testing.T, path, got string) {
	t.Helper()
	if *updateConfig {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run Config . -update-config to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s is stale: run go test -run Config . -update-config if the change is intended (-want +got):\n%s", path, diff)
	}
}

// env is a fake environment for ${VAR} expansion.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

func TestParseConfig(t *testing.T) {
	data, err := os.ReadFile("testdata/config/valid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mcpfsm.ParseConfig("testdata/config/valid.yaml", data, env(map[string]string{"ROOT": "/srv", "TOKEN": "s3cret-token"}))
	if err != nil {
		t.Fatal(err)
	}
	var got []transport.Config
	for _, s := range cfg.Servers {
		got = append(got, s.Transport)
	}
	abs := func(path string) string {
		t.Helper()
		p, err := filepath.Abs(path)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	want := []transport.Config{
		{Name: "files", Stdio: &transport.Stdio{
			Command: abs("testdata/config/bin/server"), Args: []string{"--root", "/srv", "price: $5"},
			Env: map[string]string{"API_TOKEN": "s3cret-token"}, Dir: abs("testdata/config/work"),
		}},
		{Name: "search", HTTP: &transport.HTTP{URL: "https://example.com/mcp?key=s3cret-token", Headers: map[string]string{"Authorization": "Bearer s3cret-token"}}},
		{Name: "legacy", SSE: &transport.HTTP{URL: "http://127.0.0.1:9000/sse"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("transports (-want +got):\n%s", diff)
	}
	files, _ := cfg.Server("files")
	search, _ := cfg.Server("search")
	if files.Policies.ConnectTimeout != 5*time.Second || files.Policies.KeepaliveInterval != 0 {
		t.Errorf("files policies: a server's overrides win over the config's: %+v", files.Policies)
	}
	if search.Policies.KeepaliveInterval != 15*time.Second || search.Policies.ConnectTimeout != mcpfsm.DefaultSpec().Defaults().ConnectTimeout {
		t.Errorf("search policies: the config's overrides over the spec's defaults: %+v", search.Policies)
	}
	if files.Spec != mcpfsm.DefaultSpec() || files.SpecFile != "" {
		t.Errorf("a server without a spec runs the default lifecycle")
	}
}

// TestInvalidConfigs loads every broken config under testdata/config/invalid and
// compares the whole error with the golden .err file beside it. A value written
// SEKRIT in them stands for a secret: no error may quote it.
func TestInvalidConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/config/invalid/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test configs: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := mcpfsm.ParseConfig(file, data, env(nil))
			if err == nil {
				t.Fatalf("accepted: %+v", cfg)
			}
			if !errors.Is(err, machine.ErrInvalid) {
				t.Errorf("error does not match machine.ErrInvalid: %v", err)
			}
			if strings.Contains(err.Error(), "SEKRIT") {
				t.Errorf("the error quotes a secret:\n%v", err)
			}
			configGolden(t, strings.TrimSuffix(file, ".yaml")+".err", err.Error()+"\n")
		})
	}
}

// TestConfigSecretsStayOut: an error about a value that holds a secret names the
// variable and the place, never the value, whether the value is written in the file
// or comes from ${VAR}, and whatever is wrong with it.
func TestConfigSecretsStayOut(t *testing.T) {
	const secret = "MARKER-SECRET-7f3a"
	vars := map[string]string{
		"T":      secret,
		"T_NL":   "Bearer " + secret + "\nX-Evil: 1", // a header split
		"T_NUL":  secret + "\x00",                    // no argument or path can hold it
		"T_URL":  "ftp://" + secret + "@h/",          // not http(s)
		"T_BAD":  "://" + secret,                     // does not parse
		"T_LONG": strings.Repeat(secret, 10),
	}
	stdio := "version: 1\nservers:\n  s:\n    command: server\n"
	http := "version: 1\nservers:\n  s:\n    url: https://h/mcp\n"
	for _, text := range []string{
		// Written in the file.
		http + "    headers: {A: \"Bearer " + secret + " $x\"}\n",
		http + "    headers: {A: \"${T\"}\n    transport: " + secret + "x\n",
		"version: 1\nservers:\n  s:\n    url: \"https://" + secret + "@h/mcp ${UNSET}\"\n",
		stdio + "    env: API_KEY=" + secret + "\n",                                 // a single value for a mapping
		stdio + "    env: {API_KEY=" + secret + "}\n",                               // a mapping whose key is name=value
		stdio + "    env: [API_KEY=" + secret + "]\n",                               // a list for a mapping
		stdio + "    env: {API_KEY=" + secret + ": x, API_KEY=" + secret + ": y}\n", // the same bad name twice
		stdio + "    args: --token=" + secret + "\n",                                // a single value for a list
		stdio + "    args: [{--token: " + secret + "}]\n",                           // a mapping as an argument
		stdio + "    env: {A: \"${" + secret + "-x}\"}\n",                           // a ${...} that names no variable
		http + "    headers: \"Authorization: Bearer " + secret + "\"\n",
		http + "    headers: {\"Authorization: Bearer " + secret + "\"}\n",
		http + "    headers: [\"Authorization: Bearer " + secret + "\"]\n",
		http + "    headers: {Authorization: [" + secret + "]}\n",
		http + "    args: [" + secret + "]\n",
		// Expanded from ${VAR}.
		http + "    headers: {Authorization: \"${T_NL}\"}\n",
		stdio + "    env: {A: \"${T_NL}\"}\n",
		stdio + "    env: {A: \"${T_NUL}\"}\n",
		stdio + "    args: [\"${T_NUL}\"]\n",
		stdio + "    cwd: \"${T_NUL}\"\n",
		stdio + "    stderr: \"${T_NUL}\"\n",
		stdio + "    stderr: \"/nonexistent/${T}/log\"\n", // quoted as written, not as expanded
		"version: 1\nservers:\n  s:\n    command: \"${T_NUL}\"\n",
		"version: 1\nservers:\n  s:\n    url: \"${T_URL}\"\n",
		"version: 1\nservers:\n  s:\n    url: \"${T_BAD}\"\n",
		http + "    transport: \"${T}\"\n",
		http + "    headers: {Authorization: \"${T_NL}\", authorization: \"${T}\"}\n",
		stdio + "    args: [\"${T_LONG}\", \"${T_NUL}\"]\n",
	} {
		_, err := mcpfsm.ParseConfig("c.yaml", []byte(text), env(vars))
		if err == nil {
			t.Errorf("accepted %q", text)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "MARKER") {
			t.Errorf("the error quotes a secret:\n%v\nfor:\n%s", err, text)
		}
	}
}

// TestConfigSpecNotAFile: a spec that is a device, a FIFO or a directory is refused at
// once, with the place that names it; /dev/zero is not read without end, and a FIFO
// with no writer does not hang the load.
func TestConfigSpecNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Should a load be stuck opening the FIFO, a writer releases it.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	for _, c := range []struct{ spec, at string }{
		{"/dev/zero", "4:11"},
		{fifo, "4:11"},
		{dir, "4:11"},
	} {
		cfgFile := filepath.Join(dir, "servers.yaml")
		text := fmt.Sprintf("version: 1\nservers:\n  s:\n    spec: %q\n    command: server\n", c.spec)
		if err := os.WriteFile(cfgFile, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := mcpfsm.LoadConfig(cfgFile)
			done <- err
		}()
		select {
		case err := <-done:
			want := fmt.Sprintf("%s:%s: spec %q: not a regular file", cfgFile, c.at, c.spec)
			if err == nil || err.Error() != want {
				t.Errorf("spec %s: error %v, want %s", c.spec, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("spec %s: the load has not returned after 5s", c.spec)
		}
	}
	// The config file itself, too.
	for _, file := range []string{"/dev/zero", fifo} {
		_, err := mcpfsm.LoadConfig(file)
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("LoadConfig(%s): %v", file, err)
		}
	}
}

// TestConfigCommandIsAPath: a command with a slash is a path, resolved against the
// config file's directory, even when that directory is "." (filepath.Join(".",
// "./server") is "server", which exec would look up in PATH) and whatever the server's
// cwd (exec takes a relative path relative to the child's directory).
func TestConfigCommandIsAPath(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ file, command, want string }{
		{"servers.yaml", "./server", filepath.Join(wd, "server")},
		{"servers.yaml", "bin/server", filepath.Join(wd, "bin/server")},
		{"conf/servers.yaml", "../server", filepath.Join(wd, "server")},
		{"/etc/mcp/servers.yaml", "./server", "/etc/mcp/server"},
		{"servers.yaml", "/usr/bin/server", "/usr/bin/server"},
		{"servers.yaml", "server", "server"}, // no slash: a name, looked up in PATH
	} {
		text := "version: 1\nservers:\n  s:\n    command: " + c.command + "\n    cwd: work\n"
		cfg, err := mcpfsm.ParseConfig(c.file, []byte(text), env(nil))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Servers[0].Transport.Stdio.Command; got != c.want {
			t.Errorf("command %s in %s = %q, want %q", c.command, c.file, got, c.want)
		}
	}
}

// TestConfigStderr: a stdio server's stderr is discarded by default, inherited, or
// appended to a file relative to the config's directory, created 0600.
func TestConfigStderr(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "servers.yaml")
	parse := func(stderr string) io.Writer {
		t.Helper()
		text := "version: 1\nservers:\n  s:\n    command: server\n"
		if stderr != "" {
			text += "    stderr: " + stderr + "\n"
		}
		cfg, err := mcpfsm.ParseConfig(file, []byte(text), env(map[string]string{"LOGS": "logs"}))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Servers[0].Transport.Stdio.Stderr
	}
	if w := parse(""); w != nil {
		t.Errorf("default: %v, want nil (discarded, as transport.Stdio does with nil)", w)
	}
	if w := parse("discard"); w != nil {
		t.Errorf("discard: %v, want nil", w)
	}
	if w := parse("inherit"); w != os.Stderr {
		t.Errorf("inherit: %v, want os.Stderr", w)
	}
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	w := parse("${LOGS}/s.err")
	if w == nil {
		t.Fatal("a file: nil")
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "s.err")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file exists before anything is written: %v", err)
	}
	for _, line := range []string{"one\n", "two\n"} {
		if n, err := w.Write([]byte(line)); n != len(line) || err != nil {
			t.Errorf("Write = %d, %v", n, err)
		}
	}
	// Loaded again (a reload), it appends to the same file.
	if _, err := parse("logs/s.err").Write([]byte("three\n")); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(dir, "logs", "s.err"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", info.Mode().Perm())
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "logs", "s.err")); string(data) != "one\ntwo\nthree\n" {
		t.Errorf("the file holds %q", data)
	}
}

// FuzzParseConfig: no input makes the config loader panic or hang, and a config it
// accepts has a usable transport for every server.
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{"{{},<<}", "<<: *a", "servers: {a: {command: x, args: [&a b, *a]}}", "servers: {a: {url: \"${\"}}", "\xef\xbb\xbf"} {
		f.Add([]byte(seed))
	}
	files, _ := filepath.Glob("testdata/config/*.yaml")
	more, _ := filepath.Glob("testdata/config/invalid/*.yaml")
	for _, file := range append(files, more...) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	lookup := env(map[string]string{"ROOT": "/srv", "TOKEN": "t"})
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := mcpfsm.ParseConfig("testdata/config/fuzz.yaml", data, lookup)
		if err != nil {
			return
		}
		for _, s := range cfg.Servers {
			if err := s.Transport.Validate(); err != nil {
				t.Fatalf("accepted server %s with an invalid transport: %v", s.Name, err)
			}
		}
	})
}

// TestParseConfigGateway: the gateway's naming keys (prefix, include, exclude, rename),
// its separator, and a server's protocol.
func TestParseConfigGateway(t *testing.T) {
	cfg, err := mcpfsm.LoadConfig("testdata/config/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.NameSeparator(); got != "_-" {
		t.Errorf("separator %q, want _-", got)
	}
	files, _ := cfg.Server("files")
	search, _ := cfg.Server("search")
	conf, _ := cfg.Server("conformance")
	if files.NamePrefix() != "fs" || search.NamePrefix() != "search" || conf.NamePrefix() != "" || search.Prefix != nil {
		t.Errorf("prefixes %q %q %q (search's set: %v)", files.NamePrefix(), search.NamePrefix(), conf.NamePrefix(), search.Prefix != nil)
	}
	if diff := cmp.Diff([]string{"read_*", "list"}, files.Include); diff != "" {
		t.Errorf("include (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"*_secret"}, files.Exclude); diff != "" {
		t.Errorf("exclude (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"read_file": "cat"}, files.Rename); diff != "" {
		t.Errorf("rename (-want +got):\n%s", diff)
	}
	if files.Transport.ProtocolVersion != "2025-11-25" || search.Transport.ProtocolVersion != "" {
		t.Errorf("protocols %q %q", files.Transport.ProtocolVersion, search.Transport.ProtocolVersion)
	}
	if (&mcpfsm.Config{}).NameSeparator() != mcpfsm.DefaultSeparator {
		t.Error("a config without a separator does not use the default")
	}
	if !regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`).MatchString("files" + mcpfsm.DefaultSeparator + "read_file") {
		t.Error("the default separator breaks the LLM function-name rule")
	}
}

// TestMessagesBoundedAndEscaped: text from a spec or a config is quoted up to 60
// characters and escaped in every message, so a long key or a value with a newline can
// neither make a message huge nor forge a line of its own (policy names and values and
// the spec's version were once printed whole and raw).
func TestMessagesBoundedAndEscaped(t *testing.T) {
	long := strings.Repeat("x", 100000)
	lookup := func(string) (string, bool) { return "", false }
	cases := map[string]func() error{
		"config unknown policy": func() error {
			_, err := mcpfsm.ParseConfig("c.yaml", []byte("version: 1\npolicies:\n  ? "+long+"\n  : 1s\nservers: {a: {command: x}}\n"), lookup)
			return err
		},
		"config policy value": func() error {
			_, err := mcpfsm.ParseConfig("c.yaml", []byte("version: 1\npolicies: {connect_timeout: \"-"+long+"s\"}\nservers: {a: {command: x}}\n"), lookup)
			return err
		},
		"config policy newline": func() error {
			_, err := mcpfsm.ParseConfig("c.yaml", []byte("version: 1\npolicies: {backoff_multiplier: \"0.5\\nc.yaml:1:1: forged\"}\nservers: {a: {command: x}}\n"), lookup)
			return err
		},
		"spec version": func() error {
			spec := strings.Replace(string(mcpfsm.DefaultSpecYAML()), "version: 1", "version: \"2\\ns.yaml:1:1: forged "+long+"\"", 1)
			_, err := mcpfsm.LoadSpec("s.yaml", []byte(spec))
			return err
		},
		"spec unknown policy": func() error {
			spec := strings.Replace(string(mcpfsm.DefaultSpecYAML()), "policies:\n", "policies:\n  ? "+long+"\n  : {default: 1s, description: x}\n", 1)
			_, err := mcpfsm.LoadSpec("s.yaml", []byte(spec))
			return err
		},
	}
	for name, f := range cases {
		err := f()
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			if len(line) > 400 {
				t.Errorf("%s: a line of %d bytes: %.120s…", name, len(line), line)
			}
			if strings.Contains(line, "forged") && !strings.Contains(line, `\n`) {
				t.Errorf("%s: a forged line: %.120q", name, line)
			}
		}
	}
}

// TestConfigEmptyFromEnv: a value that ${VAR} leaves empty is refused where it is
// written, as the same value written empty is. An empty command passed the config and
// failed only at NewManager, with no file:line:column ("mcp server "a": config: stdio:
// the command is empty").
func TestConfigEmptyFromEnv(t *testing.T) {
	lookup := env(map[string]string{"EMPTY": ""})
	for _, body := range []string{
		`a: {command: "${EMPTY}"}`,
		`a: {command: "${EMPTY}${EMPTY}"}`,
		`a: {url: "${EMPTY}"}`,
	} {
		data := "version: 1\nservers:\n  " + body + "\n"
		cfg, err := mcpfsm.ParseConfig("c.yaml", []byte(data), lookup)
		if err == nil {
			for _, s := range cfg.Servers {
				if verr := s.Transport.Validate(); verr != nil {
					t.Errorf("%s: accepted, and its transport does not validate: %v", body, verr)
				}
			}
			continue
		}
		if !strings.HasPrefix(err.Error(), "c.yaml:3:") {
			t.Errorf("%s: %v, want the error at c.yaml:3", body, err)
		}
	}
}

// TestConfigSpecLoadedOnce: a spec file that many servers name is loaded once and
// shared (2,000 servers naming a 1 MiB spec took 3.7 GB and 14 s; a 1 MiB config names
// it 29,000 times), and a broken one lists its problems once.
func TestConfigSpecLoadedOnce(t *testing.T) {
	dir := t.TempDir()
	spec, err := os.ReadFile("transitions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("life.yaml", string(spec))
	write("broken.yaml", strings.Replace(string(spec), "initial: idle", "initial: nowhere", 1))
	var b strings.Builder
	b.WriteString("version: 1\nservers:\n")
	for i := range 200 {
		fmt.Fprintf(&b, "  s%d: {command: server, spec: life.yaml}\n", i)
	}
	cfg, err := mcpfsm.LoadConfig(write("servers.yaml", b.String()))
	if err != nil {
		t.Fatal(err)
	}
	first, _ := cfg.Server("s0")
	for i := range 200 {
		if s, _ := cfg.Server(fmt.Sprint("s", i)); s.Spec != first.Spec {
			t.Fatalf("server s%d has a spec of its own", i)
		}
	}
	_, err = mcpfsm.LoadConfig(write("servers.yaml", "version: 1\nservers:\n  a: {command: server, spec: broken.yaml}\n  b: {command: server, spec: broken.yaml}\n  c: {command: server, spec: ./broken.yaml}\n"))
	if err == nil || strings.Count(err.Error(), `initial state "nowhere" is not declared`) != 1 ||
		!strings.Contains(err.Error(), `servers.yaml:4:30: spec "broken.yaml" did not load (see line 3)`) ||
		!strings.Contains(err.Error(), `servers.yaml:5:30: spec "./broken.yaml" did not load (see line 3)`) {
		t.Errorf("a broken spec named three times:\n%v", err)
	}
}
