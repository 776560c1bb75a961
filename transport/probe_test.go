package transport

import (
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The probe must reach the server on every transport and protocol version.
// HTTP traffic is counted at the HTTP handler; stdio and in-memory traffic by
// the server itself (its stats tool).

func TestProbeReachesTheWireOverHTTP(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     testserver.Options
		protocol string
		method   string // what each probe sends
		never    string // what no probe sends
	}{
		{"http", testserver.Options{}, "2025-11-25", "ping", "tools/list"},
		// A TTL on tools/list makes the SDK's own ListTools answer from its
		// cache on this protocol: the probe must not. The server refuses ping
		// here (-32602), once: from then on the probe lists tools.
		{"stateless", testserver.Options{Stateless: true, ToolsTTL: time.Hour}, "2026-07-28", "tools/list", ""},
		{"sse", testserver.Options{SSE: true}, "2025-11-25", "ping", "tools/list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := testserver.StartHTTP(t, tc.opts)
			cfg := httpConfig(h)
			if tc.opts.SSE {
				cfg = sseConfig(h)
			}
			s := dial(t, cfg, Options{})
			if got := s.ProtocolVersion(); got != tc.protocol {
				t.Fatalf("protocol %s, want %s", got, tc.protocol)
			}
			never := h.Count(tc.never)
			for i := range 3 {
				before := h.Count(tc.method)
				if err := s.Probe(callCtx(t)); err != nil {
					t.Fatalf("probe %d: %v", i, err)
				}
				if got := h.Count(tc.method) - before; got != 1 {
					t.Errorf("probe %d sent %d %s requests, want 1", i, got, tc.method)
				}
			}
			if got := h.Count(tc.never) - never; tc.never != "" && got != 0 {
				t.Errorf("probes sent %d %s requests, want 0", got, tc.never)
			}
			if tc.opts.Stateless && h.Count("ping") != 1 {
				t.Errorf("probes sent %d pings, want the first only (refused)", h.Count("ping"))
			}
		})
	}
}

func TestProbeReachesTheServer(t *testing.T) {
	for _, k := range []kind{kinds[0], kinds[4]} { // stdio, memory
		t.Run(k.name, func(t *testing.T) {
			s := dial(t, k.start(t, testserver.Options{}), Options{})
			if got := s.ProtocolVersion(); got != "2026-07-28" {
				t.Fatalf("protocol %s, want 2026-07-28", got)
			}
			before := stats(t, s)
			for i := range 3 {
				if err := s.Probe(callCtx(t)); err != nil {
					t.Fatalf("probe %d: %v", i, err)
				}
			}
			after := stats(t, s)
			// The SDK's server answers ping on this protocol too, the cheapest probe.
			if got := after["ping"] - before["ping"]; got != 3 {
				t.Errorf("3 probes made %d pings, want 3", got)
			}
			if got := after["tools/list"] - before["tools/list"]; got != 0 {
				t.Errorf("3 probes made %d tools/list requests, want 0", got)
			}
		})
	}
}

func TestProbeOfPinglessServer(t *testing.T) {
	t.Run("legacy protocol", func(t *testing.T) {
		for _, sse := range []bool{false, true} {
			h := testserver.StartHTTP(t, testserver.Options{RefusePing: true, SSE: sse})
			cfg := httpConfig(h)
			if sse {
				cfg = sseConfig(h)
			}
			s := dial(t, cfg, Options{})
			// The first probe tries ping, then falls back; later probes go
			// straight to the fallback.
			wantPings := []int{1, 0, 0}
			for i, want := range wantPings {
				pings, lists := h.Count("ping"), h.Count("tools/list")
				if err := s.Probe(callCtx(t)); err != nil {
					t.Fatalf("probe %d of a ping-less server: %v", i, err)
				}
				if got := h.Count("ping") - pings; got != want {
					t.Errorf("probe %d sent %d pings, want %d", i, got, want)
				}
				if got := h.Count("tools/list") - lists; got != 1 {
					t.Errorf("probe %d sent %d tools/list, want 1", i, got)
				}
			}
		}
	})
	t.Run("2026-07-28", func(t *testing.T) {
		for _, k := range []kind{kinds[0], kinds[4]} {
			s := dial(t, k.start(t, testserver.Options{RefusePing: true}), Options{})
			for i := range 2 {
				if err := s.Probe(callCtx(t)); err != nil {
					t.Fatalf("%s probe %d: %v", k.name, i, err)
				}
			}
			// The first probe's ping is refused, once; then tools/list.
			st := stats(t, s)
			if st["ping"] != 1 || st["tools/list"] < 2 {
				t.Errorf("%s: %d pings, %d tools/list; want 1 and every probe's", k.name, st["ping"], st["tools/list"])
			}
		}
	})
}

func TestListToolsIsNeverCached(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{Stateless: true, ToolsTTL: time.Hour})
	s := dial(t, httpConfig(h), Options{})
	before := h.Count("tools/list")
	for range 3 {
		if _, err := s.ListTools(callCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	// The escape hatch too: the session's client zeroes every TTL.
	if _, err := s.ClientSession().ListTools(callCtx(t), &mcp.ListToolsParams{}); err != nil {
		t.Fatal(err)
	}
	// At least one request a list: none answered from a cache. (One more may come:
	// once in many runs under load, one did, from outside these four.)
	if got := h.Count("tools/list") - before; got < 4 {
		t.Errorf("4 lists made %d tools/list requests, want one each", got)
	}
}
