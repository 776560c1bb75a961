package faults_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Marker secrets, one for each place a secret is given to a transport.
const (
	secretHeader = "hdrMARKERq7f3a" // Authorization: Bearer ...
	secretToken  = "tokMARKERz9c1d" // X-Api-Key
	secretEnv    = "envMARKERk2b8e" // a stdio server's environment
	secretUser   = "usrMARKERw5e0c" // URL userinfo
	secretPass   = "pwdMARKERj8d4f"
	secretQuery  = "qryMARKERv1a6b" // URL query value
	secretArg    = "argMARKERh3n7s" // a stdio server's argument (--token=...)
	// A configured Authorization: Basic header's user and password, which a
	// server may decode and quote.
	secretBasicUser = "busMARKERc4x2m"
	secretBasicPass = "bpwMARKERt6q9r"
)

// basicAuth is the configured header value that carries secretBasicUser and
// secretBasicPass.
var basicAuth = "Basic " + base64.StdEncoding.EncodeToString([]byte(secretBasicUser+":"+secretBasicPass))

// secretForms are the markers and the forms they travel in (userinfo goes out as
// basic auth).
var secretForms = []string{
	secretHeader, secretToken, secretEnv, secretUser, secretPass, secretQuery, secretArg,
	secretBasicUser, secretBasicPass,
	base64.StdEncoding.EncodeToString([]byte(secretUser + ":" + secretPass)),
	base64.StdEncoding.EncodeToString([]byte(secretBasicUser + ":" + secretBasicPass)),
}

// TestSecretsNeverLeak plants marker secrets in HTTP headers (a bearer token, an API
// key, and basic auth whose user and password a server decodes and quotes), URL
// userinfo and query, and a stdio server's environment and arguments; drives
// connections and a Manager through failures (a server that refuses the credentials
// and quotes them back, a child that prints its environment and arguments on stderr
// and exits, connection refused, outages, expired and dropped sessions, crashes,
// forced closes, reloads to a refused port and to an invalid server, invalid configs);
// and searches every output for the markers: log records (text, JSON and each
// attribute's value), transitions (observer, watch, history, the Manager's observer,
// with their errors), every error the API returned (Conn and Manager calls, Reload,
// Close) down its whole errors.Unwrap chain in every common rendering, stderr tails,
// Status, graphs drawn with the connection's path, config descriptions, and the
// servers config loader's errors. A marker anywhere mcpfsm wrote it fails the test.
// The cause a *transport.Error wraps unchanged (the SDK's, the OS's or the server's own
// text, kept so that errors.Is and errors.As see through it) is searched too, and must
// have quoted each kind of secret, so that it is redaction, not luck, that kept them
// out; the children must have printed theirs on stderr (the caller's own sink).
func TestSecretsNeverLeak(t *testing.T) {
	base := takeBaseline(t)
	t.Cleanup(func() { base.check(t) })
	out := &leakOutputs{rawQuotes: map[string]int{}}

	t.Run("http server refuses and quotes the credentials", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			quoted := fmt.Sprintf("%s|%s|%s|%s", r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), r.URL.RawQuery, r.URL.String())
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"bad credentials %s"}}`, strings.ReplaceAll(quoted, `"`, `'`))
		}))
		defer srv.Close()
		// A refusal of the credentials parks the connection in unauthorized until a
		// re-check, which comes at once here so that the refusal is met again.
		pol := secretPolicies()
		pol.AuthRecheckInterval = 20 * time.Millisecond
		c := out.open(t, "bad-auth", secretHTTPConfig(srv.URL+"/mcp", false), pol)
		c.waitFor(t, func(st states.State) bool { return st == states.Unauthorized })
		c.waitAttempts(t, 3)
		c.call(t, 300*time.Millisecond)
		c.close(t)
	})

	t.Run("http server decodes basic auth and quotes the user and password", func(t *testing.T) {
		srv := quotingServer(t)
		pol := secretPolicies()
		pol.AuthRecheckInterval = 20 * time.Millisecond
		cfg := transport.Config{Name: "basic-auth", HTTP: &transport.HTTP{URL: srv.URL + "/mcp", Headers: map[string]string{"Authorization": basicAuth}}}
		c := out.open(t, "basic-auth", cfg, pol)
		c.waitFor(t, func(st states.State) bool { return st == states.Unauthorized })
		c.waitAttempts(t, 3)
		c.call(t, 300*time.Millisecond)
		c.close(t)
	})

	t.Run("stdio server printing its environment and arguments on stderr", func(t *testing.T) {
		cfg := transport.Config{Name: "stdio-loud", Stdio: &transport.Stdio{
			Command: shell(t), Args: []string{"-c", loudScript, "sh", "--token=" + secretArg},
			Env: map[string]string{"API_KEY": secretEnv}, Stderr: &out.stderr,
		}}
		c := out.open(t, "stdio-loud", cfg, nil)
		c.waitFor(t, func(st states.State) bool { return st == states.BreakerOpen })
		c.waitAttempts(t, 2)
		c.call(t, 300*time.Millisecond)
		c.close(t)
	})

	t.Run("manager: calls, reloads, observer, status", func(t *testing.T) {
		out.manager(t)
	})

	t.Run("http refused, then the breaker", func(t *testing.T) {
		addr := refusedAddr(t) // nothing listens there
		c := out.open(t, "refused", secretHTTPConfig("http://"+addr+"/mcp", false), nil)
		c.waitFor(t, func(st states.State) bool { return st == states.BreakerOpen })
		c.call(t, 300*time.Millisecond)
		c.close(t)
	})

	t.Run("http and sse through outages, expiry, dropped sessions", func(t *testing.T) {
		for _, sse := range []bool{false, true} {
			j := newJournalServer()
			flap := startFlapping(t, j, sse)
			c := out.open(t, fmt.Sprintf("flapping(sse=%v)", sse), secretHTTPConfig(flap.URL(), sse), nil)
			c.ready(t)
			c.call(t, 5*time.Second)
			flap.down()
			c.conn.Reconnect()
			c.waitAttempts(t, 2)
			c.call(t, 300*time.Millisecond)
			flap.up(true)
			c.ready(t)
			flap.forget() // the session expires: the next call meets a 404
			c.call(t, 5*time.Second)
			c.ready(t)
			j.dropSessions()
			c.call(t, 5*time.Second)
			c.ready(t)
			c.close(t)
		}
	})

	t.Run("stdio server with secret environment", func(t *testing.T) {
		bin := testserver.Build(t)
		env := map[string]string{"API_KEY": secretEnv, "OTHER": "prefix-" + secretEnv + "-suffix"}
		cfg := transport.Config{Name: "stdio-secret", Stdio: &transport.Stdio{Command: bin, Args: testserver.Args(testserver.Options{ExitStatus: 3}), Env: env}}
		c := out.open(t, "stdio", cfg, nil)
		c.ready(t)
		c.callTool(t, "no_such_tool", 5*time.Second)
		c.callTool(t, "crash", 5*time.Second) // the process dies under the call
		c.ready(t)
		c.conn.Reconnect() // the close exits with status 3: an error
		c.ready(t)
		c.close(t)

		hang := transport.Config{Name: "stdio-hang", Stdio: &transport.Stdio{Command: bin, Args: testserver.Args(testserver.Options{HangClose: true}), Env: env}}
		pol := secretPolicies()
		pol.TeardownTimeout = 200 * time.Millisecond // the close is forced: killed and reaped
		c = out.open(t, "stdio-hang", hang, pol)
		c.ready(t)
		c.conn.Reconnect()
		c.ready(t)
		c.close(t)

		// A server that answers every request with an error quoting its secret.
		sh, err := exec.LookPath("sh")
		if err != nil {
			t.Fatal(err)
		}
		quoting := transport.Config{Name: "stdio-quoting", Stdio: &transport.Stdio{Command: sh, Env: env, Args: []string{"-c",
			`while read line; do id=$(echo "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p'); ` +
				`[ -n "$id" ] && echo "{\"jsonrpc\":\"2.0\",\"id\":$id,\"error\":{\"code\":-32600,\"message\":\"bad key $API_KEY\"}}"; done`}}}
		c = out.open(t, "stdio-quoting", quoting, nil)
		c.waitAttempts(t, 2)
		c.close(t)

		missing := transport.Config{Name: "stdio-missing", Stdio: &transport.Stdio{Command: "/nonexistent/" + secretEnv[:3] + "-server", Env: env}}
		// A missing command parks the connection until a re-check, which comes at once
		// here so that the command is looked for again.
		pol = secretPolicies()
		pol.ParkInterval = 20 * time.Millisecond
		c = out.open(t, "stdio-missing", missing, pol)
		c.waitFor(t, func(st states.State) bool { return st == states.Parked })
		c.waitAttempts(t, 2)
		c.close(t)
	})

	t.Run("the default logger", func(t *testing.T) {
		// A connection opened without a Logger logs to slog.Default().
		old := slog.Default()
		slog.SetDefault(slog.New(out.handler()))
		defer slog.SetDefault(old)
		addr := refusedAddr(t)
		c := out.openWith(t, "default-logger", secretHTTPConfig("http://"+addr+"/mcp", false), nil, false)
		c.waitAttempts(t, 2)
		c.close(t)
	})

	t.Run("invalid configs", func(t *testing.T) {
		for _, cfg := range []transport.Config{
			{Name: "bad-scheme", HTTP: &transport.HTTP{URL: "ftp://" + secretUser + ":" + secretPass + "@h/mcp?token=" + secretQuery}},
			{Name: "bad-url", HTTP: &transport.HTTP{URL: "http://" + secretUser + ":" + secretPass + "@[::1/mcp?token=" + secretQuery}},
			{Name: "bad-header", HTTP: &transport.HTTP{URL: "http://h/mcp", Headers: map[string]string{"Authorization": "Bearer " + secretHeader + "\r\nX: y"}}},
			{Name: "bad-header-name", HTTP: &transport.HTTP{URL: "http://h/mcp", Headers: map[string]string{"X Key": secretToken}}},
			{Name: "bad-env", Stdio: &transport.Stdio{Command: "x", Env: map[string]string{"KEY": secretEnv + "\x00"}}},
			{Name: "two", Stdio: &transport.Stdio{Command: "x", Env: map[string]string{"KEY": secretEnv}}, HTTP: &transport.HTTP{URL: "http://" + secretUser + "@h/?q=" + secretQuery}},
		} {
			out.add("config "+cfg.Name, cfg.String())
			_, err := mcpfsm.Open(cfg, mcpfsm.Options{Logger: slog.New(out.handler())})
			if err == nil {
				t.Errorf("Open(%s) accepted an invalid config", cfg.Name)
				continue
			}
			out.addErr("Open "+cfg.Name, err)
		}
		// The servers config: secrets come in by ${VAR}.
		lookup := func(name string) (string, bool) {
			v, ok := map[string]string{"TOKEN": secretHeader, "KEY": secretEnv, "USER": secretUser, "PASS": secretPass, "Q": secretQuery, "BAD": secretToken + "\n"}[name]
			return v, ok
		}
		for i, text := range []string{
			"version: 1\nservers:\n  a:\n    url: ftp://${USER}:${PASS}@h/?q=${Q}\n",
			"version: 1\nservers:\n  a:\n    url: http://h/mcp\n    headers: {Authorization: \"Bearer ${BAD}\"}\n",
			"version: 1\nservers:\n  a:\n    command: x\n    env: {K: \"${KEY}\\u0000\"}\n",
			"version: 1\nservers:\n  a:\n    url: http://${USER}:${PASS}@[::1/?q=${Q}\n",
			"version: 1\nservers:\n  a:\n    url: http://h/mcp\n    headers: {Authorization: \"Bearer ${TOKEN}\"}\n    command: x\n    env: {K: \"${KEY}\"}\n",
			"version: 1\nservers:\n  a:\n    url: http://h/mcp\n    headers: {Authorization: \"Bearer ${TOKEN}\", \"bad name\": \"${TOKEN}\"}\n",
			"version: 1\nservers:\n  a:\n    url: http://${USER}:${PASS}@h/mcp?q=${Q}\n    headers: {Authorization: \"Bearer ${TOKEN}\"}\n    policies: {connect_timeout: ${TOKEN}}\n",
		} {
			cfg, err := mcpfsm.ParseConfig(fmt.Sprintf("servers%d.yaml", i), []byte(text), lookup)
			out.addErr(fmt.Sprintf("ParseConfig %d", i), err)
			if err != nil {
				continue
			}
			// Accepted: what is wrong shows when a server is opened.
			for _, s := range cfg.Servers {
				out.add("parsed config", s.Transport.String())
				_, err := mcpfsm.Open(s.Transport, mcpfsm.Options{Logger: slog.New(out.handler())})
				if err == nil {
					t.Errorf("config %d: Open accepted server %s:\n%s", i, s.Name, text)
				}
				out.addErr(fmt.Sprintf("config %d Open", i), err)
			}
		}
	})

	out.check(t)
	// Redaction, not luck: the SDK's raw errors did quote each kind of secret.
	for _, m := range []string{secretHeader, secretToken, secretEnv, secretUser, secretQuery, secretBasicUser, secretBasicPass} {
		if out.rawQuotes[m] == 0 {
			t.Errorf("no raw SDK error quoted %s: the test proves nothing about its redaction", m)
		}
	}
	// The children did print their secrets on stderr (the caller's own sink gets
	// them), and error tails showed them redacted.
	for _, m := range []string{secretEnv, secretArg} {
		if !strings.Contains(out.stderr.String(), m) {
			t.Errorf("no child printed %s on its stderr: the test proves nothing about the tail's redaction", m)
		}
	}
	if out.redactedTails == 0 {
		t.Error("no error carried a stderr tail with a redaction: the test proves nothing about the tail")
	}
	t.Logf("searched %d texts and %d bytes of logs; raw SDK errors quoted the secrets %v times, all redacted; %d stderr tails redacted", len(out.texts), out.logBytes(), out.rawQuotes, out.redactedTails)
}

// loudScript is a stdio server that prints its environment's API_KEY and its
// arguments on stderr, and exits 1 before speaking MCP.
const loudScript = `echo "mcp server starting: key=$API_KEY args=$*" >&2; exit 1`

func shell(t *testing.T) string {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

// quotingServer answers every request 401 with a JSON-RPC error quoting what came:
// the Authorization header, its basic-auth user and password decoded, X-Api-Key,
// the query and the URL.
func quotingServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		user, pass, _ := r.BasicAuth()
		quoted := fmt.Sprintf("%s|user %s|password %s|%s|%s|%s", r.Header.Get("Authorization"), user, pass, r.Header.Get("X-Api-Key"), r.URL.RawQuery, r.URL.String())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"bad credentials %s"}}`, strings.ReplaceAll(quoted, `"`, `'`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// manager drives a Manager through failures with secrets in its config (by ${VAR}):
// a server that refuses basic credentials and quotes them decoded, a stdio server
// that prints its environment and arguments on stderr and exits, and a working one;
// reloads that move the working one to a refused port and add an invalid server;
// calls to each, before and after Close. It records every error (calls, Reload,
// Close), every observer event, the log, Status and the reload results.
func (o *leakOutputs) manager(t *testing.T) {
	quoting := quotingServer(t)
	j := newJournalServer()
	good := startFlapping(t, j, false)
	refused := refusedAddr(t)
	env := map[string]string{
		"BASIC": basicAuth, "BEARER": "Bearer " + secretHeader, "TOKEN": secretToken, "KEY": secretEnv, "ARG": secretArg,
		"USER": secretUser, "PASS": secretPass, "Q": secretQuery,
		"QUOTING": strings.TrimPrefix(quoting.URL, "http://"), "GOOD": strings.TrimPrefix(good.URL(), "http://"), "REFUSED": refused,
		"SH": shell(t),
	}
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }
	config := func(goodAt string) *mcpfsm.Config {
		t.Helper()
		text := `version: 1
policies: {connect_timeout: 3s, probe_timeout: 500ms, teardown_timeout: 1s, keepalive_interval: 100ms, backoff_base: 10ms,
  backoff_max: 50ms, breaker_threshold: 3, breaker_cooldown: 50ms, breaker_cooldown_max: 200ms, auth_recheck_interval: 20ms}
servers:
  quoting:
    url: http://${QUOTING}/mcp?token=${Q}
    headers: {Authorization: "${BASIC}", X-Api-Key: "${TOKEN}"}
  loud:
    command: ${SH}
    args: [-c, 'echo "mcp server starting: key=$$API_KEY args=$$*" >&2; exit 1', sh, "--token=${ARG}"]
    env: {API_KEY: "${KEY}"}
  good:
    url: http://${USER}:${PASS}@` + goodAt + `?token=${Q}
    headers: {Authorization: "${BEARER}", X-Api-Key: "${TOKEN}"}
`
		cfg, err := mcpfsm.ParseConfig("servers.yaml", []byte(text), lookup)
		if err != nil {
			t.Fatalf("ParseConfig: %v", err)
		}
		for i := range cfg.Servers {
			if st := cfg.Servers[i].Transport.Stdio; st != nil {
				st.Stderr = &o.stderr
			}
		}
		return cfg
	}
	var mu sync.Mutex
	attempts := map[string]int{}
	m, err := mcpfsm.NewManager(config("${GOOD}"), mcpfsm.ManagerOptions{
		Logger: slog.New(o.handler()), History: 1000,
		Observer: func(server string, tr machine.Transition) {
			o.addTransition("manager observed "+server, tr)
			if tr.To == states.Connecting || tr.To == states.HalfOpen {
				mu.Lock()
				attempts[server]++
				mu.Unlock()
			}
		},
	})
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = m.Close(context.Background())
		}
	}()
	wait := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("manager: waiting for %s: %v", what, m.States())
			}
		}
	}
	wait("the refusal, the breaker and a session", func() bool {
		st := m.States()
		mu.Lock()
		defer mu.Unlock()
		return st["quoting"] == states.Unauthorized && attempts["quoting"] >= 3 && st["loud"] == states.BreakerOpen && attempts["loud"] >= 3 && st["good"] == states.Ready
	})
	calls := func(when string) {
		for _, server := range []string{"quoting", "loud", "good"} {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := m.Call(ctx, server+".read", map[string]any{"id": "x"})
			o.addErr("manager Call "+server+" "+when, err)
			_, err = m.CallTool(ctx, server, &mcp.CallToolParams{Name: "record", Arguments: map[string]any{"id": "y"}})
			o.addErr("manager CallTool "+server+" "+when, err)
			_, err = m.ListTools(ctx, server, nil)
			o.addErr("manager ListTools "+server+" "+when, err)
			o.addErr("manager Ping "+server+" "+when, m.Ping(ctx, server, nil))
			cancel()
		}
		for _, st := range m.Status() {
			o.add("manager status "+when, fmt.Sprintf("%v", st), fmt.Sprintf("%+v", st), fmt.Sprintf("%#v", st))
		}
		o.add("manager states "+when, fmt.Sprintf("%v", m.States()))
	}
	calls("before reload")

	// The working server moves to a port where nothing listens: Reload says why.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	res, err := m.Reload(ctx, config("${REFUSED}"))
	cancel()
	o.add("manager reload result", res.String(), fmt.Sprintf("%+v", res))
	o.addErr("manager Reload to a refused port", err)
	if err == nil {
		t.Error("Reload to a refused port succeeded")
	}
	calls("after reload")
	// An invalid server: Reload refuses it.
	bad := config("${GOOD}")
	bad.Servers = append(bad.Servers, mcpfsm.ServerConfig{Name: "bad", Transport: transport.Config{Name: "bad",
		HTTP: &transport.HTTP{URL: "ftp://" + secretUser + ":" + secretPass + "@h/mcp?token=" + secretQuery, Headers: map[string]string{"Authorization": basicAuth}}}})
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	res, err = m.Reload(ctx, bad)
	cancel()
	o.add("manager reload result", res.String(), fmt.Sprintf("%+v", res))
	o.addErr("manager Reload with an invalid server", err)
	if err == nil {
		t.Error("Reload with an invalid server succeeded")
	}
	for _, name := range m.Servers() {
		if c := m.Conn(name); c != nil {
			for _, tr := range c.History() {
				o.addTransition("manager history "+name, tr)
			}
		}
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	o.addErr("manager Close", m.Close(ctx))
	cancel()
	closed = true
	calls("after close")
}

// secretHTTPConfig is an HTTP (or SSE) config carrying every HTTP secret.
func secretHTTPConfig(endpoint string, sse bool) transport.Config {
	u := strings.Replace(endpoint, "http://", "http://"+secretUser+":"+secretPass+"@", 1) + "?token=" + secretQuery
	h := &transport.HTTP{URL: u, Headers: map[string]string{"Authorization": "Bearer " + secretHeader, "X-Api-Key": secretToken}}
	if sse {
		return transport.Config{Name: "sse-secret", SSE: h}
	}
	return transport.Config{Name: "http-secret", HTTP: h}
}

func secretPolicies() *machine.Policies {
	p := mcpfsm.DefaultSpec().Defaults()
	p.ConnectTimeout = 3 * time.Second
	p.ProbeTimeout = 500 * time.Millisecond
	p.TeardownTimeout = time.Second
	p.KeepaliveInterval = 100 * time.Millisecond
	p.BackoffBase = 10 * time.Millisecond
	p.BackoffMax = 50 * time.Millisecond
	p.BreakerThreshold = 3
	p.BreakerCooldown = 50 * time.Millisecond
	p.BreakerCooldownMax = 200 * time.Millisecond
	return &p
}

// leakOutputs gathers every text the connections produced.
type leakOutputs struct {
	mu        sync.Mutex
	texts     []string // "what: text"
	text      testutil.SyncBuffer
	json      testutil.SyncBuffer
	rawQuotes map[string]int // raw SDK errors (inside a *transport.Error) that quoted each secret
	// redactedTails counts the stderr tails of errors that show a redaction: a
	// child printed a secret on its stderr.
	redactedTails int
	// stderr is what stdio children wrote to their stderr (Stdio.Stderr: the
	// caller's own sink, which gets it unredacted), to prove that they printed
	// the secrets.
	stderr testutil.SyncBuffer
}

func (o *leakOutputs) add(what string, texts ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range texts {
		o.texts = append(o.texts, what+": "+s)
	}
}

// addErr records the texts of an error's whole chain: those mcpfsm produced (down to
// and including each *transport.Error) must show no secret; those beneath a
// *transport.Error (the SDK's, the OS's or the server's own text, wrapped unchanged)
// are searched to count the secrets they quote, each of which a *transport.Error above
// redacted. A *transport.Error's stderr tail counts as its own text.
func (o *leakOutputs) addErr(what string, err error) {
	if err == nil {
		return
	}
	ours, raw := chainTexts(err)
	o.add(what, ours...)
	var te *transport.Error
	if errors.As(err, &te) && te.StderrTail != "" {
		o.add(what+" stderr tail", te.StderrTail)
		if strings.Contains(te.StderrTail, "REDACTED") {
			o.mu.Lock()
			o.redactedTails++
			o.mu.Unlock()
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, m := range secretForms {
		if slices.ContainsFunc(raw, func(t string) bool { return strings.Contains(t, m) }) {
			o.rawQuotes[m]++
		}
	}
}

func (o *leakOutputs) addTransition(what string, tr machine.Transition) {
	o.add(what, tr.String(), fmt.Sprintf("%v", tr), fmt.Sprintf("%+v", tr), fmt.Sprintf("%#v", tr))
	o.addErr(what+" error", tr.Err)
}

// handler returns a slog handler that writes to the text and JSON buffers, and keeps
// every attribute's value as text.
func (o *leakOutputs) handler() slog.Handler {
	return fanout{
		slog.NewTextHandler(&o.text, &slog.HandlerOptions{Level: slog.LevelDebug}),
		slog.NewJSONHandler(&o.json, &slog.HandlerOptions{Level: slog.LevelDebug}),
		&rawHandler{o: o},
	}
}

func (o *leakOutputs) logBytes() int { return len(o.text.String()) + len(o.json.String()) }

func (o *leakOutputs) check(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	all := append(append([]string(nil), o.texts...), "text log: "+o.text.String(), "JSON log: "+o.json.String())
	leaks := 0
	for _, text := range all {
		for _, s := range secretForms {
			if strings.Contains(text, s) {
				leaks++
				if leaks <= 10 {
					t.Errorf("secret %s leaked in %s", s, excerpt(text, s))
				}
			}
		}
	}
	if leaks > 10 {
		t.Errorf("... %d leaks in all", leaks)
	}
}

func containsSecret(s string) bool {
	for _, m := range secretForms {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// excerpt returns what text is, and 150 bytes around s in it.
func excerpt(text, s string) string {
	what, _, _ := strings.Cut(text, ": ")
	i := strings.Index(text, s)
	return fmt.Sprintf("%s: ...%s...", what, text[max(0, i-150):min(len(text), i+len(s)+150)])
}

// A leakConn is a connection under the secrets test, with everything it shows
// recorded.
type leakConn struct {
	name  string
	out   *leakOutputs
	cfg   transport.Config
	conn  *mcpfsm.Conn
	watch <-chan machine.Transition
	stop  func()
	done  chan struct{}

	mu       sync.Mutex
	attempts int
}

func (o *leakOutputs) open(t *testing.T, name string, cfg transport.Config, pol *machine.Policies) *leakConn {
	return o.openWith(t, name, cfg, pol, true)
}

func (o *leakOutputs) openWith(t *testing.T, name string, cfg transport.Config, pol *machine.Policies, logger bool) *leakConn {
	t.Helper()
	if pol == nil {
		pol = secretPolicies()
	}
	c := &leakConn{name: name, out: o, cfg: cfg, done: make(chan struct{})}
	o.add(name+" config", cfg.String(), fmt.Sprintf("%v", cfg), fmt.Sprintf("%#v", cfg))
	opts := mcpfsm.Options{
		Policies: pol, History: 1000,
		Observer: func(tr machine.Transition) {
			o.addTransition(name+" observed", tr)
			if tr.To == states.Connecting || tr.To == states.HalfOpen {
				c.mu.Lock()
				c.attempts++
				c.mu.Unlock()
			}
		},
	}
	if logger {
		opts.Logger = slog.New(o.handler())
	}
	var err error
	if c.conn, err = mcpfsm.Open(cfg, opts); err != nil {
		t.Fatalf("Open(%s): %v", name, err)
	}
	var dropped func() int
	c.watch, c.stop, dropped = c.conn.Watch(1024)
	go func() {
		defer close(c.done)
		for tr := range c.watch {
			o.addTransition(name+" watched", tr)
		}
	}()
	t.Cleanup(func() {
		c.close(t)
		if n := dropped(); n > 0 {
			t.Logf("%s: the watch dropped %d transitions (the observer saw them)", name, n)
		}
	})
	return c
}

func (c *leakConn) waitFor(t *testing.T, ok func(states.State) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if st, err := c.conn.WaitState(ctx, ok); err != nil {
		t.Fatalf("%s: waiting: %v (state %s)", c.name, err, st)
	}
}

func (c *leakConn) ready(t *testing.T) {
	t.Helper()
	c.waitFor(t, func(st states.State) bool { return c.conn.Spec().Calls(st) == machine.Serve }) // through the breaker, if it is open
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := c.conn.WaitReady(ctx)
	c.out.addErr(c.name+" WaitReady", err)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
}

// waitAttempts waits until the connection has begun n more connect attempts, and the
// last of them has ended.
func (c *leakConn) waitAttempts(t *testing.T, n int) {
	t.Helper()
	c.mu.Lock()
	want := c.attempts + n + 1 // the attempt after the n-th has begun: the n-th is over
	c.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c.mu.Lock()
		got := c.attempts
		c.mu.Unlock()
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d connect attempts, want %d", c.name, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// call calls the read tool and ListTools and records what they return.
func (c *leakConn) call(t *testing.T, within time.Duration) {
	t.Helper()
	c.callTool(t, "read", within)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	res, err := c.conn.ListTools(ctx, nil)
	c.out.addErr(c.name+" ListTools", err)
	if res != nil {
		for _, tool := range res.Tools {
			c.out.add(c.name+" tool", tool.Name, tool.Description)
		}
	}
}

func (c *leakConn) callTool(t *testing.T, tool string, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	_, err := c.conn.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"id": "x"}})
	c.out.addErr(c.name+" CallTool "+tool, err)
}

// close closes the connection and records its history and its pictures.
func (c *leakConn) close(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.out.addErr(c.name+" Close", c.conn.Close(ctx))
	c.stop()
	<-c.done
	hist := c.conn.History()
	for _, tr := range hist {
		c.out.addTransition(c.name+" history", tr)
	}
	pol := c.conn.Policies()
	opts := machine.GraphOptions{Current: c.conn.State(), Path: hist, Policies: &pol}
	c.out.add(c.name+" graph", c.conn.Spec().DOT(opts), c.conn.Spec().Mermaid(opts))
	c.out.add(c.name+" state", c.conn.State().String(), c.conn.Name())
}

// fanout sends each record to several handlers.
type fanout []slog.Handler

func (f fanout) Enabled(ctx context.Context, l slog.Level) bool { return true }

func (f fanout) Handle(ctx context.Context, r slog.Record) error {
	for _, h := range f {
		if h.Enabled(ctx, r.Level) {
			_ = h.Handle(ctx, r.Clone())
		}
	}
	return nil
}

func (f fanout) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make(fanout, len(f))
	for i, h := range f {
		out[i] = h.WithAttrs(attrs)
	}
	return out
}

func (f fanout) WithGroup(name string) slog.Handler {
	out := make(fanout, len(f))
	for i, h := range f {
		out[i] = h.WithGroup(name)
	}
	return out
}

// rawHandler keeps every record's message and attribute values as text, digging into
// errors (see errorTexts) and any other value with %+v.
type rawHandler struct {
	o     *leakOutputs
	attrs []slog.Attr
}

func (h *rawHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *rawHandler) Handle(_ context.Context, r slog.Record) error {
	texts := []string{r.Message}
	add := func(a slog.Attr) bool {
		texts = append(texts, attrTexts(a)...)
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	h.o.add("log record", texts...)
	return nil
}

func attrTexts(a slog.Attr) []string {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		var out []string
		for _, g := range v.Group() {
			out = append(out, attrTexts(g)...)
		}
		return out
	}
	if err, ok := v.Any().(error); ok {
		return append([]string{a.Key}, errorTexts(err)...)
	}
	return []string{a.Key, fmt.Sprintf("%+v", v.Any())}
}

func (h *rawHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &rawHandler{o: h.o, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

func (h *rawHandler) WithGroup(string) slog.Handler { return h }
