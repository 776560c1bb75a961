package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// TestGateway_ProgressBeforeResultOnTheWire: through the stdio front, a call's
// progress notifications are written before its result, every one of them, as a
// front client reads the wire (a client such as the TypeScript SDK's drops progress
// that comes after its call's answer). The backend is a stdio server on 2026-07-28.
func TestGateway_ProgressBeforeResultOnTheWire(t *testing.T) {
	g := start(t, config(stdio(t, "example", testserver.Options{})), gateway.Options{})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = g.Server().Run(ctx, transport.ServerStdio(inR, outW)); close(done) }()
	defer func() { cancel(); inW.Close(); outR.Close(); <-done }()
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	send := func(s string) { fmt.Fprintln(inW, s) }
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("no line")
		}
		return ""
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	next()
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// The backend's tools are listed.
	for i := 0; ; i++ {
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, 10000+i))
		l := next()
		for !strings.Contains(l, fmt.Sprintf(`"id":%d`, 10000+i)) {
			l = next()
		}
		if strings.Contains(l, "slow_progress") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 1; i <= 30; i++ {
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"example__slow_progress","arguments":{"ms":1,"steps":3},"_meta":{"progressToken":"p%d"}}}`, i, i))
		n := 0
		for {
			l := next()
			if strings.Contains(l, fmt.Sprintf(`"progressToken":"p%d"`, i)) {
				n++
				continue
			}
			if strings.Contains(l, fmt.Sprintf(`"id":%d,`, i)) {
				break
			}
		}
		if n != 3 {
			t.Errorf("call %d: %d of its 3 progress notifications before its result", i, n)
		}
	}
}
