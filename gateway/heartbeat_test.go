package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestGateway_HeartbeatKeepsStreamsAlive: behind a proxy that cuts a connection on
// which the gateway has written nothing for a while (as nginx does after its
// proxy_read_timeout, 60 s by default), a front session idle longer than that is
// still told of a reload's changed lists: the gateway writes an SSE comment to an
// event stream that has been silent for HTTPOptions.Heartbeat. Without it, the
// go-sdk's 2026-07-28 client, whose listen stream was cut, was told of nothing
// again, and its client before 2026-07-28 of nothing sent while it was opening its
// GET again (a second and more, each time the proxy cut it).
func TestGateway_HeartbeatKeepsStreamsAlive(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	// The proxy's idle cut is 20 heartbeats: a loaded machine (a load of 30 on
	// 2 cores) once kept the gateway's heartbeat from being written for 300 ms.
	url := idleCutProxy(t, serveHTTP(t, g, gateway.HTTPOptions{Heartbeat: 50 * time.Millisecond}), time.Second)
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			changed := make(chan struct{}, 16)
			cs := httpFrontWith(t, url, version, nil, &mcp.ClientOptions{
				Capabilities:           &mcp.ClientCapabilities{},
				ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
			})
			waitTools(t, cs, has("a__echo"))
			time.Sleep(2 * time.Second) // idle, past the proxy's cut
			for len(changed) > 0 {
				<-changed
			}
			if _, err := g.Reload(callCtx(t), config(inMemory("a", testserver.Options{}), inMemory(version[:4], testserver.Options{}))); err != nil {
				t.Fatal(err)
			}
			select {
			case <-changed:
			case <-time.After(waitFor):
				t.Fatal("the front session was not told of the reload's tools")
			}
			waitTools(t, cs, has(version[:4]+"__echo"))
		})
	}
}

// TestGateway_HeartbeatComments: a session's GET stream, silent, gets an SSE comment
// every HTTPOptions.Heartbeat, and a negative Heartbeat writes none.
func TestGateway_HeartbeatComments(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	for _, every := range []time.Duration{20 * time.Millisecond, -1} {
		url := serveHTTP(t, g, gateway.HTTPOptions{Heartbeat: every})
		headers := rawSession(t, url, "2025-11-25")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		req.Header.Set("Accept", "text/event-stream")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		comments := 0
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() { // until the context ends, a second on
			if sc.Text() == ":" {
				comments++
			}
		}
		resp.Body.Close()
		cancel()
		if every > 0 && comments < 5 || every < 0 && comments != 0 {
			t.Errorf("Heartbeat %v: %d comments in a second", every, comments)
		}
	}
}

// idleCutProxy forwards TCP connections to the server of url, and closes one on
// which the server has sent nothing for idle. It returns its own URL.
func idleCutProxy(t *testing.T, url string, idle time.Duration) string {
	t.Helper()
	target := strings.TrimPrefix(url, "http://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c ...net.Conn) {
		mu.Lock()
		conns = append(conns, c...)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			track(c, u)
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(u, c)
				u.Close()
			}()
			go func() {
				defer wg.Done()
				defer c.Close()
				defer u.Close()
				buf := make([]byte, 32<<10)
				for {
					_ = u.SetReadDeadline(time.Now().Add(idle))
					n, err := u.Read(buf)
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						if errors.Is(err, os.ErrDeadlineExceeded) {
							t.Logf("the proxy cut a connection idle for %v", idle)
						}
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String() + "/"
}
