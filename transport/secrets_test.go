package transport

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Marker secrets: every output this package produces is searched for them.
var markers = []string{"envSECRETmarker", "hdrSECRETmarker", "userSECRETmarker", "passSECRETmarker", "querySECRETmarker"}

// outputs gathers every text the package produced in a test.
type outputs struct {
	logs  testutil.SyncBuffer
	texts []string
}

func (o *outputs) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(&o.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// add records err's text, and checks that it carries the secret in its chain
// when want says so (so that redaction, not luck, kept it out of the text).
func (o *outputs) add(t *testing.T, what string, err error, secretInChain bool) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	o.texts = append(o.texts, what+": "+err.Error())
	if secretInChain {
		raw := errors.Unwrap(err).Error()
		if !containsAny(raw, markers) {
			t.Errorf("%s: the wrapped error %q quotes no secret: the test proves nothing", what, raw)
		}
		if !strings.Contains(err.Error(), redacted) {
			t.Errorf("%s: %q was not redacted", what, err)
		}
	}
}

func (o *outputs) check(t *testing.T) {
	t.Helper()
	for _, text := range append(o.texts, o.logs.String()) {
		for _, m := range markers {
			if strings.Contains(text, m) {
				t.Errorf("secret %s leaked in:\n%s", m, text)
			}
		}
	}
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func secretHTTP(base string) *HTTP {
	u := strings.Replace(base, "http://", "http://userSECRETmarker:passSECRETmarker@", 1) + "?token=querySECRETmarker"
	return &HTTP{URL: u, Headers: map[string]string{"Authorization": "Bearer hdrSECRETmarker"}}
}

func TestSecretsNeverPrinted(t *testing.T) {
	var out outputs
	opts := Options{Logger: out.logger()}

	t.Run("stdio", func(t *testing.T) {
		cfg := stdioConfig(t, testserver.Options{})
		cfg.Stdio.Env = map[string]string{"API_KEY": "envSECRETmarker"}
		out.texts = append(out.texts, cfg.String())
		s := dial(t, cfg, opts)
		// The server quotes the (secret) name back in its error.
		_, err := s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "envSECRETmarker"})
		out.add(t, "unknown tool", err, true)
		out.texts = append(out.texts, s.String())
	})
	t.Run("http", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{})
		cfg := Config{Name: "web", HTTP: secretHTTP(h.URL())}
		out.texts = append(out.texts, cfg.String())
		e := newEnds()
		o := opts
		o.OnEnd = e.options().OnEnd
		s := dial(t, cfg, o)
		if _, err := echo(callCtx(t), s, "x"); err != nil {
			t.Fatal(err)
		}
		h.Stop()
		_, err := echo(callCtx(t), s, "x")
		out.add(t, "call to a stopped server", err, true)
		out.add(t, "probe of a stopped server", s.Probe(callCtx(t)), true)
		ctx, cancel := context.WithTimeout(context.Background(), 0)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			out.texts = append(out.texts, err.Error())
		}
	})
	t.Run("sse", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{SSE: true})
		cfg := Config{Name: "old", SSE: secretHTTP(h.URL())}
		s := dial(t, cfg, opts)
		h.Freeze()
		defer h.Thaw()
		ctx, cancel := context.WithTimeout(context.Background(), 0)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			out.texts = append(out.texts, err.Error())
		}
	})
	t.Run("dial refused", func(t *testing.T) {
		for _, cfg := range []Config{
			{Name: "refused", HTTP: secretHTTP("http://127.0.0.1:1/mcp")},
			{Name: "refused", SSE: secretHTTP("http://127.0.0.1:1/sse")},
		} {
			_, err := Dial(callCtx(t), cfg, opts)
			out.add(t, "dial "+cfg.Kind(), err, true)
		}
	})
	t.Run("server quotes the header", func(t *testing.T) {
		// A server that answers every request with a JSON-RPC error quoting
		// the Authorization header it got, its credentials alone (a token
		// once leaked so), and those decoded from base64.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			auth := r.Header.Get("Authorization")
			_, cred, _ := strings.Cut(auth, " ")
			decoded, err := base64.StdEncoding.DecodeString(cred)
			if err != nil {
				decoded = nil // not base64: a bearer token
			}
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"bad credentials %s; token %s; decoded %s"}}`, auth, cred, decoded)
		}))
		defer srv.Close()
		bearer := secretHTTP(srv.URL)
		basic := secretHTTP(srv.URL) // userinfo goes out as basic auth
		basic.Headers = nil
		for i, h := range []*HTTP{bearer, basic} {
			_, err := Dial(callCtx(t), Config{Name: "echoing", HTTP: h}, opts)
			out.add(t, "dial a server quoting the header", err, false)
			// The configured header wins over the URL's userinfo.
			if want := []string{"bad credentials REDACTED; token REDACTED; decoded :", "bad credentials Basic REDACTED; token REDACTED; decoded REDACTED:"}[i]; !strings.Contains(err.Error(), want) {
				t.Errorf("%v does not contain %q", err, want)
			}
			basicValue := base64.StdEncoding.EncodeToString([]byte("userSECRETmarker:passSECRETmarker"))
			if !strings.Contains(err.Error(), redacted) || strings.Contains(err.Error(), basicValue) {
				t.Errorf("the quoted credentials were not redacted: %v", err)
			}
		}
	})
	t.Run("invalid config", func(t *testing.T) {
		cfg := Config{Name: "bad", HTTP: &HTTP{URL: "ftp://userSECRETmarker:passSECRETmarker@h/?q=querySECRETmarker"}}
		out.add(t, "validate", cfg.Validate(), false)
		out.texts = append(out.texts, cfg.String())
	})
	out.check(t)
	if !strings.Contains(out.logs.String(), "REDACTED") {
		t.Errorf("the logs quoted no redacted error: the test proves little:\n%s", out.logs.String())
	}
}

// TestArgumentsNeverPrinted (issue 17, item 7): command arguments are secrets
// like environment values: a server that quotes its arguments, in an error or
// on stderr, leaks neither a whole argument nor the value of a --flag=value.
func TestArgumentsNeverPrinted(t *testing.T) {
	const (
		whole = "argSECRETmarker"  // an argument of its own
		value = "flagSECRETmarker" // the value of --token=value
	)
	var out outputs
	for _, where := range []string{"error", "stderr"} {
		t.Run(where, func(t *testing.T) {
			cfg := stdioConfig(t, testserver.Options{})
			cfg.Stdio.Args = []string{"-echo-args", where, "--token=" + value, "-token", whole}
			out.texts = append(out.texts, cfg.String())
			_, err := Dial(callCtx(t), cfg, Options{Logger: out.logger()})
			var te *Error
			if !errors.As(err, &te) {
				t.Fatalf("Dial = %v, want an *Error", err)
			}
			raw := te.Err.Error()
			if where == "stderr" {
				raw = te.StderrTail
				if !strings.Contains(raw, "REDACTED") {
					t.Errorf("the stderr tail %q shows no redaction: the test proves nothing", raw)
				}
			} else if !strings.Contains(raw, whole) || !strings.Contains(raw, value) {
				t.Errorf("the server's error %q does not quote the arguments: the test proves nothing", raw)
			}
			out.texts = append(out.texts, err.Error())
		})
	}
	for _, text := range append(out.texts, out.logs.String()) {
		for _, m := range []string{whole, value} {
			if strings.Contains(text, m) {
				t.Errorf("argument %s leaked in:\n%s", m, text)
			}
		}
	}
}

// TestCredentialsInArgumentsNeverPrinted: a stdio server launched as a proxy to a
// remote one (mcp-remote's --header "Authorization: Bearer T", an argument that is a
// URL with a token in its query or user info, or an environment value "Bearer T"
// that an argument names) that quotes the token alone ("invalid token T"), as the
// remote server said it, leaks it nowhere: each argument was a secret whole, and the
// token alone was quoted as it came.
func TestCredentialsInArgumentsNeverPrinted(t *testing.T) {
	const (
		hdr   = "argHDRsecretMarker"
		query = "argQUERYsecretMarker"
		pass  = "argPASSsecretMarker"
		env   = "envBEARERsecretMarker"
	)
	// $1..$4: the header, the URL, the user info's password (as the proxy would
	// decode them); AUTH the environment's.
	script := `echo "remote said 401: invalid token ${1#*Bearer }; bad api_key ${2#*api_key=}; user x:${3} refused; ${AUTH#Bearer } expired" >&2; exit 1`
	cfg := Config{Name: "proxy", Stdio: &Stdio{
		Command: "/bin/sh",
		Args: []string{"-c", script, "sh",
			"Authorization: Bearer " + hdr, "https://remote.example/mcp?api_key=" + query, pass,
			"--url=https://x:" + pass + "@remote.example/mcp", "--header", "X-Auth:${AUTH_HEADER}"},
		Env: map[string]string{"AUTH": "Bearer " + env},
	}}
	var out outputs
	_, err := Dial(callCtx(t), cfg, Options{Logger: out.logger()})
	var te *Error
	if !errors.As(err, &te) {
		t.Fatalf("Dial = %v, want an *Error", err)
	}
	if !strings.Contains(te.StderrTail, "invalid token") || !strings.Contains(te.StderrTail, "REDACTED") {
		t.Fatalf("the stderr tail %q quotes nothing redacted: the test proves nothing", te.StderrTail)
	}
	for _, text := range []string{err.Error(), out.logs.String(), cfg.String()} {
		for _, m := range []string{hdr, query, pass, env} {
			if strings.Contains(text, m) {
				t.Errorf("secret %s leaked in:\n%s", m, text)
			}
		}
	}
	// Words of other arguments are not secrets.
	if !strings.Contains(err.Error(), "remote said 401: invalid token") {
		t.Errorf("the error lost its words: %s", err)
	}
}
