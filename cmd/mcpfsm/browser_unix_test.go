//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// pageServer is a server as the status page shows it, read from the DOM.
type pageServer struct {
	Name    string `json:"name"`
	State   string `json:"state"`   // the section's data-state
	Badge   string `json:"badge"`   // the state as written on the page
	Current string `json:"current"` // the state marked current in its picture
	Taken   int    `json:"taken"`   // edges of its picture marked as recently taken
	Text    string `json:"text"`
}

const readPage = `JSON.stringify([...document.querySelectorAll("section.server")].map(s => ({
	name: s.dataset.server, state: s.dataset.state,
	badge: s.querySelector(".badge")?.textContent ?? "",
	current: s.querySelector("svg g.state.current")?.dataset.state ?? "",
	taken: s.querySelectorAll("svg path.edge.taken").length,
	text: s.innerText})))`

// TestStatusPageInBrowser drives Debian's chromium, headless, against mcpfsm run
// --http-status with two servers, one healthy and one whose HTTP server is stopped:
// the page shows both by name, the healthy one ready and the other in a failing state,
// each on its lifecycle picture with that state marked current and its recent path
// marked; no secret of the config reaches the page; and, without a reload, the page
// follows the dead server when it comes back. It keeps screenshots as artifacts. It is
// skipped only when chromium is missing and MCPFSM_REQUIRE_BROWSER is unset (.ci/run
// installs chromium and sets it).
func TestStatusPageInBrowser(t *testing.T) {
	chromium := chromiumPath()
	if chromium == "" {
		if os.Getenv("MCPFSM_REQUIRE_BROWSER") != "" {
			t.Fatal("chromium is not installed, and MCPFSM_REQUIRE_BROWSER is set (apt-get install chromium)")
		}
		t.Skip("chromium is not installed (apt-get install chromium; MCPFSM_REQUIRE_BROWSER=1 makes this a failure)")
	}
	const secret = "SECRET-MARKER-7f3a"
	healthy := testserver.StartHTTP(t, testserver.Options{})
	dead := testserver.StartHTTP(t, testserver.Options{})
	dead.Stop()
	// Its port is held while it is down, refusing connections: another test's
	// server that took the free port answered 404, and the dead server was parked
	// (config) instead of failing.
	release := holdPort(t, strings.TrimSuffix(strings.TrimPrefix(dead.URL(), "http://"), "/mcp"))
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
policies: {backoff_base: 100ms, backoff_max: 300ms, breaker_threshold: 3, breaker_cooldown: 400ms, breaker_cooldown_max: 800ms, keepalive_interval: 2s}
servers:
  healthy:
    url: %s
  dead:
    url: %s?token=%s
    headers: {Authorization: "Bearer %s"}
`, healthy.URL(), dead.URL(), secret, secret))

	run := startCLI(t, "run", "--http-status", "127.0.0.1:0", cfg)
	var pageURL string
	run.waitFor(t, "the status page's address", func(out string) bool {
		m := regexp.MustCompile(`status page at (http://127\.0\.0\.1:\d+/)`).FindStringSubmatch(out)
		if m != nil {
			pageURL = m[1]
		}
		return m != nil
	})
	b := startBrowser(t, chromium, pageURL)

	// wait polls the page, as it updates itself, until ok holds of its servers.
	wait := func(what string, ok func(map[string]pageServer) bool) map[string]pageServer {
		t.Helper()
		var last string
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			var raw string
			if err := b.eval(readPage, &raw); err != nil {
				t.Fatal(err)
			}
			last = raw
			var list []pageServer
			if err := json.Unmarshal([]byte(raw), &list); err != nil {
				t.Fatal(err)
			}
			byName := map[string]pageServer{}
			for _, s := range list {
				byName[s.Name] = s
			}
			if ok(byName) {
				return byName
			}
			if time.Now().After(deadline) {
				t.Fatalf("the page did not show %s within 60s; it shows:\n%s\nmcpfsm run:\n%s", what, last, run.stdout.String())
			}
		}
	}
	failing := []string{"connecting", "tearing-down", "backing-off", "breaker-open", "half-open"}
	// The page writes a server's state and then marks its picture: it is read once
	// both show one state (the assertions below say what must hold then).
	page := wait("one server ready and one failing", func(p map[string]pageServer) bool {
		h, d := p["healthy"], p["dead"]
		return h.State == "ready" && slices.Contains(failing, d.State) && d.State != "connecting" &&
			h.Current == h.State && d.Current == d.State
	})
	for _, s := range page {
		if s.Current != s.State || s.Badge != s.State || !strings.Contains(s.Text, s.Name) || s.Taken == 0 {
			t.Errorf("%s: state %q, written %q, current in the picture %q, %d recent edges marked", s.Name, s.State, s.Badge, s.Current, s.Taken)
		}
	}
	if d := page["dead"]; !strings.Contains(d.Text, "connection refused") || !strings.Contains(d.Text, "lost") {
		t.Errorf("the dead server's last failure is not shown:\n%s", d.Text)
	}
	var html string
	if err := b.eval("document.documentElement.outerHTML", &html); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, secret) {
		t.Errorf("the page shows a secret of the config")
	}
	shot, err := b.screenshot()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(shot), "\x89PNG") {
		t.Fatalf("the screenshot is not a PNG")
	}
	artifact(t, "live-page-failing.png", shot)

	release()
	dead.Restart(false)
	page = wait("the dead server back, ready", func(p map[string]pageServer) bool {
		return p["dead"].State == "ready" && p["dead"].Current == "ready" && p["healthy"].State == "ready"
	})
	if !strings.Contains(page["dead"].Text, "connected") {
		t.Errorf("the recovery is not in the dead server's recent transitions:\n%s", page["dead"].Text)
	}
	if shot, err = b.screenshot(); err != nil {
		t.Fatal(err)
	}
	artifact(t, "live-page-recovered.png", shot)
	if code := run.stop(t); code != 0 {
		t.Errorf("mcpfsm run exited %d: %s", code, run.stderr.String())
	}
}

// holdPort binds addr (a port just freed) without listening on it, so that a
// connection to it is refused as to a dead server while no other server can take
// the port, until release.
func holdPort(t *testing.T, addr string) (release func()) {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		t.Fatalf("holding %q: %v", addr, err)
	}
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd) // not inherited by the CLI or chromium
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	sa := &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err = syscall.Bind(fd, sa); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		syscall.Close(fd)
		t.Fatalf("holding the dead server's port: %v", err)
	}
	var once sync.Once
	release = func() { once.Do(func() { syscall.Close(fd) }) }
	t.Cleanup(release)
	return release
}
