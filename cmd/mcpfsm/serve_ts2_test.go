package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
)

// TestServeTypeScriptV2: the TypeScript SDK v2's client (@modelcontextprotocol/client
// 2.4.0, pinned to protocol 2026-07-28), through mcpfsm serve over stdio and over HTTP
// (stateless), uses what the gateway says goes through on 2026-07-28 (testdata/
// tsclient2/features.mjs, one check each): the version negotiated (server/discover, no
// initialize), tools, prompts, resources and templates, completion, a request's own
// log level, progress (across the rounds of a call that takes input too), sampling,
// elicitation and roots asked by a backend on 2026-07-28 and on 2025-11-25 (old) as
// input requests answered by the client's handlers, each client's calls seeing its
// own roots, the refusal of a client without those capabilities, a subscription and
// list changes on a subscriptions/listen stream, cancellation on both backends, the
// gateway's attribution right after a cancelled call, a kill -9 of the backend (a call
// fails fast as a tool error; the respawn changes the lists; the stream holds), a
// SIGHUP reload, and the stream's close. Over HTTP every exchange must be a stateless
// POST; over stdio the client's probe (a gateway of its own, reaped) must leave no
// process behind.
func TestServeTypeScriptV2(t *testing.T) {
	script := filepath.Join(testutil.NpmCI(t, "testdata/tsclient2"), "features.mjs")
	bin := mcpfsmBin(t)
	server := func(name string, extra string) string {
		return fmt.Sprintf("  %s:\n    command: %s\n    args: [example-server]\n%s", name, bin, extra)
	}
	// A backoff of a second leaves the killed backend down long enough to be called.
	base := "version: 1\nservers:\n" + server("example", "    policies:\n      backoff_base: 1s\n") +
		server("old", "    protocol: 2025-11-25\n")
	common := []string{"protocol", "tools", "prompts", "resources", "completion", "logging", "progress",
		"sampling/example", "elicitation/example", "roots/example", "multi_round/example",
		"sampling/old", "elicitation/old", "roots/old", "multi_round/old", "progress_rounds",
		"roots_per_client", "refusal", "subscription", "list_changed", "cancellation", "cancel_window",
		"down_fails_fast", "respawn", "respawn_list_changed", "subscription_after_respawn", "reload",
		"listen_closed"}
	for _, tc := range []struct {
		name string
		only []string // the checks of this transport alone
	}{{"stdio", []string{"stdio_probe"}}, {"http", []string{"stateless"}}} {
		name := tc.name
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cfg, next := filepath.Join(dir, "servers.yaml"), filepath.Join(dir, "next.yaml")
			if err := os.WriteFile(cfg, []byte(base), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(next, []byte(base+server("two", "")), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			args := []string{script, "stdio", bin, "serve", cfg}
			if name == "http" {
				// A process of its own, for the script's SIGHUP.
				var gwErr testutil.SyncBuffer
				gw := exec.CommandContext(ctx, bin, "serve", "--http", "127.0.0.1:0", cfg)
				gw.Stderr = &gwErr
				if err := gw.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = gw.Process.Signal(syscall.SIGTERM); _ = gw.Wait() })
				var url string
				for deadline := time.Now().Add(30 * time.Second); url == ""; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("mcpfsm serve did not say its URL; stderr:\n%s", gwErr.String())
					}
					url = serveURL.FindString(gwErr.String())
				}
				args = []string{script, "http", url, strconv.Itoa(gw.Process.Pid)}
			}
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, "node", args...)
			cmd.Env = append(os.Environ(), "MCPFSM_CONFIG="+cfg, "MCPFSM_NEXT_CONFIG="+next)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("node features.mjs %s: %v\nstderr:\n%s", name, err, stderr.String())
			}
			var checks map[string]struct {
				OK     bool
				Detail string
				MS     int
			}
			if err := json.Unmarshal(stdout.Bytes(), &checks); err != nil {
				t.Fatalf("the client printed %q: %v\nstderr:\n%s", stdout.String(), err, stderr.String())
			}
			want := append(append([]string{}, common...), tc.only...)
			for _, c := range want {
				got, ok := checks[c]
				switch {
				case !ok:
					t.Errorf("%s: not run", c)
				case !got.OK:
					t.Errorf("%s: %s", c, got.Detail)
				default:
					t.Logf("%s (%d ms) %s", c, got.MS, got.Detail)
				}
			}
			for c := range checks {
				if !slices.Contains(want, c) && c != "client_errors" {
					t.Errorf("%s: run, but not asked for here", c)
				}
			}
			// What else the client reported on its onerror, for the log.
			t.Logf("the client's other errors: %s", checks["client_errors"].Detail)
			if t.Failed() {
				t.Logf("client stderr:\n%s", stderr.String())
			}
		})
	}
}
