package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func runCall(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("call", "[--timeout 30s] [--json] CONFIG SERVER TOOL [ARGUMENTS]", `
Call one tool of one server of a servers config, through a connection with its
lifecycle, and print the result to stdout: each text content on its own line,
other content as JSON (with --json, the whole result as JSON). ARGUMENTS is a
JSON object, such as '{"text": "hello"}'; without it the tool is called with {}.

When the call fails because the server could not be reached, the reason of the
last failure is printed too. Exits 0 when the tool answered, 1 when the tool
reported an error (the result is still printed) or the call failed (the error
goes to stderr).`, stderr)
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
			fmt.Fprintf(stderr, "mcpfsm call: ARGUMENTS is not a JSON object: %s\n", errorText(err))
			return 2
		}
	}
	if arguments == nil {
		// No ARGUMENTS (or null) is no arguments: {}, not null, which some servers
		// (the TypeScript SDK's) refuse.
		arguments = map[string]any{}
	}
	conn, failed, closeConn, code := openServer("call", cfgPath, server, stderr)
	if conn == nil {
		return code
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	res, err := conn.CallTool(cctx, &mcp.CallToolParams{Name: tool, Arguments: arguments})
	if err != nil {
		failed.report("call", server, err, stderr)
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
		fmt.Fprintf(stderr, "mcpfsm call: the tool %s reported an error\n", printable(tool, maxLine))
		return 1
	}
	return 0
}

// openServer opens a connection to one server of a servers config, for a command that
// talks to it (call, ls, read, prompt). On failure it prints why and returns a nil
// connection and the exit code. The connection's failures are not logged (they are
// warnings): the returned lastFailure keeps the last, for the command's error.
func openServer(cmd, cfgPath, server string, stderr io.Writer) (*mcpfsm.Conn, *lastFailure, func(), int) {
	cfg, err := mcpfsm.LoadConfig(cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, errorText(err))
		return nil, nil, nil, 1
	}
	sc, ok := cfg.Server(server)
	if !ok {
		var names []string
		for _, s := range cfg.Servers {
			names = append(names, s.Name)
		}
		fmt.Fprintf(stderr, "mcpfsm %s: %s has no server %s (it has %s)\n", cmd, printable(cfgPath, maxLine), machine.Quote(server), strings.Join(names, ", "))
		return nil, nil, nil, 1
	}
	failed := &lastFailure{}
	conn, err := mcpfsm.Open(sc.Transport, mcpfsm.Options{
		Spec: sc.Spec, Policies: &sc.Policies,
		Logger:   slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Observer: failed.observe,
	})
	if err != nil {
		fmt.Fprintf(stderr, "mcpfsm %s: %s\n", cmd, errorText(err))
		return nil, nil, nil, 1
	}
	return conn, failed, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}, 0
}

// report prints a request's error, and the last failure of the connection if the
// error does not say it already.
func (l *lastFailure) report(cmd, server string, err error, stderr io.Writer) {
	fmt.Fprintln(stderr, errorText(err))
	if login := transport.LoginCommand(err); login != "" {
		// On a line of its own: the error's may be cut short before it.
		fmt.Fprintf(stderr, "mcpfsm %s: to log in, run: %s\n", cmd, printable(login, 4*maxLine))
	}
	if reason := l.get(); reason != nil && !strings.Contains(err.Error(), reason.Err.Error()) {
		fmt.Fprintf(stderr, "mcpfsm %s: the last failure of %s: %s: %s\n", cmd, server, reason.Cause, printable(reason.Err.Error(), maxLine))
	}
}

// lastFailure remembers the last transition of a connection that carried an error.
type lastFailure struct {
	mu sync.Mutex
	tr *machine.Transition
}

func (l *lastFailure) observe(tr machine.Transition) {
	if tr.Err == nil || tr.Cause == states.CauseNone {
		return
	}
	l.mu.Lock()
	l.tr = &tr
	l.mu.Unlock()
}

func (l *lastFailure) get() *machine.Transition {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tr
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
