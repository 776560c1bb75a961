package mcpfsm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/authtest"
	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// secretTap wraps an authorization server and records every secret that crosses it:
// the client secret and code verifiers the client sends to the token endpoint, the
// tokens it answers with, and the bearer tokens of MCP requests. A test then checks
// that none of them shows anywhere a person or a log can read.
type secretTap struct {
	mu      sync.Mutex
	secrets map[string]string // value → what it is
}

func (tap *secretTap) add(what, value string) {
	if value == "" {
		return
	}
	tap.mu.Lock()
	defer tap.mu.Unlock()
	if tap.secrets == nil {
		tap.secrets = map[string]string{}
	}
	if _, ok := tap.secrets[value]; !ok {
		tap.secrets[value] = what
	}
}

func (tap *secretTap) all() map[string]string {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	out := make(map[string]string, len(tap.secrets))
	for k, v := range tap.secrets {
		out[k] = v
	}
	return out
}

// teeWriter keeps a copy of a response body.
type teeWriter struct {
	http.ResponseWriter
	body bytes.Buffer
}

func (w *teeWriter) Write(p []byte) (int, error) {
	w.body.Write(p)
	return w.ResponseWriter.Write(p)
}

func (tap *secretTap) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			tap.add("a bearer token", tok)
		}
		if _, secret, ok := r.BasicAuth(); ok {
			tap.add("the client secret (basic)", secret)
		}
		if r.URL.Path != "/token" {
			next.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		r.Body = io.NopCloser(bytes.NewReader(body))
		if form, err := url.ParseQuery(string(body)); err == nil {
			tap.add("a code verifier", form.Get("code_verifier"))
			tap.add("a refresh token (sent)", form.Get("refresh_token"))
			tap.add("the client secret (form)", form.Get("client_secret"))
			tap.add("an authorization code", form.Get("code"))
		}
		tw := &teeWriter{ResponseWriter: w}
		next.ServeHTTP(tw, r)
		var answer struct {
			Access  string `json:"access_token"`
			Refresh string `json:"refresh_token"`
		}
		if json.Unmarshal(tw.body.Bytes(), &answer) == nil {
			tap.add("an access token", answer.Access)
			tap.add("a refresh token", answer.Refresh)
		}
	})
}

// TestAuthBadInputThroughConn: each bad input of the auth issue (a malformed metadata
// document, a token endpoint that hangs, metadata that redirects to another host, an
// insufficient_scope loop) brings an Open'ed connection to unauthorized within its
// connect timeout (the auth's own timeout is far longer, so the bound is the
// connection's), with a clear reason in the Status and in the error of a call, which
// fails at once with ErrUnauthorized; and no secret that crossed the wire (client
// secret, code verifier, code, tokens) shows in that error, the Status JSON, the
// history or the log.
func TestAuthBadInputThroughConn(t *testing.T) {
	const clientSecret = "SEKRIT-client-secret-4b1d"
	const connectTimeout = 1500 * time.Millisecond
	for _, tc := range []struct {
		name string
		opts authtest.Options
		want string // in the reason
		tap  string // a kind of secret the tap must have seen, so that the check means something
	}{
		{"malformed metadata", authtest.Options{MalformedMetadata: true}, "authorization server metadata", ""},
		{"hanging token endpoint", authtest.Options{HangToken: true}, "token exchange failed", "a code verifier"},
		{"redirect to another host", authtest.Options{RedirectMetadata: "http://127.0.0.2:1/elsewhere-metadata"}, "another origin", ""},
		{"insufficient scope loop", authtest.Options{NeverGrant: "admin"}, "refused the request again", "an access token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.ClientID, tc.opts.ClientSecret = "pre", clientSecret
			ms := authtest.MCPServer()
			srv := authtest.New(tc.opts, authtest.Streamable(ms))
			tap := &secretTap{}
			ts := httptest.NewServer(tap.wrap(srv.Handler()))
			srv.URL = ts.URL
			t.Cleanup(func() {
				srv.Close()
				authtest.CloseSessions(ms)
				ts.CloseClientConnections()
				ts.Close()
			})
			var log testutil.SyncBuffer
			pol := fastPolicies()
			pol.ConnectTimeout = connectTimeout
			pol.AuthRecheckInterval = time.Hour // one attempt in the test's time
			start := time.Now()
			c, err := Open(transport.Config{Name: "authed", HTTP: &transport.HTTP{URL: srv.MCPURL(), Auth: &transport.Auth{
				Fetcher: authtest.Fetcher(nil), RedirectURL: testRedirect, ClientID: "pre", ClientSecret: clientSecret,
				Timeout: 30 * time.Second, // far more than connect_timeout
			}}}, Options{
				Policies: pol, History: 64,
				Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := c.Close(ctx); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
			// The bound proves the connection's timeout ends the attempt, not the
			// auth's 30 s: a generous slack over it (3 s) still tells them apart, and
			// holds on a loaded machine under the race detector (0.5 s once did not).
			const slack = 3 * time.Second
			wctx, wcancel := context.WithTimeout(context.Background(), connectTimeout+2*slack)
			st, err := c.WaitState(wctx, func(st states.State) bool { return st == states.Unauthorized })
			wcancel()
			took := time.Since(start)
			if err != nil {
				t.Fatalf("not unauthorized after %v: %v (state %s)\n%v", took, err, st, c.History())
			}
			if took > connectTimeout+slack {
				t.Errorf("unauthorized after %v, want within connect_timeout %v (+%v)", took, connectTimeout, slack)
			}
			status := c.Status()
			if status.LastFailure == nil || status.LastFailure.Cause != states.CauseAuth || !strings.Contains(status.LastFailure.Message, tc.want) {
				t.Errorf("last failure %+v, want cause auth saying %q", status.LastFailure, tc.want)
			}
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			callStart := time.Now()
			_, callErr := c.CallTool(cctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
			ccancel()
			if d := time.Since(callStart); !errors.Is(callErr, ErrUnauthorized) || !strings.Contains(fmt.Sprint(callErr), tc.want) || d > time.Second {
				t.Errorf("a call while unauthorized: %v after %v, want ErrUnauthorized at once, saying %q", callErr, d, tc.want)
			}
			statusJSON, err := json.Marshal(c.Status())
			if err != nil {
				t.Fatal(err)
			}
			var history strings.Builder
			for _, tr := range c.History() {
				fmt.Fprintf(&history, "%v %+v\n", tr, tr)
			}
			secrets := tap.all()
			secrets[clientSecret] = "the client secret"
			if tc.tap != "" {
				seen := false
				for _, what := range secrets {
					seen = seen || what == tc.tap
				}
				if !seen {
					t.Errorf("the tap saw no %s: the secret check below misses it (saw %v)", tc.tap, secrets)
				}
			}
			for value, what := range secrets {
				for where, text := range map[string]string{
					"the call's error": fmt.Sprint(callErr), "the status": string(statusJSON),
					"the history": history.String(), "the log": log.String(),
				} {
					if strings.Contains(text, value) {
						t.Errorf("%s shows in %s", what, where)
					}
				}
			}
		})
	}
}
