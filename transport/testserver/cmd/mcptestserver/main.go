// Command mcptestserver is the test server of package testserver as a real
// process: an MCP server over stdio (the default) or HTTP (-http), with
// switches that make it misbehave. See package testserver for its tools.
//
// Usage:
//
//	mcptestserver [-refuse-ping] [-hang-initialize] [-hang-close] [-garbage] [-grandchild] [-tools-ttl d]
//	mcptestserver -http 127.0.0.1:0 [-stateless | -sse] [-refuse-ping] [-hang-initialize] [-hang-close]
//
// Either form also takes -journal FILE, -control FILE, -burst-tool and
// -protocols V1,V2; stdio also -garbage-on-usr1 (see package testserver's
// Options).
//
// With -http it prints its endpoint URL on a line of stdout once listening.
// Its crash tool exits at once with status 3.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	var opts testserver.Options
	flag.StringVar(&opts.Name, "name", "", "implementation name (default "+testserver.Name+")")
	flag.BoolVar(&opts.RefusePing, "refuse-ping", false, "answer ping with method-not-found")
	flag.BoolVar(&opts.HangInitialize, "hang-initialize", false, "never answer initialize")
	flag.BoolVar(&opts.HangClose, "hang-close", false, "stdio: ignore stdin EOF, SIGTERM and SIGINT; HTTP: never answer DELETE")
	flag.BoolVar(&opts.Garbage, "garbage", false, "stdio: write a line of garbage to stdout first")
	flag.IntVar(&opts.ExitStatus, "exit-status", 0, "stdio: exit with this status when stdin closes")
	flag.BoolVar(&opts.Stateless, "stateless", false, "HTTP: stateless streamable HTTP (protocol 2026-07-28)")
	flag.BoolVar(&opts.SSE, "sse", false, "HTTP: legacy SSE transport")
	flag.DurationVar(&opts.ToolsTTL, "tools-ttl", 0, "ttlMs cache hint of tools/list results")
	flag.StringVar(&opts.Journal, "journal", "", "register the journal tool, appending to this file")
	flag.StringVar(&opts.Control, "control", "", "read faults from this control file before each request (and, for garbage, at start)")
	flag.BoolVar(&opts.BurstTool, "burst-tool", false, "register the tools_changed_burst tool")
	flag.BoolVar(&opts.GarbageOnSignal, "garbage-on-usr1", false, "stdio: write a line of garbage to stdout on each SIGUSR1")
	protocols := flag.String("protocols", "", "comma-separated protocol versions to speak, e.g. 2025-11-25 (default: every version the SDK supports)")
	addr := flag.String("http", "", "serve HTTP on this address (e.g. 127.0.0.1:0) instead of stdio")
	flag.BoolVar(&opts.SpawnGrandchild, "grandchild", false, "start a child process, in this process group, that sleeps forever holding stdout")
	sleep := flag.Bool("sleep", false, "sleep forever (what the grandchild runs)")
	flag.Parse()
	opts.Crash = func() { os.Exit(3) }
	if *protocols != "" {
		opts.ProtocolVersions = strings.Split(*protocols, ",")
		for _, v := range opts.ProtocolVersions {
			if !slices.Contains(mcp.SupportedProtocolVersions(), v) {
				fmt.Fprintf(os.Stderr, "mcptestserver: -protocols: the SDK does not support %q\n", v)
				os.Exit(2)
			}
		}
	}
	if *sleep {
		for {
			time.Sleep(time.Hour)
		}
	}
	if opts.SpawnGrandchild {
		pid, err := startGrandchild()
		if err != nil {
			fmt.Fprintln(os.Stderr, "mcptestserver:", err)
			os.Exit(1)
		}
		opts.Grandchild = pid
	}

	var err error
	if *addr != "" {
		err = serveHTTP(*addr, opts)
	} else {
		err = serveStdio(opts)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcptestserver:", err)
		os.Exit(1)
	}
}

// startGrandchild starts this program with -sleep, in this process's group,
// holding its stdout. It is never waited for: it lives until killed.
func startGrandchild() (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(exe, "-sleep")
	cmd.Stdout = os.Stdout
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	return cmd.Process.Pid, nil
}

func serveStdio(opts testserver.Options) error {
	if opts.HangClose {
		signal.Ignore(syscall.SIGTERM, os.Interrupt)
	}
	if opts.Garbage || testserver.ReadControl(opts.Control).Has(testserver.ControlGarbage) {
		if _, err := os.Stdout.WriteString("this is not JSON-RPC\n"); err != nil {
			return err
		}
	}
	if opts.GarbageOnSignal {
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		go func() {
			for range usr1 {
				// One write: the SDK writes each message in one write too,
				// so the line lands between two messages.
				_, _ = os.Stdout.WriteString("garbage mid-session: this is not JSON-RPC\n")
			}
		}()
	}
	err := testserver.New(opts).Run(context.Background(), &mcp.StdioTransport{})
	if opts.HangClose {
		for {
			time.Sleep(time.Hour)
		}
	}
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	if err == nil && opts.ExitStatus != 0 {
		os.Exit(opts.ExitStatus)
	}
	return err
}

func serveHTTP(addr string, opts testserver.Options) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: testserver.NewHandler(opts)}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		_ = srv.Close()
	}()
	fmt.Printf("http://%s/mcp\n", l.Addr())
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
