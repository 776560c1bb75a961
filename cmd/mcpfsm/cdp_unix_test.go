//go:build unix

package main

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// This file drives a headless Chromium from tests, through the DevTools protocol over
// a WebSocket: a small client written here on the standard library (the handshake of
// RFC 6455 and its frames), rather than a test tool that would download a browser of
// its own, which these machines cannot.

// chromiumPath returns Debian's chromium, or "" if it is not installed.
func chromiumPath() string {
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	return ""
}

// A browser is a headless Chromium showing one page, driven over the DevTools
// protocol.
type browser struct {
	t    *testing.T
	cmd  *exec.Cmd
	conn net.Conn
	rd   *bufio.Reader
	id   int
}

// startBrowser starts chromium headless on pageURL, with a fresh profile, and connects
// to the page's DevTools endpoint. Everything it starts is stopped at cleanup.
func startBrowser(t *testing.T, chromium, pageURL string) *browser {
	t.Helper()
	profile := t.TempDir()
	cmd := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir="+profile,
		"--remote-debugging-port=0", "--window-size=1280,1700", "--hide-scrollbars", pageURL)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its helpers are killed with it
	logFile, err := os.Create(filepath.Join(t.TempDir(), "chromium.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, cmd: cmd}
	t.Cleanup(func() {
		if b.conn != nil {
			b.conn.Close()
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		logFile.Close()
	})
	// Chromium writes the port it chose, and the browser's WebSocket path, to
	// DevToolsActivePort in the profile once it listens.
	var port string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		data, err := os.ReadFile(filepath.Join(profile, "DevToolsActivePort"))
		if line, _, _ := strings.Cut(string(data), "\n"); err == nil && line != "" {
			port = line
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("chromium did not open its DevTools port within 60s:\n%s", log)
		}
	}
	// The page's own endpoint, from the list of targets.
	var wsURL string
	for deadline := time.Now().Add(30 * time.Second); wsURL == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("chromium lists no page target")
		}
		res, err := noKeepAlive.Get("http://127.0.0.1:" + port + "/json/list")
		if err != nil {
			continue
		}
		var targets []struct{ Type, URL, WebSocketDebuggerURL string }
		err = json.NewDecoder(res.Body).Decode(&targets)
		res.Body.Close()
		for _, tg := range targets {
			if err == nil && tg.Type == "page" && strings.HasPrefix(tg.URL, pageURL) {
				wsURL = tg.WebSocketDebuggerURL
			}
		}
	}
	if err := b.dial(wsURL); err != nil {
		t.Fatal(err)
	}
	return b
}

// dial opens the WebSocket (RFC 6455's client handshake).
func (b *browser) dial(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		return err
	}
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	key := base64.StdEncoding.EncodeToString(nonce)
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", u.RequestURI(), u.Host, key)
	rd := bufio.NewReader(conn)
	res, err := http.ReadResponse(rd, nil)
	if err != nil {
		conn.Close()
		return err
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		conn.Close()
		return fmt.Errorf("WebSocket handshake with %s: %s", raw, res.Status)
	}
	b.conn, b.rd = conn, rd
	return nil
}

// send writes one text frame, masked as a client's must be.
func (b *browser) send(payload []byte) error {
	hdr := []byte{0x81} // FIN, text
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n <= 0xffff:
		hdr = append(hdr, 0x80|126, byte(n>>8), byte(n))
	default:
		hdr = append(hdr, 0x80|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	mask := make([]byte, 4)
	_, _ = rand.Read(mask)
	hdr = append(hdr, mask...)
	masked := make([]byte, len(payload))
	for i, c := range payload {
		masked[i] = c ^ mask[i%4]
	}
	_, err := b.conn.Write(append(hdr, masked...))
	return err
}

// receive reads one message, joining fragments; it answers pings.
func (b *browser) receive() ([]byte, error) {
	var msg []byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(b.rd, h[:]); err != nil {
			return nil, err
		}
		fin, op := h[0]&0x80 != 0, h[0]&0x0f
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var ext [2]byte
			if _, err := io.ReadFull(b.rd, ext[:]); err != nil {
				return nil, err
			}
			n = uint64(binary.BigEndian.Uint16(ext[:]))
		case 127:
			var ext [8]byte
			if _, err := io.ReadFull(b.rd, ext[:]); err != nil {
				return nil, err
			}
			n = binary.BigEndian.Uint64(ext[:])
		}
		if n > 64<<20 {
			return nil, fmt.Errorf("a frame of %d bytes", n)
		}
		var mask [4]byte
		if h[1]&0x80 != 0 {
			if _, err := io.ReadFull(b.rd, mask[:]); err != nil {
				return nil, err
			}
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(b.rd, data); err != nil {
			return nil, err
		}
		if h[1]&0x80 != 0 {
			for i := range data {
				data[i] ^= mask[i%4]
			}
		}
		switch op {
		case 0x8:
			return nil, errors.New("the browser closed the WebSocket")
		case 0x9: // ping
			continue
		case 0xa: // pong
			continue
		}
		msg = append(msg, data...)
		if fin {
			return msg, nil
		}
	}
}

// call sends a DevTools command and returns its result, skipping the events that
// come meanwhile.
func (b *browser) call(method string, params any, result any) error {
	b.id++
	req, err := json.Marshal(map[string]any{"id": b.id, "method": method, "params": params})
	if err != nil {
		return err
	}
	_ = b.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := b.send(req); err != nil {
		return err
	}
	for {
		data, err := b.receive()
		if err != nil {
			return err
		}
		var res struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &res); err != nil {
			return err
		}
		if res.ID != b.id {
			continue // an event
		}
		if res.Error != nil {
			return fmt.Errorf("%s: %s", method, res.Error.Message)
		}
		if result == nil {
			return nil
		}
		return json.Unmarshal(res.Result, result)
	}
}

// eval evaluates a JavaScript expression in the page and decodes its value (which
// must be JSON-serializable) into out.
func (b *browser) eval(expr string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &res); err != nil {
		return err
	}
	if res.ExceptionDetails != nil {
		return fmt.Errorf("evaluating %q: %s", expr, res.ExceptionDetails.Text)
	}
	return json.Unmarshal(res.Result.Value, out)
}

// screenshot captures the page, whole, as PNG.
func (b *browser) screenshot() ([]byte, error) {
	var res struct {
		Data string `json:"data"`
	}
	if err := b.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &res); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(res.Data)
}

// artifact writes a test artifact to $MCPFSM_ARTIFACTS (or the test's temporary
// directory) and logs where.
func artifact(t *testing.T, name string, data []byte) string {
	t.Helper()
	dir := os.Getenv("MCPFSM_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("artifact: %s (%s bytes)", path, strconv.Itoa(len(data)))
	return path
}
