package main

import (
	"bytes"
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
	flag.BoolVar(&opts.Garbage, "garbage", false, "stdio: write a broken message to stdout first")
	flag.BoolVar(&opts.Noise, "noise", false, "stdio: write lines that are not messages (a banner, a log record) to stdout first")
	flag.IntVar(&opts.ExitStatus, "exit-status", 0, "stdio: exit with this status when stdin closes")
	flag.BoolVar(&opts.Stateless, "stateless", false, "HTTP: stateless streamable HTTP (protocol 2026-07-28)")
	flag.BoolVar(&opts.SSE, "sse", false, "HTTP: legacy SSE transport")
	flag.DurationVar(&opts.ToolsTTL, "tools-ttl", 0, "ttlMs cache hint of tools/list results")
	flag.StringVar(&opts.Journal, "journal", "", "register the journal tool, appending to this file")
	flag.StringVar(&opts.Control, "control", "", "read faults from this control file before each request (and, for garbage, at start)")
	flag.BoolVar(&opts.BurstTool, "burst-tool", false, "register the tools_changed_burst tool")
	flag.BoolVar(&opts.GarbageOnSignal, "garbage-on-usr1", false, "stdio: write a broken message to stdout on each SIGUSR1")
	addr := flag.String("http", "", "serve HTTP on this address (e.g. 127.0.0.1:0) instead of stdio")
	flag.BoolVar(&opts.SpawnGrandchild, "grandchild", false, "start a child process, in this process group, that sleeps forever holding stdout")
	sleep := flag.Bool("sleep", false, "sleep forever (what the grandchild runs)")
	flag.BoolVar(&extra.ignoreEOF, "ignore-eof", false, "stdio: keep running after stdin closes (SIGTERM still ends it)")
	flag.StringVar(&extra.onUSR2, "on-usr2", "", "stdio: on SIGUSR2, close-stdout, oversize (write a line over the SDK's limit) or noise (write testserver.NoiseLines)")
	flag.BoolVar(&extra.crashLoudly, "crash-loudly", false, "the crash tool writes a line to stderr before it exits")
	flag.StringVar(&extra.echoArgs, "echo-args", "", "error: quote the arguments in initialize's error; stderr: print them there and exit 1")
	flag.String("token", "", "ignored: a secret for redaction tests")
	flag.BoolVar(&extra.samplingTool, "sampling-tool", false, "register the sample tool")
	raw := flag.Bool("raw", false, "stdio: serve the hand-written JSON-RPC server of raw.go instead of the SDK's")
	protocols := flag.String("protocols", "", "comma-separated protocol versions to speak, e.g. 2025-11-25 (default: every version the SDK supports)")
	flag.Parse()
	if *protocols != "" {
		opts.ProtocolVersions = strings.Split(*protocols, ",")
		for _, v := range opts.ProtocolVersions {
			if !slices.Contains(mcp.SupportedProtocolVersions(), v) {
				fmt.Fprintf(os.Stderr, "mcptestserver: -protocols: the SDK does not support %q\n", v)
				os.Exit(2)
			}
		}
	}
	opts.Crash = func() {
		if extra.crashLoudly {
			fmt.Fprintln(os.Stderr, "mcptestserver: crashing on request")
		}
		os.Exit(3)
	}
	if extra.echoArgs == "stderr" {
		fmt.Fprintf(os.Stderr, "mcptestserver: refusing to start with arguments %q\n", os.Args[1:])
		os.Exit(1)
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

	if *raw {
		if err := serveRaw(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "mcptestserver:", err)
			os.Exit(1)
		}
		return
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

// extra holds the switches of this command only (see the package comment).
var extra struct {
	ignoreEOF    bool
	onUSR2       string
	crashLoudly  bool
	echoArgs     string
	samplingTool bool
}

// newServer returns the test server for opts, with this command's own
// switches applied.
func newServer(opts testserver.Options) *mcp.Server {
	s := testserver.New(opts)
	if extra.samplingTool {
		testserver.AddSamplingTool(s)
	}
	if extra.echoArgs == "error" {
		s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if method == "initialize" || method == "server/discover" {
					return nil, fmt.Errorf("refusing to start with arguments %q", os.Args[1:])
				}
				return next(ctx, method, req)
			}
		})
	}
	return s
}

// onUSR2 does what -on-usr2 asks, on each SIGUSR2.
func onUSR2(what string) {
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	go func() {
		for range usr2 {
			switch what {
			case "close-stdout":
				os.Stdout.Close()
			case "noise":
				// One write, as the SDK writes each message: the lines land
				// between two messages.
				_, _ = os.Stdout.WriteString(testserver.NoiseLines)
			case "oversize":
				// A JSON-RPC message longer than mcp.DefaultMaxLineLength
				// (16 MiB), on one line.
				var line bytes.Buffer
				line.WriteString(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`)
				line.Write(bytes.Repeat([]byte("x"), 17<<20))
				line.WriteString("\"}}\n")
				_, _ = os.Stdout.Write(line.Bytes())
			}
		}
	}()
}

func serveStdio(opts testserver.Options) error {
	if opts.HangClose {
		signal.Ignore(syscall.SIGTERM, os.Interrupt)
	}
	if extra.onUSR2 != "" {
		onUSR2(extra.onUSR2)
	}
	if opts.Garbage || testserver.ReadControl(opts.Control).Has(testserver.ControlGarbage) {
		if _, err := os.Stdout.WriteString(testserver.GarbageLine); err != nil {
			return err
		}
	}
	if opts.Noise {
		if _, err := os.Stdout.WriteString(testserver.NoiseLines); err != nil {
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
				_, _ = os.Stdout.WriteString(testserver.GarbageLine)
			}
		}()
	}
	err := newServer(opts).Run(context.Background(), &mcp.StdioTransport{})
	if opts.HangClose || extra.ignoreEOF {
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
