package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serveConfig writes a servers config whose servers are the example server (this
// test binary, as mcpfsm example-server) and returns its path.
func serveConfig(t *testing.T, dir string, names ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("version: 1\nservers:\n")
	for _, name := range names {
		fmt.Fprintf(&b, "  %s:\n    command: %s\n    args: [example-server]\n", name, mcpfsmBin(t))
	}
	path := filepath.Join(dir, "servers.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

var serveURL = regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/`)

// startServeHTTP runs mcpfsm serve --http on a free loopback port in this process and
// returns its URL.
func startServeHTTP(t *testing.T, args ...string) (*background, string) {
	t.Helper()
	b := startCLI(t, append([]string{"serve", "--http", "127.0.0.1:0"}, args...)...)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if u := serveURL.FindString(b.stderr.String()); u != "" {
			return b, u
		}
		if time.Now().After(deadline) {
			t.Fatalf("mcpfsm serve did not say its URL; stderr:\n%s", b.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func connectHTTP(t *testing.T, url, version string) *mcp.ClientSession {
	t.Helper()
	return connectHTTPWith(t, url, version, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
}

// connectHTTPWith is connectHTTP with a client of these options.
func connectHTTPWith(t *testing.T, url, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "serve-test", Version: "1"}, opts)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections) // after the session's close, below
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, HTTPClient: &http.Client{Transport: tr}}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// waitTool waits until the session lists a tool named name.
func waitTool(t *testing.T, cs *mcp.ClientSession, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := cs.ListTools(ctx, nil)
		cancel()
		if err == nil {
			for _, tool := range res.Tools {
				if tool.Name == name {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway never listed %s (last: %v, %v)", name, res, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func echo(ctx context.Context, cs *mcp.ClientSession, tool, text string) (string, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": text}})
	if err != nil {
		return "", err
	}
	if res.IsError || len(res.Content) == 0 {
		return "", fmt.Errorf("tool error: %v", res.Content)
	}
	return res.Content[0].(*mcp.TextContent).Text, nil
}

// TestServeWatch: mcpfsm serve --http --watch adopts an edited config, and says so:
// the front session stays open and lists the added server's tools.
func TestServeWatch(t *testing.T) {
	dir := t.TempDir()
	cfg := serveConfig(t, dir, "one")
	b, url := startServeHTTP(t, "--watch", "--watch-interval", "20ms", cfg)
	cs := connectHTTP(t, url, "2025-11-25")
	waitTool(t, cs, "one__echo")
	if got, err := echo(t.Context(), cs, "one__echo", "hi"); err != nil || got != "hi" {
		t.Fatalf("one__echo: %q, %v", got, err)
	}
	serveConfig(t, dir, "one", "two")
	waitTool(t, cs, "two__echo")
	if got, err := echo(t.Context(), cs, "two__echo", "added"); err != nil || got != "added" {
		t.Fatalf("two__echo: %q, %v", got, err)
	}
	// The reload is said, not only done: its record was at info level, below
	// what serve logs, and an operator could not tell a reload adopted from one
	// never made.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(b.stderr.String(), "reloaded (the config file or a spec it names changed): added two"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the reload was not said; stderr:\n%s", b.stderr.String())
		}
	}
	if code := b.stop(t); code != 0 {
		t.Errorf("exit code %d; stderr:\n%s", code, b.stderr.String())
	}
}

// TestServeStopsWithACallInFlight: Ctrl-C while a front call waits on its backend ends
// the gateway within the HTTP server's grace and the close's bound: the call in flight
// is cancelled (the SDK's close of a front session waits for its requests, which once
// kept the gateway running for as long as the backend took: here ten minutes), and
// its client told why, on either protocol: the answer was the go-sdk's "context
// canceled" (code 0), as if the client had cancelled it.
func TestServeStopsWithACallInFlight(t *testing.T) {
	b, url := startServeHTTP(t, serveConfig(t, t.TempDir(), "a"))
	versions := []string{"2025-11-25", "2026-07-28"}
	type ended struct {
		version string
		err     error
	}
	done := make(chan ended, len(versions))
	for _, v := range versions {
		// The client's retries of its standalone stream left at their default:
		// without them, the stream's end as the gateway closes its sessions
		// may end the client's session before it reads the call's answer.
		c := mcp.NewClient(&mcp.Implementation{Name: "serve-test", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: tr}}, &mcp.ClientSessionOptions{ProtocolVersion: v})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		waitTool(t, cs, "a__hold")
		go func() {
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "a__hold", Arguments: map[string]any{"ms": 600000}})
			done <- ended{v, err}
		}()
	}
	time.Sleep(500 * time.Millisecond) // the calls reach the backend
	start := time.Now()
	if code := b.stop(t); code != 0 {
		t.Errorf("exit code %d; stderr:\n%s", code, b.stderr.String())
	}
	if d := time.Since(start); d > 25*time.Second {
		t.Errorf("stopped %v after Ctrl-C, want within the 5s grace and the 15s close", d)
	}
	for range versions {
		select {
		case e := <-done:
			if e.err == nil || !strings.Contains(e.err.Error(), "mcpfsm gateway: shutting down") {
				t.Errorf("%s: the call in flight ended with %v, want the gateway's shutdown named", e.version, e.err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the call in flight did not end with the gateway")
		}
	}
}

// TestServeUsage: serve's flag errors.
func TestServeUsage(t *testing.T) {
	for _, args := range [][]string{
		{"serve"},
		{"serve", "--stdio", "x.yaml"},
		{"serve", "--http", ":0", "--token-env", "MCPFSM_TEST_UNSET_TOKEN", "x.yaml"},
		{"serve", "--http", ":0", "--replica", "3/2", "x.yaml"},
		{"serve", "--watch", "--watch-interval", "0", "x.yaml"}, // once a panic of time.NewTicker
		{"serve", "--watch", "--watch-interval", "-1s", "x.yaml"},
		{"serve", "--http", ":0", "--body-memory", "8796093022208", "x.yaml"}, // 2^43 MiB: wrapped into no bound
		{"serve", "--http", ":0", "--body-memory", "-1", "x.yaml"},
		{"serve", "--http", ":0", "--max-sessions", "-5", "x.yaml"},
	} {
		if _, stderr, code := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr: %s", args, code, stderr)
		}
	}
	stdout, _, code := runCLI(t, "serve", "--help")
	if code != 0 || !strings.Contains(stdout, "Usage: mcpfsm serve") || !strings.Contains(stdout, "--replica") {
		t.Errorf("serve --help: exit %d:\n%s", code, stdout)
	}
}

// tsClient installs the pinned TypeScript SDK client of testdata/tsclient (npm ci,
// when its node_modules is missing or was installed from another lock) and returns
// the path of its script. It skips the test when node or npm is missing, unless
// MCPFSM_REQUIRE_NODE is set.
func tsClient(t *testing.T) string {
	t.Helper()
	return filepath.Join(testutil.NpmCI(t, "testdata/tsclient"), "client.mjs")
}

// TestServeTypeScriptClient: a front client other than ours, the TypeScript SDK's,
// lists and calls through mcpfsm serve, launched by it over stdio and over HTTP.
func TestServeTypeScriptClient(t *testing.T) {
	script := tsClient(t)
	cfg := serveConfig(t, t.TempDir(), "example")
	_, url := startServeHTTP(t, cfg)
	for name, target := range map[string][]string{
		"stdio": {"stdio", mcpfsmBin(t), "serve", cfg},
		"http":  {"http", url},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := append(append([]string{script}, target...), "--", "example__echo", `{"text":"from typescript"}`)
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, "node", args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("node client.mjs %s: %v\nstderr:\n%s", name, err, stderr.String())
			}
			var got struct {
				Server struct{ Name, Title string }
				Tools  []string
				Result struct {
					Content []struct{ Type, Text string }
					IsError bool
				}
			}
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("the client printed %q: %v", stdout.String(), err)
			}
			if got.Server.Name != "mcpfsm-gateway" || !strings.Contains(got.Server.Title, "example") {
				t.Errorf("server %+v", got.Server)
			}
			listed := false
			for _, n := range got.Tools {
				listed = listed || n == "example__echo"
			}
			// Over stdio the gateway starts with its client, which lists at once: the
			// gateway holds the list until its backend has listed (StartupWait).
			if !listed {
				t.Errorf("tools %v lack example__echo", got.Tools)
			}
			if got.Result.IsError || len(got.Result.Content) == 0 || got.Result.Content[0].Text != "from typescript" {
				t.Errorf("the call answered %+v", got.Result)
			}
		})
	}
}

// TestGateway_Nginx: two replicas of mcpfsm serve behind nginx hashing the
// Mcp-Session-Id header (each replica minting session IDs that hash to itself:
// --replica). A front session on one replica keeps working when the other is killed;
// a session on the killed replica gets 404 from the survivor and is re-initialized by
// its client, which then works. nginx runs the README's block as it is written there
// (but for its ports), and a reload of each replica (SIGHUP) reaches the session on it
// as tools/list_changed, through nginx. Skipped only when nginx is not installed and
// MCPFSM_REQUIRE_NGINX is unset (.ci/run installs it and sets it).
func TestGateway_Nginx(t *testing.T) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		if os.Getenv("MCPFSM_REQUIRE_NGINX") != "" {
			t.Fatal("nginx is not installed and MCPFSM_REQUIRE_NGINX is set")
		}
		t.Skip("nginx is not installed (apt-get install nginx)")
	}
	dir := t.TempDir()
	cfg := serveConfig(t, dir, "example")
	var ports []int
	var replicas []*exec.Cmd
	for i := range 2 {
		port := freePort(t)
		ports = append(ports, port)
		cmd := exec.Command(mcpfsmBin(t), "serve", "--http", fmt.Sprintf("127.0.0.1:%d", port), "--replica", fmt.Sprintf("%d/2", i+1), cfg)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, cmd)
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	front := freePort(t)
	// One process (master_process off): the Kill below ends nginx whole. With a
	// master, its worker outlived it, orphaned, after every run.
	conf := fmt.Sprintf(`worker_processes 1;
master_process off;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
%[2]s
}
`, dir, readmeNginx(t, ports[0], ports[1], front))
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ng := exec.Command(nginx, "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log"))
	ng.Stderr = os.Stderr
	if err := ng.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ng.Process.Kill()
		_ = ng.Wait()
	})
	url := fmt.Sprintf("http://127.0.0.1:%d/", front)
	waitListening(t, front)
	for _, p := range ports {
		waitListening(t, p)
	}

	// Sessions until there is one on each replica: an initialize goes round robin, and
	// a session's ID says its replica (as nginx hashes it).
	on := map[int]*mcp.ClientSession{}
	changed := map[int]chan struct{}{} // a session's tools/list_changed
	for tries := 0; len(on) < 2; tries++ {
		if tries == 20 {
			t.Fatalf("20 sessions, all on one replica: %v", on)
		}
		ch := make(chan struct{}, 16)
		cs := connectHTTPWith(t, url, "2025-11-25", &mcp.ClientOptions{
			Capabilities:           &mcp.ClientCapabilities{},
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { ch <- struct{}{} },
		})
		r := nginxPeer(cs.ID(), 2)
		if on[r] == nil {
			on[r], changed[r] = cs, ch
		}
	}
	for r, cs := range on {
		waitTool(t, cs, "example__echo")
		if got, err := echo(t.Context(), cs, "example__echo", "before"); err != nil || got != "before" {
			t.Fatalf("replica %d: %q, %v", r+1, got, err)
		}
	}

	// A reload of each replica: each session is told by its own, through nginx, and
	// lists the server added.
	for r := range changed {
		for len(changed[r]) > 0 {
			<-changed[r]
		}
	}
	serveConfig(t, dir, "example", "added")
	for _, cmd := range replicas {
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	for r, cs := range on {
		select {
		case <-changed[r]:
		case <-time.After(30 * time.Second):
			t.Fatalf("the session on replica %d was not told of the reload's tools", r+1)
		}
		waitTool(t, cs, "added__echo")
	}

	// Kill the second replica.
	if err := replicas[1].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = replicas[1].Wait()
	for i := range 20 {
		if got, err := echo(t.Context(), on[0], "example__echo", fmt.Sprint(i)); err != nil || got != fmt.Sprint(i) {
			t.Fatalf("the session on the live replica, call %d after the kill: %q, %v", i, got, err)
		}
	}
	// The session on the dead replica: the survivor does not know it (404), and the
	// client's session is over. Its client initializes a new one, which works.
	_, err = echo(t.Context(), on[1], "example__echo", "lost")
	if !errors.Is(err, mcp.ErrSessionMissing) && !errors.Is(err, mcp.ErrConnectionClosed) {
		t.Fatalf("the session of the dead replica: %v, want session missing", err)
	}
	again := connectHTTP(t, url, "2025-11-25")
	if nginxPeer(again.ID(), 2) != 0 {
		t.Errorf("the new session %q is not on the live replica", again.ID())
	}
	waitTool(t, again, "example__echo")
	if got, err := echo(t.Context(), again, "example__echo", "again"); err != nil || got != "again" {
		t.Fatalf("the re-initialized session: %q, %v", got, err)
	}
}

// readmeNginx returns the README's nginx block (the gateway's scale out), its
// replicas' ports and its own changed to these.
func readmeNginx(t *testing.T, replica1, replica2, front int) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```nginx\n")
	if block, _, ok = strings.Cut(block, "```"); !ok {
		t.Fatal("the README has no nginx block")
	}
	for from, to := range map[string]int{"127.0.0.1:8931;": replica1, "127.0.0.1:8932;": replica2, "127.0.0.1:8930;": front} {
		if !strings.Contains(block, from) {
			t.Fatalf("the README's nginx block has no %s:\n%s", from, block)
		}
		block = strings.ReplaceAll(block, from, fmt.Sprintf("127.0.0.1:%d;", to))
	}
	return block
}

// nginxPeer is the peer (0-based) nginx's hash picks for a key among n of equal weight.
func nginxPeer(key string, n int) int {
	return int((crc32.ChecksumIEEE([]byte(key))>>16)&0x7fff) % n
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitListening(t *testing.T, port int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %d: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGatewayGC: serve collects garbage at GOGC=200 unless the environment sets GOGC.
func TestGatewayGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	for _, tc := range []struct {
		gogc string
		want int
	}{{"", gatewayGCPercent}, {"100", 100}, {"off", 100}} {
		debug.SetGCPercent(100)
		gatewayGC(func(k string) string {
			if k == "GOGC" {
				return tc.gogc
			}
			return ""
		})
		if got := debug.SetGCPercent(100); got != tc.want {
			t.Errorf("GOGC=%q: the collector's target is %d, want %d", tc.gogc, got, tc.want)
		}
	}
}

// TestBodyDeadline: a client that trickles a body is cut at the deadline; a request
// whose body came in time keeps its connection (and its context) long after it.
func TestBodyDeadline(t *testing.T) {
	const d = 300 * time.Millisecond
	srv := httptest.NewServer(bodyDeadline(d, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select { // a long answer, as a long call's
		case <-time.After(3 * d):
			fmt.Fprint(w, "done")
		case <-r.Context().Done():
			t.Errorf("the context of a request whose body came in time ended: %v", r.Context().Err())
		}
	})))
	defer srv.Close()

	// Slow body: cut.
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	start := time.Now()
	go func() {
		for range 50 {
			time.Sleep(d / 4)
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(10 * d))
	line, _ := bufio.NewReader(c).ReadString('\n')
	if el := time.Since(start); el > 5*d {
		t.Errorf("slow body: answered after %v (%q), want about %v", el, line, d)
	}
	if !strings.Contains(line, "400") {
		t.Errorf("slow body: %q, want a 400", line)
	}

	// Body in time, long answer: not cut.
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "done" {
		t.Errorf("long answer: %s %q", resp.Status, b)
	}
}

// TestServeStdioSurvivesGarbage: a line on the gateway's stdin that is not a
// message gets a JSON-RPC error, and the gateway, its session and its backends go
// on (the go-sdk's stdio transport ended the session, and so the gateway, at the
// first such line).
func TestServeStdioSurvivesGarbage(t *testing.T) {
	cfg := serveConfig(t, t.TempDir(), "example")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd, stdin, stdout, _ := startPiped(ctx, t, &stderr, "serve", cfg)
	answers := bufio.NewReader(stdout)
	exchange := func(lines ...string) map[string]any {
		t.Helper()
		for _, l := range lines {
			if _, err := io.WriteString(stdin, l+"\n"); err != nil {
				t.Fatalf("writing to the gateway: %v\nstderr:\n%s", err, stderr.String())
			}
		}
		for {
			line, err := answers.ReadBytes('\n')
			if err != nil {
				t.Fatalf("reading the gateway's answer: %v\nstderr:\n%s", err, stderr.String())
			}
			var a map[string]any
			if err := json.Unmarshal(line, &a); err != nil {
				t.Fatalf("the gateway answered %q: %v", line, err)
			}
			// A list's change the gateway tells its initialized session of
			// (its backend listed after the initialize) is no answer.
			if _, isID := a["id"]; isID || a["method"] == nil {
				return a
			}
		}
	}
	if a := exchange("Content-Length: 57"); a["error"] == nil || a["id"] != nil {
		t.Errorf("a header line was answered %v, want an error with a null id", a)
	}
	if a := exchange(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`); a["id"] != float64(1) || a["result"] == nil {
		t.Fatalf("initialize answered %v", a)
	}
	if a := exchange(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, `{"oops`); a["error"] == nil {
		t.Errorf("a broken line was answered %v", a)
	}
	// The list waits for the backend to have listed (StartupWait), so the call
	// below finds it up.
	if a := exchange(`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); !strings.Contains(fmt.Sprint(a["result"]), "example__echo") {
		t.Fatalf("tools/list answered %v", a)
	}
	a := exchange(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"example__echo","arguments":{"text":"after garbage"}}}`)
	if res, _ := json.Marshal(a["result"]); a["id"] != float64(2) || !strings.Contains(string(res), "after garbage") {
		t.Errorf("the call after garbage answered %v", a)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("the gateway ended with %v at the end of stdin\nstderr:\n%s", err, stderr.String())
	}
}

// TestServeStdioCallTooLong: a host's call whose line is longer than a message may
// be (16 MiB: an LLM pasting a large file into a tool's arguments) fails, and the
// host's session goes on. The refusal named no request (id null) where the ID came
// after the line's first 256 bytes, as it always does past a large argument: the
// go-sdk's client ended its session at it (its later calls failed "client is
// closing"), and the TypeScript SDK's waited for the call's answer until its
// timeout.
func TestServeStdioCallTooLong(t *testing.T) {
	cfg := serveConfig(t, t.TempDir(), "example")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
	var stderr bytes.Buffer
	cmd := exec.Command(mcpfsmBin(t), "serve", cfg)
	cmd.Stderr = &stderr
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if instr := cs.InitializeResult().Instructions; !strings.Contains(instr, "in front of 1 MCP server,") {
		t.Errorf("the instructions do not say one server:\n%.300s", instr)
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "example__echo", Arguments: map[string]any{"text": strings.Repeat("x", mcp.DefaultMaxLineLength)}})
	if err == nil || !strings.Contains(err.Error(), "the line exceeds the maximum length") {
		t.Errorf("the call too long: %v, want the line's length named", err)
	}
	if got, err := echo(ctx, cs, "example__echo", "after"); err != nil || got != "after" {
		t.Errorf("the call after it: %q, %v\nstderr:\n%s", got, err, stderr.String())
	}
}

// TestServeStdioAnswersAtStdinsEnd: a host that writes its requests and closes the
// gateway's stdin (a shell pipeline, a script; MCP's stdio shutdown begins so) gets
// the answers to the requests in flight, then the gateway exits: at stdin's end the
// go-sdk cancelled them all, and the calls' answers were lost. The 5 s grace is
// given to requests in flight only: with none, serve exits at once.
func TestServeStdioAnswersAtStdinsEnd(t *testing.T) {
	cfg := serveConfig(t, t.TempDir(), "example")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mcpfsmBin(t), "serve", cfg)
	cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"example__echo","arguments":{"text":"piped"}}}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"example__slow","arguments":{"ms":300}}}
`)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mcpfsm serve < script: %v\nstderr:\n%s", err, stderr.String())
	}
	answered := map[float64]string{}
	for line := range strings.Lines(stdout.String()) {
		var a struct {
			ID     float64
			Result json.RawMessage
		}
		if json.Unmarshal([]byte(line), &a) == nil && a.ID != 0 {
			answered[a.ID] = string(a.Result)
		}
	}
	if !strings.Contains(answered[2], "piped") || !strings.Contains(answered[3], "slept") {
		t.Errorf("the calls in flight at stdin's end were answered %v; stdout:\n%s\nstderr:\n%s", answered, stdout.String(), stderr.String())
	}
}

// TestServeStdinEndsDuringAReload: the end of stdin while a reload waits for a
// removed backend's close (it ignores SIGTERM and its stdin's end, its teardown
// timeout a minute) ends the reload at once, and the gateway exits within its close's
// bound: serve's loop saw the end only once the reload was over, its 30 s, and then
// closed for up to 15 s more.
func TestServeStdinEndsDuringAReload(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "servers.yaml")
	bin := mcpfsmBin(t)
	write := func(deaf bool) {
		t.Helper()
		s := fmt.Sprintf("version: 1\nservers:\n  a:\n    command: %s\n    args: [example-server]\n", bin)
		if deaf {
			s += fmt.Sprintf("  deaf:\n    command: /bin/sh\n    args: [-c, 'trap \"\" TERM; %s example-server; exec sleep 60']\n    policies:\n      teardown_timeout: 60s\n", bin)
		}
		if err := os.WriteFile(cfg, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(true)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stderr testutil.SyncBuffer
	cmd, stdin, stdout, _ := startPiped(ctx, t, &stderr, "serve", cfg)
	answers := bufio.NewReader(stdout)
	exchange := func(id int, line string) string {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatal(err)
		}
		for {
			a, err := answers.ReadString('\n')
			if err != nil {
				t.Fatalf("no answer: %v\nstderr:\n%s", err, stderr.String())
			}
			if strings.HasPrefix(a, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,`, id)) {
				return a
			}
		}
	}
	exchange(1, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n"+`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// deaf up (its close is then the one that waits), under load too.
	for id, deadline := 2, time.Now().Add(30*time.Second); !strings.Contains(exchange(id, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, id)), "deaf__echo"); id++ {
		if time.Now().After(deadline) {
			t.Fatalf("deaf never listed its tools; stderr:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	go func() { _, _ = io.Copy(io.Discard, answers) }()
	write(false)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the reload waits for deaf's close
	start := time.Now()
	stdin.Close()
	if err := exited(t, cmd, 60*time.Second, "after stdin's end during a reload", &stderr); err != nil {
		t.Errorf("the gateway ended with %v, want exit 0\nstderr:\n%s", err, stderr.String())
	}
	if d := time.Since(start); d > 25*time.Second {
		t.Errorf("exited %v after stdin's end during a reload, want within the close's 15 s\nstderr:\n%s", d.Round(time.Millisecond), stderr.String())
	}
	// The backend's close is said, and nothing without saying what it is about
	// (the gateway's close added a bare "context deadline exceeded" line).
	out := stderr.String()
	if !strings.Contains(out, "closing deaf") {
		t.Errorf("the backend's close is not said:\n%s", out)
	}
	for line := range strings.Lines(out) {
		if strings.TrimSpace(line) == context.DeadlineExceeded.Error() {
			t.Errorf("a line says only %q:\n%s", line, out)
		}
	}
}

// TestServeStdioReloadStorm: SIGHUPs in a row (ten, 50 ms apart; signals that come
// during a reload are one more reload) while a stdio host calls without pause, the
// config switching between one that removes a server and one that brings it back:
// every request is answered once, and those to the server every config keeps all
// succeed. Then a config that is not YAML is refused at its file:line:col, the
// running one kept; the last config is the one in force.
func TestServeStdioReloadStorm(t *testing.T) {
	dir := t.TempDir()
	bin := mcpfsmBin(t)
	cfg := filepath.Join(dir, "servers.yaml")
	server := func(name string) string {
		return fmt.Sprintf("  %s:\n    command: %s\n    args: [example-server]\n", name, bin)
	}
	both := "version: 1\nservers:\n" + server("keep") + server("churn")
	configs := []string{"version: 1\nservers:\n" + server("keep"), both}
	if err := os.WriteFile(cfg, []byte(both), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stderr testutil.SyncBuffer
	cmd, stdin, stdout, _ := startPiped(ctx, t, &stderr, "serve", cfg)
	defer stdin.Close()
	answers := make(chan map[string]any, 1000)
	go func() {
		defer close(answers)
		lines := bufio.NewScanner(stdout)
		lines.Buffer(nil, 1<<20)
		for lines.Scan() {
			var a map[string]any
			if json.Unmarshal(lines.Bytes(), &a) == nil && a["id"] != nil {
				answers <- a
			}
		}
	}()
	var mu sync.Mutex
	send := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Errorf("writing to the gateway: %v", err)
		}
	}
	send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":"list","method":"tools/list"}`)
	got := map[string]int{}
	next := func(what string) map[string]any {
		t.Helper()
		select {
		case a, ok := <-answers:
			if !ok {
				t.Fatalf("%s: the gateway's stdout ended; stderr:\n%s", what, stderr.String())
			}
			got[fmt.Sprint(a["id"])]++
			return a
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no answer in 30 s; stderr:\n%s", what, stderr.String())
			return nil
		}
	}
	next("initialize")
	next("tools/list")

	const calls = 200
	callsDone := make(chan struct{})
	go func() {
		defer close(callsDone)
		for i := range calls {
			tool := "keep__echo"
			if i%2 == 1 {
				tool = "churn__echo"
			}
			send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"text":"%d"}}}`, i, tool, i))
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for i := range 10 {
		if err := os.WriteFile(cfg, []byte(configs[i%len(configs)]), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	<-callsDone
	for range calls {
		a := next("a call")
		id, _ := a["id"].(float64)
		if int(id)%2 == 1 {
			continue // churn: answered, one way or another
		}
		res, _ := json.Marshal(a["result"])
		if !strings.Contains(string(res), fmt.Sprintf(`"text":"%d"`, int(id))) || strings.Contains(string(res), `"isError":true`) {
			t.Errorf("call %v to the server every config keeps answered %v", a["id"], a)
		}
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("request %s answered %d times", id, n)
		}
	}
	// The last config of the storm (both servers) is in force; a broken one
	// then leaves it so.
	churnAnswers := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			send(`{"jsonrpc":"2.0","id":"last","method":"tools/call","params":{"name":"churn__echo","arguments":{"text":"back"}}}`)
			a := next(what)
			if res, _ := json.Marshal(a["result"]); strings.Contains(string(res), `"text":"back"`) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: churn__echo answered %v", what, a)
			}
		}
	}
	churnAnswers("after the storm")
	if err := os.WriteFile(cfg, []byte("version: 1\nservers:\n"+server("keep")+"  churn: [unclosed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	refused := regexp.MustCompile(`reload failed, keeping the running config.*servers\.yaml:\d+:\d+: not valid YAML`)
	for deadline := time.Now().Add(30 * time.Second); !refused.MatchString(stderr.String()); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the broken config is not refused at its file:line:col:\n%s", stderr.String())
		}
	}
	churnAnswers("after the broken config")
	stdin.Close()
	if err := exited(t, cmd, 40*time.Second, "after stdin's end", &stderr); err != nil {
		t.Errorf("the gateway ended with %v\nstderr:\n%s", err, stderr.String())
	}
}

// TestServeHostGoneWithoutReading: a host that writes requests, reads none of their
// answers and ends stdin (gone without a word, not killed: stdout's pipe stays open)
// no longer holds the gateway: the front could not read stdin's end past an answer
// it could not write, nor the go-sdk end the session with a write under way, and the
// gateway ran until a signal. Once stdin's writer is gone (poll(2) says so without
// reading: a pipe closed, or a socket's peer shut down writing, as libuv's child
// stdio is) and a write to stdout has waited 30 s, serve ends as at stdin's end.
func TestServeHostGoneWithoutReading(t *testing.T) {
	cfg := serveConfig(t, t.TempDir(), "example")
	var script strings.Builder
	script.WriteString(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n")
	for i := range 3000 { // their answers are more than the pipe holds
		fmt.Fprintf(&script, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`+"\n", i+1)
	}
	for _, stdin := range []string{"pipe", "socket"} {
		t.Run(stdin, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, mcpfsmBin(t), "serve", cfg)
			var stderr testutil.SyncBuffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe() // never read
			if err != nil {
				t.Fatal(err)
			}
			defer stdout.Close()
			var hangUp func()
			var in io.Writer
			if stdin == "pipe" {
				w, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				in, hangUp = w, func() { w.Close() }
			} else {
				fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
				if err != nil {
					t.Fatal(err)
				}
				host, theirs := os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "stdin")
				defer host.Close()
				cmd.Stdin = theirs
				defer theirs.Close()
				in, hangUp = host, func() { _ = syscall.Shutdown(fds[0], syscall.SHUT_WR) }
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(in, script.String()); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			hangUp()
			if err := exited(t, cmd, 80*time.Second, "after its host ended stdin, its answers unread", &stderr); err != nil {
				t.Errorf("the gateway ended with %v, want exit 0\nstderr:\n%s", err, stderr.String())
			}
			// The close cuts the write that waits (cuttableStdout): it waited
			// for that front for all its 15 s, and exited without it.
			if d := time.Since(start); d > 40*time.Second {
				t.Errorf("exited %v after stdin's end, want within 30 s and a moment", d.Round(time.Millisecond))
			}
			if out := stderr.String(); !strings.Contains(out, "stdout has not been read") || strings.Contains(out, "a front did not end") || strings.Contains(out, "did not end:") {
				t.Errorf("the gateway did not say why it ended, or waited for its front at the close:\n%s", out)
			}
		})
	}
}

// TestServeStopsWithStdoutUnread: SIGTERM ends the gateway within its bounds even
// when its stdio client has stopped reading its answers (stdout full): the SDK's
// close of the stdio session waits for a write that never ends, and serve waited
// for that session's Run without a bound, for ever.
func TestServeStopsWithStdoutUnread(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary for up to a minute")
	}
	cfg := serveConfig(t, t.TempDir(), "example")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd, stdin, stdout, _ := startPiped(ctx, t, &stderr, "serve", cfg) // never read
	defer stdout.Close()
	// Each line is answered with an error of some 100 bytes: 3,000 of them are
	// more than the pipe holds.
	if _, err := io.WriteString(stdin, strings.Repeat("x\n", 3000)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the gateway is blocked writing to stdout
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = exited(t, cmd, 60*time.Second, "after SIGTERM with its stdout unread", &stderr)
	if d := time.Since(start); d > 40*time.Second {
		t.Errorf("stopped %v after SIGTERM, want within the 5s grace and the 15s close", d)
	}
	// The write that waits is cut 5 s into the close (cuttableStdout): the close
	// waited for that front for all its 15 s, and exited without it.
	if strings.Contains(stderr.String(), "a front did not end") || strings.Contains(stderr.String(), "did not end:") {
		t.Errorf("the close waited for the stuck front:\n%s", stderr.String())
	}
	// The stuck front took half of the close's time, not all of it: the backend was
	// closed in what was left, not cut off.
	if strings.Contains(stderr.String(), "closing example") {
		t.Errorf("the backend's close was cut off by the stuck front's:\n%s", stderr.String())
	}
}

// TestServeStartupWaitZero: --startup-wait 0 waits for no server at startup (the
// help said so of a negative one only, and 0 waited 5 s: a zero StartupWait is package
// gateway's default): a tools/list finds the gateway's lists as they are, at once.
func TestServeStartupWaitZero(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hang"), []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "servers.yaml")
	if err := os.WriteFile(cfg, []byte("version: 1\nservers:\n  slow:\n    command: ./hang\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, url := startServeHTTP(t, "--startup-wait", "0", cfg)
	cs := connectHTTP(t, url, "2025-11-25")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("tools/list took %s with --startup-wait 0, want no wait", took.Round(time.Millisecond))
	}
}

// TestServeStdoutClosed: a host that closes the gateway's stdout (its read end of
// the pipe) ends the gateway as stdin's end does: the stdio session fails its write,
// the backends are closed, and serve exits 0 saying why. Go kills a program with
// SIGPIPE at its first write to a broken stdout, and the gateway died so, closing
// nothing (a backend that ignores its stdin's end was left running, an HTTP
// backend's session open).
func TestServeStdoutClosed(t *testing.T) {
	cfg := serveConfig(t, t.TempDir(), "example")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd, stdin, stdout, _ := startPiped(ctx, t, &stderr, "serve", cfg)
	defer stdin.Close()
	if _, err := io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(stdout).ReadBytes('\n'); err != nil {
		t.Fatalf("no answer to initialize: %v\nstderr:\n%s", err, stderr.String())
	}
	stdout.Close() // the host is gone, but for stdin
	// Something for the gateway to answer; a write that finds the gateway gone
	// is what the test is about.
	_, _ = io.WriteString(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"+`{"jsonrpc":"2.0","id":2,"method":"ping"}`+"\n")
	if err := exited(t, cmd, 40*time.Second, "after its stdout closed", &stderr); err != nil {
		t.Errorf("the gateway ended with %v, want exit 0\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "broken pipe") {
		t.Errorf("the gateway did not say why it ended:\n%s", stderr.String())
	}
}

// TestServeSIGHUPWhileStopping: a SIGHUP while the gateway shuts down (here, while a
// backend that ignores SIGTERM and its stdin's end is given its teardown timeout)
// is ignored, and the shutdown finishes: serve stopped listening for SIGHUP before
// its close, and the signal's default action killed it mid-close, leaving the
// backend running.
func TestServeSIGHUPWhileStopping(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "servers.yaml")
	// sh ignores SIGTERM, and so does sleep, which it runs once the example
	// server has ended at its stdin's end.
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("version: 1\nservers:\n  deaf:\n    command: /bin/sh\n    args: [-c, 'trap \"\" TERM; %s example-server; sleep 60']\n    policies:\n      teardown_timeout: 3s\n", mcpfsmBin(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd, stdin, stdout, _ := startPiped(ctx, t, &stderr, "serve", cfg)
	defer stdin.Close()
	answers := bufio.NewReader(stdout)
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" + `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
	} {
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatal(err)
		}
		if _, err := answers.ReadBytes('\n'); err != nil {
			t.Fatalf("no answer: %v\nstderr:\n%s", err, stderr.String())
		}
	}
	go func() { _, _ = io.Copy(io.Discard, answers) }()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // closing the deaf backend, for 3s
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := exited(t, cmd, 40*time.Second, "after SIGTERM", &stderr); err != nil {
		t.Errorf("the gateway ended with %v, want exit 0\nstderr:\n%s", err, stderr.String())
	}
}

// TestServeWatchSpec: --watch adopts an edit of a lifecycle file the config names
// (spec), the config itself unchanged, as SIGHUP does: the server gets a new
// connection. Only the config file was looked at, and the edit was never adopted
// (in a Kubernetes ConfigMap holding both, an update of the spec alone).
func TestServeWatchSpec(t *testing.T) {
	dir := t.TempDir()
	spec, err := os.ReadFile("../../transitions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	life := filepath.Join(dir, "life.yaml")
	if err := os.WriteFile(life, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "servers.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "version: 1\nspec: life.yaml\nservers:\n  one:\n    command: %s\n    args: [example-server]\n", mcpfsmBin(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	b, url := startServeHTTP(t, "--watch", "--watch-interval", "20ms", cfg)
	cs := connectHTTP(t, url, "2025-11-25")
	waitTool(t, cs, "one__echo")
	time.Sleep(200 * time.Millisecond) // ten looks: nothing to adopt
	if strings.Contains(b.stderr.String(), "reloaded") {
		t.Fatalf("a reload with nothing changed; stderr:\n%s", b.stderr.String())
	}
	edited := strings.Replace(string(spec), "default: 30s", "default: 31s", 1)
	if edited == string(spec) {
		t.Fatal("transitions.yaml has no default: 30s to edit")
	}
	if err := os.WriteFile(life, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(b.stderr.String(), "reloaded (the config file or a spec it names changed): reconnected one"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the spec's edit was not adopted; stderr:\n%s", b.stderr.String())
		}
	}
	if got, err := echo(t.Context(), cs, "one__echo", "after"); err != nil || got != "after" {
		t.Fatalf("one__echo after the reload: %q, %v", got, err)
	}
	if code := b.stop(t); code != 0 {
		t.Errorf("exit code %d; stderr:\n%s", code, b.stderr.String())
	}
}

// TestServeWatchSameStamp: --watch adopts a rewrite of the config that keeps its
// size and modification time (cp -p, rsync -t, tar, or a second write within the
// file system's timestamp granularity): it compared those two, and never saw it.
func TestServeWatchSameStamp(t *testing.T) {
	dir := t.TempDir()
	bin := mcpfsmBin(t)
	path := filepath.Join(dir, "servers.yaml")
	write := func(names ...string) {
		t.Helper()
		var b strings.Builder
		b.WriteString("version: 1\nservers:\n")
		for _, name := range names {
			fmt.Fprintf(&b, "  %s:\n    command: %s\n    args: [example-server]\n", name, bin)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("one", "two")
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, url := startServeHTTP(t, "--watch", "--watch-interval", "20ms", path)
	cs := connectHTTP(t, url, "2025-11-25")
	waitTool(t, cs, "two__echo")
	write("one", "won") // as long as before
	if err := os.Chtimes(path, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	if after, err := os.Stat(path); err != nil || after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the rewrite changed the stamp: %v, %v", after, err)
	}
	waitTool(t, cs, "won__echo")
	if code := b.stop(t); code != 0 {
		t.Errorf("exit code %d; stderr:\n%s", code, b.stderr.String())
	}
}

// TestServeStopsPastABackendsTeardown: a backend whose close takes longer than the
// gateway's close may (it ignores SIGTERM, and its teardown timeout is a minute) is
// reported as such, and the gateway exits within its bound; the HTTP front, which
// ended at once, is not blamed. The close took all of the 15 s, and serve then said
// a front had not ended, naming a stdio client that reads no answers, with no stdio
// front at all. Nothing the backend started outlives the gateway: a process of its
// group (a sleep it started) was left running, orphaned, for its minute.
func TestServeStopsPastABackendsTeardown(t *testing.T) {
	if testing.Short() {
		t.Skip("takes the gateway's 15s close")
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "servers.yaml")
	pidFile := filepath.Join(dir, "grandchild.pid")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("version: 1\nservers:\n  deaf:\n    command: /bin/sh\n    args: [-c, 'trap \"\" TERM; sleep 60 & echo $$! > %s; %s example-server; exec sleep 60']\n    policies:\n      teardown_timeout: 60s\n", pidFile, mcpfsmBin(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	// A process of its own: the backend outlives the serve it was closed by
	// (until its teardown timeout), and its goroutines would outlive this test's.
	// The backend is sh, then sleep in its place (exec): the parent-death signal
	// ends it with serve, where a child of sh would be left running.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mcpfsmBin(t), "serve", "--http", "127.0.0.1:0", cfg)
	var stderr testutil.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var url string
	for deadline := time.Now().Add(30 * time.Second); url == ""; time.Sleep(10 * time.Millisecond) {
		url = serveURL.FindString(stderr.String())
		if time.Now().After(deadline) {
			t.Fatalf("mcpfsm serve did not say its URL; stderr:\n%s", stderr.String())
		}
	}
	cs := connectHTTP(t, url, "2025-11-25")
	waitTool(t, cs, "deaf__echo")
	_ = cs.Close() // so that the HTTP server's shutdown does not wait for its stream
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Errorf("the gateway ended with %v; stderr:\n%s", err, stderr.String())
	}
	if d := time.Since(start); d > 25*time.Second {
		t.Errorf("stopped %v after SIGTERM, want within the 15s close", d)
	}
	if out := stderr.String(); !strings.Contains(out, "closing deaf") || strings.Contains(out, "a front did not end") {
		t.Errorf("want the backend's close reported, and no front blamed:\n%s", out)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); strings.Contains(string(stat), ") Z ") {
			break // killed, a zombie until init reaps it
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the backend's grandchild (pid %d) outlived the gateway", pid)
		}
	}
}

// TestServeStderrClosed: a host that closes the gateway's stderr (its read end of
// the pipe) loses the gateway's log, not the gateway: the first record logged (here
// a reload's failure) killed it with SIGPIPE, its stdio session and backends with it.
func TestServeStderrClosed(t *testing.T) {
	cfg := serveConfig(t, t.TempDir(), "example")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stdin, stdout, stderr := startPiped(ctx, t, nil, "serve", cfg)
	defer stdin.Close()
	stderr.Close() // the host reads no log
	answers := bufio.NewReader(stdout)
	exchange := func(line string) {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatalf("writing to the gateway: %v", err)
		}
		if _, err := answers.ReadBytes('\n'); err != nil {
			t.Fatalf("no answer to %.40s: %v", line, err)
		}
	}
	exchange(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if err := os.WriteFile(cfg, []byte("version: 1\nservers:\n  example:\n    comand: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the reload fails, and is logged
	exchange(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("the gateway ended with %v at the end of stdin", err)
	}
}

// TestServeStderrUnread: a host that never reads the gateway's stderr (a pipe it
// does not drain) blocks no part of the gateway: once 64 KiB of records filled the
// pipe, the next record's write blocked its goroutine for ever, serve's own loop
// with it (here, logging a reload's failure), and SIGTERM no longer stopped it.
func TestServeStderrUnread(t *testing.T) {
	cfg := serveConfig(t, t.TempDir(), "example")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd, stdin, stdout, stderr := startPiped(ctx, t, nil, "serve", cfg) // never read
	defer stdin.Close()
	defer stderr.Close()
	answers := bufio.NewReader(stdout)
	if _, err := io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := answers.ReadBytes('\n'); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, answers) }()
	// Each failed reload logs some 300 bytes: 400 of them fill the pipe.
	if err := os.WriteFile(cfg, []byte("version: 1\nservers:\n  example:\n    comand: "+strings.Repeat("x", 100)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 400 {
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := exited(t, cmd, 40*time.Second, "after SIGTERM, its stderr unread", unread{}); err != nil {
		t.Errorf("the gateway ended with %v, want exit 0", err)
	}
}

// startPiped starts mcpfsm with args (a command and its arguments) as a host or a
// shell pipeline would: its stdin and stdout are pipes; its stderr goes to stderr or,
// if that is nil, to a pipe, errPipe.
func startPiped(ctx context.Context, t *testing.T, stderr io.Writer, args ...string) (cmd *exec.Cmd, stdin io.WriteCloser, stdout, errPipe io.ReadCloser) {
	t.Helper()
	cmd = exec.CommandContext(ctx, mcpfsmBin(t), args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if stderr != nil {
		cmd.Stderr = stderr
	} else if errPipe, err = cmd.StderrPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin, stdout, errPipe
}

// exited waits up to d for cmd to end and returns how it ended; past d it kills cmd
// and fails the test, saying what it waited for and what cmd wrote on stderr.
func exited(t *testing.T, cmd *exec.Cmd, d time.Duration, what string, stderr fmt.Stringer) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("still running %v %s; stderr:\n%s", d, what, stderr)
		return nil
	}
}

// TestWatcherWaitsForASettledFile: --watch adopts a change once two readings in a row
// agree: a file read while being written (a half that parses) is not adopted, nor is a
// change undone by the next reading; a file that stays unreadable is (its reading is
// its error), so that the reload says why.
func TestWatcherWaitsForASettledFile(t *testing.T) {
	w := watcher{last: "v1"}
	var adopted []string
	for _, s := range []string{"v1", "half", "v2", "v2", "v2", "v3", "v1", "v1", "gone", "gone", "v4", "v4"} {
		if w.changed(s) {
			adopted = append(adopted, s)
		}
	}
	if diff := cmp.Diff([]string{"v2", "v1", "gone", "v4"}, adopted); diff != "" {
		t.Errorf("adopted (-want +got):\n%s", diff)
	}
}

// unread stands for a stderr the test leaves unread, in exited's failure.
type unread struct{}

func (unread) String() string { return "(not read)" }

// TestServeTypeScriptFeatures: the TypeScript SDK's client, through mcpfsm serve over
// stdio and over HTTP, uses everything the gateway says goes through (testdata/
// tsclient/features.mjs, one check each): tools, prompts, resources and templates,
// a method the gateway does not handle (-32601), completion, logging (its setLevel
// reaching the backend), progress, cancellation by
// an AbortSignal, sampling, elicitation and roots asked by a backend on 2026-07-28 and
// on 2025-11-25 (old), the refusal of a client without those capabilities, a
// subscription, list changes, a kill -9 of the backend (a call fails fast as a tool
// error; the respawn changes the lists; the subscription holds), and a SIGHUP reload.
func TestServeTypeScriptFeatures(t *testing.T) {
	script := filepath.Join(filepath.Dir(tsClient(t)), "features.mjs")
	for _, name := range []string{"stdio", "http"} {
		t.Run(name, func(t *testing.T) {
			checks, stderr := runFeatures(t, script, name)
			wantChecks(t, checks, []string{"tools", "unknown_method", "prompts", "resources", "completion", "logging", "progress", "cancellation",
				"sampling/example", "elicitation/example", "roots/example", "sampling/old", "elicitation/old", "roots/old",
				"refusal", "subscription", "list_changed", "down_fails_fast", "respawn", "respawn_list_changed",
				"subscription_after_respawn", "reload"})
			if t.Failed() {
				t.Logf("client stderr:\n%s", stderr)
			}
		})
	}
}

// A featureCheck is one check a features script printed.
type featureCheck struct {
	OK     bool
	Detail string
	MS     int
}

// runFeatures runs a features script (testdata/tsclient*/features.mjs) with node
// against mcpfsm serve over transport (stdio, or HTTP from a serve process of its
// own, for the script's SIGHUP), serving the example server as "example" (a backoff
// of a second, which leaves a killed backend down long enough to be called) and as
// "old" (pinned to 2025-11-25); MCPFSM_NEXT_CONFIG names the config the script moves
// over it to add "two". It returns the checks the script printed and its stderr.
func runFeatures(t *testing.T, script, transport string) (map[string]featureCheck, string) {
	t.Helper()
	bin := mcpfsmBin(t)
	server := func(name string, extra string) string {
		return fmt.Sprintf("  %s:\n    command: %s\n    args: [example-server]\n%s", name, bin, extra)
	}
	base := "version: 1\nservers:\n" + server("example", "    policies:\n      backoff_base: 1s\n") +
		server("old", "    protocol: 2025-11-25\n")
	dir := t.TempDir()
	cfg, next := filepath.Join(dir, "servers.yaml"), filepath.Join(dir, "next.yaml")
	if err := os.WriteFile(cfg, []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(next, []byte(base+server("two", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// The status resource tells the script when the gateway has seen a backend die.
	args := []string{script, "stdio", bin, "serve", "--status-resource", "mcpfsm://status", cfg}
	if transport == "http" {
		var gwErr testutil.SyncBuffer
		gw := exec.CommandContext(ctx, bin, "serve", "--http", "127.0.0.1:0", "--status-resource", "mcpfsm://status", cfg)
		gw.Stderr = &gwErr
		if err := gw.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = gw.Process.Signal(syscall.SIGTERM); _ = gw.Wait() })
		var url string
		for deadline := time.Now().Add(30 * time.Second); url == ""; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("mcpfsm serve did not say its URL; stderr:\n%s", gwErr.String())
			}
			url = serveURL.FindString(gwErr.String())
		}
		args = []string{script, "http", url, strconv.Itoa(gw.Process.Pid)}
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Env = append(os.Environ(), "MCPFSM_CONFIG="+cfg, "MCPFSM_NEXT_CONFIG="+next)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s %s: %v\nstderr:\n%s", filepath.Base(script), transport, err, stderr.String())
	}
	var checks map[string]featureCheck
	if err := json.Unmarshal(stdout.Bytes(), &checks); err != nil {
		t.Fatalf("the client printed %q: %v\nstderr:\n%s", stdout.String(), err, stderr.String())
	}
	return checks, stderr.String()
}

// wantChecks fails each check of want that was not run or failed, and logs the others.
func wantChecks(t *testing.T, checks map[string]featureCheck, want []string) {
	t.Helper()
	for _, c := range want {
		got, ok := checks[c]
		switch {
		case !ok:
			t.Errorf("%s: not run", c)
		case !got.OK:
			t.Errorf("%s: %s", c, got.Detail)
		default:
			t.Logf("%s (%d ms) %s", c, got.MS, got.Detail)
		}
	}
}
