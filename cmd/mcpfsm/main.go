package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/mcpfsm/mcpfsm/transport"
)

// A command is one subcommand of mcpfsm.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{
	"run":            {"connect to every server of a config and print its lifecycle", runRun},
	"status":         {"connect to every server of a config and print its status; exit 1 if any is not ready", runStatus},
	"call":           {"call one tool of one server of a config", runCall},
	"ls":             {"show what one server of a config is and has: tools, prompts, resources", runList},
	"read":           {"read a resource of one server of a config", runRead},
	"prompt":         {"get a prompt of one server of a config", runPrompt},
	"serve":          {"serve one MCP server in front of every server of a config (the gateway)", runServe},
	"simulate":       {"run a lifecycle in virtual time against a scripted server", runSimulate},
	"example-server": {"serve the project's example MCP server (stdio or HTTP)", runExampleServer},
	"demo":           {"watch a connection survive a fault tour against an in-process server", runDemo},
	"graph":          {"render a lifecycle as DOT or Mermaid", runGraph},
	"validate":       {"check a lifecycle spec and report every problem", runValidate},
	"auth":           {"log in to a server of a config (OAuth), or show each server's token state", runAuth},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		gatewayGC(os.Getenv)
	}
	finished := make(chan struct{})
	go secondSignal(ctx, finished)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	close(finished)
	stop()
	// A stdio server still closing (a command's shutdown is bounded, a server's
	// teardown timeout may be longer) is killed with everything it started: the
	// kernel kills the server when mcpfsm exits, but not its process group.
	transport.KillAll()
	os.Exit(code)
}

// secondSignal ends mcpfsm at once at a second Ctrl-C or SIGTERM, once the first
// (which ended ctx) has begun a graceful stop: a user who presses Ctrl-C again does
// not want to wait out the stop's grace (mcpfsm serve's 5 s, and its close's 15 s).
// signal.NotifyContext catches the signals until its stop is called, so without this
// the second did nothing. The stdio servers started are killed with what they
// started, as at a normal exit; the exit code is 1.
func secondSignal(ctx context.Context, finished <-chan struct{}) {
	select {
	case <-ctx.Done():
	case <-finished:
		return
	}
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	select {
	case <-again:
		fmt.Fprintln(os.Stderr, "mcpfsm: a second signal: exiting at once")
		transport.KillAll()
		os.Exit(1)
	case <-finished:
		signal.Stop(again)
	}
}

// run executes one command line and returns the exit code: 0 for success, 1 when the
// command failed, 2 for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "mcpfsm: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "mcpfsm runs, inspects and tunes MCP connection lifecycles.")
	fmt.Fprintln(w, "\nUsage: mcpfsm COMMAND [flags] [args]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-15s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun \"mcpfsm COMMAND --help\" for a command's flags.")
}

// newFlags returns a flag set for a command whose usage text is synopsis then help.
func newFlags(name, synopsis, help string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: %s\n\n%s\n", strings.TrimSpace("mcpfsm "+name+" "+synopsis), strings.TrimSpace(help))
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(out, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parse parses args and reports the exit code to return at once, if any: 0 after
// --help (printed to stdout, once), 2 after a usage error (printed to stderr). A
// flag of the command written after its arguments, which the flag package would
// take for an argument, is a usage error that says so (--help there still helps).
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) (int, bool) {
	// The flag package prints the usage itself, to the set's output, both on a usage
	// error and on -h; what it prints is held back until it is known which it was.
	stderr := fs.Output()
	var printed bytes.Buffer
	fs.SetOutput(&printed)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, true
	}
	if err != nil {
		// The flag package's message ("flag provided but not defined: -x"), then the
		// usage: the message says which command it is about.
		fmt.Fprintf(stderr, "mcpfsm %s: ", fs.Name())
		_, _ = printed.WriteTo(stderr)
		return 2, true
	}
	rest := fs.Args()
	if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
		rest = nil // the user ended the flags with --: what follows is arguments
	}
	for _, a := range rest {
		if a == "--" {
			break // so is what follows a -- among the arguments
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name == "" {
			continue
		}
		if name == "h" || name == "help" {
			fs.SetOutput(stdout)
			fs.Usage()
			fs.SetOutput(stderr)
			return 0, true
		}
		if fs.Lookup(name) != nil {
			fmt.Fprintf(stderr, "mcpfsm %s: flag %s comes after the arguments: write flags first (mcpfsm %s --help)\n", fs.Name(), a, fs.Name())
			return 2, true
		}
	}
	return 0, false
}
