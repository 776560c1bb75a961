package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// everythingServer installs the pinned npm reference servers (../../testdata/interop,
// shared with the library's interop tests: npm ci, keyed on the lock's hash) and
// returns the path of server-everything's entry point, run with node. It skips when
// node or npm is missing, unless MCPFSM_REQUIRE_NODE is set.
func everythingServer(t *testing.T) string {
	t.Helper()
	dir := testutil.NpmCI(t, "../../testdata/interop")
	return filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
}

// frontNotes is what a front client of the gateway was sent.
type frontNotes struct {
	mu       sync.Mutex
	logs     []string // level: data
	progress []float64
	updated  []string
}

func (n *frontNotes) snapshot() (logs []string, progress []float64, updated []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.logs...), append([]float64(nil), n.progress...), append([]string(nil), n.updated...)
}

// TestInterop_GatewayEverything: mcpfsm serve, launched over stdio by a go-sdk front
// client that samples, elicits and has roots, on 2026-07-28 and on 2025-11-25, fronts
// the npm reference server server-everything 2026.8.31 (over stdio, behind sh so that
// the test can kill -9 it; $$ is the config's literal $). Its conditional tools (registered once it knows the
// client's capabilities, with a list change) are listed, and every feature goes
// through: a tool that samples, one that elicits, one that reads the roots, progress,
// resources (read, subscribe and updates), prompts and completion, and on 2025-11-25
// the backend's log messages. Then the backend is killed under an idempotent call,
// which is sent again to the new process and answers.
func TestInterop_GatewayEverything(t *testing.T) {
	script := everythingServer(t)
	for _, proto := range []string{"", "2025-11-25"} {
		t.Run(frontName(proto), func(t *testing.T) {
			dir := t.TempDir()
			cfg, pidFile := filepath.Join(dir, "servers.yaml"), filepath.Join(dir, "pid")
			if err := os.WriteFile(cfg, fmt.Appendf(nil, "version: 1\nservers:\n  everything:\n    command: sh\n    args: [-c, 'echo $$$$ >\"$$0\"; exec node \"$$1\" stdio', %q, %q]\n", pidFile, script), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var notes frontNotes
			release := make(chan struct{})
			client := mcp.NewClient(&mcp.Implementation{Name: "interop-front", Version: "1"}, &mcp.ClientOptions{
				CreateMessageHandler: func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
					text := r.Params.Messages[0].Content.(*mcp.TextContent).Text
					return &mcp.CreateMessageResult{Model: "front-model", Role: "assistant", Content: &mcp.TextContent{Text: "sampled: " + text}}, nil
				},
				ElicitationHandler: func(ctx context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					select {
					case <-release:
					case <-ctx.Done():
					}
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
				},
				LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
					notes.mu.Lock()
					notes.logs = append(notes.logs, fmt.Sprintf("%s: %v", r.Params.Level, r.Params.Data))
					notes.mu.Unlock()
				},
				ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
					notes.mu.Lock()
					notes.progress = append(notes.progress, r.Params.Progress)
					notes.mu.Unlock()
				},
				ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
					notes.mu.Lock()
					notes.updated = append(notes.updated, r.Params.URI)
					notes.mu.Unlock()
				},
			})
			client.AddRoots(&mcp.Root{URI: "file:///front/root", Name: "front-root"})
			cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(mcpfsmBin(t), "serve", cfg)}, &mcp.ClientSessionOptions{ProtocolVersion: proto})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			waitTool(t, cs, "everything__trigger-sampling-request")
			call := func(name string, args any, meta mcp.Meta) (string, bool) {
				t.Helper()
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: meta})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				var b strings.Builder
				for _, c := range res.Content {
					if tc, ok := c.(*mcp.TextContent); ok {
						b.WriteString(tc.Text)
					}
				}
				return b.String(), res.IsError
			}
			for _, c := range []struct{ tool, want string }{
				{"everything__echo", "Echo: hi"},
				{"everything__trigger-sampling-request", `"text": "sampled: Resource trigger-sampling-request context: p"`},
				{"everything__get-roots-list", "file:///front/root"},
			} {
				if got, isErr := call(c.tool, map[string]any{"message": "hi", "prompt": "p"}, nil); isErr || !strings.Contains(got, c.want) {
					t.Errorf("%s = %q (error %v), want %q in it", c.tool, got, isErr, c.want)
				}
			}
			close(release)
			if got, isErr := call("everything__trigger-elicitation-request", nil, nil); isErr || !strings.Contains(got, "Name: Ada") {
				t.Errorf("elicitation = %q (error %v)", got, isErr)
			}
			if _, isErr := call("everything__trigger-long-running-operation", map[string]any{"duration": 0.4, "steps": 4}, mcp.Meta{"progressToken": "p1"}); isErr {
				t.Error("the long-running operation failed")
			}
			// (The go-sdk's front client may hand on a progress after the result.)
			waitFront(t, "progress 1 to 4", func() bool { _, progress, _ := notes.snapshot(); return cmp.Equal(progress, []float64{1, 2, 3, 4}) })
			if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
				t.Fatal(err)
			}
			const uri = "demo://resource/dynamic/text/1"
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
				t.Fatal(err)
			}
			call("everything__toggle-subscriber-updates", nil, nil)
			call("everything__toggle-simulated-logging", nil, nil)
			waitFront(t, "an update", func() bool { _, _, updated := notes.snapshot(); return len(updated) > 0 })
			if proto != "" {
				// On 2026-07-28 a log message outside every request has no way to the
				// front: only those sent under a request are forwarded.
				waitFront(t, "a log message", func() bool { logs, _, _ := notes.snapshot(); return len(logs) > 0 })
			}
			if cr, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "everything__completable-prompt"}, Argument: mcp.CompleteParamsArgument{Name: "department", Value: "S"}}); err != nil || !cmp.Equal(cr.Completion.Values, []string{"Sales", "Support"}) {
				t.Errorf("completion %v, %v", cr, err)
			}
			if rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err != nil || !strings.HasPrefix(rr.Contents[0].Text, "Resource 1: ") {
				t.Errorf("read %v, %v", rr, err)
			}
			if gp, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "everything__args-prompt", Arguments: map[string]string{"city": "Paris"}}); err != nil || !strings.Contains(gp.Messages[0].Content.(*mcp.TextContent).Text, "Paris") {
				t.Errorf("prompt %v, %v", gp, err)
			}

			// kill -9 under an idempotent call: sent again, it answers.
			go func() {
				time.Sleep(300 * time.Millisecond)
				killPidFile(t, pidFile)
			}()
			if got, isErr := call("everything__trigger-long-running-operation", map[string]any{"duration": 0.8, "steps": 4}, nil); isErr || !strings.Contains(got, "completed") {
				t.Errorf("the idempotent call under a kill = %q (error %v)", got, isErr)
			}
		})
	}
}

// killPidFile kills -9 the process whose pid is in pidFile.
func killPidFile(t *testing.T, pidFile string) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Error(err)
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Error(err)
		return
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Error(err)
	}
}

// waitFront polls ok every 10 ms for up to 15 s.
func waitFront(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestInterop_GatewaySubscribeAtStartup: a front client subscribes to a resource as
// soon as it is connected (one restoring its subscriptions after the gateway
// restarted), while the backend, server-everything over stdio (started half a
// second late), is still connecting. A request that uses a name waits at startup for
// the backends to list theirs (--startup-wait); a subscribe did not, and got
// "Resource not found" for a resource the backend has. Now it waits as a read does,
// and the subscription reaches the backend: its updates come.
func TestInterop_GatewaySubscribeAtStartup(t *testing.T) {
	script := everythingServer(t)
	for _, proto := range []string{"", "2025-11-25"} {
		t.Run(frontName(proto), func(t *testing.T) {
			t.Parallel() // each waits for server-everything's first update, 5 s in
			cfg := filepath.Join(t.TempDir(), "servers.yaml")
			if err := os.WriteFile(cfg, fmt.Appendf(nil, "version: 1\nservers:\n  everything:\n    command: sh\n    args: [-c, 'sleep 0.5; exec node \"$$0\" stdio', %q]\n", script), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var notes frontNotes
			client := mcp.NewClient(&mcp.Implementation{Name: "interop-front", Version: "1"}, &mcp.ClientOptions{
				ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
					notes.mu.Lock()
					notes.updated = append(notes.updated, r.Params.URI)
					notes.mu.Unlock()
				},
			})
			cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(mcpfsmBin(t), "serve", cfg)}, &mcp.ClientSessionOptions{ProtocolVersion: proto})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			const uri = "demo://resource/dynamic/text/1"
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
				t.Fatalf("subscribe at startup: %v", err)
			}
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__toggle-subscriber-updates"}); err != nil {
				t.Fatal(err)
			}
			waitFront(t, "an update", func() bool { _, _, updated := notes.snapshot(); return len(updated) > 0 })
		})
	}
}

// frontName names a subtest by the front client's protocol version ("": the newest).
func frontName(proto string) string {
	if proto == "" {
		return "front=newest"
	}
	return "front=" + proto
}
