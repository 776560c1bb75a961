package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var (
	rounds  = flag.Int("rounds", 3, "rounds (medians are taken over them)")
	cell    = flag.Duration("cell", 2*time.Second, "how long each measurement calls")
	clients = flag.String("clients", "1,16,64", "numbers of concurrent clients")
	only    = flag.String("only", "", "comma-separated targets to run (direct, mcpfsm, supergateway, mcp-proxy); all by default")
	tool    = flag.String("tool", "test_simple_text", "the everything-server's tool to call")
	soak    = flag.Int("soak", 0, "instead: make this many calls (16 clients) to each target, printing its memory every tenth of them")
	kill    = flag.Bool("kill", false, "instead: kill each gateway's backend under a session and say what its client sees")
	also    = flag.String("also", "", "comma-separated NAME=BINARY: other builds of mcpfsm, measured as targets of their own")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gatewaybench:", err)
		os.Exit(1)
	}
}

// A target is one way to reach the backend over streamable HTTP.
type target struct {
	name string
	// start starts it for a mode and returns its URL and its process (nil for none).
	start func(mode string, port int) (*exec.Cmd, string, error)
}

type result struct {
	p50        time.Duration
	throughput float64 // calls per second
	protocol   string
	errors     int64
}

func run() error {
	here, err := hereDir()
	if err != nil {
		return err
	}
	if err := npmCI(here); err != nil {
		return err
	}
	bin, err := os.MkdirTemp("", "gatewaybench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	root := filepath.Join(here, "..", "..")
	for _, b := range [][]string{
		{filepath.Join(bin, "everything-server"), "github.com/modelcontextprotocol/go-sdk/conformance/everything-server"},
		{filepath.Join(bin, "mcpfsm"), "./cmd/mcpfsm"},
	} {
		cmd := exec.Command("go", "build", "-o", b[0], b[1])
		cmd.Dir, cmd.Stderr = root, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build %s: %w", b[1], err)
		}
	}
	backend := filepath.Join(bin, "everything-server")
	// serve starts the mcpfsm binary given in front of the backend.
	serve := func(binary string) func(mode string, port int) (*exec.Cmd, string, error) {
		return func(mode string, port int) (*exec.Cmd, string, error) {
			cfg := filepath.Join(bin, "servers-"+strconv.Itoa(port)+".yaml")
			// Pinned to 2025-11-25: the everything-server's sampling tools need it
			// (see .ci/run); the calls measured do not care.
			data := fmt.Sprintf("version: 1\nservers:\n  everything:\n    command: %s\n    prefix: \"\"\n    protocol: 2025-11-25\n", backend)
			if err := os.WriteFile(cfg, []byte(data), 0o644); err != nil {
				return nil, "", err
			}
			cmd := exec.Command(binary, "serve", "--http", fmt.Sprintf("127.0.0.1:%d", port), cfg)
			return cmd, fmt.Sprintf("http://127.0.0.1:%d/", port), nil
		}
	}
	node := "node"
	mods := filepath.Join(here, "node_modules")
	targets := []target{
		{"direct", func(mode string, port int) (*exec.Cmd, string, error) {
			// The backend over HTTP itself: stateful for sessions, stateless for
			// 2026-07-28 (the only way the go-sdk's server offers it).
			cmd := exec.Command(backend, "-http", fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("-stateless=%v", mode == "2026-07-28"))
			return cmd, fmt.Sprintf("http://127.0.0.1:%d/", port), nil
		}},
		{"mcpfsm", serve(filepath.Join(bin, "mcpfsm"))},
		{"supergateway", func(mode string, port int) (*exec.Cmd, string, error) {
			args := []string{filepath.Join(mods, "supergateway", "dist", "index.js"), "--stdio", backend,
				"--outputTransport", "streamableHttp", "--port", strconv.Itoa(port), "--logLevel", "none"}
			if mode == "2025-11-25" {
				args = append(args, "--stateful")
			}
			return exec.Command(node, args...), fmt.Sprintf("http://127.0.0.1:%d/mcp", port), nil
		}},
		{"mcp-proxy", func(mode string, port int) (*exec.Cmd, string, error) {
			cmd := exec.Command(node, filepath.Join(mods, "mcp-proxy", "dist", "bin", "mcp-proxy.mjs"),
				"--port", strconv.Itoa(port), "--host", "127.0.0.1", "--server", "stream", "--", backend)
			return cmd, fmt.Sprintf("http://127.0.0.1:%d/mcp", port), nil
		}},
	}
	for _, nb := range strings.Split(*also, ",") {
		if nb == "" {
			continue
		}
		name, binary, ok := strings.Cut(nb, "=")
		if !ok || name == "" || binary == "" {
			return fmt.Errorf("-also %q: want NAME=BINARY", nb)
		}
		targets = append(targets, target{name, serve(binary)})
	}
	if *only != "" {
		keep := strings.Split(*only, ",")
		targets = slices.DeleteFunc(targets, func(t target) bool { return !slices.Contains(keep, t.name) })
	}
	var ns []int
	for _, s := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-clients %q", *clients)
		}
		ns = append(ns, n)
	}
	if *kill {
		for _, t := range targets {
			if t.name == "direct" {
				continue
			}
			if err := killBackend(t, backend); err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
		}
		return nil
	}
	if *soak > 0 {
		for _, mode := range []string{"2025-11-25", "2026-07-28"} {
			for _, t := range targets {
				if err := soakTarget(t, mode, *soak); err != nil {
					return fmt.Errorf("%s (%s): %w", t.name, mode, err)
				}
			}
		}
		return nil
	}
	fmt.Printf("gatewaybench: %s/%s, %d CPUs, Go %s; %d rounds of %v per cell; tool %s\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), *rounds, *cell, *tool)
	for _, mode := range []string{"2025-11-25", "2026-07-28"} {
		results := map[string]map[int][]result{}
		peak := map[string]int64{}
		for _, t := range targets {
			results[t.name] = map[int][]result{}
		}
		for r := range *rounds {
			for k := range targets {
				t := targets[(k+r)%len(targets)]
				if err := measureTarget(t, mode, ns, results[t.name], peak); err != nil {
					return fmt.Errorf("%s (%s): %w", t.name, mode, err)
				}
			}
		}
		fmt.Printf("\nmode %s (the client asks for %s)\n", mode, map[string]string{"2025-11-25": "2025-11-25, a session per client", "2026-07-28": "the go-sdk default"}[mode])
		fmt.Printf("%-13s %-10s %8s %10s %12s %10s %7s\n", "target", "protocol", "clients", "p50", "calls/s", "peak RSS", "errors")
		for _, t := range targets {
			for _, n := range ns {
				rs := results[t.name][n]
				var p50s, tps []float64
				var errs int64
				for _, x := range rs {
					p50s, tps = append(p50s, float64(x.p50)), append(tps, x.throughput)
					errs += x.errors
				}
				fmt.Printf("%-13s %-10s %8d %10s %12.0f %9.0fM %7d\n", t.name, rs[0].protocol, n,
					time.Duration(median(p50s)).Round(time.Microsecond), median(tps), float64(peak[t.name])/(1<<20), errs)
			}
		}
	}
	return nil
}

// launch starts a target for a mode on a free port and waits until it answers HTTP.
// proc is nil for a target without a process of its own; stop it (nil-safe) when done.
func launch(t target, mode string) (proc *process, url string, err error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	cmd, url, err := t.start(mode, port)
	if err != nil {
		return nil, "", err
	}
	if cmd != nil {
		if proc, err = startProcess(cmd); err != nil {
			return nil, "", err
		}
	}
	if err := waitHTTP(url); err != nil {
		proc.stop()
		return nil, "", err
	}
	return proc, url, nil
}

// measureTarget starts a target, measures it at each number of clients, and stops it.
func measureTarget(t target, mode string, ns []int, into map[int][]result, peak map[string]int64) error {
	proc, url, err := launch(t, mode)
	if err != nil {
		return err
	}
	defer proc.stop()
	for _, n := range ns {
		res, err := measure(url, mode, n)
		if err != nil {
			return fmt.Errorf("%d clients: %w", n, err)
		}
		into[n] = append(into[n], res)
	}
	if proc != nil {
		peak[t.name] = max(peak[t.name], proc.peak.Load())
	}
	return nil
}

// soakTarget makes calls calls to a target from 16 clients and prints the memory of
// its processes after every tenth of them.
func soakTarget(t target, mode string, calls int) error {
	proc, url, err := launch(t, mode)
	if err != nil {
		return err
	}
	defer proc.stop()
	ctx := context.Background()
	tr := &http.Transport{MaxIdleConnsPerHost: 32}
	defer tr.CloseIdleConnections()
	version := ""
	if mode == "2025-11-25" {
		version = mode
	}
	var sessions []*mcp.ClientSession
	for range 16 {
		c := mcp.NewClient(&mcp.Implementation{Name: "gatewaybench", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: tr}, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			return err
		}
		defer cs.Close()
		sessions = append(sessions, cs)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, err := call(ctx, sessions[0]); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("warm-up: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Printf("soak %s %s: RSS at start %.0fM\n", t.name, mode, float64(groupRSS(proc.cmd.Process.Pid))/(1<<20))
	var done, errs atomic.Int64
	step := int64(calls / 10)
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := step
	for _, cs := range sessions {
		wg.Go(func() {
			for done.Load() < int64(calls) {
				if _, err := call(ctx, cs); err != nil {
					errs.Add(1)
				}
				if n := done.Add(1); n >= next {
					mu.Lock()
					if n >= next {
						fmt.Printf("soak %s %s: %7d calls, %6.1fs, RSS %.0fM, %d errors\n", t.name, mode, n, time.Since(start).Seconds(),
							float64(groupRSS(proc.cmd.Process.Pid))/(1<<20), errs.Load())
						next += step
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// killBackend opens a session (2025-11-25) through a gateway, kills the backend
// processes the gateway started (SIGKILL), then calls every 100ms for 10s, and says
// what the session's client saw: when calls answered again, and whether a new session
// works at the end.
func killBackend(t target, backend string) error {
	proc, url, err := launch(t, "2025-11-25")
	if err != nil {
		return err
	}
	defer proc.stop()
	ctx := context.Background()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	connect := func() (*mcp.ClientSession, error) {
		c := mcp.NewClient(&mcp.Implementation{Name: "gatewaybench", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return c.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: tr}, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	}
	cs, err := connect()
	if err != nil {
		return err
	}
	defer cs.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, err := call(ctx, cs); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("warm-up: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	killed := 0
	for _, pid := range descendants(proc.cmd.Process.Pid) {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); exe == backend {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
	}
	start := time.Now()
	var firstErr, lastErr string
	var fails, oks int
	recovered := time.Duration(-1)
	for time.Since(start) < 10*time.Second {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := call(cctx, cs)
		cancel()
		if err != nil {
			fails++
			if firstErr == "" {
				firstErr = err.Error()
			}
			lastErr = err.Error()
			recovered = -1
		} else {
			oks++
			if recovered < 0 {
				recovered = time.Since(start)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	fresh := "works"
	if cs2, err := connect(); err != nil {
		fresh = "fails to connect: " + err.Error()
	} else {
		if _, err := call(ctx, cs2); err != nil {
			fresh = "connects, its call fails: " + err.Error()
		}
		_ = cs2.Close()
	}
	fmt.Printf("kill %s: killed %d backend process(es); the session's calls over 10s: %d answered, %d failed", t.name, killed, oks, fails)
	if recovered >= 0 {
		fmt.Printf("; answering again from %v on", recovered.Round(time.Millisecond))
	} else {
		fmt.Printf("; never answering again")
	}
	fmt.Printf("\n  first error: %.200s\n  last error:  %.200s\n  a new session: %.200s\n", firstErr, lastErr, fresh)
	return nil
}

// descendants lists the processes started by pid, and theirs (a stdio child may be
// in a process group of its own).
func descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) >= 2 {
			parent[p], _ = strconv.Atoi(fields[1])
		}
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// measure runs n clients calling the tool for one cell's time.
func measure(url, mode string, n int) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * n, MaxConnsPerHost: 4 * n}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	version := ""
	if mode == "2025-11-25" {
		version = mode
	}
	connect := func() (*mcp.ClientSession, error) {
		c := mcp.NewClient(&mcp.Implementation{Name: "gatewaybench", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
		return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	}
	var sessions []*mcp.ClientSession
	defer func() {
		for _, cs := range sessions {
			_ = cs.Close()
		}
	}()
	for i := range n {
		if mode == "2026-07-28" && i > 0 {
			sessions = append(sessions, sessions[0]) // no session to keep apart: one client
			continue
		}
		cs, err := connect()
		if err != nil {
			return result{}, err
		}
		sessions = append(sessions, cs)
	}
	// Warm up, and wait for the tool (a gateway may list it a moment after start).
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, err := call(ctx, sessions[0])
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return result{}, fmt.Errorf("warm-up: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var mu sync.Mutex
	var lat []time.Duration
	var calls, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(*cell)
	for i := range n {
		cs := sessions[i]
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(end) {
				took, err := call(ctx, cs)
				if err != nil {
					errs.Add(1)
					continue
				}
				calls.Add(1)
				mine = append(mine, took)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(lat) == 0 {
		return result{}, fmt.Errorf("no call answered (%d errors)", errs.Load())
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	proto := ""
	if r := sessions[0].InitializeResult(); r != nil {
		proto = r.ProtocolVersion
	}
	return result{p50: lat[len(lat)/2], throughput: float64(calls.Load()) / elapsed.Seconds(), protocol: proto, errors: errs.Load()}, nil
}

func call(ctx context.Context, cs *mcp.ClientSession) (time.Duration, error) {
	start := time.Now()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: *tool, Arguments: map[string]any{}})
	if err == nil && res.IsError {
		err = fmt.Errorf("tool error")
	}
	return time.Since(start), err
}

// A process is a started target, in a process group of its own, whose memory (the
// RSS of every process of the group) is sampled until it stops.
type process struct {
	cmd  *exec.Cmd
	peak atomic.Int64
	done chan struct{}
	wg   sync.WaitGroup
}

func startProcess(cmd *exec.Cmd) (*process, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	p.wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			p.peak.Store(max(p.peak.Load(), groupRSS(cmd.Process.Pid)))
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
		}
	})
	return p, nil
}

func (p *process) stop() {
	if p == nil {
		return
	}
	close(p.done)
	p.wg.Wait()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // the group this program started
	_ = p.cmd.Wait()
}

// groupRSS sums the resident memory of the process pgid started (the leader of its
// process group), the processes of its group, and every descendant of either: a
// gateway's stdio children count whatever group they are in (mcpfsm puts each in a
// group of its own, to kill it with its own children; counting the group alone left
// them out).
func groupRSS(pgid int) int64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	type proc struct{ ppid, pgrp int }
	procs := map[int]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command (in parentheses): state ppid pgrp ...
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 3 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		pgrp, _ := strconv.Atoi(fields[2])
		procs[pid] = proc{ppid, pgrp}
	}
	counted := map[int]bool{}
	for pid, p := range procs {
		if p.pgrp == pgid || pid == pgid {
			counted[pid] = true
		}
	}
	for grew := true; grew; {
		grew = false
		for pid, p := range procs {
			if !counted[pid] && counted[p.ppid] {
				counted[pid], grew = true, true
			}
		}
	}
	var total int64
	for pid := range counted {
		f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				total += kb << 10
			}
		}
		f.Close()
	}
	return total
}

func waitHTTP(url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s never answered: %w", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// hereDir is this program's source directory (it is run with go run from the module).
func hereDir() (string, error) {
	dir, err := filepath.Abs("internal/gatewaybench")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		return "", fmt.Errorf("run it from the module's root: go run ./internal/gatewaybench")
	}
	return dir, nil
}

// npmCI installs the pinned peers unless node_modules came from this very lock.
func npmCI(dir string) error {
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return err
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	stamp := filepath.Join(dir, "node_modules", ".mcpfsm-lock.sha256")
	if have, _ := os.ReadFile(stamp); string(have) == want {
		return nil
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("npm ci in %s: %w", dir, err)
	}
	return os.WriteFile(stamp, []byte(want), 0o644)
}
