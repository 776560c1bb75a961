package testserver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Args returns the mcptestserver flags that ask for opts (Name, the switches,
// ToolsTTL, ExitStatus, Journal, Control and ProtocolVersions; Crash and
// Grandchild cannot be passed). With no HTTP flag the binary serves stdio.
func Args(opts Options) []string {
	var args []string
	if opts.Name != "" {
		args = append(args, "-name", opts.Name)
	}
	for _, f := range []struct {
		on   bool
		flag string
	}{
		{opts.RefusePing, "-refuse-ping"},
		{opts.HangInitialize, "-hang-initialize"},
		{opts.HangClose, "-hang-close"},
		{opts.Garbage, "-garbage"},
		{opts.Noise, "-noise"},
		{opts.Stateless, "-stateless"},
		{opts.SSE, "-sse"},
		{opts.SpawnGrandchild, "-grandchild"},
		{opts.BurstTool, "-burst-tool"},
		{opts.GarbageOnSignal, "-garbage-on-usr1"},
	} {
		if f.on {
			args = append(args, f.flag)
		}
	}
	if opts.ToolsTTL > 0 {
		args = append(args, "-tools-ttl", opts.ToolsTTL.String())
	}
	if opts.ExitStatus != 0 {
		args = append(args, "-exit-status", strconv.Itoa(opts.ExitStatus))
	}
	if opts.Journal != "" {
		args = append(args, "-journal", opts.Journal)
	}
	if opts.Control != "" {
		args = append(args, "-control", opts.Control)
	}
	if len(opts.ProtocolVersions) > 0 {
		args = append(args, "-protocols", strings.Join(opts.ProtocolVersions, ","))
	}
	return args
}

// NewHandler returns an HTTP handler serving a new test server: streamable
// HTTP (stateless if opts.Stateless) or SSE (opts.SSE). With opts.HangClose a
// DELETE is never answered (the handler returns when the client gives up).
func NewHandler(opts Options) http.Handler {
	return hangDelete(opts.HangClose, nil, mcpHandler(New(opts), opts))
}

// mcpHandler returns the SDK's HTTP handler of server for opts.
func mcpHandler(server *mcp.Server, opts Options) http.Handler {
	get := func(*http.Request) *mcp.Server { return server }
	if opts.SSE {
		return mcp.NewSSEHandler(get, nil)
	}
	return mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{Stateless: opts.Stateless})
}

// hangDelete wraps next so that, if on, a DELETE hangs until its client gives
// up or release is closed, and is never answered.
func hangDelete(on bool, release <-chan struct{}, next http.Handler) http.Handler {
	if !on {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		next.ServeHTTP(w, r)
	})
}

var built struct {
	once sync.Once
	path string
	err  error
}

// Build compiles cmd/mcptestserver, once per test process, and returns the
// binary's path. The binary lives in the user's cache directory (one per
// checkout, replaced atomically), so that repeated runs leave nothing behind
// and concurrent test processes do not disturb each other; the Go build cache
// keeps rebuilding it cheap.
func Build(tb testing.TB) string {
	tb.Helper()
	built.once.Do(func() {
		start := time.Now()
		built.path, built.err = build()
		if built.err == nil {
			tb.Logf("built %s in %v", built.path, time.Since(start).Round(time.Millisecond))
		}
	})
	if built.err != nil {
		tb.Fatalf("building the test server: %v", built.err)
	}
	return built.path
}

func build() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the testserver package's source")
	}
	src := filepath.Join(filepath.Dir(file), "cmd", "mcptestserver")
	if _, err := os.Stat(src); err != nil {
		return "", fmt.Errorf("the test server's source is not at %s: %w", src, err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256([]byte(src))
	dir := filepath.Join(cache, "mcpfsm", "mcptestserver-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	exe := "mcptestserver"
	if runtime.GOOS == "windows" {
		exe += ".exe"
	}
	final := filepath.Join(dir, exe)
	tmp := filepath.Join(dir, exe+".tmp"+strconv.Itoa(os.Getpid()))
	// go test puts its own GOROOT/bin first in the test's PATH.
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command: %w", err)
	}
	cmd := exec.Command(goTool, "build", "-o", tmp, ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	// Rename replaces the file without disturbing a process running the old
	// one.
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return final, nil
}
