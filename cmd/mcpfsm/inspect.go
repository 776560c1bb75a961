package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The commands that look around one server: ls (what it is and has), read (a
// resource) and prompt (get a prompt). Like call, each goes through a connection with
// its lifecycle.

// listing is what ls prints: the server's info and every item of its lists.
type listing struct {
	Server            mcpfsm.ServerInfo       `json:"server"`
	Tools             []*mcp.Tool             `json:"tools"`
	Prompts           []*mcp.Prompt           `json:"prompts"`
	Resources         []*mcp.Resource         `json:"resources"`
	ResourceTemplates []*mcp.ResourceTemplate `json:"resourceTemplates"`
}

func runList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("ls", "[--timeout 30s] [--json] CONFIG SERVER", `
Show what one server of a servers config is and has: its name, version, protocol
and instructions, and every one of its tools, prompts, resources and resource
templates (each list read to its last page; a list the server does not have is
left empty). With --json, all of it as one JSON object.`, stderr)
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long, waiting for the server included")
	asJSON := fs.Bool("json", false, "print JSON")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() != 2 {
		fmt.Fprintln(stderr, "mcpfsm ls: want CONFIG SERVER")
		return 2
	}
	conn, failed, closeConn, code := openServer("ls", fs.Arg(0), fs.Arg(1), stderr)
	if conn == nil {
		return code
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := conn.WaitReady(ctx); err != nil {
		failed.report("ls", fs.Arg(1), err, stderr)
		return 1
	}
	var l listing
	l.Server, _ = conn.Server()
	caps := l.Server.Capabilities
	if caps == nil {
		caps = &mcp.ServerCapabilities{}
	}
	var err error
	if caps.Tools != nil {
		l.Tools, err = unlisted(collect(conn.Tools(ctx, nil)))
	}
	if err == nil && caps.Prompts != nil {
		l.Prompts, err = unlisted(collect(conn.Prompts(ctx, nil)))
	}
	if err == nil && caps.Resources != nil {
		l.Resources, err = unlisted(collect(conn.Resources(ctx, nil)))
		if err == nil {
			l.ResourceTemplates, err = unlisted(collect(conn.ResourceTemplates(ctx, nil)))
		}
	}
	if err != nil {
		failed.report("ls", fs.Arg(1), err, stderr)
		return 1
	}
	if *asJSON {
		data, _ := json.MarshalIndent(l, "", "  ")
		fmt.Fprintf(stdout, "%s\n", data)
		return 0
	}
	if impl := l.Server.Implementation; impl != nil {
		fmt.Fprintf(stdout, "server     %s %s\n", printable(impl.Name, maxLine), printable(impl.Version, maxLine))
	}
	fmt.Fprintf(stdout, "protocol   %s\n", printable(l.Server.ProtocolVersion, maxLine))
	if caps := capabilities(l.Server.Capabilities); caps != "" {
		fmt.Fprintf(stdout, "offers     %s\n", caps)
	}
	if l.Server.SessionID != "" {
		fmt.Fprintf(stdout, "session    %s\n", printable(l.Server.SessionID, maxLine))
	}
	if l.Server.Instructions != "" {
		fmt.Fprintf(stdout, "instructions\n  %s\n", printable(l.Server.Instructions, maxLine))
	}
	section := func(title string, lines []string) {
		fmt.Fprintf(stdout, "\n%s (%d)\n", title, len(lines))
		for _, line := range lines {
			fmt.Fprintf(stdout, "  %s\n", line)
		}
	}
	var lines []string
	for _, t := range l.Tools {
		lines = append(lines, described(t.Name, t.Description))
	}
	section("tools", lines)
	lines = nil
	for _, p := range l.Prompts {
		var argNames []string
		for _, a := range p.Arguments {
			name := a.Name
			if a.Required {
				name += "*"
			}
			argNames = append(argNames, name)
		}
		lines = append(lines, described(p.Name+"("+strings.Join(argNames, ", ")+")", p.Description))
	}
	section("prompts", lines)
	lines = nil
	for _, r := range l.Resources {
		lines = append(lines, described(r.URI, r.Description))
	}
	section("resources", lines)
	lines = nil
	for _, r := range l.ResourceTemplates {
		lines = append(lines, described(r.URITemplate, r.Description))
	}
	section("resource templates", lines)
	return 0
}

// described renders "name  description" on one line, escaped and capped.
func described(name, desc string) string {
	if desc == "" {
		return printable(name, maxLine)
	}
	return printable(name+"  "+strings.ReplaceAll(desc, "\n", " "), maxLine)
}

// collect reads an iterator of a list to its end.
func collect[T any](seq func(func(T, error) bool)) ([]T, error) {
	var out []T
	for it, err := range seq {
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, nil
}

// unlisted leaves a list the server answered with method-not-found empty, as the
// connection's own listing does (transport.Unlisted): a server that declares
// resources often has no templates.
func unlisted[T any](list []T, err error) ([]T, error) {
	if transport.Unlisted(err) {
		return nil, nil
	}
	return list, err
}

func runRead(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("read", "[--timeout 30s] [--json] CONFIG SERVER URI", `
Read a resource of one server of a servers config and print its contents: text as
it is, binary contents as JSON (with --json, the whole result as JSON).`, stderr)
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long, waiting for the server included")
	asJSON := fs.Bool("json", false, "print the whole result as JSON")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() != 3 {
		fmt.Fprintln(stderr, "mcpfsm read: want CONFIG SERVER URI")
		return 2
	}
	conn, failed, closeConn, code := openServer("read", fs.Arg(0), fs.Arg(1), stderr)
	if conn == nil {
		return code
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	res, err := conn.ReadResource(ctx, &mcp.ReadResourceParams{URI: fs.Arg(2)})
	if err != nil {
		failed.report("read", fs.Arg(1), err, stderr)
		return 1
	}
	if *asJSON {
		data, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintf(stdout, "%s\n", data)
		return 0
	}
	for _, c := range res.Contents {
		if c.Blob == nil {
			fmt.Fprintln(stdout, c.Text)
			continue
		}
		data, _ := json.Marshal(c)
		fmt.Fprintf(stdout, "%s\n", data)
	}
	return 0
}

func runPrompt(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("prompt", "[--timeout 30s] [--json] CONFIG SERVER NAME [ARGUMENTS]", `
Get a prompt of one server of a servers config and print its messages, one per
line as ROLE: TEXT (other content as JSON; with --json, the whole result as JSON).
ARGUMENTS is a JSON object of strings, such as '{"name": "bob"}'.`, stderr)
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long, waiting for the server included")
	asJSON := fs.Bool("json", false, "print the whole result as JSON")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() != 3 && fs.NArg() != 4 {
		fmt.Fprintln(stderr, "mcpfsm prompt: want CONFIG SERVER NAME [ARGUMENTS]")
		return 2
	}
	var arguments map[string]string
	if fs.NArg() == 4 {
		if err := json.Unmarshal([]byte(fs.Arg(3)), &arguments); err != nil {
			fmt.Fprintf(stderr, "mcpfsm prompt: ARGUMENTS is not a JSON object of strings: %s\n", errorText(err))
			return 2
		}
	}
	conn, failed, closeConn, code := openServer("prompt", fs.Arg(0), fs.Arg(1), stderr)
	if conn == nil {
		return code
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	res, err := conn.GetPrompt(ctx, &mcp.GetPromptParams{Name: fs.Arg(2), Arguments: arguments})
	if err != nil {
		failed.report("prompt", fs.Arg(1), err, stderr)
		return 1
	}
	if *asJSON {
		data, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintf(stdout, "%s\n", data)
		return 0
	}
	for _, m := range res.Messages {
		if t, ok := m.Content.(*mcp.TextContent); ok {
			fmt.Fprintf(stdout, "%s: %s\n", m.Role, t.Text)
			continue
		}
		data, _ := json.Marshal(m.Content)
		fmt.Fprintf(stdout, "%s: %s\n", m.Role, data)
	}
	return 0
}

// capabilities names what a server's capabilities offer, for people: "tools
// (list changes), resources (subscribe, list changes), prompts, logging,
// completions".
func capabilities(c *mcp.ServerCapabilities) string {
	if c == nil {
		return ""
	}
	var out []string
	offer := func(name string, details ...string) {
		if len(details) > 0 {
			name += " (" + strings.Join(details, ", ") + ")"
		}
		out = append(out, name)
	}
	if t := c.Tools; t != nil {
		offer("tools", when(t.ListChanged, "list changes")...)
	}
	if r := c.Resources; r != nil {
		offer("resources", append(when(r.Subscribe, "subscribe"), when(r.ListChanged, "list changes")...)...)
	}
	if p := c.Prompts; p != nil {
		offer("prompts", when(p.ListChanged, "list changes")...)
	}
	if c.Logging != nil {
		offer("logging")
	}
	if c.Completions != nil {
		offer("completions")
	}
	return strings.Join(out, ", ")
}

// when returns []string{s} if on, else nothing.
func when(on bool, s string) []string {
	if on {
		return []string{s}
	}
	return nil
}
