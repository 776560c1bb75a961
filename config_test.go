package mcpfsm_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/transport"
)

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
	want := []transport.Config{
		{Name: "files", Stdio: &transport.Stdio{
			Command: filepath.Join("testdata/config", "bin/server"), Args: []string{"--root", "/srv", "price: $5"},
			Env: map[string]string{"API_TOKEN": "s3cret-token"}, Dir: filepath.Join("testdata/config", "work"),
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
// compares the whole error with the golden .err file beside it.
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
			fresh(t, strings.TrimSuffix(file, ".yaml")+".err", err.Error()+"\n")
		})
	}
}

// TestConfigSecretsStayOut: an error about a value that holds a secret names the
// variable and the place, never the value.
func TestConfigSecretsStayOut(t *testing.T) {
	const secret = "MARKER-SECRET-7f3a"
	for _, text := range []string{
		"version: 1\nservers:\n  s:\n    url: https://h/mcp\n    headers: {A: \"Bearer " + secret + " $x\"}\n",
		"version: 1\nservers:\n  s:\n    url: https://h/mcp\n    headers: {A: \"${T\"}\n    transport: " + secret + "x\n",
		"version: 1\nservers:\n  s:\n    url: \"https://" + secret + "@h/mcp ${UNSET}\"\n",
	} {
		_, err := mcpfsm.ParseConfig("c.yaml", []byte(text), env(map[string]string{"T": secret}))
		if err == nil {
			t.Fatalf("accepted %q", text)
		}
		if strings.Contains(err.Error(), secret) && !strings.Contains(text, "transport: "+secret) {
			t.Errorf("the error quotes a secret: %v", err)
		}
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
