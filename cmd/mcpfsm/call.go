package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func runCall(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("call", "[--timeout 30s] [--json] CONFIG SERVER TOOL [ARGUMENTS]", `
Call one tool of one server of a servers config, through a connection with its
lifecycle, and print the result to stdout: each text content on its own line,
other content as JSON (with --json, the whole result as JSON). ARGUMENTS is a
JSON object, such as '{"text": "hello"}'.

Exits 0 when the tool answered, 1 when the tool reported an error (the result is
still printed) or the call failed (the error goes to stderr).`, stderr)
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long, waiting for the server included")
	asJSON := fs.Bool("json", false, "print the whole result as JSON")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() != 3 && fs.NArg() != 4 {
		fmt.Fprintln(stderr, "mcpfsm call: want CONFIG SERVER TOOL [ARGUMENTS]")
		return 2
	}
	cfgPath, server, tool := fs.Arg(0), fs.Arg(1), fs.Arg(2)
	var arguments map[string]any
	if fs.NArg() == 4 {
		if err := json.Unmarshal([]byte(fs.Arg(3)), &arguments); err != nil {
			fmt.Fprintf(stderr, "mcpfsm call: ARGUMENTS is not a JSON object: %v\n", err)
			return 2
		}
	}
	cfg, err := mcpfsm.LoadConfig(cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	sc, ok := cfg.Server(server)
	if !ok {
		var names []string
		for _, s := range cfg.Servers {
			names = append(names, s.Name)
		}
		fmt.Fprintf(stderr, "mcpfsm call: %s has no server %q (it has %s)\n", cfgPath, server, strings.Join(names, ", "))
		return 1
	}
	conn, err := mcpfsm.Open(sc.Transport, mcpfsm.Options{
		Spec: sc.Spec, Policies: &sc.Policies,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		fmt.Fprintln(stderr, "mcpfsm call:", err)
		return 1
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	cctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	res, err := conn.CallTool(cctx, &mcp.CallToolParams{Name: tool, Arguments: arguments})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *asJSON {
		data, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintf(stdout, "%s\n", data)
	} else {
		printContent(stdout, res.Content)
		if res.StructuredContent != nil && len(res.Content) == 0 {
			data, _ := json.Marshal(res.StructuredContent)
			fmt.Fprintf(stdout, "%s\n", data)
		}
	}
	if res.IsError {
		fmt.Fprintf(stderr, "mcpfsm call: the tool %s reported an error\n", tool)
		return 1
	}
	return 0
}

func printContent(w io.Writer, content []mcp.Content) {
	for _, c := range content {
		if t, ok := c.(*mcp.TextContent); ok {
			fmt.Fprintln(w, t.Text)
			continue
		}
		data, _ := json.Marshal(c)
		fmt.Fprintf(w, "%s\n", data)
	}
}
