package gateway

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/mcpfsm/mcpfsm"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"
)

// This file turns each backend's last lists into what the front shows: every name
// mapped (filtered, prefixed or renamed), and each shown name routed to its backend.
// It is pure: a table is computed from the rules and the lists, never changed after.

// rules are how one server's names are shown, from its ServerConfig.
type rules struct {
	server           string
	prefix           string // "" for none
	include, exclude []string
	rename           map[string]string
}

func rulesOf(cfg *mcpfsm.Config) []rules {
	out := make([]rules, 0, len(cfg.Servers))
	for _, s := range cfg.Servers {
		out = append(out, rules{server: s.Name, prefix: s.NamePrefix(), include: s.Include, exclude: s.Exclude, rename: s.Rename})
	}
	return out
}

// shown reports whether a backend name passes the include and exclude patterns.
func (r *rules) shown(name string) bool {
	if len(r.include) > 0 && !slices.ContainsFunc(r.include, func(p string) bool { ok, _ := path.Match(p, name); return ok }) {
		return false
	}
	return !slices.ContainsFunc(r.exclude, func(p string) bool { ok, _ := path.Match(p, name); return ok })
}

// front returns the name a backend name is shown under. Renames apply to tools and
// prompts (renamable).
func (r *rules) front(name, sep string, renamable bool) string {
	if to, ok := r.rename[name]; ok && renamable {
		return to
	}
	if r.prefix == "" {
		return name
	}
	return r.prefix + sep + name
}

// listing is the gateway's own copy of what a backend last listed. It outlives the
// backend's sessions: a backend that is down keeps its items shown.
type listing struct {
	tools     []*mcp.Tool
	prompts   []*mcp.Prompt
	resources []*mcp.Resource
	templates []*mcp.ResourceTemplate
	// delivered are the lists the backend's connection has delivered (bits of
	// listTools, listPrompts, listResources): a backend has listed at startup
	// once it has delivered all three (see Gateway.setList).
	delivered uint8
}

// The lists of a listing, as bits of listing.delivered.
const (
	listTools uint8 = 1 << iota
	listPrompts
	listResources
	listAll = listTools | listPrompts | listResources
)

// A route is where a shown item goes: its server, and its name (a tool's or a
// prompt's) or URI (a resource's, a template's) there.
type route struct {
	server, name string
}

type shownTool struct {
	route
	front *mcp.Tool
}

type shownPrompt struct {
	route
	front *mcp.Prompt
}

type shownResource struct {
	route
	front *mcp.Resource
}

type shownTemplate struct {
	route
	front *mcp.ResourceTemplate
	match *uritemplate.Template // nil if the template does not parse
}

// A table is what the front shows, at one time.
type table struct {
	tools     map[string]shownTool     // by front name
	prompts   map[string]shownPrompt   // by front name
	resources map[string]shownResource // by URI
	templates []shownTemplate          // in config order, then the backend's
	rules     []rules                  // the config's, in its order
	sep       string
	// warnings are what is wrong with the names shown, each a sentence: a name
	// two servers would show (who kept it), a tool name an LLM API would refuse.
	warnings []warning
}

// A warning is something wrong with the names a table shows, for the log.
type warning struct {
	what, detail string
}

// llmName is the function-name rule of common LLM APIs (OpenAI's, Anthropic's):
// a host that hands the gateway's tools to one may be refused them all when one
// breaks it. MCP allows more (dots, 128 characters).
var llmName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// compute builds the table from the rules (config order) and the backends' lists. A
// name claimed twice goes to the first claimer in config order (within one server,
// in its list's order). The URI of the gateway's status resource (status, if set) is
// the gateway's: no backend's resource is shown there.
func compute(rs []rules, sep string, lists map[string]*listing, status string) *table {
	t := &table{
		tools: map[string]shownTool{}, prompts: map[string]shownPrompt{},
		resources: map[string]shownResource{}, rules: rs, sep: sep,
	}
	collide := func(kind, name, winner, loser string) {
		t.warnings = append(t.warnings, warning{"a name collides", fmt.Sprintf("%s %q of server %q hides server %q's", kind, name, winner, loser)})
	}
	templates := map[string]bool{}
	for i := range rs {
		r := &rs[i]
		l := lists[r.server]
		if l == nil {
			continue
		}
		for _, tool := range l.tools {
			if tool == nil || !r.shown(tool.Name) {
				continue
			}
			name := r.front(tool.Name, sep, true)
			if prev, dup := t.tools[name]; dup {
				collide("tool", name, prev.server, r.server)
				continue
			}
			if !llmName.MatchString(name) {
				t.warnings = append(t.warnings, warning{"a tool name breaks the function-name rule of common LLM APIs",
					fmt.Sprintf("tool %q of server %q is not %s: a host handing it to such an API may be refused every tool; rename it (rename:) or shorten the prefix", name, r.server, llmName)})
			}
			f := *tool
			f.Name = name
			t.tools[name] = shownTool{route{r.server, tool.Name}, &f}
		}
		for _, p := range l.prompts {
			if p == nil || !r.shown(p.Name) {
				continue
			}
			name := r.front(p.Name, sep, true)
			if prev, dup := t.prompts[name]; dup {
				collide("prompt", name, prev.server, r.server)
				continue
			}
			f := *p
			f.Name = name
			t.prompts[name] = shownPrompt{route{r.server, p.Name}, &f}
		}
		for _, res := range l.resources {
			if res == nil || !r.shown(res.Name) {
				continue
			}
			if status != "" && res.URI == status {
				t.warnings = append(t.warnings, warning{"a name collides", fmt.Sprintf("resource %q of server %q is hidden by the gateway's status resource", res.URI, r.server)})
				continue
			}
			if prev, dup := t.resources[res.URI]; dup {
				collide("resource", res.URI, prev.server, r.server)
				continue
			}
			f := *res
			f.Name = r.front(res.Name, sep, false)
			t.resources[res.URI] = shownResource{route{r.server, res.URI}, &f}
		}
		for _, tmpl := range l.templates {
			if tmpl == nil || !r.shown(tmpl.Name) {
				continue
			}
			if templates[tmpl.URITemplate] {
				collide("resource template", tmpl.URITemplate, t.templateOwner(tmpl.URITemplate), r.server)
				continue
			}
			templates[tmpl.URITemplate] = true
			f := *tmpl
			f.Name = r.front(tmpl.Name, sep, false)
			st := shownTemplate{route: route{r.server, tmpl.URITemplate}, front: &f}
			st.match, _ = uritemplate.New(tmpl.URITemplate)
			t.templates = append(t.templates, st)
		}
	}
	return t
}

func (t *table) templateOwner(uriTemplate string) string {
	for _, st := range t.templates {
		if st.name == uriTemplate {
			return st.server
		}
	}
	return ""
}

// resourceRoute returns the backend of a resource URI: the server that lists it, or
// else the first whose template matches it.
func (t *table) resourceRoute(uri string) (route, bool) {
	if r, ok := t.resources[uri]; ok {
		return r.route, true
	}
	for _, st := range t.templates {
		if st.match != nil && st.match.Regexp().MatchString(uri) {
			return route{st.server, uri}, true
		}
	}
	return route{}, false
}

// unknown explains why a front name (of a tool or prompt) is not shown. The name
// is quoted up to 128 characters (MCP's bound on a tool's name): a client's name
// of megabytes is not sent back whole.
func (t *table) unknown(kind, name string) string {
	for _, r := range t.rules {
		if r.prefix != "" && strings.HasPrefix(name, r.prefix+t.sep) {
			rest := strings.TrimPrefix(name, r.prefix+t.sep)
			return fmt.Sprintf("unknown %s %.128q: server %q (prefix %q) shows no %s %.128q", kind, name, r.server, r.prefix, kind, rest)
		}
	}
	var prefixes []string
	for _, r := range t.rules {
		if r.prefix != "" {
			prefixes = append(prefixes, r.prefix+t.sep)
		}
	}
	if len(prefixes) == 0 {
		return fmt.Sprintf("unknown %s %.128q: no server of this gateway shows it", kind, name)
	}
	return fmt.Sprintf("unknown %s %.128q: no server of this gateway shows it (names start with a server's prefix: %s)", kind, name, strings.Join(prefixes, ", "))
}
