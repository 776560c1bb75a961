package mcpfsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	yaml "go.yaml.in/yaml/v3"
)

// A Config lists MCP servers: how to reach each, and how its connection is tuned. Load
// one with LoadConfig; open its servers with NewManager.
//
// The format (YAML):
//
//	version: 1
//	spec: lifecycle.yaml          # optional: a custom lifecycle for every server
//	policies:                     # optional: overrides of transitions.yaml's policies for every server
//	  keepalive_interval: 15s
//	servers:
//	  files:                      # a name: letters, digits, - and _
//	    command: mcp-server-files # stdio: run this program (never through a shell)
//	    args: [/srv]
//	    env: {API_TOKEN: "${FILES_TOKEN}"}  # added to the inherited environment
//	    cwd: /srv                 # optional working directory
//	    stderr: logs/files.err    # optional: the child's stderr: discard (the default), inherit, or a file
//	    policies: {connect_timeout: 5s}     # optional: this server's overrides
//	    spec: custom.yaml         # optional: this server's own lifecycle
//	  search:
//	    url: https://example.com/mcp        # streamable HTTP
//	    transport: sse            # optional: sse for the legacy SSE transport
//	    headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}
//	    protocol: 2025-11-25      # optional: the protocol version to ask for (default: the newest)
//
// The gateway (mcpfsm serve) reads a few more keys: how the names of each server's
// tools, prompts and resources are shown to its clients.
//
//	gateway:
//	  separator: "__"             # optional: between a prefix and a name (the default)
//	servers:
//	  files:
//	    command: mcp-server-files
//	    prefix: fs                # optional: fs__read_file; the server's name by default; "" for none
//	    include: ["read_*"]       # optional: only names matching one of these patterns
//	    exclude: ["*_dangerous"]  # optional: not names matching one of these
//	    rename: {read_file: cat}  # optional: a name shown exactly as given, without the prefix
//
// Patterns are those of path.Match (* ? [...]) and apply to the server's own names
// of tools, prompts, resources and resource templates; rename applies to tools and
// prompts. A config whose shown names could collide is refused: two servers with one
// prefix, a prefix that extends another's (fs and fs__x), two renames to one name, or a
// rename into another server's prefixed names. Names that collide only by what the
// servers list (a server with prefix "" beside another) are resolved when they are
// listed: the server written first keeps the name.
//
// ${NAME} in a command, its args, env values, cwd, stderr, a url or header values is
// replaced by the environment variable NAME, which must be set; $$ writes a literal $.
// Paths (spec, cwd, stderr, and a command that contains a slash) are relative to the
// config file's directory; a command with a slash is always a path, never looked up in
// PATH. A stdio server's stderr is discarded unless stderr says inherit (mcpfsm's own
// stderr) or names a file, which is appended to and created with mode 0600. A header
// name may appear once, in whatever letter case. Every problem is reported with its
// file:line:column, and no message quotes a value of env, headers or args.
type Config struct {
	File    string         // the file it was read from; relative paths in it are from its directory
	Servers []ServerConfig // in file order
	// Separator goes between a server's prefix and its names in the gateway; ""
	// means DefaultSeparator.
	Separator string
}

// DefaultSeparator is the gateway's separator between a server's prefix and its names:
// with letters, digits and _ in server names, prefixed names satisfy the function-name
// rule of common LLM APIs, ^[a-zA-Z0-9_-]{1,64}$, which a dot would not.
const DefaultSeparator = "__"

// NameSeparator returns the separator the gateway puts between a prefix and a name.
func (c *Config) NameSeparator() string {
	if c.Separator == "" {
		return DefaultSeparator
	}
	return c.Separator
}

// A ServerConfig is one server of a Config, resolved.
type ServerConfig struct {
	Name      string           // the server's name, its key under servers
	Transport transport.Config // how to reach it: command, url, headers, auth...
	Spec      *machine.Spec    // the lifecycle; DefaultSpec() unless the config names one
	SpecFile  string           // the file Spec came from, "" for the default
	specText  []byte           // its contents, to tell a changed spec on reload
	// Policies are the spec's defaults with the config's overrides; the zero value
	// means the spec's defaults.
	Policies machine.Policies

	// How the gateway (mcpfsm serve) shows the server's names (see Config).
	Prefix  *string           // nil: the server's name; "": names pass unchanged
	Include []string          // path.Match patterns: if any, only names matching one are shown
	Exclude []string          // names matching one of these are not shown
	Rename  map[string]string // a server's name to the name shown, exactly (no prefix)
}

// NamePrefix returns the prefix the gateway puts before the server's names, separator
// excluded: Prefix if set, else the server's name.
func (s ServerConfig) NamePrefix() string {
	if s.Prefix != nil {
		return *s.Prefix
	}
	return s.Name
}

// Server returns the named server's config.
func (c *Config) Server(name string) (ServerConfig, bool) {
	for _, s := range c.Servers {
		if s.Name == name {
			return s, true
		}
	}
	return ServerConfig{}, false
}

// LoadConfig reads and validates a servers config file, expanding ${VAR} from the
// process's environment.
func LoadConfig(path string) (*Config, error) {
	data, err := machine.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig(path, data, os.LookupEnv)
}

// ParseConfig validates a servers config. file names data in messages and is the base
// of its relative paths; lookup reads environment variables.
func ParseConfig(file string, data []byte, lookup func(string) (string, bool)) (*Config, error) {
	p := &configParser{r: machine.YAMLReader{File: file}, dir: filepath.Dir(file), lookup: lookup}
	root := p.r.Parse(data)
	if root == nil {
		return nil, p.r.Err()
	}
	cfg := &Config{File: file}
	top := p.r.Struct(root, "the config", "version!", "spec", "policies", "gateway", "servers!")
	if f := top["version"]; f.Value != nil {
		if v, ok := p.r.String(f.Value, "version"); ok && v != "1" {
			p.r.Errorf(f.Value, "version %s is not supported (this is version 1)", machine.Quote(v))
		}
	}
	spec, specFile, specText := DefaultSpec(), "", []byte(nil)
	if f := top["spec"]; f.Value != nil {
		spec, specFile, specText = p.spec(f.Value)
	}
	var global []policyOverride
	if f := top["policies"]; f.Value != nil {
		global = p.policies(f.Value)
	}
	if f := top["gateway"]; f.Value != nil {
		cfg.Separator = p.gateway(f.Value)
	}
	if f := top["servers"]; f.Value != nil {
		fields := p.r.Mapping(f.Value, "servers")
		if len(fields) == 0 && f.Value.Kind == yaml.MappingNode {
			p.r.Errorf(f.Value, "servers is empty")
		}
		for _, sf := range fields {
			if s, ok := p.server(sf, spec, specFile, specText, global); ok {
				cfg.Servers = append(cfg.Servers, s)
			}
		}
		p.checkNames(cfg.NameSeparator())
	}
	if err := p.r.Err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// configParser holds what a ParseConfig call has read.
type configParser struct {
	r      machine.YAMLReader
	dir    string
	lookup func(string) (string, bool)
	names  []shownNames // each server's naming keys, for checkNames
	// specs holds each spec file loaded so far, by path: a file named by many
	// servers is read, loaded and held once (2,000 servers naming a 1 MiB spec
	// took 3.7 GB and 14 s), and its problems are listed once.
	specs map[string]*loadedSpec
}

type loadedSpec struct {
	spec *machine.Spec
	data []byte
	bad  *yaml.Node // where the config first named it, if it did not load
}

var serverName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

type policyOverride struct {
	name, value string
	at          *yaml.Node
}

func (p *configParser) server(sf machine.Field, spec *machine.Spec, specFile string, specText []byte, global []policyOverride) (ServerConfig, bool) {
	name := sf.Name()
	what := "server " + machine.Quote(name)
	if !serverName.MatchString(name) {
		p.r.Errorf(sf.Key, "server name %s may hold only letters, digits, - and _", machine.Quote(name))
	}
	body := p.r.Struct(sf.Value, what, "command", "args", "env", "cwd", "stderr", "url", "transport", "headers", "protocol", "policies", "spec", "auth",
		"prefix", "include", "exclude", "rename")
	if body == nil {
		return ServerConfig{}, false
	}
	s := ServerConfig{Name: name, Spec: spec, SpecFile: specFile, specText: specText}
	s.Transport.Name = name
	has := func(key string) bool { return body[key].Value != nil }
	switch {
	case has("command") && has("url"):
		p.r.Errorf(body["url"].Key, "%s has both a command (stdio) and a url (HTTP): give one", what)
	case !has("command") && !has("url"):
		p.r.Errorf(sf.Value, "%s has neither a command (stdio) nor a url (HTTP)", what)
	case has("command"):
		for _, key := range []string{"transport", "headers"} {
			if has(key) {
				p.r.Errorf(body[key].Key, "%s runs a command: %s is for servers reached by url", what, key)
			}
		}
		st := &transport.Stdio{}
		if cmd, ok := p.expand(body["command"].Value, "command"); ok && cmd == "" {
			p.r.Errorf(body["command"].Value, "%s command is empty", what)
		} else if ok && p.noNUL(body["command"].Value, what+" command", cmd) {
			// A command with a slash is a path, always: made absolute, it can neither
			// be looked up in PATH (filepath.Join(".", "./server") is "server") nor be
			// taken relative to cwd (as exec does with a relative path).
			if strings.ContainsRune(cmd, '/') {
				cmd = p.path(cmd)
			}
			st.Command = cmd
		}
		if f := body["args"]; f.Value != nil {
			if f.Value.Kind != yaml.SequenceNode {
				p.r.Errorf(f.Value, "%s args must be a list, found %s", what, shape(f.Value))
			} else {
				for i, a := range f.Value.Content {
					arg := fmt.Sprintf("%s argument %d", what, i+1)
					if v, ok := p.expandAny(a, arg); ok && p.noNUL(a, arg, v) {
						st.Args = append(st.Args, v)
					}
				}
			}
		}
		if f := body["env"]; f.Value != nil {
			st.Env = p.stringMap(f.Value, what+" env", envVarName, "a name without = or NUL", false)
		}
		if f := body["cwd"]; f.Value != nil {
			if dir, ok := p.expand(f.Value, "cwd"); ok && p.noNUL(f.Value, what+" cwd", dir) {
				st.Dir = p.path(dir)
			}
		}
		if f := body["stderr"]; f.Value != nil {
			st.Stderr = p.stderr(f.Value, what)
		}
		s.Transport.Stdio = st
	default:
		for _, key := range []string{"args", "env", "cwd", "stderr"} {
			if has(key) {
				p.r.Errorf(body[key].Key, "%s is reached by url: %s is for servers run by a command", what, key)
			}
		}
		h := &transport.HTTP{}
		if u, ok := p.expand(body["url"].Value, "url"); ok {
			if parsed, err := url.Parse(u); err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
				p.r.Errorf(body["url"].Value, "%s url is not an http or https URL", what)
			}
			h.URL = u
		}
		if f := body["headers"]; f.Value != nil {
			h.Headers = p.stringMap(f.Value, what+" headers", headerName, "an HTTP token (letters, digits and !#$%&'*+-.^_`|~)", true)
		}
		s.Transport.HTTP = h
		if f := body["transport"]; f.Value != nil {
			switch v, ok := p.r.String(f.Value, "transport"); {
			case !ok:
			case v == "http" || v == "streamable":
			case v == "sse":
				s.Transport.HTTP, s.Transport.SSE = nil, h
			default:
				// Not quoted: it is one of two words, and a value in the wrong place
				// may be anything.
				p.r.Errorf(f.Value, "%s transport must be http or sse", what)
			}
		}
	}
	if f := body["auth"]; f.Value != nil {
		p.serverAuth(f, what, name, &s.Transport)
	}
	if f := body["spec"]; f.Value != nil {
		s.Spec, s.SpecFile, s.specText = p.spec(f.Value)
	}
	var local []policyOverride
	if f := body["policies"]; f.Value != nil {
		local = p.policies(f.Value)
	}
	if f := body["protocol"]; f.Value != nil {
		if v, ok := p.r.String(f.Value, what+" protocol"); ok {
			if !slices.Contains(mcp.SupportedProtocolVersions(), v) {
				p.r.Errorf(f.Value, "%s protocol %s is not a version the client speaks (%s)", what, machine.Quote(v), strings.Join(mcp.SupportedProtocolVersions(), ", "))
			} else {
				s.Transport.ProtocolVersion = v
			}
		}
	}
	p.shown(&s, sf, body)
	if s.Spec == nil {
		return s, false
	}
	s.Policies = s.Spec.Defaults()
	for _, o := range append(global, local...) {
		if err := s.Policies.Set(o.name, o.value); err != nil {
			p.r.Errorf(o.at, "%s: %v", what, err)
		}
	}
	var pe *machine.PolicyError
	if err := s.Policies.Validate(); errors.As(err, &pe) {
		for _, problem := range pe.Problems {
			p.r.Errorf(sf.Key, "%s: %s", what, problem)
		}
	}
	return s, true
}

// spec loads a lifecycle file named in the config; its problems are reported in its
// own file, and the config says where it was named.
func (p *configParser) spec(n *yaml.Node) (*machine.Spec, string, []byte) {
	name, ok := p.r.String(n, "spec")
	if !ok {
		return nil, "", nil
	}
	if !p.noNUL(n, "spec", name) {
		return nil, "", nil
	}
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(p.dir, path)
	}
	if l, ok := p.specs[path]; ok {
		if l.bad != nil {
			p.r.Errorf(n, "spec %s did not load (see line %d)", machine.Quote(name), l.bad.Line)
			return nil, "", nil
		}
		return l.spec, path, l.data
	}
	if p.specs == nil {
		p.specs = map[string]*loadedSpec{}
	}
	p.specs[path] = &loadedSpec{bad: n} // until it loads
	data, err := machine.ReadFile(path)
	if err != nil {
		where := ""
		if path != name {
			where = " (" + machine.Quote(path) + ")"
		}
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		p.r.Errorf(n, "spec %s%s: %v", machine.Quote(name), where, err)
		return nil, "", nil
	}
	spec, err := LoadSpec(path, data)
	if err != nil {
		p.r.Errorf(n, "spec %s is not valid:\n%v", machine.Quote(name), err)
		return nil, "", nil
	}
	p.specs[path] = &loadedSpec{spec: spec, data: data}
	return spec, path, data
}

// path resolves a path written in the config (a command with a slash, cwd, stderr):
// relative to the config file's directory, and made absolute so that it means the same
// whatever the process's or the child's working directory.
func (p *configParser) path(name string) string {
	if !filepath.IsAbs(name) {
		name = filepath.Join(p.dir, name)
	}
	if abs, err := filepath.Abs(name); err == nil {
		return abs
	}
	if !filepath.IsAbs(name) && !strings.HasPrefix(name, ".") {
		name = "./" + name // still a path, never a name to look up in PATH
	}
	return name
}

// noNUL reports whether v holds no NUL byte, recording a problem (which does not quote
// v) if it does: no command, argument or path can hold one, and the child would fail
// to start only at run time.
func (p *configParser) noNUL(n *yaml.Node, what, v string) bool {
	if strings.ContainsRune(v, 0) {
		p.r.Errorf(n, "%s holds a NUL byte: not allowed", what)
		return false
	}
	return true
}

// stderr reads where a stdio server's stderr goes: inherit (mcpfsm's own stderr),
// discard (the default), or a file, appended to.
func (p *configParser) stderr(n *yaml.Node, what string) io.Writer {
	v, ok := p.expand(n, what+" stderr")
	if !ok || !p.noNUL(n, what+" stderr", v) {
		return nil
	}
	switch v {
	case "inherit":
		return os.Stderr
	case "discard":
		return nil
	}
	path := p.path(v)
	info, err := os.Stat(path)
	switch {
	case err == nil && !info.Mode().IsRegular():
		p.r.Errorf(n, "%s stderr %s is not a regular file", what, machine.Quote(n.Value))
		return nil
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		if dir, err := os.Stat(filepath.Dir(path)); err != nil || !dir.IsDir() {
			p.r.Errorf(n, "%s stderr %s: its directory does not exist", what, machine.Quote(n.Value))
			return nil
		}
	default:
		p.r.Errorf(n, "%s stderr %s: %v", what, machine.Quote(n.Value), errors.Unwrap(err))
		return nil
	}
	return &appendFile{path: path}
}

// appendFile is a stdio server's stderr routed to a file. Each write opens the file for
// appending (creating it 0600: what a server prints may hold secrets), writes and closes
// it, so that a Config, which is loaded again on every reload and never closed, holds
// no open file. A write that fails is dropped: a child's stderr must never stall it.
type appendFile struct{ path string }

func (f *appendFile) Write(b []byte) (int, error) {
	// O_NONBLOCK: a FIFO put in the file's place must not hang the copy.
	fh, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NONBLOCK, 0o600)
	if err == nil {
		_, _ = fh.Write(b)
		_ = fh.Close()
	}
	return len(b), nil
}

// policies reads a mapping of policy overrides, checking each name and value.
func (p *configParser) policies(n *yaml.Node) []policyOverride {
	var out []policyOverride
	var scratch machine.Policies
	for _, f := range p.r.Mapping(n, "policies") {
		v, ok := p.r.String(f.Value, "policy "+f.Name())
		if !ok {
			continue
		}
		if err := scratch.Set(f.Name(), v); err != nil {
			at := f.Value
			if _, known := machine.LookupPolicy(f.Name()); !known {
				at = f.Key
			}
			p.r.Errorf(at, "%v", err)
			continue
		}
		out = append(out, policyOverride{name: f.Name(), value: v, at: f.Value})
	}
	return out
}

// stringMap reads a mapping of names to values (env, headers). A name must match
// validName, and may not repeat (ignoring case, with foldCase: two spellings of one
// header would leave which one is sent to chance); a value, once expanded, must hold
// no control character (a newline would split a header). Messages name the entry,
// never its value, and never quote a name that is not one: it may be a value written
// in its place (env: {API_KEY=SEKRIT} is a mapping with one key).
func (p *configParser) stringMap(n *yaml.Node, what string, validName *regexp.Regexp, nameRule string, foldCase bool) map[string]string {
	if n.Kind != yaml.MappingNode {
		p.r.Errorf(n, "%s must be a mapping of names to values, found %s", what, shape(n))
		return nil
	}
	out := map[string]string{}
	seen := map[string]string{} // the name as compared to the name as written
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || !validName.MatchString(k.Value) {
			p.r.Errorf(k, "%s: a name must be %s", what, nameRule)
			continue
		}
		name, key := k.Value, k.Value
		if foldCase {
			key = strings.ToLower(key)
		}
		if first, dup := seen[key]; dup {
			if first == name {
				p.r.Errorf(k, "duplicate key %q in %s", name, what)
			} else {
				p.r.Errorf(k, "%s %s and %s are one name (letter case does not count): give one", what, first, name)
			}
			continue
		}
		seen[key] = name
		v, ok := p.expandAny(val, what+" "+name)
		if !ok {
			continue
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
			p.r.Errorf(val, "%s %s holds a control character (a newline, say): not allowed", what, name)
			continue
		}
		out[name] = v
	}
	return out
}

// shape says what kind of YAML value n is, without quoting it: a value in the wrong
// place may be a secret.
func shape(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.ScalarNode && n.Tag != "!!null":
		return "a single value"
	}
	return "nothing"
}

var (
	headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	envVarName = regexp.MustCompile("^[^=\\x00]+$")
)

// expand reads a non-empty string and expands ${VAR} in it.
func (p *configParser) expand(n *yaml.Node, what string) (string, bool) {
	s, ok := p.r.String(n, what)
	if !ok {
		return "", false
	}
	return p.substitute(n, s)
}

// expandAny is expand for a value that may be empty.
func (p *configParser) expandAny(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.r.Errorf(n, "%s must be a single value", what)
		return "", false
	}
	return p.substitute(n, n.Value)
}

// substitute replaces ${NAME} with the environment variable NAME and $$ with $. The
// problems it reports name the variable, never its value.
func (p *configParser) substitute(n *yaml.Node, s string) (string, bool) {
	if !strings.Contains(s, "$") {
		return s, true
	}
	var b bytes.Buffer
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "$$"):
			b.WriteByte('$')
			i++
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				p.r.Errorf(n, "unterminated ${ (write $$ for a literal $)")
				return "", false
			}
			name := s[i+2 : i+end]
			if !envName.MatchString(name) {
				// Not quoted: the text may be part of a secret.
				p.r.Errorf(n, "a ${...} does not name an environment variable (letters, digits and _, not starting with a digit)")
				return "", false
			}
			v, ok := p.lookup(name)
			if !ok {
				p.r.Errorf(n, "environment variable %s is not set", name)
				return "", false
			}
			b.WriteString(v)
			i += end
		default:
			p.r.Errorf(n, "a $ must start ${NAME} or be doubled ($$)")
			return "", false
		}
	}
	return b.String(), true
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// The gateway's names: what mcpfsm serve shows of each server's names.

var (
	// shownName is what a prefix, a separator and a renamed name may hold: the
	// characters MCP allows in tool names.
	shownName = regexp.MustCompile(`^[A-Za-z0-9_.-]*$`)
)

// shownNames is one server's naming keys, with where they were written.
type shownNames struct {
	server  string
	prefix  string
	at      *yaml.Node // the prefix's value, or the server's key when it has none
	renames []renamed
}

type renamed struct {
	from, to string
	at       *yaml.Node
}

// gateway reads the gateway's own settings and returns the separator ("" if unset).
func (p *configParser) gateway(n *yaml.Node) string {
	body := p.r.Struct(n, "gateway", "separator")
	f := body["separator"]
	if f.Value == nil {
		return ""
	}
	v, ok := p.r.String(f.Value, "gateway separator")
	if !ok {
		return ""
	}
	if !shownName.MatchString(v) || len(v) > 8 {
		p.r.Errorf(f.Value, "gateway separator %s may hold only 1 to 8 letters, digits, _, - and .", machine.Quote(v))
		return ""
	}
	return v
}

// shown reads a server's prefix, include, exclude and rename keys into s.
func (p *configParser) shown(s *ServerConfig, sf machine.Field, body map[string]machine.Field) {
	what := "server " + machine.Quote(s.Name)
	names := shownNames{server: s.Name, prefix: s.Name, at: sf.Key}
	if f := body["prefix"]; f.Value != nil {
		switch v := f.Value; {
		case v.Kind != yaml.ScalarNode || v.Tag == "!!null":
			p.r.Errorf(v, "%s prefix must be a single value (\"\" for none), found %s", what, shape(v))
		case !shownName.MatchString(v.Value) || len(v.Value) > 64:
			p.r.Errorf(v, "%s prefix %s may hold only letters, digits, _, - and . (at most 64)", what, machine.Quote(v.Value))
		default:
			prefix := v.Value
			s.Prefix, names.prefix, names.at = &prefix, prefix, v
		}
	}
	for _, key := range []string{"include", "exclude"} {
		f := body[key]
		if f.Value == nil {
			continue
		}
		var patterns []string
		for _, n := range p.r.Strings(f.Value, what+" "+key+" pattern") {
			if _, err := path.Match(n.Value, ""); err != nil {
				p.r.Errorf(n, "%s %s pattern %s is not a valid pattern (path.Match: * ? [...] \\)", what, key, machine.Quote(n.Value))
				continue
			}
			patterns = append(patterns, n.Value)
		}
		if key == "include" {
			s.Include = patterns
		} else {
			s.Exclude = patterns
		}
	}
	if f := body["rename"]; f.Value != nil {
		for _, r := range p.r.Mapping(f.Value, what+" rename") {
			to, ok := p.r.String(r.Value, what+" rename of "+machine.Quote(r.Name()))
			if !ok {
				continue
			}
			if !shownName.MatchString(to) || len(to) > 128 {
				p.r.Errorf(r.Value, "%s renames %s to %s: a name may hold only letters, digits, _, - and . (at most 128)", what, machine.Quote(r.Name()), machine.Quote(to))
				continue
			}
			if s.Rename == nil {
				s.Rename = map[string]string{}
			}
			s.Rename[r.Name()] = to
			names.renames = append(names.renames, renamed{from: r.Name(), to: to, at: r.Value})
		}
	}
	p.names = append(p.names, names)
}

// checkNames refuses names that could collide in the gateway: two servers with one
// prefix, a prefix that extends another's (with sep "__", fs and fs__x: fs's tool
// x__y and fs__x's tool y are both fs__x__y), two renames to one name, a rename into
// another server's prefixed names. Each problem is reported where the later of the
// two was written.
func (p *configParser) checkNames(sep string) {
	claimed := map[string]renamed{} // renamed names, by name
	owner := map[string]string{}    // the server of each renamed name
	for i, a := range p.names {
		for _, b := range p.names[:i] {
			switch {
			case a.prefix == "" || b.prefix == "":
			case a.prefix == b.prefix:
				p.r.Errorf(a.at, "servers %s and %s have one prefix, %s: their names would collide (give one a prefix: of its own)",
					machine.Quote(b.server), machine.Quote(a.server), machine.Quote(a.prefix))
			case strings.HasPrefix(a.prefix+sep, b.prefix+sep) || strings.HasPrefix(b.prefix+sep, a.prefix+sep):
				long, short := a, b
				if len(b.prefix) > len(a.prefix) {
					long, short = b, a
				}
				rest := strings.TrimPrefix(long.prefix+sep, short.prefix+sep)
				p.r.Errorf(a.at, "the names of servers %s (prefix %s) and %s (prefix %s) can collide: %s's x is %s, and so is %s's %s (give one another prefix)",
					machine.Quote(short.server), machine.Quote(short.prefix), machine.Quote(long.server), machine.Quote(long.prefix),
					long.server, machine.Quote(long.prefix+sep+"x"), short.server, machine.Quote(rest+"x"))
			}
		}
		for _, r := range a.renames {
			if first, dup := claimed[r.to]; dup {
				p.r.Errorf(r.at, "server %s renames %s to %s, which server %s already gives %s", machine.Quote(a.server), machine.Quote(r.from),
					machine.Quote(r.to), machine.Quote(owner[r.to]), machine.Quote(first.from))
				continue
			}
			claimed[r.to], owner[r.to] = r, a.server
		}
	}
	for _, a := range p.names {
		for _, r := range a.renames {
			for _, b := range p.names {
				if b.server != a.server && b.prefix != "" && strings.HasPrefix(r.to, b.prefix+sep) {
					p.r.Errorf(r.at, "server %s renames %s to %s, a name of server %s (prefix %s): they could collide",
						machine.Quote(a.server), machine.Quote(r.from), machine.Quote(r.to), machine.Quote(b.server), machine.Quote(b.prefix))
				}
			}
		}
	}
}
