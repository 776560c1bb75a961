package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// noKeepAlive is an HTTP client that leaves no idle connection (and no goroutine)
// behind.
var noKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// TestStatusAddr: --http-status listens on loopback unless told otherwise; a missing
// host is loopback.
func TestStatusAddr(t *testing.T) {
	for _, c := range []struct {
		addr     string
		want     string
		loopback bool
	}{
		{":0", "127.0.0.1:0", true},
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{"localhost:0", "localhost:0", true},
		{"[::1]:0", "[::1]:0", true},
		{"0.0.0.0:8080", "0.0.0.0:8080", false},
		{"192.0.2.7:80", "192.0.2.7:80", false},
		{"example.com:80", "example.com:80", false},
	} {
		got, loopback, err := statusAddr(c.addr)
		if err != nil || got != c.want || loopback != c.loopback {
			t.Errorf("statusAddr(%q) = %q, %v, %v; want %q, %v", c.addr, got, loopback, err, c.want, c.loopback)
		}
	}
	if _, _, err := statusAddr("8080"); err == nil {
		t.Error("a bare port is accepted")
	}
	if s, err := newStatusServer(&statusFlags{addr: "0.0.0.0:0"}); err == nil || s != nil || !strings.Contains(err.Error(), "--http-status-remote") {
		t.Errorf("a non-loopback address without --http-status-remote: %v", err)
	}
	_, errOut, code := runCLI(t, "run", "--http-status", "0.0.0.0:0", writeConfig(t, "version: 1\nservers:\n  s:\n    command: ./x\n"))
	if code != 2 || !strings.Contains(errOut, "not a loopback address") {
		t.Errorf("run --http-status 0.0.0.0:0: exit %d, %q", code, errOut)
	}
}

// TestStatusServer: mcpfsm run --http-status serves /status (every server's status as
// JSON), /metrics (Prometheus text with mcpfsm's metrics) and the page, with no secret
// of the config in any of them; a request whose Host is not loopback is refused.
func TestStatusServer(t *testing.T) {
	const secret = "SECRET-MARKER-91c2"
	h := testserver.StartHTTP(t, testserver.Options{})
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
policies: {backoff_base: 50ms, backoff_max: 100ms}
servers:
  good:
    url: %s
    headers: {X-Token: %s}
  missing:
    command: ./no-such-server
    args: [--password, %s]
    env: {TOKEN: %s}
`, h.URL(), secret, secret, secret))
	run := startCLI(t, "run", "--http-status", ":0", cfg)
	var base string
	run.waitFor(t, "the status page's address", func(out string) bool {
		m := regexp.MustCompile(`status page at (http://127\.0\.0\.1:\d+)/`).FindStringSubmatch(out)
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	get := func(path string, host string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		if host != "" {
			req.Host = host
		}
		res, err := noKeepAlive.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body), res.Header
	}
	var doc struct {
		Time    time.Time
		Servers []jsonStatus
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, body, _ := get("/status", "")
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatalf("/status is not JSON: %v\n%s", err, body)
		}
		if len(doc.Servers) == 2 && doc.Servers[0].State == "ready" && doc.Servers[1].State == "parked" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/status did not show good ready and missing parked: %+v", doc.Servers)
		}
	}
	if g, m := doc.Servers[0], doc.Servers[1]; g.Server != "good" || g.Session == nil || m.Server != "missing" || !m.ActionNeeded ||
		m.LastFailure.Cause != "config" || m.Calls != "fail" || time.Since(doc.Time) > time.Minute {
		t.Errorf("statuses: %+v\n%+v", g, m)
	}
	code, page, hdr := get("/", "")
	if code != 200 || !strings.Contains(page, `id="server-good"`) || !strings.Contains(page, `data-state="parked"`) ||
		!strings.Contains(page, "<svg") || !strings.Contains(hdr.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("the page: %d\n%s", code, page)
	}
	for _, path := range []string{"/page.js", "/page.css", "/view"} {
		if code, _, _ := get(path, ""); code != 200 {
			t.Errorf("%s: %d", path, code)
		}
	}
	code, metrics, _ := get("/metrics", "")
	for _, name := range []string{"mcpfsm_transitions_total", "mcpfsm_connect_attempts_total", "mcpfsm_connect_duration_seconds_bucket",
		`mcpfsm_connections{mcpfsm_state="ready"`, `mcpfsm_failures_total{mcpfsm_cause="config",mcpfsm_server="missing"`} {
		if code != 200 || !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s:\n%s", name, metrics)
		}
	}
	_, body, _ := get("/status", "")
	_, view, _ := get("/view", "")
	for what, text := range map[string]string{"/status": body, "/": page, "/view": view, "/metrics": metrics, "stdout": run.stdout.String()} {
		if strings.Contains(text, secret) {
			t.Errorf("%s shows a secret of the config", what)
		}
	}
	if code, _, _ := get("/status", "attacker.example:80"); code != http.StatusMisdirectedRequest {
		t.Errorf("a request for another host: %d, want 421", code)
	}
	if code := run.stop(t); code != 0 {
		t.Errorf("exit %d: %s", code, run.stderr.String())
	}
}

// TestPicture: the lifecycle picture has every state of the spec once, the current one
// marked, and the edges of the recent path marked as taken; it is the same for the same
// input.
func TestPicture(t *testing.T) {
	spec := mcpfsm.DefaultSpec()
	path := []machine.Transition{
		{From: "idle", To: "connecting", Trigger: "start"},
		{From: "connecting", To: "backing-off", Trigger: "connect_failed"},
		{From: "backing-off", To: "connecting", Trigger: "after backoff"},
	}
	svg := pictureOf(spec).svg(states.Connecting, path)
	for _, st := range spec.States() {
		if n := strings.Count(svg, fmt.Sprintf(`data-state="%s"`, st.Name)); n != 1 {
			t.Errorf("state %s drawn %d times", st.Name, n)
		}
	}
	if !strings.Contains(svg, `<g class="state current" data-state="connecting">`) || !strings.Contains(svg, `<g class="state visited" data-state="backing-off">`) {
		t.Errorf("the current or visited state is not marked:\n%s", svg)
	}
	if n := strings.Count(svg, `class="edge taken`); n != 3 {
		t.Errorf("%d taken edges, want 3", n)
	}
	if svg != pictureOf(spec).svg(states.Connecting, path) || strings.Contains(svg, "NaN") {
		t.Error("the picture is not stable")
	}
	// The picture is within its box.
	p := pictureOf(spec)
	for name, n := range p.nodes {
		if n.x-n.w/2 < 0 || n.x+n.w/2 > p.width || n.y-nodeH/2 < 0 || n.y+nodeH/2 > p.height {
			t.Errorf("state %s drawn outside the picture", name)
		}
	}
}

// TestServeStatusServer: mcpfsm serve --http-status serves the same status page over
// the gateway's backends: /status with each backend's state, /metrics with their
// metrics.
func TestServeStatusServer(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	cfg := writeConfig(t, fmt.Sprintf("version: 1\nservers:\n  good:\n    url: %s\n  missing:\n    command: ./no-such-server\n", h.URL()))
	serve := startCLI(t, "serve", "--http", "127.0.0.1:0", "--http-status", ":0", cfg)
	var base string
	for deadline := time.Now().Add(30 * time.Second); base == ""; time.Sleep(10 * time.Millisecond) {
		if m := regexp.MustCompile(`status page at (http://127\.0\.0\.1:\d+)/`).FindStringSubmatch(serve.stderr.String()); m != nil {
			base = m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no status page address within 30s; stderr:\n%s", serve.stderr.String())
		}
	}
	get := func(path string) string {
		t.Helper()
		res, err := noKeepAlive.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, res.StatusCode, body)
		}
		return string(body)
	}
	var doc struct{ Servers []jsonStatus }
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := json.Unmarshal([]byte(get("/status")), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Servers) == 2 && doc.Servers[0].State == "ready" && doc.Servers[1].State == "parked" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/status did not show good ready and missing parked: %+v", doc.Servers)
		}
	}
	if metrics := get("/metrics"); !strings.Contains(metrics, `mcpfsm_failures_total{mcpfsm_cause="config",mcpfsm_server="missing"`) {
		t.Errorf("/metrics lacks the backend's failure:\n%s", metrics)
	}
	if page := get("/"); !strings.Contains(page, `id="server-good"`) {
		t.Errorf("the page lacks the backend:\n%s", page)
	}
	if code := serve.stop(t); code != 0 {
		t.Errorf("exit %d: %s", code, serve.stderr.String())
	}
}

// statusPageAddr waits for run to say where its status page is, and returns its address.
func statusPageAddr(t *testing.T, run *background) string {
	t.Helper()
	var addr string
	run.waitFor(t, "the status page's address", func(out string) bool {
		m := regexp.MustCompile(`status page at http://(127\.0\.0\.1:\d+)/`).FindStringSubmatch(out)
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

// TestStatusServerIdleConnections: a client that keeps a connection to the status
// server open after its request, sending nothing more, has it closed after the idle
// timeout: the status server had none, and such connections (a goroutine and a file
// descriptor each) were held for ever, until the process ran out of descriptors for
// its fronts and its backends.
func TestStatusServerIdleConnections(t *testing.T) {
	defer func(d time.Duration) { idleTimeout = d }(idleTimeout)
	idleTimeout = 300 * time.Millisecond
	h := testserver.StartHTTP(t, testserver.Options{})
	run := startCLI(t, "run", "--http-status", ":0", writeConfig(t, fmt.Sprintf("version: 1\nservers:\n  good:\n    url: %s\n", h.URL())))
	addr := statusPageAddr(t, run)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("the idle connection: %v after %v, want it closed (EOF) after about %v", err, time.Since(start), idleTimeout)
	}
}

// TestStatusServerHostileClients: a client of the status server that declares a body
// it never sends, or pipelines requests and never reads the answers, holds neither its
// connection nor the run's exit: the first had no answer at all (Go's server reads a
// body before answering, and the status server had no read timeout), the second held
// a goroutine blocked writing to it, and with both Ctrl-C took the run's 30 s for its
// connections and exited 1.
func TestStatusServerHostileClients(t *testing.T) {
	defer func(r, w time.Duration) { statusReadTimeout, statusWriteTimeout = r, w }(statusReadTimeout, statusWriteTimeout)
	statusReadTimeout, statusWriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	h := testserver.StartHTTP(t, testserver.Options{})
	run := startCLI(t, "run", "--http-status", ":0", writeConfig(t, fmt.Sprintf("version: 1\nservers:\n  good:\n    url: %s\n", h.URL())))
	addr := statusPageAddr(t, run)
	dial := func() *net.TCPConn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.TCPConn)
	}

	// A body declared and never sent: an answer, or the connection closed, at once.
	silent := dial()
	fmt.Fprintf(silent, "GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n")
	start := time.Now()
	_ = silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(silent); err != nil || time.Since(start) > 5*time.Second {
		t.Errorf("a request whose body never comes: %v after %v, want its connection ended within about %v", err, time.Since(start), statusReadTimeout)
	}

	// Pipelined requests for the page whose answers are not read: cut once a write
	// has waited past the write timeout.
	deaf := dial()
	_ = deaf.SetReadBuffer(4096)
	const requests = 2000
	go func() {
		_, _ = deaf.Write([]byte(strings.Repeat("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", requests)))
	}()
	time.Sleep(2 * time.Second)
	_ = deaf.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(deaf)
	answered := 0
	var err error
	for ; answered < requests; answered++ {
		var res *http.Response
		if res, err = http.ReadResponse(br, nil); err != nil {
			break
		}
		if _, err = io.Copy(io.Discard, res.Body); err != nil {
			break
		}
		res.Body.Close()
	}
	if answered == requests || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a client that reads no answers: %d of %d answered, then %v; want it cut", answered, requests, err)
	}

	start = time.Now()
	if code := run.stop(t); code != 0 || time.Since(start) > 5*time.Second {
		t.Errorf("Ctrl-C: exit %d after %v: %s", code, time.Since(start), run.stderr.String())
	}
}
