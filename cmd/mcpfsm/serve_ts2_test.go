package main

import (
	"path/filepath"
	"slices"
	"testing"

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
		t.Run(tc.name, func(t *testing.T) {
			checks, stderr := runFeatures(t, script, tc.name)
			want := append(append([]string{}, common...), tc.only...)
			wantChecks(t, checks, want)
			for c := range checks {
				if !slices.Contains(want, c) && c != "client_errors" {
					t.Errorf("%s: run, but not asked for here", c)
				}
			}
			// What else the client reported on its onerror, for the log.
			t.Logf("the client's other errors: %s", checks["client_errors"].Detail)
			if t.Failed() {
				t.Logf("client stderr:\n%s", stderr)
			}
		})
	}
}
