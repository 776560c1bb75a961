package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// session is every MCP request the scenarios make.
type session interface {
	// ListTools lists the server's tools, every page.
	ListTools(ctx context.Context) ([]*mcp.Tool, error)
	// CallTool calls a tool. Nil args are sent as {}.
	CallTool(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, error)
	// Close ends the session.
	Close(ctx context.Context) error
}

// opener opens a session to the MCP server at serverURL, configured by opts.
type opener func(ctx context.Context, serverURL string, opts options) (session, error)

// options is what a scenario needs from its client besides the server's URL.
type options struct {
	// Elicit answers the server's elicitation requests. If nil, the client does not
	// advertise elicitation.
	Elicit func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)
	// OAuth, if set, authorizes the client's HTTP requests with the OAuth 2.1
	// authorization-code flow. It is set by the auth scenarios only.
	OAuth *oauthConfig
}

// oauthConfig is what the auth scenarios need from a client's OAuth configuration,
// independent of how a session takes it. The client registers itself in the first way
// the authorization server supports, in this order (the go-sdk's): a client ID metadata
// document, pre-registered credentials, dynamic client registration.
type oauthConfig struct {
	// RedirectURL is where the authorization server sends the user back to.
	RedirectURL string
	// Fetch plays the user: it visits the authorization URL and returns the code.
	Fetch auth.AuthorizationCodeFetcher
	// ClientIDMetadataURL is the client's ID when the server accepts client ID
	// metadata documents (CIMD, SEP-991).
	ClientIDMetadataURL string
	// Preregistered holds credentials the server already knows, if any; the suite
	// gives them in MCP_CONFORMANCE_CONTEXT. Its secret is never logged.
	Preregistered *oauthex.ClientCredentials
	// Registration is the metadata sent for dynamic client registration (RFC 7591).
	Registration *oauthex.ClientRegistrationMetadata
}

// conformanceContext is MCP_CONFORMANCE_CONTEXT: the fields the scenarios use.
type conformanceContext struct {
	Name         string `json:"name"`
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
}

// scenario runs one conformance scenario against the server at serverURL.
type scenario func(ctx context.Context, open opener, serverURL string, cc conformanceContext) error

// scenarios maps the suite's scenario names to their functions.
var scenarios = map[string]scenario{
	"initialize":                          runInitialize,
	"tools_call":                          runToolsCall,
	"elicitation-sep1034-client-defaults": runElicitationDefaults,
	"sse-retry":                           runSSERetry,
}

// authScenarios are the suite's auth scenarios (its `auth` suite, conformance 0.1.16).
// They all run the same client; the servers differ in what they offer and require.
var authScenarios = []string{
	"auth/metadata-default",
	"auth/metadata-var1",
	"auth/metadata-var2",
	"auth/metadata-var3",
	"auth/basic-cimd",
	"auth/scope-from-www-authenticate",
	"auth/scope-from-scopes-supported",
	"auth/scope-omitted-when-undefined",
	"auth/scope-step-up",
	"auth/scope-retry-limit",
	"auth/token-endpoint-auth-basic",
	"auth/token-endpoint-auth-post",
	"auth/token-endpoint-auth-none",
	"auth/pre-registration",
	// Protocol 2025-03-26 back-compatibility (not in the auth suite).
	"auth/2025-03-26-oauth-metadata-backcompat",
	"auth/2025-03-26-oauth-endpoint-fallback",
}

func init() {
	for _, name := range authScenarios {
		scenarios[name] = runAuth
	}
}

// Bounds on one run. The suite kills a client after 30 s by default; the client gives up
// first, so that it says why.
const (
	runTimeout   = 25 * time.Second
	closeTimeout = 5 * time.Second
)

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, openConn(nil)))
}

// run runs the scenario named in the environment against the URL in args and returns the
// process's exit status: 0 when the scenario ran to its end, 1 when it failed, 2 on a
// usage error.
func run(ctx context.Context, args []string, getenv func(string) string, open opener) int {
	name := getenv("MCP_CONFORMANCE_SCENARIO")
	if len(args) != 1 || name == "" {
		slog.Error("usage: MCP_CONFORMANCE_SCENARIO=NAME client URL", "scenarios", scenarioNames())
		return 2
	}
	f, ok := scenarios[name]
	if !ok {
		slog.Error("unknown scenario", "scenario", name, "scenarios", scenarioNames())
		return 2
	}
	var cc conformanceContext
	if raw := getenv("MCP_CONFORMANCE_CONTEXT"); raw != "" {
		// The context holds client secrets: an error names the problem, not the text.
		if err := json.Unmarshal([]byte(raw), &cc); err != nil {
			slog.Error("MCP_CONFORMANCE_CONTEXT is not a JSON object", "scenario", name)
			return 2
		}
	}
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	if err := f(ctx, open, args[0], cc); err != nil {
		slog.Error("scenario failed", "scenario", name, "err", err)
		return 1
	}
	return 0
}

func scenarioNames() string {
	names := make([]string, 0, len(scenarios))
	for name := range scenarios {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

// withSession opens a session, runs f on it and closes it. A failure to close is an
// error of the scenario too: a client that cannot end its session cleanly is not done.
func withSession(ctx context.Context, open opener, serverURL string, opts options, f func(session) error) (err error) {
	s, err := open(ctx, serverURL, opts)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if cerr := s.Close(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	return f(s)
}

// callListed lists the tools, checks that name is among them, and calls it with args. A
// result with IsError set fails the scenario: every scenario tool is meant to succeed.
func callListed(ctx context.Context, s session, name string, args map[string]any) error {
	tools, err := s.ListTools(ctx)
	if err != nil {
		return fmt.Errorf("list tools: %w", err)
	}
	if !slices.ContainsFunc(tools, func(t *mcp.Tool) bool { return t.Name == name }) {
		return fmt.Errorf("tool %q is not listed", name)
	}
	res, err := s.CallTool(ctx, name, args)
	if err != nil {
		return fmt.Errorf("call %q: %w", name, err)
	}
	if res.IsError {
		return fmt.Errorf("call %q: the tool failed: %s", name, resultText(res))
	}
	return nil
}

// resultText is the text content of a result, for error messages.
func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, " ")
}

// runInitialize: the client initializes a session and lists the tools.
func runInitialize(ctx context.Context, open opener, serverURL string, _ conformanceContext) error {
	return withSession(ctx, open, serverURL, options{}, func(s session) error {
		if _, err := s.ListTools(ctx); err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		return nil
	})
}

// runToolsCall: the client calls add_numbers with 5 and 3.
func runToolsCall(ctx context.Context, open opener, serverURL string, _ conformanceContext) error {
	return withSession(ctx, open, serverURL, options{}, func(s session) error {
		return callListed(ctx, s, "add_numbers", map[string]any{"a": 5, "b": 3})
	})
}

// runElicitationDefaults (SEP-1034): the tool asks the client for input whose schema has
// defaults; the client accepts with no content of its own, and the defaults of the schema
// must reach the server (the go-sdk's client fills them in before answering).
func runElicitationDefaults(ctx context.Context, open opener, serverURL string, _ conformanceContext) error {
	accept := func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}, nil
	}
	return withSession(ctx, open, serverURL, options{Elicit: accept}, func(s session) error {
		return callListed(ctx, s, "test_client_elicitation_defaults", nil)
	})
}

// runSSERetry: the server closes the call's event stream before the result, after an
// SSE retry field; the client must reconnect with GET and Last-Event-ID, after the given
// delay, and receive the result there.
func runSSERetry(ctx context.Context, open opener, serverURL string, _ conformanceContext) error {
	return withSession(ctx, open, serverURL, options{}, func(s session) error {
		return callListed(ctx, s, "test_reconnection", nil)
	})
}

// The auth scenarios' client identity. The suite's CIMD scenario expects exactly this
// client ID URL; the redirect URL is never listened on: fetchCode reads the redirect.
const (
	clientIDMetadataURL = "https://conformance-test.local/client-metadata.json"
	redirectURL         = "http://localhost:3000/callback"
)

// runAuth runs every auth scenario: a server that requires OAuth, whose authorization
// server the client must discover, register with, and get a token from (with the scopes
// the server asks for, stepping up when a call needs more), then list the tools and call
// test-tool.
func runAuth(ctx context.Context, open opener, serverURL string, cc conformanceContext) error {
	oc := &oauthConfig{
		RedirectURL:         redirectURL,
		Fetch:               fetchCode,
		ClientIDMetadataURL: clientIDMetadataURL,
		Registration:        &oauthex.ClientRegistrationMetadata{RedirectURIs: []string{redirectURL}},
	}
	if cc.ClientID != "" && cc.ClientSecret != "" {
		oc.Preregistered = &oauthex.ClientCredentials{
			ClientID:         cc.ClientID,
			ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: cc.ClientSecret},
		}
	}
	return withSession(ctx, open, serverURL, options{OAuth: oc}, func(s session) error {
		if _, err := s.ListTools(ctx); err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		res, err := s.CallTool(ctx, "test-tool", nil)
		if err != nil {
			return fmt.Errorf("call %q: %w", "test-tool", err)
		}
		if res.IsError {
			return fmt.Errorf("call %q: the tool failed: %s", "test-tool", resultText(res))
		}
		return nil
	})
}

// fetchCode plays the user at the authorization server: the suite's authorization server
// redirects at once to the redirect URL with the code, the state and (RFC 9207) the
// issuer, which are read from the redirect instead of following it.
func fetchCode(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
	client := &http.Client{
		Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, args.URL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	loc := resp.Header.Get("Location")
	if loc == "" {
		return nil, fmt.Errorf("authorization endpoint answered %s without a redirect", resp.Status)
	}
	u, err := url.Parse(loc)
	if err != nil {
		return nil, errors.New("authorization endpoint redirected to an unparsable URL")
	}
	q := u.Query()
	return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
}
