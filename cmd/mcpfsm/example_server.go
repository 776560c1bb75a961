package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func runExampleServer(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("example-server", "[--http ADDR] [--crash-after DURATION]", `
Serve the project's example MCP server: over stdio by default, or over
streamable HTTP on ADDR (such as 127.0.0.1:8931). Its tools include echo, counter
(counts per session), slow (sleeps), hold, crash (dies), change_tools (makes the tool
list change), pid and stats; mcpfsm ls lists them all, with its prompt, resources and
a resource template. The example config (examples/servers.yaml) runs it.

--crash-after makes the server exit abruptly after that long, as a flaky server
would, so that mcpfsm run shows a crash, a backoff and a respawn.`, stderr)
	addr := fs.String("http", "", "serve streamable HTTP on this address instead of stdio")
	crashAfter := fs.Duration("crash-after", 0, "exit abruptly after this long (0: never)")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "mcpfsm example-server: takes no arguments")
		return 2
	}
	if *crashAfter > 0 {
		go func() {
			time.Sleep(*crashAfter)
			os.Exit(3) // abruptly, as a crash: no goodbye on the wire
		}()
	}
	if *addr == "" {
		opts := testserver.Options{Name: "example-server", Crash: func() { os.Exit(3) }}
		if err := testserver.New(opts).Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
			fmt.Fprintln(stderr, "mcpfsm example-server:", err)
			return 1
		}
		return 0
	}
	srv, err := startExampleServer(*addr)
	if err != nil {
		fmt.Fprintln(stderr, "mcpfsm example-server:", err)
		return 1
	}
	fmt.Fprintln(stdout, srv.URL())
	<-ctx.Done()
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.close(cctx)
	return 0
}
