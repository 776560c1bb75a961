package faults_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
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
)

// secretForms are the markers and the forms they travel in (userinfo goes out as
// basic auth).
var secretForms = []string{
	secretHeader, secretToken, secretEnv, secretUser, secretPass, secretQuery,
	base64.StdEncoding.EncodeToString([]byte(secretUser + ":" + secretPass)),
}

// TestSecretsNeverLeak plants marker secrets in HTTP headers, URL userinfo and query,
// and a stdio server's environment; drives connections through failures (a server
// that refuses the credentials and quotes them back, connection refused, outages,
// expired and dropped sessions, crashes, forced closes, invalid configs); and searches
// every output for the markers: log records (text, JSON and each attribute's value),
// transitions (observer, watch, history, with their errors), every error the API
// returned, graphs drawn with the connection's path, config descriptions, and the
// servers config loader's errors. A marker anywhere fails the test. The test also
// checks that the SDK's raw errors did quote the secrets, so that it is redaction, not
// luck, that kept them out.
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

	t.Run("http refused, then the breaker", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now
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
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
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
	for _, m := range []string{secretHeader, secretToken, secretEnv, secretUser, secretQuery} {
		if out.rawQuotes[m] == 0 {
			t.Errorf("no raw SDK error quoted %s: the test proves nothing about its redaction", m)
		}
	}
	t.Logf("searched %d texts and %d bytes of logs; raw SDK errors quoted the secrets %v times, all redacted", len(out.texts), out.logBytes(), out.rawQuotes)
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
}

func (o *leakOutputs) add(what string, texts ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range texts {
		o.texts = append(o.texts, what+": "+s)
	}
}

// addErr records an error's texts, and counts the raw errors beneath it that quote a
// secret.
func (o *leakOutputs) addErr(what string, err error) {
	if err == nil {
		return
	}
	o.add(what, errorTexts(err)...)
	var te *transport.Error
	if errors.As(err, &te) && te.Err != nil {
		raw := te.Err.Error()
		o.mu.Lock()
		for _, m := range secretForms {
			if strings.Contains(raw, m) {
				o.rawQuotes[m]++
			}
		}
		o.mu.Unlock()
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
